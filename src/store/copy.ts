/**
 * Moving an install from its SQLite file to Postgres (`sandgate db copy`): every row of
 * every table, parents before children, ids kept, in batches, read from one snapshot of
 * the file and written in ONE Postgres transaction, so an interrupted copy leaves the
 * target as empty as it was and is simply run again.
 *
 * The target must be empty: a copy never merges into rows already there (an id taken by
 * another row would hand one user's tokens and chats to another). Run against a target
 * that already holds data, it compares instead: when every table holds the same rows
 * (the copy was done), it says so and changes nothing; otherwise it refuses. After a copy
 * the same comparison checks every table, row by row, not only the counts.
 *
 * Tables kept by the database itself (running totals maintained by triggers) are filled
 * by the target's own triggers as their sources arrive, and compared like any other.
 */
import crypto from 'node:crypto';
import { sql } from 'kysely';
import type { Store } from './store.js';
import type { Db } from './tables.js';

export interface TableCount {
  table: string;
  source: number;
  target: number;
  copied: number;
  /** Whether both sides hold the same rows (same count and same content). */
  same: boolean;
}

export interface CopyResult {
  tables: TableCount[];
  /** Whether every table holds the same rows on both sides. */
  ok: boolean;
  /** The target held data before: nothing was copied, only compared. */
  compared: boolean;
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

/** The columns of `table`'s primary key on SQLite, in key order. */
async function primaryKey(source: Store, table: string): Promise<string[]> {
  const cols = await sql<{ name: string; pk: number }>`SELECT name, pk FROM pragma_table_info(${table})`.execute(source.db);
  const pk = cols.rows.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk).map((c) => c.name);
  if (!pk.length) throw new Error(`table ${table} has no primary key: it cannot be copied row by row`);
  return pk;
}

/** Every row of `table`, in batches by primary key (keyset pagination: stable and cheap). */
async function* rowsOf(db: Db, table: string, keys: string[]): AsyncGenerator<Record<string, unknown>[]> {
  const from = db.withTables<Loose>();
  let after: Record<string, unknown> | undefined;
  for (;;) {
    let q = from.selectFrom(table).selectAll().orderBy(keys.map((k) => sql.ref(k)));
    if (after) {
      const last = after;
      q = q.where(sql<boolean>`(${sql.join(keys.map((k) => sql.ref(k)))}) > (${sql.join(keys.map((k) => last[k]))})`);
    }
    const rows = await q.limit(BATCH).execute();
    if (!rows.length) return;
    yield rows;
    after = rows[rows.length - 1];
  }
}

/** A row as comparable text: the same on both databases for the same values (numbers, text, bytes, null). */
function rowText(row: Record<string, unknown>): string {
  return JSON.stringify(Object.keys(row).sort().map((k) => {
    const v = row[k];
    return Buffer.isBuffer(v) ? ['b', v.toString('base64')] : v;
  }));
}

/**
 * What a table holds, independent of row order: its count, and the sum of each row's
 * hash modulo 2^128 (the same multiset of rows gives the same sum, whatever order each
 * database reads them in).
 */
async function contentOf(db: Db, table: string, keys: string[]): Promise<{ count: number; digest: bigint }> {
  let count = 0;
  let digest = 0n;
  for await (const rows of rowsOf(db, table, keys)) {
    for (const r of rows) {
      count++;
      digest = (digest + BigInt(`0x${crypto.createHash('sha256').update(rowText(r)).digest('hex').slice(0, 32)}`)) % 2n ** 128n;
    }
  }
  return { count, digest };
}

async function compare(source: Store, target: Store, tables: string[], copied: Map<string, number>): Promise<TableCount[]> {
  const out: TableCount[] = [];
  for (const table of tables) {
    const keys = await primaryKey(source, table);
    const a = await contentOf(source.db, table, keys);
    const b = await contentOf(target.db, table, keys);
    out.push({ table, source: a.count, target: b.count, copied: copied.get(table) ?? 0, same: a.count === b.count && a.digest === b.digest });
  }
  return out;
}

/**
 * Copies every row of `source` (a SQLite store) into `target` (an empty Postgres store
 * at the same schema version), or, when `target` already holds data, compares the two.
 * `progress` hears each table as it is checked.
 */
export async function copyStore(source: Store, target: Store, progress: (c: TableCount) => void = () => {}): Promise<CopyResult> {
  if (source.dialect !== 'sqlite' || target.dialect !== 'postgres') throw new Error('a copy goes from the SQLite file to a Postgres database');
  if (source.version !== target.version) throw new Error(`the two databases are at different schema versions (${source.version} and ${target.version}): open both with this sandgate first`);
  const tables = await tablesInOrder(source);
  const targetTables = new Set((await target.db.introspection.getTables()).map((t) => t.name));
  for (const t of tables) if (!targetTables.has(t)) throw new Error(`the Postgres database has no table ${t}: it was not made by this sandgate`);

  let empty = true;
  for (const t of tables) {
    const any = await target.db.withTables<Loose>().selectFrom(t).select(sql<number>`1`.as('x')).limit(1).executeTakeFirst();
    if (any) empty = false;
  }
  const copied = new Map<string, number>();
  if (empty) {
    // One transaction: all of it lands, or none (an interrupted copy is run again from the start).
    await target.db.transaction().execute(async (tx) => {
      const to = tx.withTables<Loose>();
      for (const table of tables) {
        const keys = await primaryKey(source, table);
        let n = 0;
        for await (const rows of rowsOf(source.db, table, keys)) {
          const r = await to
            .insertInto(table)
            .values(rows)
            .onConflict((oc) => oc.doNothing())
            .executeTakeFirst()
            .catch((e: Error) => {
              throw new Error(`copying ${table} failed: ${e.message}. Nothing was written to the Postgres database.`);
            });
          n += Number(r.numInsertedOrUpdatedRows ?? 0);
        }
        copied.set(table, n);
        await restartIdentity(tx, table);
      }
    });
  }
  const result = await compare(source, target, tables, copied);
  result.forEach((c) => progress(c));
  return { tables: result, ok: result.every((t) => t.same), compared: !empty };
}

/** After ids were copied as they were, the identity goes on from the largest (else the next insert would collide). */
async function restartIdentity(db: Db, table: string): Promise<void> {
  const ids = await sql<{ column_name: string }>`
    SELECT column_name FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = ${table} AND is_identity = 'YES'`.execute(db);
  for (const { column_name: column } of ids.rows) {
    await sql`SELECT setval(pg_get_serial_sequence(${table}, ${column}), m) FROM (SELECT MAX(${sql.ref(column)}) AS m FROM ${sql.table(table)}) x WHERE m IS NOT NULL`.execute(db);
  }
}
