/**
 * Shared set-up for the MCP, token and audit tests: a real gateway (createApp + the /mcp
 * router + the real sandbox manager) listening on a free port.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createApp } from '../../src/app.js';
import { configFor } from '../../src/config.js';
import { createGateway, piiLayer, type Gateway as AppGateway } from '../../src/gateway.js';
import { createLogger } from '../../src/logger.js';
import type { PreflightResult } from '../../src/sandboxes/preflight.js';
import { preloadWordKnowledge } from '../../src/pii/index.js';
import { recordAudit } from '../../src/audit/audit.js';
import { mcpRouter, type McpRouterDeps } from '../../src/http/mcp-endpoint.js';
import { copyStaticTools } from '../../src/sandboxes/index.js';
import { createUpstream, type Upstream } from '../../src/upstream/index.js';
import { upstreamSettings } from './upstream.js';
import { ensureUser } from '../../src/store/users.js';
import { createHarness, type Harness, type HarnessOptions } from './harness.js';
import { createToken } from '../../src/tokens/tokens.js';
import type { McpDeps } from '../../src/mcp/context.js';
import { IDENTITY_BOUNDARY } from '../../src/pii/boundary.js';
import { SkillsDir } from '../../src/skills/skills.js';

export interface Gateway {
  harness: Harness;
  /** Whether the PII boundary is on (`pii`). */
  pii: boolean;
  /** The real upstream hub, when `upstream` servers were given. */
  upstream?: Upstream;
  url: string;
  /** http://127.0.0.1:<port>/mcp */
  mcpUrl: string;
  port: number;
  /** What the endpoint serves its tools with: an in-process caller uses the same (src/mcp/serve.ts). */
  tools: McpDeps;
  /** Creates the user if needed and a fresh token for it. */
  tokenFor(user: string, name?: string, opts?: { expiresAt?: number }): string;
  close(): Promise<void>;
}

let tokenSeq = 0;

/**
 * @param opts.upstream an `mcpServers` object: the gateway then runs the real upstream
 *   hub with it (catalog for search_tools, wrappers in /tools, the bridge for code).
 */
export async function startGateway(
  opts: { harness?: HarnessOptions; router?: Partial<McpRouterDeps>; upstream?: Record<string, unknown>; /** The PII boundary as createGateway configures it. */ pii?: boolean } = {},
): Promise<Gateway> {
  let upstream: Upstream | undefined;
  const harness = await createHarness({
    // Bound late: the hub needs the store the harness opens.
    prepareTools: (dir, owner) => (upstream ? upstream.prepareTools(dir, owner) : copyStaticTools(dir)),
    ...opts.harness,
  });
  if (opts.upstream) {
    const file = path.join(harness.dataDir, 'mcp-servers.json');
    fs.writeFileSync(file, JSON.stringify({ mcpServers: opts.upstream }));
    const db = harness.store.db;
    upstream = createUpstream({ config: upstreamSettings(harness.dataDir, file), db, audit: (e) => recordAudit(db, e), logger: harness.logger });
    harness.manager.setBridgeHandler(upstream.bridgeHandler);
  }
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  // The allowed Host names come from the public URL, as in production.
  const config = { ...harness.config, publicUrl: `http://127.0.0.1:${port}` };
  const pii = opts.pii ? piiLayer(config, harness.store.db) : undefined;
  if (pii) preloadWordKnowledge();
  const tools: McpDeps = {
    config,
    db: harness.store.db,
    logger: harness.logger,
    sandboxes: harness.manager,
    skills: new SkillsDir(),
    catalog: upstream?.catalog,
    boundary: pii?.boundary ?? IDENTITY_BOUNDARY,
  };
  const app = createApp({
    config,
    store: harness.store,
    logger: harness.logger,
    mount: (a) => a.use(mcpRouter({ ...tools, ...opts.router })),
  });
  server.on('request', app);
  const url = `http://127.0.0.1:${port}`;
  return {
    harness,
    pii: !!pii,
    upstream,
    url,
    mcpUrl: `${url}/mcp`,
    port,
    tools,
    tokenFor(user, name, o = {}) {
      const u = ensureUser(harness.store.db, user);
      return createToken(harness.store.db, { userId: u.id, name: name ?? `t${++tokenSeq}`, expiresAt: o.expiresAt }).token;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await upstream?.close();
      await harness.close();
    },
  };
}

export interface ServedGateway {
  /** The gateway as main.ts composes it: createGateway with the default settings. */
  gateway: AppGateway;
  preflight: PreflightResult;
  /** http://127.0.0.1:<port>/mcp */
  mcpUrl: string;
  dataDir: string;
  close(): Promise<void>;
}

/**
 * The whole gateway of main.ts (createGateway, PII boundary on by default) serving on a
 * free loopback port, with a fresh data directory named after `name`.
 */
export async function serveGateway(name: string): Promise<ServedGateway> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `sandgate-${name}-`));
  const config = configFor({ SANDGATE_DATA_DIR: dataDir, SANDGATE_WARM_POOL_SIZE: '0', SANDGATE_LOG_LEVEL: process.env.SANDGATE_TEST_LOG_LEVEL ?? 'silent' });
  const gateway = createGateway(config, createLogger(config.logLevel));
  const preflight = await gateway.start();
  const server = http.createServer(gateway.app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    gateway,
    preflight,
    mcpUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`,
    dataDir,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await gateway.close({ stopAll: true, releaseVolumes: true });
      fs.rmSync(dataDir, { recursive: true, force: true });
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

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  /** JSON-RPC messages of the body, whether it came as JSON or as an SSE stream. */
  messages: Record<string, unknown>[];
}

/**
 * One HTTP request with full control of the headers (fetch forbids setting Host), for
 * checks below what an MCP client library would send.
 */
export function rawRequest(url: string, opts: { method?: string; headers?: Record<string, string>; body?: unknown } = {}): Promise<RawResponse> {
  const u = new URL(url);
  const body = opts.body === undefined ? undefined : typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: opts.method ?? 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}),
          ...opts.headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let messages: Record<string, unknown>[] = [];
          if (String(res.headers['content-type']).startsWith('text/event-stream')) {
            messages = text
              .split('\n')
              .filter((l) => l.startsWith('data: ') && l.length > 6)
              .map((l) => JSON.parse(l.slice(6)) as Record<string, unknown>);
          } else if (text) {
            try {
              const j = JSON.parse(text) as unknown;
              messages = (Array.isArray(j) ? j : [j]) as Record<string, unknown>[];
            } catch {
              /* not JSON */
            }
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, messages });
        });
      },
    );
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

export function initializeBody(protocolVersion: string, id = 1) {
  return { jsonrpc: '2.0', id, method: 'initialize', params: { protocolVersion, capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };
}
