/**
 * The sandboxes table: each user's container (at most one), when it started, when it was
 * last used and how many executions it has run. The manager writes it as sandboxes start,
 * run and stop; the CLI and the admin page read it to match containers to users. Every
 * statement on these rows is here, and on the executions the usage view counts.
 *
 * Both tables are created by steps of the accounts schema (src/accounts/schema.ts,
 * src/accounts/admin-schema.ts); their columns are declared here, beside their queries.
 */
import type { Generated } from 'kysely';
import type { Db } from '../store/store.js';

declare module '../store/tables.js' {
  interface Tables {
    sandboxes: SandboxesTable;
    executions: ExecutionsTable;
  }
}

export interface SandboxesTable {
  user_id: number;
  /** Null once the container was stopped on purpose. */
  container_id: string | null;
  started_at: number | null;
  last_used_at: number | null;
  executions: Generated<number>;
}

export interface ExecutionsTable {
  id: Generated<number>;
  user_id: number;
  /** Epoch ms when the run began. */
  ts: number;
  language: string;
  duration_ms: number;
  /** The container's CPU time during the run; null when unknown. */
  cpu_ms: number | null;
  outcome: ExecutionRow['outcome'];
}

export interface SandboxRecord {
  userId: number;
  /** Null once the container was stopped on purpose; the counts stay. */
  containerId: string | null;
  startedAt: number | null;
  lastUsedAt: number | null;
  executions: number;
}

/** A container became the user's sandbox (a fresh start, or one taken from the warm pool). */
export async function recordSandboxStarted(db: Db, userId: number, containerId: string, startedAt: number): Promise<void> {
  await db
    .insertInto('sandboxes')
    .values({ user_id: userId, container_id: containerId, started_at: startedAt, last_used_at: startedAt })
    .onConflict((oc) =>
      oc.column('user_id').doUpdateSet((eb) => ({
        container_id: eb.ref('excluded.container_id'),
        started_at: eb.ref('excluded.started_at'),
        last_used_at: eb.ref('excluded.last_used_at'),
      })),
    )
    .execute();
}

/**
 * Adds `executions` runs to the user's count and moves their last use forward (never
 * back: two writes for the same sandbox may land in either order).
 */
export async function recordSandboxUse(db: Db, userId: number, lastUsedAt: number, executions: number): Promise<void> {
  await db
    .updateTable('sandboxes')
    .set((eb) => ({
      last_used_at: eb.case().when('last_used_at', '>', lastUsedAt).then(eb.ref('last_used_at')).else(lastUsedAt).end(),
      executions: eb('executions', '+', executions),
    }))
    .where('user_id', '=', userId)
    .execute();
}

/** The user's container was stopped on purpose: nothing is to be adopted for them. */
export async function forgetSandboxContainer(db: Db, userId: number, containerId?: string): Promise<void> {
  // With `containerId`, only while it is still the one recorded: a sandbox started for the
  // user meanwhile (a run that came during the stop) keeps its record.
  let q = db.updateTable('sandboxes').set({ container_id: null }).where('user_id', '=', userId);
  if (containerId !== undefined) q = q.where('container_id', '=', containerId);
  await q.execute();
}

/** Whose sandbox a container is, by the store's mapping (pooled containers carry no owner label). */
export async function sandboxOwnerId(db: Db, containerId: string): Promise<number | undefined> {
  const r = await db.selectFrom('sandboxes').select('user_id').where('container_id', '=', containerId).executeTakeFirst();
  return r?.user_id;
}

const RECORD_COLUMNS = ['user_id as userId', 'container_id as containerId', 'started_at as startedAt', 'last_used_at as lastUsedAt', 'executions'] as const;

export async function sandboxRecord(db: Db, userId: number): Promise<SandboxRecord | undefined> {
  return db.selectFrom('sandboxes').select(RECORD_COLUMNS).where('user_id', '=', userId).executeTakeFirst();
}

/** Every user's record, by user id (the admin page's list of users). */
export async function sandboxRecords(db: Db): Promise<Map<number, SandboxRecord>> {
  return new Map((await db.selectFrom('sandboxes').select(RECORD_COLUMNS).execute()).map((r) => [r.userId, r]));
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

/** Rows written by one statement: well below SQLite's limit on bound values (6 a row). */
const EXECUTIONS_PER_INSERT = 500;

/** Writes executions (the manager gathers them and writes them together, off the run's path). */
export async function recordExecutions(db: Db, rows: readonly ExecutionRow[]): Promise<void> {
  if (!rows.length) return;
  await db.transaction().execute(async (tx) => {
    // A user deleted meanwhile has no rows to count.
    const ids = [...new Set(rows.map((r) => r.userId))];
    const known = new Set((await tx.selectFrom('users').select('id').where('id', 'in', ids).execute()).map((u) => u.id));
    const kept = rows.filter((r) => known.has(r.userId));
    for (let i = 0; i < kept.length; i += EXECUTIONS_PER_INSERT) {
      await tx
        .insertInto('executions')
        .values(kept.slice(i, i + EXECUTIONS_PER_INSERT).map((r) => ({ user_id: r.userId, ts: r.ts, language: r.language, duration_ms: r.durationMs, cpu_ms: r.cpuMs, outcome: r.outcome })))
        .execute();
    }
  });
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
export async function executionUsage(db: Db, since: number, until: number): Promise<ExecutionUsage[]> {
  return db
    .selectFrom('executions as e')
    .innerJoin('users as u', 'u.id', 'e.user_id')
    .select((eb) => [
      'e.user_id as userId',
      'u.name as user',
      eb.fn.countAll<number>().as('executions'),
      // Literals, not parameters: Postgres must see numbers to sum them.
      eb.fn.sum<number>(eb.case().when('e.outcome', '!=', 'ok').then(eb.lit(1)).else(eb.lit(0)).end()).as('failed'),
      eb(eb.fn.coalesce(eb.fn.sum<number>('e.cpu_ms'), eb.lit(0)), '/', eb.lit(1000)).$castTo<number>().as('cpuSeconds'),
      eb(eb.fn.sum<number>('e.duration_ms'), '/', eb.lit(1000)).$castTo<number>().as('runSeconds'),
    ])
    .where('e.ts', '>=', since)
    .where('e.ts', '<', until)
    .groupBy(['e.user_id', 'u.name'])
    .orderBy('u.name')
    .execute();
}
