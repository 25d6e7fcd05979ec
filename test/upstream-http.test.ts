/**
 * A Streamable HTTP upstream (a small MCP server in this process, on 127.0.0.1): each
 * user's own credential travels as a header of their connection only, admin headers
 * are added for everyone, and the hub recovers when the server goes away and returns.
 * Also: createUpstream composes the pieces from a config file in the data directory.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import type { Store } from '../src/store/store.js';
import { createCredentialStore, loadOrCreateCredentialsKey } from '../src/upstream/credentials.js';
import { UpstreamError } from '../src/upstream/errors.js';
import { UpstreamHub } from '../src/upstream/hub.js';
import { createUpstream } from '../src/upstream/index.js';
import { hubHomes, MEMORY_SERVER, nodeServer, serversFrom, openStoreWithUsers, upstreamSettings } from './support/upstream.js';

/** A stateless Streamable HTTP MCP server with one tool that reports the headers it got. */
function startHeaderServer(port = 0): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', async () => {
      const mcp = new McpServer({ name: 'headers', version: '1.0.0' });
      mcp.registerTool('whoami', { description: 'Reports the credentials this request carried' }, async (extra) => {
        const h = extra.requestInfo?.headers ?? {};
        return { content: [{ type: 'text', text: JSON.stringify({ apiKey: h['x-api-key'] ?? null, team: h['x-team'] ?? null }) }] };
      });
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      res.on('close', () => void transport.close());
      await mcp.connect(transport);
      await transport.handleRequest(req, res, JSON.parse(body));
    });
  });
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(server)));
}

const text = (r: CallToolResult) => (r.content[0] as { text: string }).text;

let dataDir: string;
let store: Store;
let alice: SandboxOwner;
let bob: SandboxOwner;

beforeAll(async () => {
  ({ dataDir, store, owners: [alice, bob] } = await openStoreWithUsers('http', ['alice', 'bob']));
});
afterAll(async () => {
  await store.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

describe('Streamable HTTP upstream', () => {
  it('sends each user their own credential header, and recovers after the server was down', async () => {
    let server = await startHeaderServer();
    const port = (server.address() as AddressInfo).port;
    const hub = new UpstreamHub({
      servers: serversFrom(
        {
          api: {
            url: `http://127.0.0.1:${port}/mcp`,
            headers: { 'X-Team': '${TEAM_NAME}' },
            sandgate: { scope: 'per-user', allowUsers: ['*'], userCredentials: ['X-Api-Key'] },
          },
        },
        { TEAM_NAME: 'platform' },
      ),
      dataDir,
      ...hubHomes(dataDir, store.db),
      credentials: createCredentialStore(store.db, loadOrCreateCredentialsKey(dataDir)),
      backoff: { initialMs: 50, maxMs: 100 },
    });
    try {
      await hub.setUserCredential(alice, 'api', 'X-Api-Key', 'alice-key');
      await hub.setUserCredential(bob, 'api', 'X-Api-Key', 'bob-key');
      expect(JSON.parse(text(await hub.callTool(alice, 'api', 'whoami', {})))).toEqual({ apiKey: 'alice-key', team: 'platform' });
      expect(JSON.parse(text(await hub.callTool(bob, 'api', 'whoami', {})))).toEqual({ apiKey: 'bob-key', team: 'platform' });

      await new Promise<void>((r) => server.close(() => r()));
      server.closeAllConnections();
      const down = await hub.callTool(alice, 'api', 'whoami', {}).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(down).toBeInstanceOf(UpstreamError);
      expect((down as UpstreamError).message).toMatch(/^api\/whoami failed: /);

      server = await startHeaderServer(port);
      let back: CallToolResult | undefined;
      for (let i = 0; i < 20 && !back; i++) {
        back = await hub.callTool(alice, 'api', 'whoami', {}).catch(async () => {
          await new Promise((r) => setTimeout(r, 100));
          return undefined;
        });
      }
      expect(JSON.parse(text(back!))).toEqual({ apiKey: 'alice-key', team: 'platform' });
    } finally {
      await hub.close();
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});

describe('createUpstream', () => {
  it('reads <dataDir>/mcp-servers.json and wires hub, catalogue, /tools and the bridge', async () => {
    const dir = path.join(dataDir, 'composed');
    fs.mkdirSync(dir);
    fs.writeFileSync(
      path.join(dir, 'mcp-servers.json'),
      JSON.stringify({ mcpServers: { memory: nodeServer(MEMORY_SERVER, [], { env: { MEMORY_FILE_PATH: '${SANDGATE_WORKDIR}/m.jsonl' }, sandgate: { allowUsers: ['alice'] } }) } }),
    );
    const audit: unknown[] = [];
    // Homes outside the (private) data directory, where their unprivileged users can reach them.
    const up = createUpstream({ config: { ...upstreamSettings(dir), upstreamHomeDir: `${dataDir}-homes` }, db: store.db, audit: (e) => void audit.push(e) });
    try {
      expect(up.hub.servers().map((s) => s.name)).toEqual(['memory']);
      const listed = (await up.bridgeHandler(alice, 'tools/list', {})) as { tools: { tool: string }[] };
      expect(listed.tools.map((t) => t.tool)).toContain('read_graph');
      await up.bridgeHandler(alice, 'tools/call', { server: 'memory', tool: 'read_graph', arguments: {} });
      expect(audit).toHaveLength(1);
      await expect(up.bridgeHandler(bob, 'tools/call', { server: 'memory', tool: 'read_graph' })).rejects.toThrow('bob may not use upstream server "memory"');
      await expect(up.bridgeHandler(alice, 'tools/delete', {})).rejects.toThrow('unknown bridge method "tools/delete"');
      await expect(up.bridgeHandler(alice, 'tools/call', { server: 'memory' })).rejects.toThrow('bad parameters for tools/call: expected {server, tool, arguments}');
      const toolsDir = await up.toolsDirFor(alice);
      expect(toolsDir).toBe(path.join(dir, 'tools', String(alice.userId)));
      expect(fs.existsSync(path.join(toolsDir, 'servers/memory/read_graph.ts'))).toBe(true);
      expect((await up.catalog.search(alice, 'read graph', 'names', 1))[0]).toMatchObject({ server: 'memory', tool: 'read_graph' });
      expect(fs.statSync(path.join(dir, 'upstream.key')).mode & 0o777).toBe(0o600);
    } finally {
      await up.close();
    }
  });

  it('refuses stdio servers in a gateway that runs on a cluster without root (they would share its token and keys), and takes HTTP ones', () => {
    const dir = path.join(dataDir, 'cluster');
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, 'mcp-servers.json'), JSON.stringify({ mcpServers: { memory: nodeServer(MEMORY_SERVER, [], { sandgate: { allowUsers: ['*'] } }) } }));
    expect(() => createUpstream({ config: { ...upstreamSettings(dir), sandboxDriver: 'kubernetes' }, db: store.db, audit: () => undefined, uid: 10001 })).toThrow(
      /stdio upstream servers \(memory\) cannot run in a gateway on a cluster.*HTTP MCP server/,
    );
    fs.writeFileSync(path.join(dir, 'mcp-servers.json'), JSON.stringify({ mcpServers: { api: { type: 'http', url: 'http://upstream.example:8080/mcp', sandgate: { allowUsers: ['*'] } } } }));
    const up = createUpstream({ config: { ...upstreamSettings(dir), sandboxDriver: 'kubernetes' }, db: store.db, audit: () => undefined, uid: 10001 });
    expect(up.hub.servers().map((s) => s.name)).toEqual(['api']);
    return up.close();
  });

  it('has no servers when the file is absent', async () => {
    const dir = path.join(dataDir, 'empty');
    const up = createUpstream({ config: upstreamSettings(dir), db: store.db, audit: () => undefined });
    expect(up.hub.servers()).toEqual([]);
    expect(await up.catalog.search(alice, 'anything', 'names')).toEqual([]);
    await up.close();
  });
});
