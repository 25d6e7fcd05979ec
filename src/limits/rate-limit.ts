/**
 * Per-key token buckets, in memory: `perMinute` requests refill steadily, up to `burst`
 * at once. One gateway process holds them; a restart forgives everyone, which is fine
 * for a limit meant to stop a runaway client loop, not to bill.
 *
 * The gateway keeps one limiter whose keys are users (`userBudgetKey`): the MCP
 * endpoint, the /v1 API and the web pages that cost work all take from the same bucket,
 * so more tokens or more tabs never mean more requests.
 */
export interface RateLimitOptions {
  perMinute: number;
  burst: number;
}

export type RateDecision = { ok: true } | { ok: false; retryAfterSec: number; /** The cost alone is more than a full bucket: it can never pass. */ tooLarge?: boolean };

interface Bucket {
  tokens: number;
  at: number;
}

/** Buckets idle for this long are full again, so they can be forgotten. */
const SWEEP_EVERY = 1000;

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly perMs: number;
  private takes = 0;

  constructor(readonly opts: RateLimitOptions) {
    this.perMs = opts.perMinute / 60_000;
  }

  /** Takes `cost` tokens from `key`'s bucket, or says how long until that many are there. */
  take(key: string, cost = 1, now = Date.now()): RateDecision {
    if (++this.takes % SWEEP_EVERY === 0) this.sweep(now);
    const b = this.buckets.get(key) ?? { tokens: this.opts.burst, at: now };
    b.tokens = Math.min(this.opts.burst, b.tokens + (now - b.at) * this.perMs);
    b.at = now;
    this.buckets.set(key, b);
    // Every message costs one: a batch of 100 costs 100, never less.
    if (cost > this.opts.burst) return { ok: false, retryAfterSec: Math.max(1, Math.ceil(this.opts.burst / this.perMs / 1000)), tooLarge: true };
    if (b.tokens >= cost) {
      b.tokens -= cost;
      return { ok: true };
    }
    return { ok: false, retryAfterSec: Math.max(1, Math.ceil((cost - b.tokens) / this.perMs / 1000)) };
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
export function budgetSpentMessage(limiter: RateLimiter, userName: string, decision: { retryAfterSec: number; tooLarge?: boolean }, batch = 1): string {
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
