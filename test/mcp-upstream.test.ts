/**
 * search_tools and upstream calls from code, against the real upstream hub running a
 * real MCP server from npm (@modelcontextprotocol/server-memory over stdio), through the
 * SDK's client over real HTTP and the real sandbox. The server is granted to alice only:
 * bob can neither find its tools nor call them, and his audit log shows his own denials.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { listAudit, type AuditRecord } from '../src/audit/audit.js';
import { findUser } from '../src/accounts/accounts.js';
import { NO_UPSTREAM_SERVERS_FOR_YOU } from '../src/mcp/tools/search-tools.js';
import { MEMORY_SERVER, nodeServer } from './support/upstream.js';
import { startGateway, type Gateway } from './support/mcp.js';

let gw: Gateway;
let alice: Client;
let bob: Client;

async function connect(token: string): Promise<Client> {
  const client = new Client({ name: 'sandgate-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gw.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return client;
}

async function call(client: Client, name: string, args: Record<string, unknown>): Promise<{ text: string; isError: boolean }> {
  const r = (await client.callTool({ name, arguments: args })) as CallToolResult;
  const text = r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
  return { text, isError: r.isError === true };
}

beforeAll(async () => {
  gw = await startGateway({
    upstream: {
      memory: nodeServer(MEMORY_SERVER, [], {
        env: { MEMORY_FILE_PATH: '${SANDGATE_WORKDIR}/memory.jsonl' },
        sandgate: { scope: 'per-user', allowUsers: ['alice'] },
      }),
    },
  });
  alice = await connect(await gw.tokenFor('alice', 'laptop'));
  bob = await connect(await gw.tokenFor('bob', 'laptop'));
});
afterAll(async () => {
  await alice?.close();
  await bob?.close();
  await gw?.close();
});

describe('search_tools over the real upstream hub', () => {
  it('finds the tools a user may use, at each level of detail', async () => {
    const names = await call(alice, 'search_tools', { query: 'create entities', detail: 'names' });
    expect(names.isError).toBe(false);
    expect(names.text.split('\n')[0]).toBe('memory.create_entities  /tools/servers/memory/create_entities.ts');
    const described = await call(alice, 'search_tools', { query: 'create entities' });
    expect(described.text).toMatch(/^memory\.create_entities {2}\S+\n {2}\S.+/);
    const schemas = await call(alice, 'search_tools', { query: 'create entities', detail: 'schemas', limit: 1 });
    expect(schemas.text.split('\n')).toHaveLength(3);
    expect(schemas.text).toMatch(/\n {2}input: \{.*"entities"/);
  });

  it('tells a user no server is granted to that none is open to them, and shows nothing', async () => {
    const r = await call(bob, 'search_tools', { query: 'create entities' });
    expect(r.isError).toBe(false);
    expect(r.text).toBe(NO_UPSTREAM_SERVERS_FOR_YOU);
    expect(r.text).not.toMatch(/memory/);
  });

  it('says when nothing matches', async () => {
    const r = await call(alice, 'search_tools', { query: 'zzqx' });
    expect(r.text).toBe('No upstream tools match "zzqx". Try other words, or an empty query to list them all.');
  });
});

/** A user's audit rows of upstream calls, once there are at least `atLeast` (each is written off the call's path). */
async function upstreamAudit(name: string, atLeast: number): Promise<AuditRecord[]> {
  const db = gw.harness.store.db;
  const id = (await findUser(db, name))!.id;
  const rows = async () => (await listAudit(db, id, { limit: 100 })).filter((e) => e.kind === 'upstream');
  await vi.waitUntil(async () => (await rows()).length >= atLeast, { timeout: 5000, interval: 50 });
  return rows();
}

describe('upstream calls from code', () => {
  it('alice calls the tool from Python through its wrapper; the call is audited to her, by shape', async () => {
    const r = await call(alice, 'execute_code', {
      language: 'python',
      code: [
        'from sandgate_tools.servers.memory import create_entities, read_graph',
        'create_entities(entities=[{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}])',
        'len(read_graph()["entities"])',
      ].join('\n'),
    });
    expect(r.isError, r.text).toBe(false);
    expect(r.text).toMatch(/\[result\] 1/);
    const upstream = await upstreamAudit('alice', 2);
    expect(upstream.map((e) => e.outcome)).toEqual(['ok', 'ok']);
    expect(upstream.find((e) => e.tool?.endsWith('create_entities'))?.argsShape).toMatchObject({ entities: { array: 1 } });
    expect(JSON.stringify(upstream)).not.toMatch(/Ada|first program/);
  });

  it("bob's sandbox has no wrapper for it, and calling it anyway is refused and audited to bob", async () => {
    const ls = await call(bob, 'execute_code', { language: 'bash', code: 'ls /tools/servers/ ; ls /tools/servers/memory 2>&1 | head -1' });
    expect(ls.text).not.toMatch(/create_entities/);
    const r = await call(bob, 'execute_code', {
      language: 'python',
      code: 'from sandgate_tools import call_mcp_tool\ncall_mcp_tool("memory", "read_graph", {})',
    });
    expect(r.isError).toBe(true);
    expect(r.text).not.toMatch(/Ada/);
    const bobs = await upstreamAudit('bob', 1);
    expect(bobs.length).toBeGreaterThan(0);
    expect(bobs.every((e) => e.outcome !== 'ok')).toBe(true);
    // Bob's refused call is his alone: alice's log still holds just her two calls.
    expect(await upstreamAudit('alice', 2)).toHaveLength(2);
  });
});
