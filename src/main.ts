/**
 * The only file that listens. Loads configuration (a bad setting stops the start with
 * a message naming it), opens the store, checks the sandbox runtime, composes the app
 * and serves it; SIGTERM/SIGINT shut down gracefully.
 */
import http from 'node:http';
import { createApp } from './app.js';
import { ConfigError, loadConfig } from './config.js';
import { createLogger } from './logger.js';
import { dockerClient, createSandboxManager } from './sandboxes/index.js';
import { loopBackendProblem } from './sandboxes/volumes.js';
import { dockerReachable, imagePresent, runtimePreflight, type PreflightResult } from './sandboxes/preflight.js';
import { openStore, StoreError } from './store/store.js';

async function main(): Promise<void> {
  let loaded;
  try {
    loaded = loadConfig();
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`sandgate: ${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
  const { config, warnings } = loaded;
  const logger = createLogger(config.logLevel);
  for (const w of warnings) {
    logger.warn({ unsafe: true }, w);
    process.stderr.write(`\n  !!! ${w}\n\n`);
  }

  let store;
  try {
    store = openStore(config.dataDir);
  } catch (e) {
    if (e instanceof StoreError) {
      process.stderr.write(`sandgate: ${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
  logger.info({ file: store.file, schema: store.version }, 'store open');

  if (config.workspaceBackend === 'loop') {
    const problem = await loopBackendProblem();
    if (problem) {
      process.stderr.write(
        `sandgate: workspace size limits need loop mounts, but ${problem}.\n` +
          'Run as root, or set SANDGATE_WORKSPACE_BACKEND=directory to accept workspaces without a size limit.\n',
      );
      process.exit(2);
    }
  }

  const docker = dockerClient(config);
  let preflight: PreflightResult = { ok: false, detail: 'not run yet' };
  const runPreflight = async () => {
    const reach = await dockerReachable(docker);
    preflight = reach.ok ? await runtimePreflight(docker, config).catch((e: Error) => ({ ok: false, detail: e.message })) : reach;
    if (!preflight.ok) logger.error({ detail: preflight.detail }, 'sandbox preflight failed');
  };
  await runPreflight();

  const manager = createSandboxManager(config, store.db, logger);
  if (preflight.ok) await manager.init();

  const app = createApp({
    config,
    store,
    logger,
    readiness: {
      docker: () => dockerReachable(docker),
      runtime: async () => {
        if (!preflight.ok) await runPreflight();
        return preflight;
      },
      image: () => imagePresent(docker, config.sandboxImage),
    },
  });

  const server = http.createServer(app);
  server.listen(config.port, config.host, () => {
    const addr = server.address();
    const port = typeof addr === 'object' && addr ? addr.port : config.port;
    const url = config.publicUrl.replace(/:\d+$/, `:${port}`);
    logger.info({ url, runtime: config.sandboxRuntime }, 'sandgate listening');
    process.stdout.write(`\n  sandgate is running at ${url}\n  health: ${url}/readyz\n\n`);
  });

  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) {
      logger.warn('second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal }, 'shutting down');
    server.close();
    server.closeIdleConnections();
    const force = setTimeout(() => process.exit(1), 15_000);
    force.unref();
    void manager
      .shutdown()
      .catch((e) => logger.error({ err: e }, 'sandbox shutdown failed'))
      .finally(() => {
        store.close();
        logger.info('stopped');
        process.exit(0);
      });
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

void main();
