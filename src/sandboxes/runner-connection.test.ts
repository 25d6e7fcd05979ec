/**
 * The gateway's reading of a runner's stream, fed by a runner that does not keep the
 * protocol: what it takes, what it drops, and when it gives up on the connection.
 */
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { isWorkspacePath, parseRunnerEvent, type RunnerEvent } from './protocol.js';
import { MAX_JUNK, MAX_LINE, RunnerConnection } from './runner-connection.js';

function connection() {
  const input = new PassThrough();
  const output = new PassThrough();
  const events: RunnerEvent[] = [];
  const diagnostics: string[] = [];
  const conn = new RunnerConnection(input, output, (d) => diagnostics.push(d));
  conn.onEvent((e) => events.push(e));
  let exitReason: string | undefined;
  conn.onExit((r) => (exitReason = r));
  const tick = () => new Promise((r) => setImmediate(r));
  /** Waits until everything written has been read (or reading stopped). */
  const drained = async () => {
    for (let i = 0; i < 10_000 && (output.readableLength > 0 || output.writableLength > 0) && !output.isPaused(); i++) await tick();
    await tick();
  };
  return { conn, output, events, diagnostics, exit: () => exitReason, tick, drained };
}

describe('RunnerConnection', () => {
  it('takes events split anywhere, even inside a UTF-8 character', async () => {
    const c = connection();
    const line = Buffer.from(`${JSON.stringify({ type: 'stdout', id: 'x1', data: 'héllo ✓' })}\n`);
    for (let i = 0; i < line.length; i += 3) c.output.write(line.subarray(i, i + 3));
    await c.drained();
    expect(c.events).toEqual([{ type: 'stdout', id: 'x1', data: 'héllo ✓' }]);
  });

  it('takes a long line within MAX_LINE; a longer one is dropped as it streams and ends the connection', async () => {
    const c = connection();
    const long = 'x'.repeat(2 * 1024 * 1024);
    c.output.write(`${JSON.stringify({ type: 'stdout', id: 'x1', data: long })}\n`);
    await c.drained();
    expect(c.events).toEqual([{ type: 'stdout', id: 'x1', data: long }]);
    const chunk = Buffer.alloc(64 * 1024, 'a');
    for (let sent = 0; sent <= MAX_LINE; sent += chunk.length) c.output.write(chunk);
    c.output.write('\n{"type":"pong","id":"p1"}\n');
    await c.drained();
    expect(c.diagnostics[0]).toMatch(/longer than/);
    expect(c.exit()).toMatch(/broke the protocol/);
    expect(c.events).toHaveLength(1);
  });

  it('ends a connection that sends more than MAX_JUNK bytes that are not protocol', async () => {
    const c = connection();
    const junk = `${'not json '.repeat(100)}\n`;
    for (let sent = 0; sent <= 2 * MAX_JUNK; sent += junk.length) c.output.write(junk);
    await c.drained();
    expect(c.exit()).toMatch(/broke the protocol/);
    c.output.write('{"type":"pong","id":"late"}\n');
    await c.tick();
    expect(c.events).toEqual([]);
  });

  it('drops events of unknown types or with mistyped fields', async () => {
    const c = connection();
    for (const bad of [{ type: 'stdout', id: 1, data: 'x' }, { type: 'stdout', id: 'x' }, { type: 'shell', cmd: 'rm -rf /' }, [1, 2], 'done', null]) {
      c.output.write(`${JSON.stringify(bad)}\n`);
    }
    await c.tick();
    expect(c.events).toEqual([]);
    expect(c.conn.exited).toBe(false);
  });
});

describe('a done is checked field by field', () => {
  it('keeps only files inside /workspace and bounds every text', () => {
    const done = parseRunnerEvent({
      type: 'done',
      id: 'x1',
      exitCode: 'zero',
      durationMs: -5,
      timedOut: 'yes',
      truncated: { stdout: -1, stderr: 3 },
      result: 'r'.repeat(100_000),
      files: [
        { path: 'ok.txt', size: 1, change: 'created' },
        { path: '../../../etc/shadow', size: 1, change: 'created' },
        { path: '/etc/shadow', size: 1, change: 'created' },
        { path: 'a/./b', size: 1, change: 'created' },
        { path: 'a//b', size: 1, change: 'modified' },
        { path: 'fine', size: -1, change: 'created' },
        { path: 'fine', size: 1, change: 'exploded' },
      ],
      error: { name: 7, message: 'm', traceback: ['t'] },
    });
    expect(done).toMatchObject({ type: 'done', id: 'x1', exitCode: null, durationMs: 0, timedOut: false, truncated: { stdout: 0, stderr: 3 } });
    expect((done as { files: unknown[] }).files).toEqual([{ path: 'ok.txt', size: 1, change: 'created' }]);
    expect((done as { result: string }).result.length).toBeLessThanOrEqual(4203);
    expect((done as { error: unknown }).error).toEqual({ name: 'Error', message: 'm', traceback: '' });
  });

  it('knows a workspace path', () => {
    for (const ok of ['a', 'a/b.txt', 'figures/figure-1.png', 'ünïcode/名前']) expect(isWorkspacePath(ok), ok).toBe(true);
    for (const bad of ['', '/a', '../a', 'a/..', 'a/./b', 'a//b', 'a\0b', 'x'.repeat(5000), 7]) expect(isWorkspacePath(bad), String(bad)).toBe(false);
  });
});

describe('a lying runner about kept runs', () => {
  it('takes a claimed only with a known state and a target, and at most 16 well-formed kept runs from a pong', () => {
    expect(parseRunnerEvent({ type: 'claimed', id: 'k1', target: 'x1', state: 'done' })).toEqual({ type: 'claimed', id: 'k1', target: 'x1', state: 'done' });
    for (const bad of [
      { type: 'claimed', id: 'k1', target: 'x1', state: 'finished' },
      { type: 'claimed', id: 'k1', state: 'done' },
      { type: 'claimed', id: 'k1', target: 7, state: 'done' },
      { type: 'claimed', target: 'x1', state: 'done' },
    ]) {
      expect(parseRunnerEvent(bad)).toBeUndefined();
    }
    const kept = [
      { id: 'ok', language: 'python', done: 'yes' },
      { id: 'x'.repeat(129), language: 'python' },
      { id: 'lang', language: 'cobol' },
      'not an object',
      ...Array.from({ length: 1000 }, (_, i) => ({ id: `r${i}`, language: 'bash', done: true })),
    ];
    const pong = parseRunnerEvent({ type: 'pong', id: 'p', separated: true, kept }) as Extract<RunnerEvent, { type: 'pong' }>;
    // Only the first 16 entries are looked at; of those, the malformed ones are dropped, and `done` is true only when it is true.
    expect(pong.kept).toEqual([{ id: 'ok', language: 'python', done: false }, ...Array.from({ length: 12 }, (_, i) => ({ id: `r${i}`, language: 'bash', done: true }))]);
    // A runner that says nothing of kept runs keeps none (an older image): no list, not an empty one.
    expect((parseRunnerEvent({ type: 'pong', id: 'p', separated: true }) as Extract<RunnerEvent, { type: 'pong' }>).kept).toBeUndefined();
  });

  it('takes at most 64 well-formed ids from the list of runs a pong says it has', () => {
    const execs = ['ok', '', 'x'.repeat(129), 7, { id: 'obj' }, ...Array.from({ length: 1000 }, (_, i) => `e${i}`)];
    const pong = parseRunnerEvent({ type: 'pong', id: 'p', separated: true, execs }) as Extract<RunnerEvent, { type: 'pong' }>;
    expect(pong.execs).toEqual(['ok', ...Array.from({ length: 59 }, (_, i) => `e${i}`)]);
    expect((parseRunnerEvent({ type: 'pong', id: 'p', separated: true, execs: 'all' }) as Extract<RunnerEvent, { type: 'pong' }>).execs).toBeUndefined();
  });
});
