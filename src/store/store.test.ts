import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { Migration } from './migrations.js';
import { MIGRATIONS } from '../migrations.js';
import { openStore, openStoreFile, redactUrl, StoreError, type Store, type StoreOptions } from './store.js';
import { ensureUser, findUser } from '../accounts/accounts.js';
import { openTestStore } from '../../test/support/store.js';
import { REPO_ROOT } from '../paths.js';

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-store-'));
const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';

/** A step that adds a column, the same on both databases. */
const noteColumn: Migration = { description: 'test column', sqlite: 'ALTER TABLE users ADD COLUMN note TEXT', postgres: 'ALTER TABLE users ADD COLUMN note TEXT' };

async function tableExists(store: Store, name: string): Promise<boolean> {
  const tables = await store.db.introspection.getTables();
  return tables.some((t) => t.name === name);
}

/** Sets the recorded schema version behind the store's back, as a newer sandgate would leave it. */
async function setVersion(store: Store, version: number): Promise<void> {
  if (store.dialect === 'sqlite') await sql.raw(`PRAGMA user_version = ${version}`).execute(store.db);
  else await sql`UPDATE sandgate_schema SET version = ${version}`.execute(store.db);
}

describe('store', () => {
  it('creates the database with every migration applied', async () => {
    const store = await openTestStore();
    expect(store.version).toBe(MIGRATIONS.length);
    expect(await tableExists(store, 'users')).toBe(true);
    await store.ping();
    await store.close();
  });

  it.skipIf(onPostgres)('keeps the SQLite file in WAL mode, and the data directory and the database private whatever mode they had', async () => {
    const dir = tmp();
    fs.chmodSync(dir, 0o755);
    fs.writeFileSync(path.join(dir, 'sandgate.db'), '', { mode: 0o644 });
    fs.chmodSync(path.join(dir, 'sandgate.db'), 0o644);
    const store = await openStore({ dataDir: dir }, MIGRATIONS);
    expect(store.dialect).toBe('sqlite');
    await ensureUser(store.db, 'alice');
    const raw = new Database(path.join(dir, 'sandgate.db'), { readonly: true });
    expect(raw.pragma('journal_mode', { simple: true })).toBe('wal');
    raw.close();
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    for (const f of ['sandgate.db', 'sandgate.db-wal', 'sandgate.db-shm']) expect(fs.statSync(path.join(dir, f)).mode & 0o777, f).toBe(0o600);
    await store.close();
  });

  it('keeps data across restarts and applies only new migrations', async () => {
    const first = await openTestStore();
    await ensureUser(first.db, 'alice', { isAdmin: true });
    await first.close();
    const second = await openStore(first.options, [...MIGRATIONS, noteColumn]);
    expect(second.version).toBe(MIGRATIONS.length + 1);
    expect((await findUser(second.db, 'alice'))?.isAdmin).toBe(true);
    await second.close();
    // Opened again, the added step is not run twice (a second ADD COLUMN would fail).
    const third = await openStore(first.options, [...MIGRATIONS, noteColumn]);
    expect(await findUser(third.db, 'alice')).toBeDefined();
    await third.close();
  });

  it('refuses a database from a newer version and changes nothing', async () => {
    const s = await openTestStore();
    await ensureUser(s.db, 'bob');
    await setVersion(s, MIGRATIONS.length + 5);
    await s.close();
    const file = path.join(s.dataDir, 'sandgate.db');
    const before = onPostgres ? undefined : fs.readFileSync(file);
    const err = await openStore(s.options, MIGRATIONS).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreError);
    expect((err as Error).message).toMatch(/newer sandgate \(schema version \d+, this one knows up to \d+\)\. Upgrade sandgate/);
    if (before) expect(fs.readFileSync(file).equals(before)).toBe(true);
  });

  it('rolls back a failing migration as a whole, naming the step', async () => {
    const s = await openTestStore();
    await s.close();
    const bad: Migration = {
      description: 'half-done',
      sqlite: 'CREATE TABLE half (x INTEGER); INSERT INTO no_such_table VALUES (1);',
      postgres: 'CREATE TABLE half (x BIGINT); INSERT INTO no_such_table VALUES (1);',
    };
    await expect(openStore(s.options, [...MIGRATIONS, noteColumn, bad])).rejects.toThrow(/migration \d+ \(half-done\) failed: .*no_such_table.*Nothing was changed/);
    const again = await openStore(s.options, MIGRATIONS);
    expect(await tableExists(again, 'half')).toBe(false);
    // The good step before it was rolled back too: all pending steps are one transaction.
    expect((await again.db.introspection.getTables()).find((t) => t.name === 'users')!.columns.map((c) => c.name)).not.toContain('note');
    await again.close();
  });

  it('migrates once when two gateways start at the same time', async () => {
    const s = await openTestStore();
    await s.close();
    // Fails if run twice: the second CREATE TABLE finds the table.
    const once: Migration = { description: 'once', sqlite: 'CREATE TABLE once_only (x INTEGER)', postgres: 'CREATE TABLE once_only (x BIGINT)' };
    if (onPostgres) {
      const opened = await Promise.all([openStore(s.options, [...MIGRATIONS, once]), openStore(s.options, [...MIGRATIONS, once])]);
      for (const o of opened) expect(o.version).toBe(MIGRATIONS.length + 1);
      await Promise.all(opened.map((o) => o.close()));
    } else {
      // Two processes, each opening the same file with the extra step.
      const script = path.join(s.dataDir, 'open.mts');
      fs.writeFileSync(
        script,
        `import { openStore } from ${JSON.stringify(path.join(REPO_ROOT, 'src/store/store.ts'))};
         import { MIGRATIONS } from ${JSON.stringify(path.join(REPO_ROOT, 'src/migrations.ts'))};
         const s = await openStore({ dataDir: ${JSON.stringify(s.dataDir)} }, [...MIGRATIONS, ${JSON.stringify(once)}]);
         console.log(s.version); await s.close();`,
      );
      const run = () => promisify(execFile)(process.execPath, ['--import', 'tsx', script], { cwd: REPO_ROOT });
      const outs = await Promise.all([run(), run()]);
      for (const o of outs) expect(o.stdout.trim()).toBe(String(MIGRATIONS.length + 1));
    }
    const after = await openStore(s.options, [...MIGRATIONS, once]);
    expect(await tableExists(after, 'once_only')).toBe(true);
    await after.close();
  });

  it('says which database it cannot reach, without its password', async () => {
    const options: StoreOptions = { dataDir: tmp(), databaseUrl: 'postgres://sandgate:s3cret-pw@127.0.0.1:1/sandgate' };
    const err = (await openStore(options, MIGRATIONS).catch((e: unknown) => e)) as Error;
    expect(err).toBeInstanceOf(StoreError);
    expect(err.message).toMatch(/cannot reach the database at postgres:\/\/sandgate:\*\*\*@127\.0\.0\.1:1\/sandgate: .*SANDGATE_DATABASE_URL/);
    expect(err.message).not.toContain('s3cret-pw');
    expect(redactUrl('postgres://u:p@h/db')).toBe('postgres://u:***@h/db');
  });

  it.skipIf(onPostgres)('says which file it cannot open', async () => {
    const dir = tmp();
    fs.mkdirSync(path.join(dir, 'sandgate.db'));
    await expect(openStoreFile(path.join(dir, 'sandgate.db'), MIGRATIONS)).rejects.toThrow(/cannot open the database .*sandgate\.db.*SANDGATE_DATA_DIR/);
  });

  it('validates user names', async () => {
    const s = await openTestStore();
    await expect(ensureUser(s.db, '../etc')).rejects.toThrow(/not a valid user name/);
    expect((await ensureUser(s.db, 'octo-cat')).name).toBe('octo-cat');
    await s.close();
  });
});
