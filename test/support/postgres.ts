/**
 * A throw-away Postgres cluster for a test run, and fresh databases on it.
 *
 * test/support/global-setup.ts starts one cluster for the `postgres` vitest project and
 * exports its superuser URL as SANDGATE_TEST_POSTGRES_URL; a test asks testDatabaseUrl()
 * for a database of its own. The cluster is Debian's postgresql, started from its own
 * binaries in a temporary directory: it never touches the distribution's default cluster
 * (the package may have started one; it is left alone).
 *
 * initdb and postgres refuse to run as root, and the tests run as root: the cluster then
 * belongs to the `postgres` system user the package creates, and its directory lives under
 * os.tmpdir(), which global-setup makes passable by other users.
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort } from './ports.js';

export interface PgCluster {
  /** The superuser's URL for the `postgres` database; its password is random per cluster. */
  adminUrl: string;
  port: number;
  /** Makes a fresh, empty database (sg_<random hex>) and returns its URL, with the superuser's credentials. */
  createDatabase(): Promise<string>;
  /** Stops the server at once (nothing in it is worth a clean shutdown) and removes its directory. */
  stop(): Promise<void>;
}

/** The superuser initdb creates; a name of its own, so nothing mistakes the cluster for a real one. */
const SUPERUSER = 'sandgate_test';
/** Settings for a database whose contents are thrown away: durability only costs time here. */
const SETTINGS = {
  fsync: 'off',
  synchronous_commit: 'off',
  full_page_writes: 'off',
  max_connections: '200',
};

interface Binaries {
  initdb: string;
  pgCtl: string;
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

/**
 * initdb and pg_ctl from one directory holding the server too (pg_ctl starts the `postgres`
 * beside it): PATH first, then the newest of Debian's /usr/lib/postgresql/<version>/bin,
 * which Debian keeps off PATH.
 */
export function findPostgresBinaries(): Binaries {
  const fromPath = (process.env.PATH ?? '').split(path.delimiter).filter(Boolean);
  let versioned: string[] = [];
  try {
    versioned = fs
      .readdirSync('/usr/lib/postgresql')
      .filter((v) => /^\d+(\.\d+)?$/.test(v))
      .sort((a, b) => Number(b) - Number(a))
      .map((v) => path.join('/usr/lib/postgresql', v, 'bin'));
  } catch {
    // No Debian server installed: only PATH can have one.
  }
  for (const dir of [...fromPath, ...versioned]) {
    const initdb = path.join(dir, 'initdb');
    const pgCtl = path.join(dir, 'pg_ctl');
    if (isExecutable(initdb) && isExecutable(pgCtl) && isExecutable(path.join(dir, 'postgres'))) {
      // A link on PATH (/usr/local/bin/initdb) names the real directory pg_ctl works from.
      return { initdb: fs.realpathSync(initdb), pgCtl: fs.realpathSync(pgCtl) };
    }
  }
  throw new Error(
    "Postgres server binaries (initdb, pg_ctl, postgres) not found on PATH or in /usr/lib/postgresql/*/bin: install Debian's postgresql (the test command does this: npm test)",
  );
}

/** The user the cluster runs as: `postgres` when we are root (the server refuses root), else ourselves. */
interface RunAs {
  /** Prefix for a command run as the cluster's user. */
  prefix: string[];
  uid: number;
  gid: number;
}

function clusterUser(): RunAs {
  const uid = process.getuid?.() ?? -1;
  if (uid !== 0) return { prefix: [], uid, gid: process.getgid?.() ?? -1 };
  let ids: number[];
  try {
    ids = ['-u', '-g'].map((flag) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim()));
  } catch {
    throw new Error("running as root and there is no `postgres` user to run the test cluster as: install Debian's postgresql (the test command does this: npm test)");
  }
  return { prefix: ['runuser', '-u', 'postgres', '--'], uid: ids[0]!, gid: ids[1]! };
}

/** Runs a command as the cluster's user; rejects with its output when it fails. */
function run(user: RunAs, cwd: string, argv: string[]): Promise<string> {
  const [cmd, ...args] = [...user.prefix, ...argv];
  return new Promise((resolve, reject) => {
    // stdin ignored: a prompt (a password, a missing pwfile) fails instead of waiting forever.
    const child = spawn(cmd!, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (out += b.toString()));
    child.on('error', (err) => reject(new Error(`${path.basename(argv[0]!)} could not run: ${err.message}`)));
    child.on('close', (code, signal) => {
      if (code === 0) resolve(out);
      else reject(new Error(`${path.basename(argv[0]!)} failed (${signal ?? `exit ${code}`}):\n${out.trim()}`));
    });
  });
}

function readLog(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch {
    return '(no server log)';
  }
}

/** A database name of our own making: never from input, so it is safe to put in SQL unquoted. */
function newDatabaseName(): string {
  return `sg_${randomBytes(8).toString('hex')}`;
}

/** Creates a fresh, empty database through a superuser URL and returns the new database's URL. */
export async function createDatabaseOn(adminUrl: string): Promise<string> {
  const name = newDatabaseName();
  const admin = new URL(adminUrl);
  admin.pathname = '/postgres';
  const client = new pg.Client({ connectionString: admin.toString() });
  await client.connect();
  try {
    // template0: empty whatever a test may have left in template1.
    await client.query(`CREATE DATABASE ${name} TEMPLATE template0 ENCODING 'UTF8'`);
  } finally {
    await client.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/**
 * Starts a cluster of its own in a new directory under os.tmpdir(). The caller stops it.
 * `durable`: keep Postgres's default durability (fsync, synchronous commit), for
 * benchmarks whose figures must include what a commit costs on a real server.
 */
export async function startPostgresCluster(opts: { durable?: boolean } = {}): Promise<PgCluster> {
  const bin = findPostgresBinaries();
  const user = clusterUser();
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-pg-')));
  const data = path.join(dir, 'data');
  const log = path.join(dir, 'server.log');
  let started = false;
  let stopped = false;

  const stopSync = (): void => {
    // The run ended without the teardown (a crash, an interrupt): do not leave a server behind.
    if (stopped) return;
    stopped = true;
    if (started) {
      try {
        const [cmd, ...args] = [...user.prefix, bin.pgCtl, 'stop', '-D', data, '-m', 'immediate', '-w'];
        execFileSync(cmd!, args, { cwd: dir, stdio: 'ignore' });
      } catch {
        // Already gone.
      }
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', stopSync);

  try {
    fs.chownSync(dir, user.uid, user.gid);
    fs.chmodSync(dir, 0o700);
    const password = randomBytes(24).toString('hex');
    const pwfile = path.join(dir, 'superuser-password');
    fs.writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
    fs.chownSync(pwfile, user.uid, user.gid);
    try {
      await run(user, dir, [
        bin.initdb,
        '-D', data,
        '-U', SUPERUSER,
        `--pwfile=${pwfile}`,
        '--auth=scram-sha-256',
        '--encoding=UTF8',
        '--locale=C',
        '--no-sync',
      ]);
    } catch (err) {
      const hint = user.prefix.length && /Permission denied/.test((err as Error).message)
        ? `\n(the postgres user must be able to reach ${dir}: every directory above it must be passable by other users, as test/support/global-setup.ts makes TMPDIR)`
        : '';
      throw new Error(`${(err as Error).message}${hint}`);
    } finally {
      fs.rmSync(pwfile, { force: true });
    }
    const settings = {
      ...(opts.durable ? { max_connections: SETTINGS.max_connections } : SETTINGS),
      listen_addresses: "'127.0.0.1'",
      unix_socket_directories: `'${dir}'`,
    };
    fs.appendFileSync(
      path.join(data, 'postgresql.conf'),
      `\n# A throw-away cluster for tests.\n${Object.entries(settings).map(([k, v]) => `${k} = ${v}`).join('\n')}\n`,
    );

    // The free port can be taken between looking and binding: try another then.
    let port = 0;
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      try {
        await run(user, dir, [bin.pgCtl, 'start', '-D', data, '-l', log, '-w', '-t', '60', '-o', `-p ${port}`]);
        started = true;
        break;
      } catch (err) {
        const serverLog = readLog(log);
        if (attempt < 3 && /could not bind|Address already in use/i.test(serverLog)) continue;
        throw new Error(`${(err as Error).message}\nserver log:\n${serverLog}`);
      }
    }

    const adminUrl = `postgres://${SUPERUSER}:${password}@127.0.0.1:${port}/postgres`;
    return {
      adminUrl,
      port,
      createDatabase: () => createDatabaseOn(adminUrl),
      async stop() {
        if (stopped) return;
        stopped = true;
        process.removeListener('exit', stopSync);
        try {
          await run(user, dir, [bin.pgCtl, 'stop', '-D', data, '-m', 'immediate', '-w']);
        } finally {
          fs.rmSync(dir, { recursive: true, force: true });
        }
      },
    };
  } catch (err) {
    stopSync();
    process.removeListener('exit', stopSync);
    throw err;
  }
}

/**
 * The database a test should use: '' for SQLite (in its data directory, as ever), or in the
 * `postgres` project the URL of a fresh database on the run's cluster.
 */
export async function testDatabaseUrl(): Promise<string> {
  if (process.env.SANDGATE_TEST_DATABASE !== 'postgres') return '';
  const adminUrl = process.env.SANDGATE_TEST_POSTGRES_URL;
  if (!adminUrl) {
    throw new Error(
      'SANDGATE_TEST_DATABASE=postgres but SANDGATE_TEST_POSTGRES_URL is unset: run the tests through vitest, whose global setup (test/support/global-setup.ts) starts the cluster for the postgres project',
    );
  }
  return createDatabaseOn(adminUrl);
}
