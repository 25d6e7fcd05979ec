/**
 * Test helpers for the upstream module: a migrated store with users, and
 * configs for real MCP servers from npm (dev dependencies) started over stdio with the
 * node running the tests.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import net from 'node:net';
import path from 'node:path';
import type { BridgeHandler, SandboxOwner } from '../../src/sandboxes/types.js';
import type { Store } from '../../src/store/store.js';
import { ensureUser } from '../../src/accounts/accounts.js';
import { openTestStore } from './store.js';
import type { Db } from '../../src/store/store.js';
import { parseUpstreamConfig, type UpstreamServerConfig } from '../../src/upstream/config.js';
import { gatewayIdFor } from '../../src/sandboxes/index.js';
import { uidBlockOf, upstreamIdentity } from '../../src/upstream/identities.js';

/**
 * Where a test hub keeps its connection homes (beside the data directory, as a gateway
 * keeps them apart from it) and whose uid each connection gets: the real identities table.
 */
export function hubHomes(dataDir: string, db: Db): { homeDir: string; identityOf: (connection: string) => ReturnType<typeof upstreamIdentity> } {
  return { homeDir: `${dataDir}-homes`, identityOf: (connection) => upstreamIdentity(db, connection, uidBlockOf(gatewayIdFor(dataDir))) };
}

/** The upstream settings of a test gateway whose data directory is `dataDir`. */
export function upstreamSettings(dataDir: string, mcpServersFile = ''): { dataDir: string; mcpServersFile: string; upstreamHomeDir: string } {
  return { dataDir, mcpServersFile, upstreamHomeDir: `${dataDir}-homes` };
}

/** A fresh data directory with a migrated store and the named users, as sandbox owners. */
export async function openStoreWithUsers(prefix: string, names: string[]): Promise<{ dataDir: string; store: Store; owners: SandboxOwner[] }> {
  const store = await openTestStore(fs.mkdtempSync(path.join(os.tmpdir(), `sandgate-${prefix}-`)));
  const owners: SandboxOwner[] = [];
  for (const name of names) {
    const r = await ensureUser(store.db, name);
    owners.push({ userId: r.id, name: r.name });
  }
  return { dataDir: store.dataDir, store, owners };
}

const require = createRequire(import.meta.url);

/** Absolute path of an npm package's file, e.g. ('@modelcontextprotocol/server-memory', 'dist/index.js'). */
export function packageFile(pkg: string, file: string): string {
  return path.join(path.dirname(require.resolve(`${pkg}/package.json`)), file);
}

export const MEMORY_SERVER = packageFile('@modelcontextprotocol/server-memory', 'dist/index.js');
export const EVERYTHING_SERVER = packageFile('@modelcontextprotocol/server-everything', 'dist/index.js');

/** An mcpServers entry running a node script with the current node. */
export function nodeServer(script: string, args: string[] = [], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { command: process.execPath, args: [script, ...args], ...extra };
}

/** Parses an mcpServers object the way the gateway does. */
export function serversFrom(mcpServers: Record<string, unknown>, env: Record<string, string> = {}): UpstreamServerConfig[] {
  return parseUpstreamConfig({ mcpServers }, { source: 'test', env });
}

/** The Deno binary shipped in the npm package (the same one the sandbox image copies). */
export const DENO_BIN = packageFile('@deno/linux-x64-glibc', 'deno');

/**
 * Plays the runner's part of the tool channel on the host: a Unix socket that takes one
 * JSON line `{method, params, execId}` per connection, refuses any execId but `execId`,
 * and answers `{ok, result}` / `{ok: false, error}` from `handler` as `owner`.
 */
export async function startBridgeSocket(
  handler: BridgeHandler,
  owner: SandboxOwner,
  execId: string,
  socketPath: string,
): Promise<{ path: string; close(): Promise<void> }> {
  const server = net.createServer((conn) => {
    let buf = '';
    conn.on('data', (d) => {
      buf += d.toString('utf8');
      const nl = buf.indexOf('\n');
      if (nl < 0) return;
      const line = buf.slice(0, nl);
      buf = '';
      const reply = (obj: object) => conn.end(`${JSON.stringify(obj)}\n`);
      let req: { method?: string; params?: unknown; execId?: string };
      try {
        req = JSON.parse(line) as typeof req;
      } catch {
        return reply({ ok: false, error: 'malformed bridge request' });
      }
      if (req.execId !== execId) return reply({ ok: false, error: `no running execution ${JSON.stringify(req.execId)}` });
      handler(owner, String(req.method), req.params).then(
        (result) => reply({ ok: true, result }),
        (e: unknown) => reply({ ok: false, error: e instanceof Error ? e.message : String(e) }),
      );
    });
    conn.on('error', () => undefined);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, resolve);
  });
  return { path: socketPath, close: () => new Promise((r) => server.close(() => r())) };
}
