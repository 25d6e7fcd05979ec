/**
 * One lazily opened, self-healing MCP client connection to an upstream server: shared
 * by everyone, or one user's own for a per-user server.
 *
 * Invariants:
 * - Nothing connects until the first `tools()` or `callTool()`.
 * - At most one connect attempt runs at a time; concurrent callers share it.
 * - When the transport closes (the process died, the HTTP session ended), the next call
 *   reconnects. The first retry after a failure is immediate; further consecutive
 *   failures wait an exponentially growing delay (capped), during which calls fail fast
 *   with a message that says when the next attempt will be made. A successful call or
 *   listing resets the count.
 * - A tools/call is never retried by sandgate: it may have had effects upstream.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { CallToolResult, Tool } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from '../logger.js';
import { fillConnectionPlaceholders, type UpstreamServerConfig } from './config.js';
import { startEgressProxy, type EgressProxy } from './egress-proxy.js';
import { UpstreamError, fromCallError } from './errors.js';
import { isolatedCommand, prepareHome } from './isolation.js';

export interface BackoffOptions {
  /** Delay before the second consecutive retry; it doubles from there. */
  initialMs: number;
  maxMs: number;
}

export interface ConnectionOptions {
  server: UpstreamServerConfig;
  /** Set for a per-user connection: whose credentials and work directory it uses. */
  user?: { id: number; name: string; credentials: Record<string, string> };
  /** Private directory of this connection (`${SANDGATE_WORKDIR}`; HOME and default cwd of stdio servers). */
  workDir: string;
  /**
   * Who a stdio server runs as (isolation.ts): its own uid, whose home `workDir` is,
   * under `base`; the egress proxy's socket goes in `proxyDir`. `legacyWorkDir` is where an
   * earlier version kept this connection's files (moved into `workDir` once).
   */
  isolation: { uid: number; gid: number; base: string; proxyDir: string; legacyWorkDir?: string };
  connectTimeoutMs: number;
  backoff: BackoffOptions;
  logger?: Logger;
  /** Called with the new tool list when it differs from the cached one. */
  onToolsChanged?: (tools: Tool[]) => void;
  /** Identity sandgate announces upstream. */
  clientInfo?: { name: string; version: string };
  now?: () => number;
}

export interface ConnectionState {
  connected: boolean;
  failures: number;
  lastError?: string;
  /** Epoch ms before which no reconnect is attempted. */
  retryAt?: number;
  pid?: number;
}

const STDERR_LINES = 20;
/** Largest message a stdio server may send (a tool result with a large text). */
const MAX_STDIO_MESSAGE = 8 * 1024 * 1024;

export class UpstreamConnection {
  private client?: Client;
  private connecting?: Promise<Client>;
  private cachedTools?: Tool[];
  private failures = 0;
  private lastError?: string;
  private retryAt = 0;
  private closedByUs = false;
  private pid?: number;
  private readonly stderrTail: string[] = [];
  private readonly label: string;
  /** The egress proxy of the running stdio server, when its policy allows network. */
  private proxy?: EgressProxy;
  private readonly now: () => number;

  constructor(private readonly opts: ConnectionOptions) {
    this.label = `upstream server "${opts.server.name}"`;
    this.now = opts.now ?? Date.now;
  }

  state(): ConnectionState {
    return {
      connected: this.client !== undefined,
      failures: this.failures,
      ...(this.lastError !== undefined ? { lastError: this.lastError } : {}),
      ...(this.retryAt > this.now() ? { retryAt: this.retryAt } : {}),
      ...(this.pid !== undefined ? { pid: this.pid } : {}),
    };
  }

  /** The server's tools (every page), cached until the connection is replaced or the server says they changed. */
  async tools(): Promise<Tool[]> {
    if (this.cachedTools) return this.cachedTools;
    const client = await this.connect();
    const tools = await this.listAll(client);
    this.failures = 0;
    return tools;
  }

  /** Calls one tool. Errors come back as UpstreamError with a readable message. */
  async callTool(tool: string, args: Record<string, unknown>, timeoutMs: number): Promise<CallToolResult> {
    const label = `${this.opts.server.name}/${tool}`;
    const client = await this.connect();
    try {
      const result = (await client.callTool({ name: tool, arguments: args }, undefined, { timeout: timeoutMs })) as CallToolResult;
      this.failures = 0;
      return result;
    } catch (e) {
      const err = fromCallError(e, label, timeoutMs);
      if (err.reason === 'unavailable' || err.reason === 'timeout') this.lastError = err.message;
      throw err;
    }
  }

  /** Closes the connection (and stops a stdio server). The next call opens a new one. */
  async close(): Promise<void> {
    const client = this.client ?? (await this.connecting?.catch(() => undefined));
    this.client = undefined;
    this.connecting = undefined;
    this.cachedTools = undefined;
    if (client) {
      this.closedByUs = true;
      await client.close().catch(() => undefined);
    }
    await this.closeProxy();
  }

  private async closeProxy(): Promise<void> {
    const proxy = this.proxy;
    this.proxy = undefined;
    await proxy?.close().catch(() => undefined);
  }

  private connect(): Promise<Client> {
    if (this.client) return Promise.resolve(this.client);
    if (this.connecting) return this.connecting;
    const wait = this.retryAt - this.now();
    if (wait > 0) {
      return Promise.reject(
        new UpstreamError(
          `${this.label} is unavailable (${this.failures} failed attempts; last error: ${this.lastError ?? 'unknown'}); ` +
            `sandgate tries again in ${Math.ceil(wait / 1000)} s`,
          'unavailable',
        ),
      );
    }
    this.connecting = this.open().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  private async open(): Promise<Client> {
    const { server, logger } = this.opts;
    const client = new Client(this.opts.clientInfo ?? { name: 'sandgate', version: '0.1.0' }, {
      capabilities: {},
      listChanged: {
        tools: {
          autoRefresh: false,
          debounceMs: 200,
          onChanged: () => {
            if (this.client !== client) return;
            this.cachedTools = undefined;
            this.listAll(client).catch((e: Error) => logger?.warn({ server: server.name, err: e.message }, 'tools refresh failed'));
          },
        },
      },
    });
    let transport: Transport;
    try {
      transport = await this.makeTransport();
    } catch (e) {
      await this.closeProxy();
      throw this.failed(e);
    }
    this.closedByUs = false;
    client.onerror = (e) => logger?.debug({ server: server.name, err: e.message }, 'upstream transport error');
    client.onclose = () => {
      if (this.client !== client) return;
      this.client = undefined;
      this.cachedTools = undefined;
      this.pid = undefined;
      void this.closeProxy();
      if (!this.closedByUs) {
        this.noteFailure(`the connection closed${this.stderrHint()}`);
        logger?.warn({ server: server.name, user: this.opts.user?.name }, 'upstream connection closed; reconnecting on next use');
      }
    };
    try {
      await client.connect(transport, { timeout: this.opts.connectTimeoutMs });
    } catch (e) {
      this.closedByUs = true;
      await client.close().catch(() => undefined);
      await this.closeProxy();
      throw this.failed(e);
    }
    this.client = client;
    if (transport instanceof StdioClientTransport) this.pid = transport.pid ?? undefined;
    logger?.info({ server: server.name, user: this.opts.user?.name, pid: this.pid }, 'upstream connected');
    return client;
  }

  private async listAll(client: Client): Promise<Tool[]> {
    const tools: Tool[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 100; page++) {
      const r = await client.listTools(cursor ? { cursor } : undefined, { timeout: this.opts.server.timeoutMs });
      tools.push(...r.tools);
      cursor = r.nextCursor;
      if (!cursor) break;
    }
    const changed = this.cachedTools === undefined || JSON.stringify(this.cachedTools) !== JSON.stringify(tools);
    if (this.client === client) this.cachedTools = tools;
    if (changed) this.opts.onToolsChanged?.(tools);
    return tools;
  }

  private async makeTransport(): Promise<Transport> {
    const { server, user, workDir } = this.opts;
    const vars = { SANDGATE_WORKDIR: workDir, SANDGATE_USER: user?.name ?? '', SANDGATE_USER_ID: user ? String(user.id) : '' };
    const fill = (v: string) => fillConnectionPlaceholders(v, vars);
    const t = server.transport;
    if (t.type === 'stdio') {
      const iso = this.opts.isolation;
      prepareHome(iso.base, workDir, iso.uid, iso.gid, iso.legacyWorkDir);
      const policy = server.network;
      if (policy.kind === 'public' || policy.kind === 'allow') {
        fs.mkdirSync(iso.proxyDir, { recursive: true, mode: 0o711 });
        const name = crypto.createHash('sha256').update(workDir).digest('hex').slice(0, 16);
        this.proxy = await startEgressProxy({ socketPath: path.join(iso.proxyDir, `${name}.sock`), policy, uid: iso.uid, gid: iso.gid, label: server.name, logger: this.opts.logger });
      }
      const start = isolatedCommand({
        uid: iso.uid,
        gid: iso.gid,
        home: workDir,
        cwd: t.cwd !== undefined ? fill(t.cwd) : workDir,
        policy,
        proxySocket: this.proxy?.socketPath,
        command: fill(t.command),
        args: t.args.map(fill),
        env: {
          HOME: workDir,
          PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
          ...Object.fromEntries(Object.entries(t.env).map(([k, v]) => [k, fill(v)])),
          ...(user?.credentials ?? {}),
        },
      });
      const transport = new StdioClientTransport({
        command: start.command,
        args: start.args,
        // The SDK adds HOME, LOGNAME, SHELL, TERM and USER of the gateway; only what is here may pass.
        env: { ...start.env, LOGNAME: undefined, SHELL: undefined, TERM: undefined, USER: undefined } as unknown as Record<string, string>,
        cwd: workDir,
        stderr: 'pipe',
        // A server's messages are read whole before parsing: bound what one may hold.
        maxBufferSize: MAX_STDIO_MESSAGE,
      });
      this.stderrTail.length = 0;
      transport.stderr?.on('data', (chunk: Buffer) => {
        for (const line of chunk.toString('utf8').split('\n')) {
          if (!line.trim()) continue;
          this.stderrTail.push(line.slice(0, 500));
          if (this.stderrTail.length > STDERR_LINES) this.stderrTail.shift();
        }
      });
      return transport;
    }
    const headers = { ...Object.fromEntries(Object.entries(t.headers).map(([k, v]) => [k, fill(v)])), ...(user?.credentials ?? {}) };
    const url = new URL(fill(t.url));
    return t.type === 'sse'
      ? new SSEClientTransport(url, { requestInit: { headers } })
      : new StreamableHTTPClientTransport(url, { requestInit: { headers } });
  }

  private failed(e: unknown): UpstreamError {
    let msg = e instanceof Error ? e.message : String(e);
    const code = (e as NodeJS.ErrnoException).code;
    const t = this.opts.server.transport;
    // The launcher's own words (a command it cannot start) say it best.
    const launcher = this.stderrTail.findLast((l) => l.startsWith('sandgate: '));
    if (launcher) {
      this.noteFailure(launcher.slice('sandgate: '.length));
      return new UpstreamError(`${this.label} could not be reached: ${this.lastError}`, 'unavailable', { cause: e });
    }
    if (code === 'ENOENT' && t.type === 'stdio') msg = `cannot start "${t.command}": not found on PATH`;
    else if (e instanceof Error && /timed out|RequestTimeout/i.test(msg)) msg = `no answer within ${Math.round(this.opts.connectTimeoutMs / 1000)} s`;
    this.noteFailure(`${msg}${this.stderrHint()}`);
    return new UpstreamError(`${this.label} could not be reached: ${this.lastError}`, 'unavailable', { cause: e });
  }

  private noteFailure(message: string): void {
    this.failures++;
    this.lastError = message;
    const { initialMs, maxMs } = this.opts.backoff;
    const delay = this.failures <= 1 ? 0 : Math.min(maxMs, initialMs * 2 ** (this.failures - 2));
    this.retryAt = this.now() + delay;
    this.opts.logger?.warn({ server: this.opts.server.name, user: this.opts.user?.name, failures: this.failures, err: message }, 'upstream failure');
  }

  private stderrHint(): string {
    const last = this.stderrTail.at(-1);
    return last ? ` (server said: ${last})` : '';
  }
}
