/**
 * A real gateway stack for tests and benchmarks: a fresh data directory, a store (SQLite
 * in it, or in the `postgres` test project a fresh Postgres database: test/support/store.ts),
 * the Docker+runsc driver with the real sandbox image, and the manager. Nothing is mocked.
 * `close()` removes every container it started and unmounts its workspaces.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { configFor, type Config } from '../../src/config.js';
import { createLogger, type Logger } from '../../src/logger.js';
import { createSandboxManager, type SandboxStackOptions } from '../../src/sandboxes/index.js';
import type { SandboxManager } from '../../src/sandboxes/manager.js';
import type { BridgeHandler, SandboxOwner } from '../../src/sandboxes/types.js';
import { openStore, type Store } from '../../src/store/store.js';
import { MIGRATIONS } from '../../src/migrations.js';
import { ensureUser } from '../../src/accounts/accounts.js';
import { testDatabaseEnv } from './store.js';
import { driverEnv } from './kube.js';

export interface Harness {
  config: Config;
  store: Store;
  logger: Logger;
  manager: SandboxManager;
  dataDir: string;
  /** Creates (or finds) a user and returns it as a sandbox owner. */
  user(name: string, opts?: { isAdmin?: boolean }): Promise<SandboxOwner>;
  close(): Promise<void>;
}

export interface HarnessOptions extends SandboxStackOptions {
  dataDir?: string;
  /** Setting overrides, by environment variable name. */
  env?: Record<string, string>;
  bridgeHandler?: BridgeHandler;
  /** Skip init() (adoption, pool, reaper). */
  noInit?: boolean;
}

/** The database of each data directory a test made: one reopened (a restart) finds its data again. */
const databases = new Map<string, Promise<Record<string, string>>>();

/**
 * The settings that point a gateway on `dataDir` at the run's kind of database
 * (SANDGATE_DATABASE_URL in the `postgres` project, nothing for SQLite), the same each
 * time for the same directory.
 */
export function databaseEnvFor(dataDir: string): Promise<Record<string, string>> {
  let env = databases.get(dataDir);
  if (!env) {
    env = testDatabaseEnv();
    databases.set(dataDir, env);
  }
  return env;
}

export async function createHarness(opts: HarnessOptions = {}): Promise<Harness> {
  const dataDir = opts.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-test-'));
  const config = configFor({
    SANDGATE_DATA_DIR: dataDir,
    SANDGATE_WARM_POOL_SIZE: '0',
    SANDGATE_LOG_LEVEL: process.env.SANDGATE_TEST_LOG_LEVEL ?? 'silent',
    ...(await databaseEnvFor(dataDir)),
    ...(await driverEnv()),
    ...opts.env,
  });
  const logger = createLogger(config.logLevel);
  const store = await openStore(config, MIGRATIONS);
  const manager = createSandboxManager(config, store.db, logger, opts);
  if (opts.bridgeHandler) manager.setBridgeHandler(opts.bridgeHandler);
  if (!opts.noInit) await manager.init();
  return {
    config,
    store,
    logger,
    manager,
    dataDir,
    async user(name, o) {
      const u = await ensureUser(store.db, name, o);
      return { userId: u.id, name: u.name };
    },
    async close() {
      await manager.shutdown({ stopAll: true, releaseVolumes: true });
      await store.close();
      // A data directory this harness made is removed; one it was given is kept.
      if (!opts.dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
