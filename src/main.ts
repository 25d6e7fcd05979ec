/**
 * The only file that listens. Loads configuration (a bad setting stops the start with
 * a message naming it), opens the store, checks the sandbox runtime, composes the app
 * and serves it; SIGTERM/SIGINT shut down gracefully. A promise rejected with nobody to
 * handle it is logged with the request it came from, and the gateway keeps serving.
 */
import http from 'node:http';
import { loadConfig } from './config.js';
import { GatewayError } from './errors.js';
import { createGateway } from './gateway.js';
import { ensureUser } from './accounts/accounts.js';
import { createLoginLink } from './auth/login-links.js';
import { createLogger } from './logger.js';
import { guardStrayRejections } from './http/request-context.js';
import { metricsListener } from './http/metrics.js';
import { loopBackendProblem } from './sandboxes/volumes.js';

async function main(): Promise<void> {
  let loaded;
  try {
    loaded = loadConfig();
  } catch (e) {
    if (e instanceof GatewayError) {
      process.stderr.write(`sandgate: ${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
  const { config, warnings } = loaded;
  const logger = createLogger(config.logLevel);
  // One user's request must never end everyone's sessions, turns and streams.
  guardStrayRejections(logger);
  for (const w of warnings) {
    logger.warn({ unsafe: true }, w);
    process.stderr.write(`\n  !!! ${w}\n\n`);
  }

  if (config.workspaceBackend === 'loop' && config.sandboxDriver === 'docker') {
    const problem = await loopBackendProblem();
    if (problem) {
      process.stderr.write(
        `sandgate: workspace size limits need loop mounts, but ${problem}.\n` +
          'Run as root, or set SANDGATE_WORKSPACE_BACKEND=directory to accept workspaces without a size limit.\n',
      );
      process.exit(2);
    }
  }

  let gateway;
  try {
    gateway = await createGateway(config, logger);
  } catch (e) {
    // Problems an operator fixes (the store, a key, the upstream config): what and where, no stack trace.
    if (e instanceof GatewayError) {
      process.stderr.write(`sandgate: ${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
  for (const w of gateway.warnings) {
    logger.warn({ unsafe: true }, w);
    process.stderr.write(`\n  !!! ${w}\n\n`);
  }
  logger.info({ store: gateway.store.location, database: gateway.store.dialect, schema: gateway.store.version }, 'store open');
  await gateway.start();
  const app = gateway.app;

  const server = http.createServer(app);
  // Longer than a load balancer keeps an idle connection to it (HAProxy: 10 s in
  // deploy/haproxy/haproxy.cfg), so it is never the gateway that closes one as a request
  // is sent on it.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  /** Requests being answered, but the live channel's long polls: a stop waits for them. */
  let inflight = 0;
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    if (req.url?.startsWith('/socket.io/')) return;
    inflight++;
    res.once('close', () => inflight--);
  });
  gateway.attach(server);
  /** What the operator reads once the gateway listens: where it is and how to sign in. */
  const greet = async () => {
    const addr = server.address();
    const port = typeof addr === 'object' && addr ? addr.port : config.port;
    // The public URL as set; only a default one takes the port picked at listen (SANDGATE_PORT=0).
    const url = config.publicUrlSet ? config.publicUrl.replace(/\/$/, '') : config.publicUrl.replace(/:\d+$/, `:${port}`);
    logger.info({ url, runtime: config.sandboxRuntime }, 'sandgate listening');
    const models = gateway.agent.catalog.teamModels().map((m) => m.id);
    // Without a GitHub app, sign-in is a one-time link for the local user, as Jupyter prints its token URL.
    let signIn = `  sign in with GitHub at ${url}/login\n`;
    if (!config.githubClientId) {
      const local = await ensureUser(gateway.store.db, config.localUser, { isAdmin: true });
      const link = await createLoginLink(gateway.store.db, local.id);
      signIn = `  sign in as ${local.name} (once, within 15 minutes): ${url}/login/link/${link.secret}\n` + `  a fresh link later: npx sandgate users login-link ${local.name}\n`;
    }
    process.stdout.write(
      `\n  sandgate is running at ${url}\n` +
        signIn +
        `  MCP endpoint:  ${url}/mcp\n` +
        `  OpenAI-compatible API: ${url}/v1 (${models.length ? `models: ${models.join(', ')}` : 'no model provider set: see SANDGATE_ANTHROPIC_API_KEY and friends in README.md'})\n` +
        `  create a token: npx sandgate users add <your-name>\n` +
        `                  npx sandgate tokens create --user <your-name> --name laptop\n` +
        `  connect a client: docs/mcp-clients.md   health: ${url}/readyz\n\n`,
    );
  };
  // Metrics on a listener of their own, when asked for (else behind the admin gate only).
  const metricsServer = config.metricsListen ? await metricsListener(config.metricsListen, logger) : undefined;
  server.listen(config.port, config.host, () => {
    greet().catch((e: unknown) => logger.error({ err: e }, 'could not make the sign-in link: run npx sandgate users login-link to get one'));
  });

  let stopping = false;
  /** The exit status: 2 once a setting the operator must fix was found, whatever stop was under way. */
  let exitCode = 0;
  /** Drains, then closes; `code` is the exit status (2: a setting the operator must fix). */
  const shutdown = (signal: string, code = 0) => {
    if (stopping) {
      logger.warn('second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    exitCode = Math.max(exitCode, code);
    logger.info({ signal }, 'shutting down');
    // Drain, then up to 10 s for the requests under way, then 15 s to close.
    const force = setTimeout(() => process.exit(1), 25_000 + (gateway.replica ? config.drainSec * 1000 : 0));
    force.unref();
    // With other replicas: it keeps serving while it hands its sandboxes over (the load
    // balancer sees /readyz fail and sends it nothing new), then stops taking requests.
    void gateway
      .drain()
      .catch((e) => logger.error({ err: e }, 'drain failed'))
      .then(async () => {
        server.close();
        server.closeIdleConnections();
        void metricsServer?.close();
        // Requests under way (runs, and runs this one sends on to another replica), and runs
        // other replicas sent on their channels, finish first.
        for (const end = Date.now() + 10_000; inflight + gateway.hopRunsUnderway() > 0 && Date.now() < end; ) await new Promise((r) => setTimeout(r, 25));
        return gateway.close();
      })
      .catch((e) => logger.error({ err: e }, 'shutdown failed'))
      .finally(() => {
        logger.info('stopped');
        process.exit(exitCode);
      });
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  // Two folders under one workspace store id, found while serving: the later gateway of the
  // two stops, as it would not have started. At once, not after a drain: whatever it serves
  // meanwhile is from the copy (users' files written there, runs on it). Its sandboxes stop
  // with it (they mount the copy); their users' next runs go to the other folder's gateways.
  gateway.watchWorkspaceStore((message) => {
    logger.error({ err: message }, 'this gateway stops at once, with its sandboxes: its workspaces folder is a copy of another gateway’s');
    process.stderr.write(`sandgate: ${message}\n`);
    exitCode = 2;
    // A stop under way ends as it began, with this status.
    if (stopping) return;
    stopping = true;
    setTimeout(() => process.exit(2), 25_000).unref();
    server.close();
    server.closeIdleConnections();
    void metricsServer?.close();
    void gateway
      .close({ stopAll: true })
      .catch((e) => logger.error({ err: e }, 'shutdown failed'))
      .finally(() => {
        logger.info('stopped');
        process.exit(2);
      });
  });
}

main().catch((e: unknown) => {
  // A start that fails still ends the process: the guard above is for a gateway that serves.
  process.stderr.write(`sandgate: the gateway could not start: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
