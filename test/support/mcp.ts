/**
 * A real gateway for the MCP, token and audit tests: createGateway, exactly as main.ts
 * composes it (store, sandboxes on Docker with runsc and the real image, upstream hub,
 * PII boundary, tools, app), listening on a free loopback port with a fresh data
 * directory (and, in the `postgres` test project, a fresh Postgres database). Tests give a part of their own (a driver that fails in a named way) only
 * where the real one cannot produce the failure.
 *
 * In the `replicas` test project (SANDGATE_TEST_REPLICAS=2) the same suites run against a
 * tier: this gateway, a second gateway process (src/main.ts with the same settings, data
 * directory and database) and Debian's HAProxy in front of both with the shipped
 * configuration. `url` and `mcpUrl` are HAProxy's, and the public URL both gateways check
 * Host and Origin against; so every request a test sends may land on either replica,
 * while `gateway` and `harness` stay this process's own replica, for what a test sets up
 * or reads in the store they share.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { configFor } from '../../src/config.js';
import { createGateway, type Gateway as AppGateway, type GatewayParts, type Preflight } from '../../src/gateway.js';
import { createLogger } from '../../src/logger.js';
import type { McpDeps } from '../../src/mcp/context.js';
import { ensureUser } from '../../src/accounts/accounts.js';
import { createToken } from '../../src/tokens/tokens.js';
import type { Upstream } from '../../src/upstream/index.js';
import { driverEnv } from './kube.js';
import { databaseEnvFor, type Harness } from './harness.js';
import { killAndClean, startGatewayProcess, type GatewayProcess } from './gateway-process.js';
import { startHaproxy, type Haproxy } from './haproxy.js';
import { freePort } from './ports.js';

export interface GatewayOptions {
  /** Settings, by environment variable name, over the test defaults. */
  env?: Record<string, string>;
  /** An `mcpServers` object: written to the data directory's mcp-servers.json. */
  upstream?: Record<string, unknown>;
  /** The PII boundary (SANDGATE_PII_TOKENIZE); off unless asked, as most tests read raw values. */
  pii?: boolean;
  /** Skip start() (preflight, adoption, pool, reaper): for tests that run no code. */
  noStart?: boolean;
  parts?: GatewayParts;
  /** Reopen this data directory (one a closed gateway kept) instead of a fresh one. */
  dataDir?: string;
}

/** The pieces tests reach into, under the names the tests have always used. */
export type GatewayStack = Omit<Harness, 'close'>;

export interface Gateway {
  gateway: AppGateway;
  harness: GatewayStack;
  preflight?: Preflight;
  /** Whether the PII boundary is on (`pii`). */
  pii: boolean;
  upstream: Upstream;
  url: string;
  /** http://127.0.0.1:<port>/mcp */
  mcpUrl: string;
  port: number;
  dataDir: string;
  /** What the endpoint serves its tools with: an in-process caller uses the same (src/mcp/serve.ts). */
  tools: McpDeps;
  /** Creates the user if needed and a fresh token for it. */
  tokenFor(user: string, name?: string, opts?: { expiresAt?: number }): Promise<string>;
  /** `keepData`: leave the data directory (and the sandboxes) for a gateway started on it next, as a restart would. */
  close(opts?: { keepData?: boolean }): Promise<void>;
}

let tokenSeq = 0;

export async function startGateway(opts: GatewayOptions = {}): Promise<Gateway> {
  const dataDir = opts.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-gw-'));
  if (opts.upstream) fs.writeFileSync(path.join(dataDir, 'mcp-servers.json'), JSON.stringify({ mcpServers: opts.upstream }));
  // The port comes first: the public URL names it, and Host checks follow the public URL.
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const ownPort = (server.address() as AddressInfo).port;
  // A part of a test's own cannot be handed to another process: such a gateway runs alone.
  const replicated = replicasWanted() && !opts.parts;
  const port = replicated ? await freePort() : ownPort;
  const url = `http://127.0.0.1:${port}`;
  const settings: Record<string, string> = {
    SANDGATE_DATA_DIR: dataDir,
    SANDGATE_PUBLIC_URL: url,
    // Where it listens (below): the other replica reaches it there.
    SANDGATE_HOST: '127.0.0.1',
    SANDGATE_WARM_POOL_SIZE: '0',
    SANDGATE_LOG_LEVEL: process.env.SANDGATE_TEST_LOG_LEVEL ?? 'silent',
    SANDGATE_PII_TOKENIZE: opts.pii ? 'true' : 'false',
    // Homes of upstream servers beside the data directory, where their users can reach them.
    SANDGATE_UPSTREAM_HOME_DIR: `${dataDir}-homes`,
    // SQLite in the data directory, or in the `postgres` project its own Postgres database.
    ...(await databaseEnvFor(dataDir)),
    // Docker, or in the kubernetes project a cluster (the stand-in API server).
    ...(await driverEnv()),
    ...opts.env,
  };
  const config = configFor(settings);
  const logger = createLogger(config.logLevel);
  const gateway = await createGateway(config, logger, opts.parts);
  const preflight = opts.noStart ? undefined : await gateway.start();
  server.on('request', gateway.app);
  gateway.attach(server);
  const tier = replicated ? await startTier(settings, ownPort, port) : undefined;
  const harness: GatewayStack = {
    config,
    store: gateway.store,
    logger,
    manager: gateway.manager,
    dataDir,
    async user(name, o) {
      const u = await ensureUser(gateway.store.db, name, o);
      return { userId: u.id, name: u.name };
    },
  };
  return {
    gateway,
    harness,
    preflight,
    pii: !!opts.pii,
    upstream: gateway.upstream,
    url,
    mcpUrl: `${url}/mcp`,
    port,
    dataDir,
    tools: gateway.tools,
    async tokenFor(user, name, o = {}) {
      const u = await ensureUser(gateway.store.db, user);
      return (await createToken(gateway.store.db, { userId: u.id, name: name ?? `t${++tokenSeq}`, expiresAt: o.expiresAt })).token;
    },
    async close(o = {}) {
      await tier?.close();
      server.closeAllConnections();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // Browsers' live connections are upgraded ones, which the server no longer counts.
      await gateway.web.close();
      await closed;
      if (o.keepData) return gateway.close();
      await gateway.close({ stopAll: true, releaseVolumes: true });
      // What the other replica held and handed over is nobody's now: its containers and mounts go with the directory.
      if (tier) await killAndClean([], dataDir);
      fs.rmSync(dataDir, { recursive: true, force: true });
      fs.rmSync(`${dataDir}-homes`, { recursive: true, force: true });
    },
  };
}

/** Whether this test project runs its gateways as two replicas behind HAProxy (the `replicas` project). */
function replicasWanted(): boolean {
  if (process.env.SANDGATE_TEST_REPLICAS !== '2') return false;
  // Replicas share one database: only Postgres can be shared.
  if (process.env.SANDGATE_TEST_DATABASE !== 'postgres') throw new Error('SANDGATE_TEST_REPLICAS=2 needs SANDGATE_TEST_DATABASE=postgres');
  return true;
}

/** The second replica and HAProxy in front of both; HAProxy listens on `frontPort`, the public URL's. */
async function startTier(settings: Record<string, string>, ownPort: number, frontPort: number): Promise<{ close(): Promise<void> }> {
  const secondPort = await freePort();
  // A short drain: a test's gateway has nothing to hand over that its next step needs kept.
  const second: GatewayProcess = startGatewayProcess({ ...settings, SANDGATE_PORT: String(secondPort), SANDGATE_DRAIN_SEC: '1' });
  let proxy: Haproxy | undefined;
  try {
    await second.ready();
    // HAProxy takes both servers as up from the start, and round robin alternates between them.
    proxy = await startHaproxy([ownPort, secondPort], { port: frontPort });
  } catch (e) {
    second.child.kill('SIGKILL');
    await second.exited;
    await proxy?.stop();
    throw e;
  }
  return {
    async close() {
      await proxy!.stop();
      second.child.kill('SIGTERM');
      const code = await second.exited;
      if (code !== 0) throw new Error(`the second replica exited with ${code}; it printed:\n${second.output().slice(-3000)}`);
    },
  };
}
/** The text blocks of a tool result, joined by newlines. */
export function toolText(r: unknown): string {
  return (r as { content: { type: string; text?: string }[] }).content
    .filter((c) => c.type === 'text')
    .map((c) => c.text!)
    .join('\n');
}

/** A tools/call through any MCP client (the v1 or the v2 SDK's), its result typed as `R`. */
export async function callTool<R>(client: { callTool(params: { name: string; arguments: Record<string, unknown> }): Promise<unknown> }, name: string, args: Record<string, unknown>): Promise<R> {
  return (await client.callTool({ name, arguments: args })) as R;
}

export { rawRequest, type RawResponse } from './raw-request.js';

export function initializeBody(protocolVersion: string, id = 1) {
  return { jsonrpc: '2.0', id, method: 'initialize', params: { protocolVersion, capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };
}
