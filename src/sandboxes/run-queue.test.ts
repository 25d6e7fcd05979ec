import { describe, expect, it } from 'vitest';
import { RunQueue } from './run-queue.js';

const later = <T>(v: T, ms: number) => new Promise<T>((r) => setTimeout(() => r(v), ms));

describe('RunQueue', () => {
  it('runs one at a time, in order, and a failed run does not stop the ones behind it', async () => {
    const q = new RunQueue(4);
    const order: string[] = [];
    let inFlight = 0;
    let most = 0;
    const job = (name: string, fail = false) => async () => {
      inFlight++;
      most = Math.max(most, inFlight);
      order.push(name);
      await later(null, 10);
      inFlight--;
      if (fail) throw new Error(name);
      return name;
    };
    const runs = [q.push(job('a')), q.push(job('b', true)), q.push(job('c'))];
    const settled = await Promise.allSettled(runs);
    expect(order).toEqual(['a', 'b', 'c']);
    expect(most).toBe(1);
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
  });

  it('refuses past its limit of waiting runs, and takes more once they start', async () => {
    const q = new RunQueue(2);
    const first = q.push(() => later('1', 30));
    expect(q.waiting).toBe(1);
    await later(null, 0);
    // The first has started: it no longer waits, so two more may.
    expect(q.waiting).toBe(0);
    const waiting = [q.push(() => later('2', 1)), q.push(() => later('3', 1))];
    expect(q.waiting).toBe(2);
    expect(() => q.push(() => later('4', 1))).toThrow(/2 executions are already waiting/);
    expect(await Promise.all([first, ...waiting])).toEqual(['1', '2', '3']);
    expect(q.waiting).toBe(0);
    await expect(q.push(() => later('5', 1))).resolves.toBe('5');
  });
});
