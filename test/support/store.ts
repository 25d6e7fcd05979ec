/**
 * The store a test opens: SQLite in the data directory, or (in the postgres project,
 * SANDGATE_TEST_DATABASE=postgres) a fresh database on the run's throw-away cluster.
 * Tests that open a store themselves use this, so they run unchanged on both.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach } from 'vitest';
import { openStore, type Store, type StoreOptions } from '../../src/store/store.js';
import { MIGRATIONS } from '../../src/migrations.js';
import { testDatabaseUrl } from './postgres.js';

export type TestStore = Store & { dataDir: string; options: StoreOptions };

/** Opens a migrated store for a test, in `dataDir` (a new temporary one by default); `options` open the same database again. */
export async function openTestStore(dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-store-'))): Promise<TestStore> {
  const options = { dataDir, databaseUrl: await testDatabaseUrl() };
  const store = await openStore(options, MIGRATIONS);
  return Object.assign(store, { dataDir, options });
}

/** The setting overrides that point a gateway made by a test at the same kind of database. */
export async function testDatabaseEnv(): Promise<Record<string, string>> {
  const url = await testDatabaseUrl();
  return url ? { SANDGATE_DATABASE_URL: url } : {};
}

/** Opens a fresh store before each test of the file (or describe) and removes it after; `use` receives it. */
export function storePerTest(use: (store: TestStore) => void): void {
  let store: TestStore | undefined;
  beforeEach(async () => {
    store = await openTestStore();
    use(store);
  });
  afterEach(async () => {
    await store?.close();
    if (store) fs.rmSync(store.dataDir, { recursive: true, force: true });
  });
}
