/**
 * UpstreamHub: sandgate's MCP clients to the servers an admin configured. It decides
 * who may use which server and tool, opens connections lazily (one shared, or one per
 * user for per-user servers, carrying that user's credentials), keeps each server's
 * tool list, and turns every failure into an UpstreamError with a readable message.
 * Nothing here throws past a call: a dead or misbehaving upstream never takes the
 * gateway down.
 */
import * as metrics from '../telemetry/metrics.js';
import crypto from 'node:crypto';
import path from 'node:path';
import type { Tool, CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from '../logger.js';
import type { SandboxOwner } from '../sandboxes/types.js';
import type { UpstreamServerConfig } from './config.js';
import type { CredentialStore } from './credentials.js';
import { UpstreamConnection, type BackoffOptions, type ConnectionState } from './connection.js';
import { UpstreamError } from './errors.js';
import type { UpstreamIdentity } from './identities.js';

export interface UpstreamHubOptions {
  servers: readonly UpstreamServerConfig[];
  /** The data directory; earlier versions kept connection homes under `<dataDir>/upstream/`. */
  dataDir: string;
  /** Where connection homes go (SANDGATE_UPSTREAM_HOME_DIR and the gateway's id): `<homeDir>/<server id>/<shared|user-N>`. */
  homeDir: string;
  /** The uid a stdio connection runs as (identities.ts), by its name `<server id>/<shared|user-N>`. */
  identityOf: (connection: string) => Promise<UpstreamIdentity>;
  /** Needed when any server is per-user with userCredentials. */
  credentials?: CredentialStore;
  /** GitHub teams (`org/team`, any case) of a user; for allowTeams. Defaults to none. */
  teamsOf?: (owner: SandboxOwner) => Promise<string[]>;
  logger?: Logger;
  connectTimeoutMs?: number;
  backoff?: BackoffOptions;
  /** Close a per-user connection after this long unused. */
  idleCloseMs?: number;
}

/** A tool as offered to one user: the server it lives on and its MCP definition. */
export interface HubTool {
  server: UpstreamServerConfig;
  tool: Tool;
}

export interface ToolListing {
  tools: HubTool[];
  /** Servers the user may use whose tools could not be listed right now. */
  unavailable: { server: string; error: string }[];
}

export interface ConnectionStatus extends ConnectionState {
  server: string;
  userId?: number;
}

const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 500, maxMs: 30_000 };

const missingCredentials = (server: UpstreamServerConfig, missing: string[]) =>
  new UpstreamError(
    `upstream server "${server.name}" runs with each user's own credentials, and yours are not set: ` +
      `${missing.join(', ')} (store them in sandgate for this server; they never enter the sandbox)`,
    'missing_credential',
  );

export class UpstreamHub {
  private readonly byName = new Map<string, UpstreamServerConfig>();
  private readonly connections = new Map<string, { conn: UpstreamConnection; idle?: NodeJS.Timeout }>();
  /** Latest tool list seen per server, from any connection (per-user servers list the same tools for everyone). */
  private readonly lastTools = new Map<string, { tools: Tool[]; hash: string }>();
  private readonly listeners = new Set<(server: string) => void>();
  private closed = false;
  /**
   * Counts the times connections were dropped (credentials changed, a reconnect): a
   * connection being set up while that happens read what is now stale, and starts over.
   */
  private drops = 0;

  constructor(private readonly opts: UpstreamHubOptions) {
    for (const s of opts.servers) this.byName.set(s.name, s);
  }

  /** Every configured server. */
  servers(): UpstreamServerConfig[] {
    return [...this.byName.values()];
  }

  /** Whether the user may use the server at all (allowUsers / allowTeams). */
  async mayUse(owner: SandboxOwner, server: UpstreamServerConfig): Promise<boolean> {
    const name = owner.name.toLowerCase();
    if (server.allowUsers.some((u) => u === '*' || u.toLowerCase() === name)) return true;
    if (!server.allowTeams.length || !this.opts.teamsOf) return false;
    let teams: Set<string>;
    try {
      teams = new Set((await this.opts.teamsOf(owner)).map((t) => t.toLowerCase()));
    } catch (e) {
      // Team lookups can fail (GitHub down); deny rather than guess, and say why in the log.
      this.opts.logger?.warn({ user: owner.name, err: (e as Error).message }, 'team lookup failed; treating the user as in no team');
      return false;
    }
    return server.allowTeams.some((t) => teams.has(t));
  }

  /** The servers this user may use, in config order. */
  async serversFor(owner: SandboxOwner): Promise<UpstreamServerConfig[]> {
    const out: UpstreamServerConfig[] = [];
    for (const s of this.byName.values()) if (await this.mayUse(owner, s)) out.push(s);
    return out;
  }

  /** Whether the admin offers this tool of the server (allowTools / denyTools). */
  toolOffered(server: UpstreamServerConfig, tool: string): boolean {
    if (server.denyTools.includes(tool)) return false;
    return !server.allowTools || server.allowTools.includes(tool);
  }

  /**
   * Tools the user may call, of one server or of all they may use. One server that
   * cannot be reached is reported in `unavailable`, never thrown, when listing all;
   * asking for one server throws its error.
   */
  async listTools(owner: SandboxOwner, serverName?: string): Promise<ToolListing> {
    if (serverName !== undefined) {
      const server = await this.usable(owner, serverName);
      return { tools: (await this.serverTools(owner, server)).map((tool) => ({ server, tool })), unavailable: [] };
    }
    const servers = await this.serversFor(owner);
    const results = await Promise.allSettled(servers.map((s) => this.serverTools(owner, s)));
    const listing: ToolListing = { tools: [], unavailable: [] };
    results.forEach((r, i) => {
      const server = servers[i]!;
      if (r.status === 'fulfilled') listing.tools.push(...r.value.map((tool) => ({ server, tool })));
      else listing.unavailable.push({ server: server.name, error: (r.reason as Error).message });
    });
    return listing;
  }

  /** One tool's full definition, after the same checks as a call. */
  async describeTool(owner: SandboxOwner, serverName: string, toolName: string): Promise<HubTool> {
    const server = await this.usable(owner, serverName);
    return { server, tool: await this.findTool(owner, server, toolName) };
  }

  /**
   * Calls a tool as the user: checks access, opens the connection if needed and
   * forwards the call with the server's time limit. A tool that reports an error
   * (`isError: true`) is a result, not an exception; everything else that goes wrong
   * throws UpstreamError.
   */
  async callTool(owner: SandboxOwner, serverName: string, toolName: string, args: Record<string, unknown> = {}): Promise<CallToolResult> {
    const started = performance.now();
    // A configured server's name only: a name code made up would grow the metrics without end.
    let server: UpstreamServerConfig | undefined;
    try {
      server = await this.usable(owner, serverName);
      await this.findTool(owner, server, toolName);
      const conn = await this.connectionFor(owner, server);
      const result = await conn.callTool(toolName, args, server.timeoutMs);
      metrics.upstreamCalls.inc({ server: server.name, outcome: result.isError ? 'tool_error' : 'ok' });
      metrics.upstreamSeconds.observe({ server: server.name }, metrics.secondsSince(started));
      return result;
    } catch (e) {
      metrics.upstreamCalls.inc({ server: server?.name ?? '(unknown)', outcome: e instanceof UpstreamError ? e.reason : 'failed' });
      throw e;
    }
  }

  /** Names the server needs from the user and whether each is stored (never the values). */
  async credentialStatus(owner: SandboxOwner, serverName: string): Promise<{ name: string; set: boolean }[]> {
    const server = this.configured(serverName);
    const stored = new Set((await this.opts.credentials?.names(owner.userId, server.name)) ?? []);
    return server.userCredentials.map((name) => ({ name, set: stored.has(name) }));
  }

  /** Stores one of the user's credentials for a per-user server; their connection restarts with it. */
  async setUserCredential(owner: SandboxOwner, serverName: string, name: string, value: string): Promise<void> {
    const server = await this.usable(owner, serverName);
    if (!server.userCredentials.includes(name)) {
      throw new UpstreamError(
        `upstream server "${server.name}" takes no credential named ${name}` +
          (server.userCredentials.length ? `; it takes: ${server.userCredentials.join(', ')}` : ' (it takes none)'),
        'missing_credential',
      );
    }
    if (!value) throw new UpstreamError(`the value of ${name} is empty`, 'missing_credential');
    await this.requireCredentialStore().set(owner.userId, server.name, name, value);
    await this.dropConnection(server, owner);
  }

  /** Deletes one (or every) credential of the user for the server; their connection closes. */
  async deleteUserCredential(owner: SandboxOwner, serverName: string, name?: string): Promise<number> {
    const server = this.configured(serverName);
    const n = await this.requireCredentialStore().delete(owner.userId, server.name, name);
    await this.dropConnection(server, owner);
    return n;
  }

  /** Subscribes to "this server's tool list changed"; returns an unsubscribe function. */
  onCatalogChange(listener: (server: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * A tool of a configured server as last listed, without connecting; undefined when the
   * server or the tool is not known (the audit log names only what exists).
   */
  knownTool(serverName: string, toolName: string): Tool | undefined {
    return this.lastTools.get(serverName)?.tools.find((t) => t.name === toolName);
  }

  /** Whether a server of that name is configured. */
  isServer(serverName: string): boolean {
    return this.byName.has(serverName);
  }

  /** A fingerprint of a server's current tool list ('' before the first listing). */
  toolsHash(serverName: string): string {
    return this.lastTools.get(serverName)?.hash ?? '';
  }

  /** State of every open or failed connection, for the admin page. */
  status(): ConnectionStatus[] {
    return [...this.connections.entries()].map(([key, { conn }]) => {
      const [server, user] = key.split('\0');
      return { server: server!, ...(user ? { userId: Number(user) } : {}), ...conn.state() };
    });
  }

  /** Closes a server's connections (every user's, for a per-user server): the next call connects afresh. */
  async reconnect(serverName: string): Promise<number> {
    this.configured(serverName);
    this.drops++;
    const closing: Promise<void>[] = [];
    for (const [key, c] of [...this.connections.entries()]) {
      if (key.split('\0')[0] !== serverName) continue;
      this.connections.delete(key);
      if (c.idle) clearTimeout(c.idle);
      closing.push(c.conn.close());
    }
    await Promise.all(closing);
    return closing.length;
  }

  /** Closes every connection (stdio servers are stopped). */
  async close(): Promise<void> {
    this.closed = true;
    this.drops++;
    const all = [...this.connections.values()];
    this.connections.clear();
    for (const c of all) if (c.idle) clearTimeout(c.idle);
    await Promise.all(all.map((c) => c.conn.close()));
  }

  private configured(serverName: string): UpstreamServerConfig {
    const server = this.byName.get(serverName);
    if (!server) {
      throw new UpstreamError(`there is no upstream server named "${serverName}"; listTools() shows the servers you may use`, 'unknown_server');
    }
    return server;
  }

  private async usable(owner: SandboxOwner, serverName: string): Promise<UpstreamServerConfig> {
    const server = this.configured(serverName);
    if (!(await this.mayUse(owner, server))) {
      throw new UpstreamError(
        `${owner.name} may not use upstream server "${server.name}": an admin can add you to its sandgate.allowUsers or sandgate.allowTeams`,
        'denied',
      );
    }
    return server;
  }

  private async findTool(owner: SandboxOwner, server: UpstreamServerConfig, toolName: string): Promise<Tool> {
    if (!this.toolOffered(server, toolName)) {
      throw new UpstreamError(`tool "${toolName}" of upstream server "${server.name}" is switched off by the admin`, 'denied');
    }
    const tools = await this.serverTools(owner, server);
    const tool = tools.find((t) => t.name === toolName);
    if (!tool) {
      const names = tools.map((t) => t.name);
      throw new UpstreamError(
        `upstream server "${server.name}" has no tool "${toolName}"; its tools are: ${names.slice(0, 50).join(', ')}${names.length > 50 ? ', …' : ''}`,
        'unknown_tool',
      );
    }
    return tool;
  }

  /**
   * The offered tools of a server as this user sees them. A per-user server lists the
   * same tools for everyone, so once any connection has listed them, listing (for search
   * or wrappers) starts no process of this user's: their connection opens at their
   * first call. Without their credentials that is also the only list they can see.
   */
  private async serverTools(owner: SandboxOwner, server: UpstreamServerConfig): Promise<Tool[]> {
    let tools: Tool[];
    const seen = this.lastTools.get(server.name);
    const own = this.connections.get(this.connectionKey(owner, server))?.conn;
    if (server.scope === 'per-user' && seen && !own?.state().connected) {
      tools = seen.tools;
    } else {
      if (server.scope === 'per-user') {
        const missing = await this.missingCredentials(owner, server);
        if (missing.length) throw missingCredentials(server, missing);
      }
      tools = await (await this.connectionFor(owner, server)).tools();
    }
    return tools.filter((t) => this.toolOffered(server, t.name));
  }

  private connectionKey(owner: SandboxOwner, server: UpstreamServerConfig): string {
    return server.scope === 'per-user' ? `${server.name}\0${owner.userId}` : server.name;
  }

  private async missingCredentials(owner: SandboxOwner, server: UpstreamServerConfig): Promise<string[]> {
    if (!server.userCredentials.length) return [];
    const stored = new Set((await this.opts.credentials?.names(owner.userId, server.name)) ?? []);
    return server.userCredentials.filter((n) => !stored.has(n));
  }

  /**
   * The connection the user's calls to the server go through, made (not yet opened) on
   * first use. Making one reads the store (the user's credentials, the connection's uid),
   * so two calls can get here at once: the first to finish keeps its connection and the
   * other uses it, and one made while connections were being dropped is made again.
   */
  private async connectionFor(owner: SandboxOwner, server: UpstreamServerConfig): Promise<UpstreamConnection> {
    const key = this.connectionKey(owner, server);
    for (;;) {
      if (this.closed) throw new UpstreamError('the upstream hub is shutting down', 'unavailable');
      const existing = this.connections.get(key);
      if (existing) return this.keepAlive(key, server, existing);
      const drops = this.drops;
      const conn = await this.newConnection(owner, server);
      if (this.drops !== drops) continue;
      if (this.closed) throw new UpstreamError('the upstream hub is shutting down', 'unavailable');
      const entry = this.connections.get(key) ?? { conn };
      this.connections.set(key, entry);
      return this.keepAlive(key, server, entry);
    }
  }

  /** A connection for the user to the server, with their credentials and the connection's uid; it connects at its first use. */
  private async newConnection(owner: SandboxOwner, server: UpstreamServerConfig): Promise<UpstreamConnection> {
    const perUser = server.scope === 'per-user';
    let user: { id: number; name: string; credentials: Record<string, string> } | undefined;
    if (perUser) {
      const missing = await this.missingCredentials(owner, server);
      if (missing.length) throw missingCredentials(server, missing);
      user = {
        id: owner.userId,
        name: owner.name,
        credentials: server.userCredentials.length ? await this.requireCredentialStore().get(owner.userId, server.name) : {},
      };
    }
    const name = `${server.id}/${perUser ? `user-${owner.userId}` : 'shared'}`;
    const identity = server.transport.type === 'stdio' ? await this.opts.identityOf(name) : { uid: -1, gid: -1 };
    return new UpstreamConnection({
      server,
      ...(user ? { user } : {}),
      workDir: path.join(this.opts.homeDir, name),
      isolation: {
        ...identity,
        base: this.opts.homeDir,
        proxyDir: path.join(this.opts.homeDir, '.proxy'),
        legacyWorkDir: path.join(this.opts.dataDir, 'upstream', name),
      },
      connectTimeoutMs: this.opts.connectTimeoutMs ?? 30_000,
      backoff: this.opts.backoff ?? DEFAULT_BACKOFF,
      ...(this.opts.logger ? { logger: this.opts.logger } : {}),
      onToolsChanged: (tools) => this.noteTools(server.name, tools),
    });
  }

  /** Restarts a per-user connection's idle timer; returns the connection. */
  private keepAlive(key: string, server: UpstreamServerConfig, entry: { conn: UpstreamConnection; idle?: NodeJS.Timeout }): UpstreamConnection {
    if (server.scope === 'per-user' && this.opts.idleCloseMs) {
      if (entry.idle) clearTimeout(entry.idle);
      entry.idle = setTimeout(() => {
        if (this.connections.get(key) === entry) this.connections.delete(key);
        void entry.conn.close();
      }, this.opts.idleCloseMs);
      entry.idle.unref();
    }
    return entry.conn;
  }

  private async dropConnection(server: UpstreamServerConfig, owner: SandboxOwner): Promise<void> {
    if (server.scope !== 'per-user') return;
    this.drops++;
    const key = this.connectionKey(owner, server);
    const entry = this.connections.get(key);
    if (!entry) return;
    this.connections.delete(key);
    if (entry.idle) clearTimeout(entry.idle);
    await entry.conn.close();
  }

  private noteTools(serverName: string, tools: Tool[]): void {
    const hash = crypto.createHash('sha256').update(JSON.stringify(tools)).digest('hex').slice(0, 16);
    const before = this.lastTools.get(serverName)?.hash;
    this.lastTools.set(serverName, { tools, hash });
    if (before === hash) return;
    for (const l of this.listeners) {
      try {
        l(serverName);
      } catch (e) {
        this.opts.logger?.warn({ server: serverName, err: (e as Error).message }, 'catalog change listener failed');
      }
    }
  }

  private requireCredentialStore(): CredentialStore {
    if (!this.opts.credentials) throw new UpstreamError('per-user credentials are not available: the hub has no credential store', 'missing_credential');
    return this.opts.credentials;
  }
}
