/**
 * The sandboxes table: each user's container (at most one), when it started, when it was
 * last used and how many executions it has run. The manager writes it as sandboxes start,
 * run and stop; the CLI and the admin page read it to match containers to users. Every
 * statement on these rows is here.
 */
import { statement, type Db } from '../store/store.js';

export interface SandboxRecord {
  userId: number;
  /** Null once the container was stopped on purpose; the counts stay. */
  containerId: string | null;
  startedAt: number | null;
  lastUsedAt: number | null;
  executions: number;
}

interface Row {
  user_id: number;
  container_id: string | null;
  started_at: number | null;
  last_used_at: number | null;
  executions: number;
}

const toRecord = (r: Row): SandboxRecord => ({
  userId: r.user_id,
  containerId: r.container_id,
  startedAt: r.started_at,
  lastUsedAt: r.last_used_at,
  executions: r.executions,
});

/** A container became the user's sandbox (a fresh start, or one taken from the warm pool). */
export function recordSandboxStarted(db: Db, userId: number, containerId: string, startedAt: number): void {
  statement(
    db,
    `INSERT INTO sandboxes (user_id, container_id, started_at, last_used_at) VALUES (?, ?, ?, ?)
     ON CONFLICT(user_id) DO UPDATE SET container_id = excluded.container_id, started_at = excluded.started_at, last_used_at = excluded.last_used_at`,
  ).run(userId, containerId, startedAt, startedAt);
}

/** Adds `executions` runs to the user's count and moves their last use. */
export function recordSandboxUse(db: Db, userId: number, lastUsedAt: number, executions: number): void {
  statement(db, 'UPDATE sandboxes SET last_used_at = ?, executions = executions + ? WHERE user_id = ?').run(lastUsedAt, executions, userId);
}

/** The user's container was stopped on purpose: nothing is to be adopted for them. */
export function forgetSandboxContainer(db: Db, userId: number): void {
  statement(db, 'UPDATE sandboxes SET container_id = NULL WHERE user_id = ?').run(userId);
}

/** Whose sandbox a container is, by the store's mapping (pooled containers carry no owner label). */
export function sandboxOwnerId(db: Db, containerId: string): number | undefined {
  const r = statement(db, 'SELECT user_id FROM sandboxes WHERE container_id = ?').get(containerId) as { user_id: number } | undefined;
  return r?.user_id;
}

export function sandboxRecord(db: Db, userId: number): SandboxRecord | undefined {
  const r = statement(db, 'SELECT * FROM sandboxes WHERE user_id = ?').get(userId) as Row | undefined;
  return r && toRecord(r);
}

/** One execution as the usage view counts it. */
export interface ExecutionRow {
  userId: number;
  ts: number;
  language: string;
  durationMs: number;
  cpuMs: number | null;
  outcome: 'ok' | 'error' | 'timeout' | 'killed';
}

/** Writes executions (the manager gathers them and writes them together, off the run's path). */
export function recordExecutions(db: Db, rows: readonly ExecutionRow[]): void {
  if (!rows.length) return;
  const insert = statement(db, 'INSERT INTO executions (user_id, ts, language, duration_ms, cpu_ms, outcome) VALUES (?, ?, ?, ?, ?, ?)');
  db.transaction(() => {
    // A user deleted meanwhile has no rows to count.
    for (const r of rows) if (statement(db, 'SELECT 1 FROM users WHERE id = ?').get(r.userId)) insert.run(r.userId, r.ts, r.language, r.durationMs, r.cpuMs, r.outcome);
  })();
}

export interface ExecutionUsage {
  userId: number;
  user: string;
  executions: number;
  failed: number;
  cpuSeconds: number;
  runSeconds: number;
}

/** Executions and their CPU time per user in [since, until). */
export function executionUsage(db: Db, since: number, until: number): ExecutionUsage[] {
  return statement(
    db,
    `SELECT e.user_id AS userId, u.name AS user, COUNT(*) AS executions, SUM(e.outcome != 'ok') AS failed,
            COALESCE(SUM(e.cpu_ms), 0) / 1000.0 AS cpuSeconds, SUM(e.duration_ms) / 1000.0 AS runSeconds
     FROM executions e JOIN users u ON u.id = e.user_id
     WHERE e.ts >= ? AND e.ts < ? GROUP BY e.user_id ORDER BY u.name`,
  ).all(since, until) as ExecutionUsage[];
}
