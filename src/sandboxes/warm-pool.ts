/**
 * The warm pool: sandboxes started ahead of need (runner up, the data stack imported, an
 * empty workspace) and handed to users who have no workspace yet, so their first run
 * skips the cold start. Filled in the background; a pooled sandbox that dies leaves it
 * and is removed.
 */
import crypto from 'node:crypto';
import type { Logger } from '../logger.js';
import type { Live } from './live.js';
import type { RunnerEvent } from './protocol.js';
import type { SandboxHandle } from './types.js';

export interface WarmPoolOptions {
  /** How many to keep ready (SANDGATE_WARM_POOL_SIZE). */
  size: number;
  /** Modules imported in each before it is ready (SANDGATE_WARM_POOL_PRELOAD). */
  preload: string[];
  /** Starts a sandbox for the pool: no owner, a fresh workspace. */
  start(): Promise<Live>;
  /** Stops a pooled sandbox and removes its workspace. */
  discard(live: Live): Promise<void>;
  /** A sandbox is ready and waiting (it may be frozen until taken). */
  rested?(live: Live): void;
  /** A sandbox leaves the pool for a user (thawed before it serves). */
  taken?(live: Live): void;
  log: Logger;
}

export class WarmPool {
  private readonly ready: Live[] = [];
  private starting = 0;
  private closed = false;
  /** Discards of sandboxes that died waiting, awaited by `close`. */
  private readonly discarding = new Set<Promise<void>>();

  constructor(private readonly opts: WarmPoolOptions) {}

  get size(): number {
    return this.ready.length;
  }

  /** The sandboxes waiting to be taken (for the admin page). */
  entries(): readonly Live[] {
    return this.ready;
  }

  /** A ready sandbox, out of the pool (then refilled by `fill`), or none. */
  take(): Live | undefined {
    while (this.ready.length) {
      const live = this.ready.shift()!;
      if (live.handle.exited) continue;
      this.opts.taken?.(live);
      return live;
    }
    return undefined;
  }

  /** Starts pooled sandboxes in the background until the pool is full. */
  fill(): void {
    while (!this.closed && this.ready.length + this.starting < this.opts.size) {
      this.starting++;
      void this.startOne()
        .catch((e) => this.opts.log.error({ err: e }, 'could not start a pooled sandbox'))
        .finally(() => this.starting--);
    }
  }

  /** Resolves once the pool is full (for tests and benchmarks). */
  async full(timeoutMs = 120_000): Promise<void> {
    const t0 = Date.now();
    while (this.ready.length < this.opts.size) {
      if (Date.now() - t0 > timeoutMs) throw new Error('warm pool did not fill in time');
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Discards pooled sandboxes started more than `maxAgeMs` ago, then refills. */
  async discardOlderThan(maxAgeMs: number, now = Date.now()): Promise<void> {
    for (const live of [...this.ready]) {
      if (now - live.startedAt <= maxAgeMs) continue;
      this.ready.splice(this.ready.indexOf(live), 1);
      await this.opts.discard(live);
    }
    this.fill();
  }

  /** Stops filling and empties the pool; `detachOnly` leaves its sandboxes running, as a crash would. */
  async close(opts: { detachOnly?: boolean } = {}): Promise<void> {
    this.closed = true;
    while (this.starting > 0) await new Promise((r) => setTimeout(r, 50));
    for (const live of this.ready.splice(0)) {
      if (opts.detachOnly) live.handle.detach();
      else await this.opts.discard(live).catch(() => {});
    }
    await Promise.all(this.discarding);
  }

  private async startOne(): Promise<void> {
    const live = await this.opts.start();
    if (this.opts.preload.length) await this.preload(live);
    if (this.closed) {
      await this.opts.discard(live);
      return;
    }
    live.handle.onExit(() => {
      const i = this.ready.indexOf(live);
      if (i < 0) return;
      // Died waiting: its container (thawed first, were it frozen) and fresh workspace go.
      this.ready.splice(i, 1);
      const p = this.opts.discard(live).catch(() => {});
      this.discarding.add(p);
      void p.finally(() => this.discarding.delete(p));
    });
    this.ready.push(live);
    this.opts.log.info({ ready: this.ready.length, size: this.opts.size }, 'pooled sandbox ready');
    this.opts.rested?.(live);
  }

  /** Imports the preload modules in the sandbox's kernel; a failure is logged, the sandbox still serves. */
  private async preload(live: Live): Promise<void> {
    const answer = await preloadIn(live.handle, this.opts.preload);
    if (answer?.error) this.opts.log.warn({ error: answer.error }, 'pool preload failed');
  }
}

/**
 * Asks the runner to import `modules` in its Python kernel (none: one empty round trip
 * through its worker and kernel) and waits for the answer: the `preloaded` event, or
 * undefined when the runner is gone or `timeoutMs` passed (the runner bounds a preload
 * itself, at 300 s). The request's id starts with `idPrefix`.
 */
export function preloadIn(handle: SandboxHandle, modules: string[], opts: { timeoutMs?: number; idPrefix?: string } = {}): Promise<Extract<RunnerEvent, { type: 'preloaded' }> | undefined> {
  const { timeoutMs, idPrefix = 'p' } = opts;
  const id = `${idPrefix}${crypto.randomBytes(4).toString('hex')}`;
  return new Promise((resolve) => {
    const done = (answer?: Extract<RunnerEvent, { type: 'preloaded' }>) => {
      if (timer) clearTimeout(timer);
      offEvent();
      offExit();
      resolve(answer);
    };
    const timer = timeoutMs === undefined ? undefined : setTimeout(() => done(), timeoutMs);
    const offEvent = handle.onEvent((e) => {
      if (e.type === 'preloaded' && e.id === id) done(e);
    });
    const offExit = handle.onExit(() => done());
    try {
      handle.send({ op: 'preload', id, modules });
    } catch {
      done(); // runner gone: the next run starts a fresh sandbox
    }
  });
}
