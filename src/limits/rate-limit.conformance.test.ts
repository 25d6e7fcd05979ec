/**
 * One contract, every limiter: the same cases run on the in-memory buckets and on the
 * buckets in the store (SQLite in the sqlite project, Postgres in the postgres one). The
 * store's also hold across gateways: two limiters on one store (two gateways) spend one
 * budget, exactly, however many takes they run at once.
 */
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { storePerTest, type TestStore } from '../../test/support/store.js';
import { MemoryRateLimiter, OncePer, type RateLimiter, type RateLimitOptions } from './rate-limit.js';
import { rateLimiterFor, StoreRateLimiter } from './store-rate-limit.js';

let store: TestStore;
storePerTest((s) => (store = s));

const implementations: { name: string; make: (opts: RateLimitOptions) => RateLimiter }[] = [
  { name: 'MemoryRateLimiter', make: (opts) => new MemoryRateLimiter(opts) },
  { name: 'StoreRateLimiter', make: (opts) => new StoreRateLimiter(store.db, opts, 'test') },
];

describe.each(implementations)('$name', ({ make }) => {
  it('allows a burst, then paces at the rate, per key', async () => {
    const rl = make({ perMinute: 60, burst: 3 });
    const t = 1_000_000;
    expect((await rl.take('a', 1, t)).ok).toBe(true);
    expect((await rl.take('a', 1, t)).ok).toBe(true);
    expect((await rl.take('a', 1, t)).ok).toBe(true);
    expect(await rl.take('a', 1, t)).toEqual({ ok: false, retryAfterSec: 1 });
    expect((await rl.take('b', 1, t)).ok).toBe(true);
    expect((await rl.take('a', 1, t + 1000)).ok).toBe(true);
    expect((await rl.take('a', 1, t + 1000)).ok).toBe(false);
  });

  it('refills over time, never past the burst', async () => {
    const rl = make({ perMinute: 60, burst: 3 });
    for (let i = 0; i < 3; i++) expect((await rl.take('a', 1, 0)).ok).toBe(true);
    // An hour idle: full again, three and no more.
    const later = 3_600_000;
    for (let i = 0; i < 3; i++) expect((await rl.take('a', 1, later)).ok).toBe(true);
    expect((await rl.take('a', 1, later)).ok).toBe(false);
    // Half a token a half second: two halves make one.
    expect((await rl.take('a', 1, later + 500)).ok).toBe(false);
    expect((await rl.take('a', 1, later + 1000)).ok).toBe(true);
  });

  it('says how long to wait', async () => {
    const rl = make({ perMinute: 6, burst: 1 });
    expect((await rl.take('a', 1, 0)).ok).toBe(true);
    expect(await rl.take('a', 1, 0)).toEqual({ ok: false, retryAfterSec: 10 });
    expect(await rl.take('a', 1, 4000)).toEqual({ ok: false, retryAfterSec: 6 });
    expect(await rl.take('a', 1, 9999)).toEqual({ ok: false, retryAfterSec: 1 });
    expect((await rl.take('a', 1, 10_000)).ok).toBe(true);
  });

  it('charges a batch per message; one larger than the burst never passes', async () => {
    const rl = make({ perMinute: 60, burst: 5 });
    expect((await rl.take('a', 4, 0)).ok).toBe(true);
    expect(await rl.take('a', 4, 0)).toEqual({ ok: false, retryAfterSec: 3 });
    expect(await rl.take('b', 50, 0)).toEqual({ ok: false, retryAfterSec: 5, tooLarge: true });
    // The refused batch cost nothing: b's bucket is still full.
    expect((await rl.take('b', 5, 0)).ok).toBe(true);
  });

  it('keeps keys apart', async () => {
    const rl = make({ perMinute: 1, burst: 2 });
    for (const key of ['user:1', 'user:2', 'user:3']) {
      expect((await rl.take(key, 2, 0)).ok).toBe(true);
      expect((await rl.take(key, 1, 0)).ok).toBe(false);
    }
  });

  it('spends no more than the bucket holds when takes run at once', async () => {
    const rl = make({ perMinute: 1, burst: 40 });
    const decisions = await Promise.all(Array.from({ length: 100 }, () => rl.take('a', 1, 0)));
    expect(decisions.filter((d) => d.ok)).toHaveLength(40);
  });
});

describe('StoreRateLimiter across gateways', () => {
  const bucketTokens = async (bucket: string) =>
    (await store.db.selectFrom('rate_buckets').select('tokens').where('limiter', '=', 'requests').where('bucket', '=', bucket).executeTakeFirstOrThrow()).tokens;

  it('gives two limiters on one store one budget', async () => {
    const opts = { perMinute: 60, burst: 3 };
    const a = new StoreRateLimiter(store.db, opts, 'requests');
    const b = new StoreRateLimiter(store.db, opts, 'requests');
    expect((await a.take('user:1', 2, 0)).ok).toBe(true);
    expect((await b.take('user:1', 1, 0)).ok).toBe(true);
    expect(await a.take('user:1', 1, 0)).toEqual({ ok: false, retryAfterSec: 1 });
    expect(await b.take('user:1', 1, 0)).toEqual({ ok: false, retryAfterSec: 1 });
    // The refill is shared too: one second, one token, taken by whichever asks first.
    expect((await b.take('user:1', 1, 1000)).ok).toBe(true);
    expect((await a.take('user:1', 1, 1000)).ok).toBe(false);
  });

  it('spends one budget exactly under many takes at once from both', async () => {
    const opts = { perMinute: 1, burst: 50 };
    const gateways = [new StoreRateLimiter(store.db, opts, 'requests'), new StoreRateLimiter(store.db, opts, 'requests')];
    const decisions = await Promise.all(Array.from({ length: 150 }, (_, i) => gateways[i % 2]!.take('user:1', 1, 0)));
    expect(decisions.filter((d) => d.ok)).toHaveLength(50);
    expect(await bucketTokens('user:1')).toBe(0);
  });

  it('never overspends with batches of several costs at once from both', async () => {
    const opts = { perMinute: 1, burst: 50 };
    const gateways = [new StoreRateLimiter(store.db, opts, 'requests'), new StoreRateLimiter(store.db, opts, 'requests')];
    const costs = Array.from({ length: 120 }, (_, i) => 1 + (i % 3));
    const decisions = await Promise.all(costs.map((cost, i) => gateways[i % 2]!.take('user:2', cost, 0)));
    const spent = costs.reduce((sum, cost, i) => sum + (decisions[i]!.ok ? cost : 0), 0);
    // Every take that passed was paid for, from one bucket both gateways see.
    expect(spent).toBeLessThanOrEqual(50);
    expect(await bucketTokens('user:2')).toBe(50 - spent);
  });

  it('keeps the buckets of differently named limiters apart', async () => {
    const opts = { perMinute: 1, burst: 1 };
    const requests = new StoreRateLimiter(store.db, opts, 'requests');
    const upstream = new StoreRateLimiter(store.db, opts, 'upstream');
    expect((await requests.take('user:1', 1, 0)).ok).toBe(true);
    expect((await upstream.take('user:1', 1, 0)).ok).toBe(true);
    expect((await requests.take('user:1', 1, 0)).ok).toBe(false);
  });

  it('does not keep a row per idle bucket', async () => {
    const rl = new StoreRateLimiter(store.db, { perMinute: 60, burst: 2 }, 'requests');
    // 300 users take once each; they are full again two seconds later.
    for (let i = 0; i < 300; i++) expect((await rl.take(`user:${i}`, 1, 0)).ok).toBe(true);
    for (let i = 0; i < 300; i++) expect((await rl.take('busy', 1, 10_000 + i * 1000)).ok).toBe(true);
    const rows = Number((await sql<{ n: number }>`SELECT COUNT(*) AS n FROM rate_buckets`.execute(store.db)).rows[0]!.n);
    // The sweeps kept pace: every idle bucket is gone, the one in use stays.
    expect(rows).toBe(1);
    // A swept bucket is a full one.
    expect((await rl.take('user:0', 2, 400_000)).ok).toBe(true);
  });
});

describe.skipIf(process.env.SANDGATE_TEST_DATABASE !== 'postgres')('StoreRateLimiter on Postgres', () => {
  it('keeps its buckets in an unlogged table (a take commits without waiting for the WAL), and they still take', async () => {
    const persistence = await sql<{ relpersistence: string }>`SELECT relpersistence FROM pg_class WHERE relname = 'rate_buckets' AND relkind = 'r'`.execute(store.db);
    expect(persistence.rows).toEqual([{ relpersistence: 'u' }]);
    const rl = new StoreRateLimiter(store.db, { perMinute: 60, burst: 1 }, 'requests');
    expect((await rl.take('user:1', 1, 0)).ok).toBe(true);
    expect((await rl.take('user:1', 1, 0)).ok).toBe(false);
  });
});

describe('rateLimiterFor', () => {
  it('keeps buckets in memory on SQLite (one process owns it) and in the store on Postgres', () => {
    const rl = rateLimiterFor(store.db, { perMinute: 60, burst: 3 }, 'requests');
    expect(rl).toBeInstanceOf(store.dialect === 'postgres' ? StoreRateLimiter : MemoryRateLimiter);
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
