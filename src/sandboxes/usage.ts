/**
 * What the store learns of sandbox use, written in batches rather than on each run (a
 * write per execution cost about a tenth of a warm run): each execution's row, gathered
 * in memory and written every few seconds and at shutdown; and each sandbox's execution
 * count and last use, written at most every ten seconds per sandbox and when it stops.
 */
import type { Logger } from '../logger.js';
import type { Db } from '../store/store.js';
import type { UserSandbox } from './live.js';
import { recordExecutions, recordSandboxUse, type ExecutionRow } from './records.js';

/** How often a sandbox's use (execution count, last use) is written to the store; also written when it stops. */
const USE_RECORD_INTERVAL_MS = 10_000;
/** How often the executions gathered in memory are written to the store. */
const EXECUTION_LOG_INTERVAL_MS = 5_000;

/** Executions not yet written to the store. */
export class ExecutionLog {
  private rows: ExecutionRow[] = [];
  private timer?: NodeJS.Timeout;
  /** The writes under way, one after another: a flush is done when every earlier one is. */
  private writing: Promise<void> = Promise.resolve();

  constructor(private readonly deps: { db: Db; log: Logger }) {}

  add(row: ExecutionRow): void {
    this.rows.push(row);
  }

  /** Writes every few seconds from now on. */
  start(): void {
    this.timer = setInterval(() => void this.flush(), EXECUTION_LOG_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /**
   * Writes the executions gathered so far to the store; resolves once they (and every
   * batch before them) are written, or failed and were logged. Never rejects.
   */
  flush(): Promise<void> {
    const rows = this.rows;
    this.rows = [];
    this.writing = this.writing.then(async () => {
      try {
        await recordExecutions(this.deps.db, rows);
      } catch (e) {
        this.deps.log.warn({ err: e, rows: rows.length }, 'could not record executions');
      }
    });
    return this.writing;
  }
}

/**
 * Writes the sandbox's uncounted executions to the store, if due (or `now`). The count
 * is taken before the write starts, so runs that end meanwhile wait for the next one;
 * a failed write gives its count back. Never rejects.
 */
export async function recordUse(deps: { db: Db; log: Logger }, sb: UserSandbox, now = false): Promise<void> {
  if (!sb.unrecorded) return;
  const at = Date.now();
  if (!now && at - (sb.recordedAt ?? 0) < USE_RECORD_INTERVAL_MS) return;
  const count = sb.unrecorded;
  const before = sb.recordedAt;
  sb.unrecorded = 0;
  sb.recordedAt = at;
  try {
    await recordSandboxUse(deps.db, sb.owner.userId, sb.lastActivity, count);
  } catch (e) {
    sb.unrecorded = (sb.unrecorded ?? 0) + count;
    sb.recordedAt = before;
    deps.log.warn({ err: e, user: sb.owner.name }, 'could not record sandbox use');
  }
}
