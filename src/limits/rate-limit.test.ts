import { describe, expect, it } from 'vitest';
import { OncePer, RateLimiter } from './rate-limit.js';

describe('RateLimiter', () => {
  it('allows a burst, then paces at the rate, per key', () => {
    const rl = new RateLimiter({ perMinute: 60, burst: 3 });
    const t = 1_000_000;
    expect(rl.take('a', 1, t).ok).toBe(true);
    expect(rl.take('a', 1, t).ok).toBe(true);
    expect(rl.take('a', 1, t).ok).toBe(true);
    expect(rl.take('a', 1, t)).toEqual({ ok: false, retryAfterSec: 1 });
    expect(rl.take('b', 1, t).ok).toBe(true);
    expect(rl.take('a', 1, t + 1000).ok).toBe(true);
    expect(rl.take('a', 1, t + 1000).ok).toBe(false);
  });

  it('says how long to wait', () => {
    const rl = new RateLimiter({ perMinute: 6, burst: 1 });
    expect(rl.take('a', 1, 0).ok).toBe(true);
    expect(rl.take('a', 1, 0)).toEqual({ ok: false, retryAfterSec: 10 });
    expect(rl.take('a', 1, 4000)).toEqual({ ok: false, retryAfterSec: 6 });
  });

  it('charges a batch per message; one larger than the burst never passes', () => {
    const rl = new RateLimiter({ perMinute: 60, burst: 5 });
    expect(rl.take('a', 4, 0).ok).toBe(true);
    expect(rl.take('a', 4, 0).ok).toBe(false);
    expect(rl.take('b', 50, 0)).toMatchObject({ ok: false, tooLarge: true });
    // The refused batch cost nothing: b's bucket is still full.
    expect(rl.take('b', 5, 0).ok).toBe(true);
  });
});

describe('OncePer', () => {
  it('lets one event a period through per key, and forgets keys past its bound', () => {
    const once = new OncePer(1000, 3);
    expect(once.due(1, 0)).toBe(true);
    expect(once.due(1, 999)).toBe(false);
    expect(once.due(2, 999)).toBe(true);
    expect(once.due(1, 1000)).toBe(true);
    expect(once.due(3, 1000)).toBe(true);
    // A fourth key: all are forgotten, so the next event of each passes again.
    expect(once.due(4, 1001)).toBe(true);
    expect(once.due(1, 1002)).toBe(true);
    expect(once.due(4, 1002)).toBe(false);
  });
});
