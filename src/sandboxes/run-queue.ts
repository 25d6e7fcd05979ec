/**
 * The runs of one sandbox, one at a time and in order (its Python state is shared, like a
 * notebook kernel's), with a bound on how many may wait.
 */
import { SandboxError } from './errors.js';

/** Executions that may wait behind a running one in the same sandbox. */
export const MAX_QUEUED = 16;

export class RunQueue {
  private tail: Promise<unknown> = Promise.resolve();
  private count = 0;

  constructor(private readonly limit = MAX_QUEUED) {}

  /** Runs waiting for their turn (not the one running). */
  get waiting(): number {
    return this.count;
  }

  /** Runs `fn` once every run queued before it has settled; refuses when `limit` runs wait already. */
  push<T>(fn: () => Promise<T>): Promise<T> {
    if (this.count >= this.limit) {
      throw new SandboxError(`${this.count} executions are already waiting in this sandbox; wait for them to finish`, 'busy');
    }
    this.count++;
    const run = this.tail.then(() => {
      this.count--;
      return fn();
    });
    this.tail = run.catch(() => {});
    return run;
  }
}
