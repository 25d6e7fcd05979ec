/**
 * Token buckets kept in the store (`rate_buckets`, schema.ts), for gateways that share
 * one database: each user has one budget whichever gateway a request reaches.
 *
 * A take is one statement, so it is exact however many gateways take at once: an upsert
 * whose refill-and-spend arithmetic runs in the database on the row as it is at that
 * moment (Postgres locks the row for it; SQLite has one writer), and whose WHERE refuses
 * a bucket short of the cost, writing nothing. Only a refusal reads the row again, to say
 * when to retry; that answer is advice, so it needs no lock.
 *
 * Times come from the gateways' clocks (`now`), not the database's, so tests can move
 * them. A gateway whose clock is behind the last take's refills nothing until it catches
 * up, and `refilled_at` never moves back: skew between gateways delays a refill by the
 * skew, never grants one twice.
 */
import { sql, type RawBuilder } from 'kysely';
import { prepared } from '../store/prepared.js';
import { dialectOf, type Db } from '../store/store.js';
import { MemoryRateLimiter, secondsUntil, tooLarge, type RateDecision, type RateLimiter, type RateLimitOptions } from './rate-limit.js';

/**
 * Takes between two sweeps of idle rows, per limiter, and the most rows a sweep deletes:
 * every take adds at most one row, and a sweep every SWEEP_EVERY takes deletes up to as
 * many, so idle rows go as fast as they come, a bounded few at a time.
 */
const SWEEP_EVERY = 100;
const SWEEP_MAX_ROWS = 100;

// Typed explicitly: Postgres infers a parameter's type from its neighbour, and would read
// a fractional rate as an integer beside a BIGINT column. Standard SQL, the same on SQLite.
const real = (v: unknown): RawBuilder<number> => sql<number>`CAST(${v} AS DOUBLE PRECISION)`;
const integer = (v: unknown): RawBuilder<number> => sql<number>`CAST(${v} AS BIGINT)`;

/** Spends `cost` from the bucket refilled to `now`, or changes nothing: one row back (what is left) when it spent. */
const spend = prepared((db, p: { limiter: string; bucket: string; cost: number; burst: number; perMs: number; now: number }) => {
  const elapsed = sql`(${integer(p.now)} - rate_buckets.refilled_at)`;
  const grown = sql`(rate_buckets.tokens + ${elapsed} * ${real(p.perMs)})`;
  // CASE rather than LEAST/MIN, which the two databases spell differently.
  const refilled = sql`(CASE WHEN ${elapsed} <= 0 THEN rate_buckets.tokens WHEN ${grown} >= ${real(p.burst)} THEN ${real(p.burst)} ELSE ${grown} END)`;
  return db
    .insertInto('rate_buckets')
    .values({ limiter: p.limiter, bucket: p.bucket, tokens: sql<number>`${real(p.burst)} - ${real(p.cost)}`, refilled_at: integer(p.now) })
    .onConflict((oc) =>
      oc
        .columns(['limiter', 'bucket'])
        .doUpdateSet({
          tokens: sql<number>`${refilled} - ${real(p.cost)}`,
          refilled_at: sql<number>`CASE WHEN ${elapsed} > 0 THEN ${integer(p.now)} ELSE rate_buckets.refilled_at END`,
        })
        .where(sql<boolean>`${refilled} >= ${real(p.cost)}`),
    )
    .returning('tokens');
});

const bucketOf = prepared((db, p: { limiter: string; bucket: string }) =>
  db.selectFrom('rate_buckets').select(['tokens', 'refilled_at']).where('limiter', '=', p.limiter).where('bucket', '=', p.bucket),
);

/**
 * Deletes up to SWEEP_MAX_ROWS rows of `limiter` counted before `before` (full again by
 * now, the same as absent). The outer condition is checked again on a row another
 * gateway took from meanwhile, so a bucket in use is never deleted.
 */
const sweepIdle = prepared((db, p: { limiter: string; before: number }) =>
  db
    .deleteFrom('rate_buckets')
    .where('limiter', '=', p.limiter)
    .where('refilled_at', '<', p.before)
    .where('bucket', 'in', (eb) =>
      eb.selectFrom('rate_buckets').select('bucket').where('limiter', '=', p.limiter).where('refilled_at', '<', p.before).limit(SWEEP_MAX_ROWS),
    ),
);

export class StoreRateLimiter implements RateLimiter {
  private readonly perMs: number;
  private takes = 0;

  /** `limiter` names this limiter's buckets in the table: two limiters with different names never share one. */
  constructor(
    private readonly db: Db,
    readonly opts: RateLimitOptions,
    private readonly limiter: string,
  ) {
    this.perMs = opts.perMinute / 60_000;
  }

  async take(key: string, cost = 1, now = Date.now()): Promise<RateDecision> {
    // Every message costs one: a batch of 100 costs 100, never less.
    if (cost > this.opts.burst) return tooLarge(this.opts);
    now = Math.floor(now);
    const p = { limiter: this.limiter, bucket: key, cost, burst: this.opts.burst, perMs: this.perMs, now };
    const spent = (await spend(this.db, p)).length > 0;
    if (++this.takes % SWEEP_EVERY === 0) await this.sweep(now);
    if (spent) return { ok: true };
    const row = (await bucketOf(this.db, p))[0];
    // Gone since (swept as full): a retry passes at once.
    if (!row) return { ok: false, retryAfterSec: 1 };
    const tokens = Math.min(this.opts.burst, row.tokens + Math.max(0, now - row.refilled_at) * this.perMs);
    return { ok: false, retryAfterSec: secondsUntil(this.opts, tokens, cost) };
  }

  private async sweep(now: number): Promise<void> {
    const fullAfterMs = Math.ceil(this.opts.burst / this.perMs);
    // Nothing waits on a sweep: one that fails (the database away for a moment, or a
    // deadlock with another gateway's sweep, which Postgres breaks by failing one) leaves
    // the rows for the next one, and the take it follows has already been decided.
    await sweepIdle(this.db, { limiter: this.limiter, before: now - fullAfterMs }).catch(() => {});
  }
}

/**
 * The limiter a gateway on `db` needs, its buckets named `name`: in memory on SQLite,
 * whose one process owns the database; in the store on Postgres, where several gateways
 * may share the database and must share each user's budget.
 */
export function rateLimiterFor(db: Db, opts: RateLimitOptions, name: string): RateLimiter {
  return dialectOf(db) === 'postgres' ? new StoreRateLimiter(db, opts, name) : new MemoryRateLimiter(opts);
}
