/**
 * Per-key token buckets: `perMinute` requests refill steadily, up to `burst` at once. A
 * limit meant to stop a runaway client loop, not to bill.
 *
 * The gateway keeps one limiter whose keys are users (`userBudgetKey`): the MCP
 * endpoint, the /v1 API and the web pages that cost work all take from the same bucket,
 * so more tokens or more tabs never mean more requests.
 *
 * Two kinds, one contract (rate-limit.conformance.test.ts runs both):
 * - `MemoryRateLimiter` holds the buckets in the process. One process owns a SQLite store
 *   by construction, so on SQLite that is every bucket there is; a restart forgives everyone.
 * - `StoreRateLimiter` (store-rate-limit.ts) keeps them in the store, so gateways sharing
 *   one Postgres database share each user's one budget, whichever of them a request reaches.
 * `rateLimiterFor` (store-rate-limit.ts) picks the one a store needs.
 */

export interface RateLimitOptions {
  perMinute: number;
  burst: number;
}

export type RateDecision = { ok: true } | { ok: false; retryAfterSec: number; /** The cost alone is more than a full bucket: it can never pass. */ tooLarge?: boolean };

export interface RateLimiter {
  readonly opts: RateLimitOptions;
  /**
   * Takes `cost` tokens (default 1) from `key`'s bucket at `now` (epoch ms, default the
   * clock), or refuses and says how long until that many are there. A refusal takes
   * nothing. Exact under concurrency: however many takes run at once, in one process
   * or across the gateways sharing a store, no more is spent than the bucket holds.
   */
  take(key: string, cost?: number, now?: number): Promise<RateDecision>;
}

/** Seconds until `cost` tokens are there, for a bucket holding `tokens` (whole seconds, at least 1, as Retry-After needs). */
export function secondsUntil(opts: RateLimitOptions, tokens: number, cost: number): number {
  return Math.max(1, Math.ceil((cost - tokens) / (opts.perMinute / 60_000) / 1000));
}

/** The refusal of a cost more than a full bucket: its retry-after is the time a bucket takes to fill, though it will never pass. */
export function tooLarge(opts: RateLimitOptions): RateDecision {
  return { ok: false, retryAfterSec: secondsUntil(opts, 0, opts.burst), tooLarge: true };
}

interface Bucket {
  tokens: number;
  at: number;
}

/** Takes between sweeps of the buckets idle long enough to be full again (then the same as absent). */
const SWEEP_EVERY = 1000;

export class MemoryRateLimiter implements RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly perMs: number;
  private takes = 0;

  constructor(readonly opts: RateLimitOptions) {
    this.perMs = opts.perMinute / 60_000;
  }

  take(key: string, cost = 1, now = Date.now()): Promise<RateDecision> {
    return Promise.resolve(this.takeNow(key, cost, now));
  }

  private takeNow(key: string, cost: number, now: number): RateDecision {
    if (++this.takes % SWEEP_EVERY === 0) this.sweep(now);
    const b = this.buckets.get(key) ?? { tokens: this.opts.burst, at: now };
    // A clock that went back refills nothing, and never moves the bucket back in time.
    if (now > b.at) {
      b.tokens = Math.min(this.opts.burst, b.tokens + (now - b.at) * this.perMs);
      b.at = now;
    }
    this.buckets.set(key, b);
    // Every message costs one: a batch of 100 costs 100, never less.
    if (cost > this.opts.burst) return tooLarge(this.opts);
    if (b.tokens >= cost) {
      b.tokens -= cost;
      return { ok: true };
    }
    return { ok: false, retryAfterSec: secondsUntil(this.opts, b.tokens, cost) };
  }

  private sweep(now: number): void {
    const fullAfterMs = this.opts.burst / this.perMs;
    for (const [k, b] of this.buckets) if (now - b.at > fullAfterMs) this.buckets.delete(k);
  }
}

/** The key of a user's one budget, whatever token or page the request comes through. */
export function userBudgetKey(userId: number): string {
  return `user:${userId}`;
}

/** What a user whose budget is spent is told: when to retry, the limit, and the settings that raise it. */
export function budgetSpentMessage(limiter: Pick<RateLimiter, 'opts'>, userName: string, decision: { retryAfterSec: number; tooLarge?: boolean }, batch = 1): string {
  const why = decision.tooLarge
    ? `This batch has ${batch} messages, more than the ${limiter.opts.burst} a user may send at once: send them in smaller batches.`
    : `Rate limit exceeded for ${userName}: retry after ${decision.retryAfterSec} s.`;
  return `${why} Each user has one budget across all their tokens and pages: ${limiter.opts.perMinute} a minute, in bursts of up to ${limiter.opts.burst}; an operator can raise SANDGATE_RATE_LIMIT_PER_MIN and SANDGATE_RATE_LIMIT_BURST.`;
}

/**
 * At most one event a `everyMs` per key: what a refused request leaves behind (an audit
 * row) must not cost the gateway a row per request, since refusing costs the sender
 * nothing. Forgets every key past `maxKeys` (a few extra events then, never unbounded).
 */
export class OncePer {
  private readonly last = new Map<number | string, number>();

  constructor(
    private readonly everyMs: number,
    private readonly maxKeys = 10_000,
  ) {}

  /** True (and noted) when `key`'s last event was `everyMs` or more before `now`. */
  due(key: number | string, now: number): boolean {
    if (now - (this.last.get(key) ?? -Infinity) < this.everyMs) return false;
    if (this.last.size >= this.maxKeys) this.last.clear();
    this.last.set(key, now);
    return true;
  }
}
