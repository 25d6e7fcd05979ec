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

  constructor(private readonly deps: { db: Db; log: Logger }) {}

  add(row: ExecutionRow): void {
    this.rows.push(row);
  }

  /** Writes every few seconds from now on. */
  start(): void {
    this.timer = setInterval(() => this.flush(), EXECUTION_LOG_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** Writes the executions gathered so far to the store. */
  flush(): void {
    const rows = this.rows;
    this.rows = [];
    try {
      recordExecutions(this.deps.db, rows);
    } catch (e) {
      this.deps.log.warn({ err: e, rows: rows.length }, 'could not record executions');
    }
  }
}

/** Writes the sandbox's uncounted executions to the store, if due (or `now`). */
export function recordUse(deps: { db: Db; log: Logger }, sb: UserSandbox, now = false): void {
  if (!sb.unrecorded) return;
  const at = Date.now();
  if (!now && at - (sb.recordedAt ?? 0) < USE_RECORD_INTERVAL_MS) return;
  try {
    recordSandboxUse(deps.db, sb.owner.userId, sb.lastActivity, sb.unrecorded);
    sb.unrecorded = 0;
    sb.recordedAt = at;
  } catch (e) {
    deps.log.warn({ err: e, user: sb.owner.name }, 'could not record sandbox use');
  }
}
