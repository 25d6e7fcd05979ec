/**
 * The Store: every table sandgate keeps, in one of two databases, behind one typed,
 * asynchronous handle (Kysely). With SANDGATE_DATABASE_URL empty it is one SQLite file
 * in the data directory (better-sqlite3, WAL): the default, for one host. With a
 * `postgres://` URL it is that Postgres database through a node-postgres pool: for
 * several gateways, or a team that outgrew one host. This folder is the only code that
 * knows which one it talks to; domains query `store.db` the same way on both.
 *
 * Opening never loses data: pending migrations run in one transaction under a lock (two
 * gateways starting at once never both migrate), and a database written by a newer
 * sandgate is refused before anything is changed.
 *
 * The store knows no domain: it opens a database and applies the steps it is given.
 * Each domain owns its tables (its schema.ts) and its queries; the ordered list of every
 * step is assembled above all domains, in src/migrations.ts.
 */
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, sql, type LogEvent, type SqliteDatabase } from 'kysely';
import * as metrics from '../telemetry/metrics.js';
import pg from 'pg';
import { parseIntoClientConfig } from 'pg-connection-string';
import type { Migration } from './migrations.js';
import type { Db, Dialect, Tables, Tx } from './tables.js';
import { GatewayError } from '../errors.js';

export type { Db, Dialect, Tx } from './tables.js';

/** The database cannot be opened, or was written by a newer sandgate: an operator must act. */
export class StoreError extends GatewayError {
  override name = 'StoreError';
  constructor(message: string) {
    super(message, { reason: 'store_unavailable', operator: true });
  }
}

/** Where the store is: the settings of the same names (src/config.ts). */
export interface StoreOptions {
  dataDir: string;
  /** Empty: `<dataDir>/sandgate.db`. `postgres://…`: that database. */
  databaseUrl?: string;
  /** Connections the Postgres pool may open. */
  databasePoolSize?: number;
  /** A PEM file with the certificate authority that signed the Postgres server's certificate. */
  databaseCaFile?: string;
  /**
   * false: open the database as it is, applying no migration (a backup must copy what
   * the running gateway has, not upgrade it first). `version` is then the database's own.
   */
  migrate?: boolean;
}

export interface Store {
  db: Db;
  dialect: Dialect;
  /** Schema version after migrations. */
  version: number;
  /** Where the data is, for messages: the file, or the URL without its password. */
  location: string;
  /** Throws when the database cannot answer a query (the readiness check's question). */
  ping(): Promise<void>;
  close(): Promise<void>;
  /**
   * SQLite: copies the database to `file` while it is in use (SQLite's online backup, a
   * consistent snapshot). Absent on Postgres, whose own pg_dump does that.
   */
  backup?(file: string): Promise<void>;
  /**
   * Postgres: the store's connection pool, for a part that speaks to Postgres itself
   * rather than through `db` (the live channel's LISTEN/NOTIFY between gateways). It is
   * the store's: a user never ends it, and releases every client it takes before
   * close(), which waits for them. Absent on SQLite.
   */
  pgPool?: pg.Pool;
}

const dialects = new WeakMap<object, Dialect>();

/** Which database `db` (a store's handle) talks to. */
export function dialectOf(db: Db): Dialect {
  const d = dialects.get(db);
  if (!d) throw new Error('not a store handle: open it with openStore');
  return d;
}

/** Postgres error codes worth a retry of a serializable transaction: a conflict, or a deadlock broken by the server. */
const RETRYABLE = new Set(['40001', '40P01']);
const MAX_ATTEMPTS = 12;

/**
 * Runs `fn` in a transaction that no concurrent writer can interleave with: for a check
 * and the write it allows (a limit counted, then a row added; a single-use row read,
 * then spent). On SQLite every transaction is that already (one connection in the
 * process, one writer per file). On Postgres it runs SERIALIZABLE, and is run again
 * from the start when the server reports that another transaction got in the way, so
 * `fn` must do nothing but queries (no side effects outside the database).
 */
export async function serializable<T>(db: Db, fn: (tx: Tx) => Promise<T>): Promise<T> {
  if (dialectOf(db) === 'sqlite') return db.transaction().execute(fn);
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction().setIsolationLevel('serializable').execute(fn);
    } catch (e) {
      const code = (e as { code?: unknown }).code;
      if (attempt >= MAX_ATTEMPTS || typeof code !== 'string' || !RETRYABLE.has(code)) throw e;
      // Randomised and growing, so transactions that collided do not collide again in step.
      await new Promise((r) => setTimeout(r, Math.random() * Math.min(2 ** attempt, 250)));
    }
  }
}

/** Opens the store the options name, creating and migrating it as needed. */
export async function openStore(o: StoreOptions, migrations: readonly Migration[]): Promise<Store> {
  return o.databaseUrl ? openPostgres(o, migrations) : openSqlite(o.dataDir, migrations, o.migrate ?? true);
}

/**
 * Opens (creating when absent) `<dataDir>/sandgate.db` and migrates it. The data
 * directory holds the store, the keys and every workspace: it is made private (0700)
 * whatever mode it had (a folder made beforehand, as compose's /var/lib/sandgate, is
 * often 0755), and so is the database, so neither another local user nor an upstream
 * server (which runs as a user of its own) can read it.
 */
export async function openSqlite(dataDir: string, migrations: readonly Migration[], migrate = true): Promise<Store> {
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  fs.chmodSync(dataDir, 0o700);
  const file = path.join(dataDir, 'sandgate.db');
  if (!fs.existsSync(file)) fs.closeSync(fs.openSync(file, 'a', 0o600));
  fs.chmodSync(file, 0o600);
  return openStoreFile(file, migrations, migrate);
}

/** Opens the SQLite database `file` and migrates it (unless `migrate` is false). */
export async function openStoreFile(file: string, migrations: readonly Migration[], migrate = true): Promise<Store> {
  let raw: Database.Database;
  try {
    raw = new Database(file);
  } catch (e) {
    throw new StoreError(`cannot open the database ${file}: ${(e as Error).message}. Check SANDGATE_DATA_DIR and its permissions.`);
  }
  let version: number;
  try {
    raw.pragma('journal_mode = WAL');
    raw.pragma('foreign_keys = ON');
    raw.pragma('busy_timeout = 5000');
    raw.pragma('synchronous = NORMAL');
    version = migrate ? migrateSqlite(raw, migrations) : (raw.pragma('user_version', { simple: true }) as number);
  } catch (e) {
    raw.close();
    throw e;
  }
  const db = new Kysely<Tables>({ dialect: new SqliteDialect({ database: preparingOnce(raw) }), log: queryMetrics('sqlite') });
  dialects.set(db, 'sqlite');
  return {
    db,
    dialect: 'sqlite',
    version,
    location: file,
    ping: async () => void (await sql`SELECT 1`.execute(db)),
    // Kysely closes only what a query opened: a store that never ran one is closed here.
    close: async () => {
      await db.destroy();
      if (raw.open) raw.close();
    },
    // All pages in one step: one read transaction, so writers (WAL) go on and the copy is
    // one consistent moment (copied in small steps, another process's write restarts it).
    backup: async (to) => void (await raw.backup(to, { progress: () => 0x7fffffff })),
  };
}

/** Statements kept prepared per database; queries are built from a fixed set of shapes, so a few hundred cover them all. */
const PREPARED_MAX = 500;

/**
 * better-sqlite3 for Kysely, preparing each distinct statement once: preparing costs
 * more than running the small queries on hot paths (every request checks a token and
 * writes an audit row). Kysely runs one query at a time per SQLite database, so a
 * statement is never in use twice at once.
 */
function preparingOnce(raw: Database.Database): SqliteDatabase {
  const prepared = new Map<string, Database.Statement>();
  return {
    close: () => raw.close(),
    prepare(text) {
      let s = prepared.get(text);
      if (!s) {
        s = raw.prepare(text);
        if (prepared.size >= PREPARED_MAX) prepared.delete(prepared.keys().next().value!);
        prepared.set(text, s);
      }
      return s;
    },
  };
}

function newerThanCode(current: number, latest: number): StoreError {
  return new StoreError(
    `the database was written by a newer sandgate (schema version ${current}, this one knows up to ${latest}). ` +
      'Upgrade sandgate, or restore a backup made by this version. Nothing was changed.',
  );
}

/**
 * Applies pending steps in one IMMEDIATE transaction (it takes the file's write lock
 * first, so a second process migrating at the same time waits, then finds nothing left
 * to do); a step's version is its place in the list, from 1.
 */
export function migrateSqlite(raw: Database.Database, migrations: readonly Migration[]): number {
  const latest = migrations.length;
  const current = raw.pragma('user_version', { simple: true }) as number;
  if (current > latest) throw newerThanCode(current, latest);
  if (current === latest) return latest;
  raw
    .transaction(() => {
      const now = raw.pragma('user_version', { simple: true }) as number;
      if (now > latest) throw newerThanCode(now, latest);
      migrations.forEach((m, i) => {
        if (i < now) return;
        try {
          raw.exec(m.sqlite);
        } catch (e) {
          throw new StoreError(`migration ${i + 1} (${m.description}) failed: ${(e as Error).message}. Nothing was changed.`);
        }
      });
      raw.pragma(`user_version = ${latest}`);
    })
    .immediate();
  return latest;
}

/** Postgres integer types node-postgres returns as strings: every value sandgate keeps fits a double exactly. */
const NUMERIC_TYPES = [pg.types.builtins.INT8, pg.types.builtins.NUMERIC];
const types = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    NUMERIC_TYPES.includes(oid) && format !== 'binary' ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
};

/** The URL without its password (in the user part or as a parameter), for messages and logs. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    for (const k of [...u.searchParams.keys()]) if (/pass|secret|key/i.test(k)) u.searchParams.set(k, '***');
    return u.toString();
  } catch {
    return 'an unparsable database URL';
  }
}

async function openPostgres(o: StoreOptions, migrations: readonly Migration[]): Promise<Store> {
  const url = o.databaseUrl!;
  const location = redactUrl(url);
  // Parsed here rather than given to the pool as a string: the pool lets a URL's sslmode
  // replace an explicit `ssl`, which would drop the CA file.
  const parsed = parseIntoClientConfig(url);
  const ssl = o.databaseCaFile
    ? { ...(typeof parsed.ssl === 'object' ? parsed.ssl : {}), ca: fs.readFileSync(o.databaseCaFile, 'utf8'), rejectUnauthorized: true }
    : parsed.ssl;
  const pool = new pg.Pool({
    ...parsed,
    ssl,
    max: o.databasePoolSize ?? 10,
    types,
    application_name: 'sandgate',
    connectionTimeoutMillis: 10_000,
    // A server that vanished (a partition, a failover) is noticed instead of waited on forever.
    keepAlive: true,
    query_timeout: 60_000,
    idleTimeoutMillis: 30_000,
  });
  // A pooled connection the server closes while idle (a restart, a failover) is dropped
  // by the pool and reopened at the next query; without a listener its error would end the process.
  pool.on('error', () => {});
  // The same for a connection a transaction holds between two queries: its query fails
  // and the pool drops it at release; the error event itself must not end the process.
  pool.on('connect', (client) => client.on('error', () => {}));
  let version: number;
  try {
    version = o.migrate === false ? await versionOnPostgres(pool, location) : await migratePostgres(pool, migrations, location);
  } catch (e) {
    await pool.end().catch(() => {});
    throw e;
  }
  const db = new Kysely<Tables>({ dialect: new PostgresDialect({ pool }), log: queryMetrics('postgres') });
  dialects.set(db, 'postgres');
  return {
    db,
    dialect: 'postgres',
    version,
    location,
    ping: async () => void (await sql`SELECT 1`.execute(db)),
    close: async () => {
      await db.destroy();
      if (!pool.ending) await pool.end();
    },
    pgPool: pool,
  };
}

/** The schema version a Postgres database is at (0 when sandgate never migrated it), changing nothing. */
async function versionOnPostgres(pool: pg.Pool, location: string): Promise<number> {
  try {
    const r = await pool.query<{ version: number }>('SELECT version FROM sandgate_schema');
    return r.rows[0]?.version ?? 0;
  } catch (e) {
    if ((e as { code?: string }).code === '42P01') return 0; // no such table: never migrated
    throw new StoreError(`cannot reach the database at ${location}: ${(e as Error).message}. Check SANDGATE_DATABASE_URL and that the server is up.`);
  }
}

/** Held while migrating, so gateways starting together take turns: 'sandgate' in ASCII. */
const MIGRATION_LOCK = '8313472493587260517';

/**
 * Applies pending steps in one transaction, holding a transaction-level advisory lock
 * taken before the version is read: a second gateway starting at the same time waits
 * for the first, then finds nothing left to do. Postgres DDL is transactional, so a
 * failed step leaves the database as it was.
 */
async function migratePostgres(pool: pg.Pool, migrations: readonly Migration[], location: string): Promise<number> {
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (e) {
    throw new StoreError(`cannot reach the database at ${location}: ${(e as Error).message}. Check SANDGATE_DATABASE_URL and that the server is up.`);
  }
  const latest = migrations.length;
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await client.query('CREATE TABLE IF NOT EXISTS sandgate_schema (version INTEGER NOT NULL)');
    const rows = (await client.query<{ version: number }>('SELECT version FROM sandgate_schema')).rows;
    if (!rows.length) await client.query('INSERT INTO sandgate_schema (version) VALUES (0)');
    const current = rows[0]?.version ?? 0;
    if (current > latest) throw newerThanCode(current, latest);
    for (let i = current; i < latest; i++) {
      const m = migrations[i]!;
      try {
        // No parameters: the simple protocol, which runs a step's several statements.
        await client.query(m.postgres);
      } catch (e) {
        throw new StoreError(`migration ${i + 1} (${m.description}) failed: ${(e as Error).message}. Nothing was changed.`);
      }
    }
    if (current < latest) await client.query('UPDATE sandgate_schema SET version = $1', [latest]);
    await client.query('COMMIT');
    return latest;
  } catch (e) {
    await client.query('ROLLBACK').catch(() => {});
    if (e instanceof StoreError) throw e;
    throw new StoreError(`cannot prepare the database at ${location}: ${(e as Error).message}. Check SANDGATE_DATABASE_URL and the role's rights (it must be able to create tables).`);
  } finally {
    client.release();
  }
}

const STATEMENTS = new Set(['select', 'insert', 'update', 'delete']);

/** Each query's time in the metrics, by its statement's first word. */
function queryMetrics(dialect: 'sqlite' | 'postgres'): (event: LogEvent) => void {
  return (event) => {
    const word = /^\s*(\w+)/.exec(event.query.sql)?.[1]?.toLowerCase() ?? '';
    metrics.dbQuerySeconds.observe({ dialect, statement: STATEMENTS.has(word) ? word : 'other' }, event.queryDurationMillis / 1000);
    if (event.level === 'error') metrics.dbQueryErrors.inc({ dialect });
  };
}
