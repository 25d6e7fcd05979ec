/**
 * Every migration is written twice, once per database; this holds the two to the same
 * schema: the same tables, the same columns with the same nullability and defaults,
 * and every SQLite index present on Postgres too. Runs in the postgres project, which
 * has a server to compare with.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MIGRATIONS } from '../migrations.js';
import { openStore, type Store } from './store.js';
import { testDatabaseUrl } from '../../test/support/postgres.js';

const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';

interface Shape {
  [table: string]: { [column: string]: { nullable: boolean; defaulted: boolean } };
}

async function shapeOf(store: Store): Promise<Shape> {
  const out: Shape = {};
  for (const t of await store.db.introspection.getTables()) {
    if (t.name === 'sandgate_schema') continue;
    // SQLite lets a primary key column hold NULL unless it says NOT NULL (a quirk kept for
    // compatibility); sandgate never stores one, and Postgres never allows it.
    const keys =
      store.dialect === 'sqlite' ? new Set((await sql<{ name: string }>`SELECT name FROM pragma_table_info(${t.name}) WHERE pk > 0`.execute(store.db)).rows.map((r) => r.name)) : new Set<string>();
    // A table WITHOUT ROWID has no rowid for its INTEGER PRIMARY KEY to stand for, so
    // nothing numbers it; Kysely's introspection does not look for that clause.
    const withoutRowid =
      store.dialect === 'sqlite' &&
      /WITHOUT\s+ROWID\s*$/i.test((await sql<{ sql: string }>`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ${t.name}`.execute(store.db)).rows[0]?.sql ?? '');
    out[t.name] = Object.fromEntries(
      t.columns.map((c) => [c.name, { nullable: c.isNullable && !keys.has(c.name), defaulted: c.hasDefaultValue || (c.isAutoIncrementing && !withoutRowid) }]),
    );
  }
  return out;
}

async function indexesOf(store: Store): Promise<Set<string>> {
  const rows =
    store.dialect === 'sqlite'
      ? await sql<{ name: string }>`SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_autoindex_%'`.execute(store.db)
      : await sql<{ name: string }>`SELECT indexname AS name FROM pg_indexes WHERE schemaname = current_schema()`.execute(store.db);
  return new Set(rows.rows.map((r) => r.name));
}

async function triggerTablesOf(store: Store): Promise<Set<string>> {
  const rows =
    store.dialect === 'sqlite'
      ? await sql<{ name: string }>`SELECT DISTINCT tbl_name AS name FROM sqlite_master WHERE type = 'trigger'`.execute(store.db)
      : await sql<{ name: string }>`SELECT DISTINCT event_object_table AS name FROM information_schema.triggers WHERE trigger_schema = current_schema()`.execute(store.db);
  return new Set(rows.rows.map((r) => r.name));
}

describe.skipIf(!onPostgres)('the two databases have one schema', () => {
  let lite: Store;
  let pg: Store;
  beforeAll(async () => {
    lite = await openStore({ dataDir: fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-parity-')) }, MIGRATIONS);
    pg = await openStore({ dataDir: lite.location, databaseUrl: await testDatabaseUrl() }, MIGRATIONS);
  });
  afterAll(async () => {
    await lite?.close();
    await pg?.close();
  });

  it('at the same version', () => {
    expect(pg.version).toBe(lite.version);
  });

  it('with the same tables and columns, nullability and defaults', async () => {
    expect(await shapeOf(pg)).toEqual(await shapeOf(lite));
  });

  it('with every SQLite index on Postgres too', async () => {
    const pgIndexes = await indexesOf(pg);
    const missing = [...(await indexesOf(lite))].filter((i) => !pgIndexes.has(i));
    expect(missing).toEqual([]);
  });

  it('with triggers on the same tables', async () => {
    expect([...(await triggerTablesOf(pg))].sort()).toEqual([...(await triggerTablesOf(lite))].sort());
  });
});
