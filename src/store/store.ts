/**
 * The Store: one SQLite file (better-sqlite3, WAL) under the data directory, with
 * versioned migrations applied at open. Opening never loses data: each migration runs
 * in a transaction and a database written by a newer sandgate is refused.
 *
 * The store knows no domain: it opens a file and applies the steps it is given. Each
 * domain owns its tables (its schema.ts) and its queries; the ordered list of every
 * step is assembled above all domains, in src/migrations.ts, where the gateway is
 * composed.
 */
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Migration } from './migrations.js';
import { GatewayError } from '../errors.js';

export type Db = Database.Database;

const statements = new WeakMap<Db, Map<string, Database.Statement>>();

/**
 * A prepared statement for `sql`, prepared once per database: for queries on hot paths
 * (every execution, every request), where preparing costs more than running.
 */
export function statement(db: Db, sql: string): Database.Statement {
  let m = statements.get(db);
  if (!m) statements.set(db, (m = new Map()));
  let s = m.get(sql);
  if (!s) m.set(sql, (s = db.prepare(sql)));
  return s;
}

/** The database cannot be opened, or was written by a newer sandgate: an operator must act. */
export class StoreError extends GatewayError {
  override name = 'StoreError';
  constructor(message: string) {
    super(message, { reason: 'store_unavailable', operator: true });
  }
}

export interface Store {
  db: Db;
  /** Schema version after migrations. */
  version: number;
  file: string;
  /** Throws when the database cannot answer a query (the readiness check's question). */
  ping(): void;
  close(): void;
}

/**
 * Opens (creating when absent) `<dataDir>/sandgate.db` and migrates it. The data
 * directory holds the store, the keys and every workspace: it is made private (0700)
 * whatever mode it had (a folder made beforehand, as compose's /var/lib/sandgate, is
 * often 0755), and so is the database, so neither another local user nor an upstream
 * server (which runs as a user of its own) can read it.
 */
export function openStore(dataDir: string, migrations: readonly Migration[]): Store {
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  fs.chmodSync(dataDir, 0o700);
  const file = path.join(dataDir, 'sandgate.db');
  if (!fs.existsSync(file)) fs.closeSync(fs.openSync(file, 'a', 0o600));
  fs.chmodSync(file, 0o600);
  return openStoreFile(file, migrations);
}

export function openStoreFile(file: string, migrations: readonly Migration[]): Store {
  let db: Db;
  try {
    db = new Database(file);
  } catch (e) {
    throw new StoreError(`cannot open the database ${file}: ${(e as Error).message}. Check SANDGATE_DATA_DIR and its permissions.`);
  }
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('foreign_keys = ON');
    db.pragma('busy_timeout = 5000');
    db.pragma('synchronous = NORMAL');
    const version = migrate(db, migrations);
    return { db, version, file, ping: () => void statement(db, 'SELECT 1').get(), close: () => db.close() };
  } catch (e) {
    db.close();
    throw e;
  }
}

/** Applies pending migrations in order (a step's version is its place in the list, from 1); returns the resulting version. */
export function migrate(db: Db, migrations: readonly Migration[]): number {
  const latest = migrations.length;
  const current = db.pragma('user_version', { simple: true }) as number;
  if (current > latest) {
    throw new StoreError(
      `the database was written by a newer sandgate (schema version ${current}, this one knows up to ${latest}). ` +
        'Upgrade sandgate, or restore a backup made by this version. Nothing was changed.',
    );
  }
  migrations.forEach((m, i) => {
    if (i < current) return;
    db.transaction(() => {
      m.up(db);
      db.pragma(`user_version = ${i + 1}`);
    })();
  });
  return latest;
}
