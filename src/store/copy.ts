/**
 * Moving an install from its SQLite file to Postgres (`sandgate db copy`): every row of
 * every table, parents before children, ids kept, in batches. Running it again copies
 * only what is missing (a row whose key is already there is left as it is), so an
 * interrupted copy is finished by running it again. At the end each table's rows are
 * counted on both sides; any difference is reported, and the copy is not called done.
 *
 * Tables kept by the database itself (running totals maintained by triggers) are filled
 * by the target's own triggers as their sources arrive; their counts are checked like
 * any other.
 */
import { sql } from 'kysely';
import type { Store } from './store.js';

export interface TableCount {
  table: string;
  source: number;
  target: number;
  copied: number;
}

export interface CopyResult {
  tables: TableCount[];
  /** Whether every table holds as many rows on both sides. */
  ok: boolean;
}

/** Rows read and written at a time. */
const BATCH = 500;

interface Loose {
  [table: string]: Record<string, unknown>;
}

/** The source's tables, parents before children (by their foreign keys). */
async function tablesInOrder(source: Store): Promise<string[]> {
  const names = (await source.db.introspection.getTables()).map((t) => t.name).sort();
  const parents = new Map<string, string[]>();
  for (const t of names) {
    const fks = await sql<{ table: string }>`SELECT "table" FROM pragma_foreign_key_list(${t})`.execute(source.db);
    parents.set(t, fks.rows.map((r) => r.table).filter((p) => p !== t));
  }
  const ordered: string[] = [];
  const visit = (t: string, path: Set<string>) => {
    if (ordered.includes(t) || path.has(t)) return;
    path.add(t);
    for (const p of parents.get(t) ?? []) if (names.includes(p)) visit(p, path);
    ordered.push(t);
  };
  for (const t of names) visit(t, new Set());
  // Tables the database keeps itself go last: by then the target's triggers have filled
  // them from the rows copied before, and a copied row that is already there is skipped.
  const kept = await triggerTargets(source);
  return [...ordered.filter((t) => !kept.has(t)), ...ordered.filter((t) => kept.has(t))];
}

/** Tables that the source's triggers write to. */
async function triggerTargets(source: Store): Promise<Set<string>> {
  const triggers = await sql<{ sql: string }>`SELECT sql FROM sqlite_master WHERE type = 'trigger'`.execute(source.db);
  const out = new Set<string>();
  for (const { sql: body } of triggers.rows) {
    for (const m of body.matchAll(/\b(?:INSERT\s+INTO|UPDATE)\s+(\w+)/gi)) out.add(m[1]!);
  }
  return out;
}

async function count(store: Store, table: string): Promise<number> {
  const db = store.db.withTables<Loose>();
  const r = await db.selectFrom(table).select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
  return Number(r.n);
}

/**
 * Copies every row of `source` (a SQLite store) into `target` (a Postgres store at the
 * same schema version). `progress` hears each table as it is done.
 */
export async function copyStore(source: Store, target: Store, progress: (c: TableCount) => void = () => {}): Promise<CopyResult> {
  if (source.dialect !== 'sqlite' || target.dialect !== 'postgres') throw new Error('a copy goes from the SQLite file to a Postgres database');
  if (source.version !== target.version) throw new Error(`the two databases are at different schema versions (${source.version} and ${target.version}): open both with this sandgate first`);
  const from = source.db.withTables<Loose>();
  const to = target.db.withTables<Loose>();
  const targetTables = new Set((await target.db.introspection.getTables()).map((t) => t.name));
  const tables: TableCount[] = [];
  for (const table of await tablesInOrder(source)) {
    if (!targetTables.has(table)) throw new Error(`the Postgres database has no table ${table}: it was not made by this sandgate`);
    const keys = await primaryKey(source, table);
    let copied = 0;
    let after: Record<string, unknown> | undefined;
    for (;;) {
      // Keyset pagination on the primary key: stable while the source does not change.
      let q = from.selectFrom(table).selectAll().orderBy(keys.map((k) => sql.ref(k)));
      if (after) q = q.where(sql<boolean>`(${sql.join(keys.map((k) => sql.ref(k)))}) > (${sql.join(keys.map((k) => after![k]))})`);
      const rows = await q.limit(BATCH).execute();
      if (!rows.length) break;
      const r = await to.insertInto(table).values(rows).onConflict((oc) => oc.doNothing()).executeTakeFirst();
      copied += Number(r.numInsertedOrUpdatedRows ?? 0);
      after = rows[rows.length - 1];
    }
    await restartIdentity(target, table);
    const c = { table, source: await count(source, table), target: await count(target, table), copied };
    tables.push(c);
    progress(c);
  }
  return { tables, ok: tables.every((t) => t.source === t.target) };
}

/** The columns of `table`'s primary key on SQLite, in key order (rowid when it has none declared). */
async function primaryKey(source: Store, table: string): Promise<string[]> {
  const cols = await sql<{ name: string; pk: number }>`SELECT name, pk FROM pragma_table_info(${table})`.execute(source.db);
  const pk = cols.rows.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk).map((c) => c.name);
  if (!pk.length) throw new Error(`table ${table} has no primary key: it cannot be copied row by row`);
  return pk;
}

/** After ids were copied as they were, the identity goes on from the largest (else the next insert would collide). */
async function restartIdentity(target: Store, table: string): Promise<void> {
  const ids = await sql<{ column_name: string }>`
    SELECT column_name FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = ${table} AND is_identity = 'YES'`.execute(target.db);
  for (const { column_name: column } of ids.rows) {
    await sql`SELECT setval(pg_get_serial_sequence(${table}, ${column}), m) FROM (SELECT MAX(${sql.ref(column)}) AS m FROM ${sql.table(table)}) x WHERE m IS NOT NULL`.execute(
      target.db,
    );
  }
}
