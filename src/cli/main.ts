/**
 * Entry of the `sandgate` command (bin/sandgate.js runs it through tsx). Reads the same
 * configuration as the gateway, so it opens the same store and finds the same
 * containers.
 */
import { loadConfig, type Config } from '../config.js';
import { GatewayError } from '../errors.js';
import { createDriver } from '../sandboxes/index.js';
import { createLogger } from '../logger.js';
import { openStore } from '../store/store.js';
import { MIGRATIONS } from '../migrations.js';
import { runCli, type CliContext } from './program.js';

async function main(): Promise<number> {
  let config: Config;
  try {
    config = loadConfig().config;
  } catch (e) {
    if (e instanceof GatewayError) {
      process.stderr.write(`sandgate: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  const ctx: CliContext = {
    openStore: (opts = {}) => openStore({ ...config, ...opts }, MIGRATIONS),
    openStoreAt: (url) => openStore({ ...config, databaseUrl: url }, MIGRATIONS),
    dataDir: config.dataDir,
    publicUrl: config.publicUrl,
    maxTokensPerUser: config.maxTokensPerUser,
    replicaLeaseMs: config.replicaLeaseMs,
    hostLostSec: config.hostLostSec,
    githubInstall: !!config.githubClientId,
    readSecret: async () => {
      const chunks: Buffer[] = [];
      for await (const c of process.stdin) chunks.push(c as Buffer);
      return Buffer.concat(chunks).toString('utf8');
    },
    // The driver alone, not a manager: a second manager would adopt the gateway's containers.
    driver: () => createDriver(config, createLogger('warn', process.stderr)),
    out: (s) => process.stdout.write(`${s}\n`),
    err: (s) => process.stderr.write(`${s}\n`),
  };
  return runCli(process.argv.slice(2), ctx);
}

process.exitCode = await main();
