/**
 * The /mcp endpoint end to end: the SDK's own client over real HTTP against createApp,
 * the real sandbox manager (Docker + runsc, the real image), real tokens in a real store.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { listAudit } from '../src/audit/audit.js';
import { TOOL_NAMES } from '../src/mcp/server.js';
import { NO_UPSTREAM_SERVERS } from '../src/mcp/tools/search-tools.js';
import { findUser } from '../src/accounts/accounts.js';
import { findTokenBySecret, revokeToken } from '../src/tokens/tokens.js';
import { generateToken } from '../src/tokens/format.js';
import { callTool, initializeBody, rawRequest, startGateway, toolText, type Gateway } from './support/mcp.js';

let gw: Gateway;
let aliceToken: string;
let bobToken: string;

async function connect(token: string, url = gw.mcpUrl): Promise<Client> {
  const client = new Client({ name: 'sandgate-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return client;
}

const text = toolText;
const call = callTool<CallToolResult>;

beforeAll(async () => {
  gw = await startGateway();
  aliceToken = await gw.tokenFor('alice', 'laptop');
  bobToken = await gw.tokenFor('bob', 'desktop');
});
afterAll(async () => {
  await gw?.close();
});

describe('authentication', () => {
  it('answers a request without a token with 401, a Bearer challenge and what to do', async () => {
    const r = await rawRequest(gw.mcpUrl, { body: initializeBody(LATEST_PROTOCOL_VERSION) });
    expect(r.status).toBe(401);
    // It names where an OAuth client learns how to sign in (RFC 9728).
    expect(r.headers['www-authenticate']).toBe(`Bearer realm="sandgate", resource_metadata="${new URL(gw.mcpUrl).origin}/.well-known/oauth-protected-resource/mcp", scope="mcp"`);
    expect(r.text).toMatch(/sandgate tokens create --user <you> --name <device>/);
    expect(r.text).toMatch(/Authorization: Bearer sgp_/);
  });

  it.each([
    ['malformed', 'sgp_notatoken', /malformed/, /copied whole/],
    ['unknown', generateToken(), /not recognised/, /not known to this gateway/],
  ])('refuses a %s token with invalid_token', async (_kind, token, challenge, message) => {
    const r = await rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${token}` }, body: initializeBody(LATEST_PROTOCOL_VERSION) });
    expect(r.status).toBe(401);
    expect(r.headers['www-authenticate']).toMatch(/^Bearer realm="sandgate", resource_metadata="[^"]+", scope="mcp", error="invalid_token", error_description=/);
    expect(r.headers['www-authenticate']).toMatch(challenge);
    expect(r.text).toMatch(message);
  });

  it('refuses a non-Bearer Authorization header with invalid_request', async () => {
    const r = await rawRequest(gw.mcpUrl, { headers: { authorization: 'Basic YWxpY2U6cHc=' }, body: initializeBody(LATEST_PROTOCOL_VERSION) });
    expect(r.status).toBe(401);
    expect(r.headers['www-authenticate']).toMatch(/error="invalid_request"/);
  });

  it('refuses an expired token, and audits it for its owner', async () => {
    const token = await gw.tokenFor('carol', 'old', { expiresAt: Date.now() + 300 });
    await new Promise((r) => setTimeout(r, 400));
    const r = await rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${token}` }, body: initializeBody(LATEST_PROTOCOL_VERSION) });
    expect(r.status).toBe(401);
    expect(r.headers['www-authenticate']).toMatch(/The token has expired/);
    expect((r.messages[0]!.error as { message: string }).message).toMatch(/The token "old" expired at .*sandgate tokens create/);
    const carol = (await findUser(gw.harness.store.db, 'carol'))!;
    // The row may be written after the answer went out.
    await vi.waitUntil(async () => (await listAudit(gw.harness.store.db, carol.id)).length > 0, { timeout: 5000, interval: 50 });
    expect((await listAudit(gw.harness.store.db, carol.id))[0]).toMatchObject({ method: 'authenticate', outcome: 'denied', errorClass: 'expired', tokenName: 'old' });
    // The same old token sent in a loop: each request refused, but one audit row a second at most.
    const rows = async () => (await listAudit(gw.harness.store.db, carol.id)).filter((a) => a.method === 'authenticate').length;
    const before = await rows();
    const t0 = Date.now();
    for (let i = 0; i < 50; i++) {
      const again = await rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${token}` }, body: initializeBody(LATEST_PROTOCOL_VERSION) });
      expect(again.status).toBe(401);
    }
    expect((await rows()) - before).toBeLessThanOrEqual(Math.ceil((Date.now() - t0) / 1000));
  });

  it('the SDK client shows the message when its token is refused', async () => {
    await expect(connect(generateToken())).rejects.toThrow(/401|not known to this gateway/);
  });

  it('revocation takes effect on the very next request, and last use is recorded', async () => {
    const token = await gw.tokenFor('dave', 'phone');
    const client = await connect(token);
    expect((await client.listTools()).tools).toHaveLength(TOOL_NAMES.length);
    const record = (await findTokenBySecret(gw.harness.store.db, token))!;
    expect(record.lastUsedAt).toBeGreaterThan(Date.now() - 10_000);
    await revokeToken(gw.harness.store.db, record.id);
    await expect(client.listTools()).rejects.toThrow(/401|revoked/);
    await client.close();
  });
});

describe('Host and Origin validation (DNS rebinding)', () => {
  it('refuses a foreign Host before looking at the token', async () => {
    const r = await rawRequest(gw.mcpUrl, { headers: { host: 'evil.example:80' }, body: initializeBody(LATEST_PROTOCOL_VERSION) });
    expect(r.status).toBe(403);
    expect(r.text).toMatch(/Invalid Host: evil.example/);
  });

  it('accepts localhost names for a gateway on loopback', async () => {
    for (const host of [`localhost:${gw.port}`, `127.0.0.1:${gw.port}`]) {
      const r = await rawRequest(gw.mcpUrl, { headers: { host, authorization: `Bearer ${aliceToken}` }, body: initializeBody(LATEST_PROTOCOL_VERSION) });
      expect(r.status, host).toBe(200);
    }
  });

  it('refuses a foreign Origin, allows the gateway own and loopback origins', async () => {
    const bad = await rawRequest(gw.mcpUrl, { headers: { origin: 'https://evil.example', authorization: `Bearer ${aliceToken}` }, body: initializeBody(LATEST_PROTOCOL_VERSION) });
    expect(bad.status).toBe(403);
    expect(bad.text).toMatch(/SANDGATE_MCP_ALLOWED_ORIGINS/);
    const nul = await rawRequest(gw.mcpUrl, { headers: { origin: 'null', authorization: `Bearer ${aliceToken}` }, body: initializeBody(LATEST_PROTOCOL_VERSION) });
    expect(nul.status).toBe(403);
    for (const origin of [gw.url, 'http://localhost:6274']) {
      const ok = await rawRequest(gw.mcpUrl, { headers: { origin, authorization: `Bearer ${aliceToken}` }, body: initializeBody(LATEST_PROTOCOL_VERSION) });
      expect(ok.status, origin).toBe(200);
    }
  });
});

describe('protocol', () => {
  it.each([...SUPPORTED_PROTOCOL_VERSIONS])('speaks protocol version %s', async (version) => {
    const r = await rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${aliceToken}` }, body: initializeBody(version) });
    expect(r.status).toBe(200);
    const result = r.messages[0]!.result as { protocolVersion: string; serverInfo: { name: string }; instructions?: string };
    expect(result.protocolVersion).toBe(version);
    expect(result.serverInfo.name).toBe('sandgate');
    expect(result.instructions).toMatch(/execute_code/);
    expect(r.headers['mcp-session-id']).toBeUndefined();
  });

  it('offers its latest version to a client asking for one it does not know', async () => {
    const r = await rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${aliceToken}` }, body: initializeBody('2026-07-28') });
    expect((r.messages[0]!.result as { protocolVersion: string }).protocolVersion).toBe(LATEST_PROTOCOL_VERSION);
  });

  it('is stateless: requests need no initialize and no session, GET and DELETE are 405', async () => {
    const r = await rawRequest(gw.mcpUrl, {
      headers: { authorization: `Bearer ${aliceToken}`, 'mcp-protocol-version': LATEST_PROTOCOL_VERSION, 'mcp-session-id': 'made-up' },
      body: { jsonrpc: '2.0', id: 7, method: 'tools/list' },
    });
    expect(r.status).toBe(200);
    expect((r.messages[0]!.result as { tools: unknown[] }).tools).toHaveLength(TOOL_NAMES.length);
    for (const method of ['GET', 'DELETE']) {
      const s = await rawRequest(gw.mcpUrl, { method, headers: { authorization: `Bearer ${aliceToken}` } });
      expect(s.status).toBe(405);
      expect(s.headers.allow).toBe('POST');
    }
  });

  it('answers bad JSON with a JSON-RPC parse error', async () => {
    const r = await rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${aliceToken}` }, body: '{"jsonrpc":' });
    expect(r.status).toBe(400);
    expect(r.messages[0]).toMatchObject({ error: { code: -32700 } });
  });

  it('refuses a body nested thousands of levels deep with -32600, not an internal error', async () => {
    const deep = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
    for (const body of [deep(5000), `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":${deep(100_000)}}}`]) {
      const r = await rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${aliceToken}`, 'mcp-protocol-version': LATEST_PROTOCOL_VERSION }, body });
      expect(r.status).toBe(400);
      expect(r.messages[0]).toMatchObject({ error: { code: -32600, message: expect.stringMatching(/nests deeper than 100 levels/) } });
    }
  });

  it('answers a request whose params do not fit its method with -32602 Invalid params, not an internal error', async () => {
    // A user of its own: the audit test below counts alice's refusals.
    const headers = { authorization: `Bearer ${await gw.tokenFor('pat')}`, 'mcp-protocol-version': '2025-06-18' };
    for (const [method, params] of [
      ['resources/read', undefined],
      ['completion/complete', {}],
      ['prompts/get', { name: 42 }],
      ['initialize', { protocolVersion: '2025-06-18', capabilities: 'all', clientInfo: 5 }],
    ] as const) {
      const r = await rawRequest(gw.mcpUrl, { headers, body: { jsonrpc: '2.0', id: 9, method, ...(params && { params }) } });
      expect(r.status, method).toBe(200);
      expect(r.messages[0], method).toMatchObject({ id: 9, error: { code: -32602, message: expect.stringContaining(`Invalid params for ${method}: params`) } });
    }
  });

  it('answers a 2025-03-26 batch that calls two tools, and names a tool it does not have', async () => {
    const headers = { authorization: `Bearer ${aliceToken}`, 'mcp-protocol-version': '2025-03-26' };
    const batch = await rawRequest(gw.mcpUrl, {
      headers,
      body: [
        { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'write_file', arguments: { path: 'batch.txt', content: 'hi' } } },
        { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'search_tools', arguments: { query: '' } } },
      ],
    });
    expect(batch.status).toBe(200);
    const byId = new Map(batch.messages.map((m) => [m.id, m]));
    expect(JSON.stringify(byId.get(1)!.result)).toContain('Wrote 2 bytes');
    expect(JSON.stringify(byId.get(2)!.result)).toContain('upstream');
    const unknown = await rawRequest(gw.mcpUrl, { headers, body: { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'nope', arguments: {} } } });
    expect(unknown.messages[0]).toMatchObject({ id: 3, error: { code: -32602, message: 'Tool nope not found' } });
  });

  it('answers a body over 4 MB with 413 and what to do instead', async () => {
    const code = 'x'.repeat(4.5 * 1024 * 1024);
    const r = await rawRequest(gw.mcpUrl, {
      headers: { authorization: `Bearer ${aliceToken}`, 'mcp-protocol-version': LATEST_PROTOCOL_VERSION },
      body: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'write_file', arguments: { path: 'big.txt', content: code } } },
    });
    expect(r.status).toBe(413);
    expect(r.messages[0]).toMatchObject({ error: { code: -32000, message: expect.stringContaining('send large files from code') } });
  });

  it('serves /mcp/ and /MCP like /mcp, and keeps every other method and path under /mcp behind the same checks', async () => {
    const auth = { authorization: `Bearer ${aliceToken}`, 'mcp-protocol-version': LATEST_PROTOCOL_VERSION };
    for (const url of [`${gw.mcpUrl}/`, gw.mcpUrl.replace(/\/mcp$/, '/MCP')]) {
      const r = await rawRequest(url, { headers: auth, body: { jsonrpc: '2.0', id: 1, method: 'tools/list' } });
      expect(r.status).toBe(200);
      expect((r.messages[0]!.result as { tools: unknown[] }).tools).toHaveLength(TOOL_NAMES.length);
    }
    for (const [method, path] of [
      ['PUT', ''],
      ['POST', '/other'],
      ['GET', '/a/b'],
    ] as const) {
      expect((await rawRequest(`${gw.mcpUrl}${path}`, { method, body: {} })).status).toBe(401);
      expect((await rawRequest(`${gw.mcpUrl}${path}`, { method, headers: { ...auth, host: 'evil.example' }, body: {} })).status).toBe(403);
      expect((await rawRequest(`${gw.mcpUrl}${path}`, { method, headers: auth, body: {} })).status).toBe(404);
    }
    // A path that only starts like /mcp is not the endpoint.
    expect((await rawRequest(`${gw.mcpUrl}x`, { body: {} })).status).toBe(404);
  });
});

describe('rate limits', () => {
  it('answers 429 with Retry-After once a user has used their burst, whichever of their tokens sent it', async () => {
    const limited = await startGateway({ noStart: true, env: { SANDGATE_RATE_LIMIT_PER_MIN: '6', SANDGATE_RATE_LIMIT_BURST: '3' } });
    try {
      const t1 = await limited.tokenFor('erin', 'a');
      const t2 = await limited.tokenFor('erin', 'b');
      const list = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
      for (let i = 0; i < 3; i++) expect((await rawRequest(limited.mcpUrl, { headers: { authorization: `Bearer ${t1}` }, body: list })).status).toBe(200);
      const r = await rawRequest(limited.mcpUrl, { headers: { authorization: `Bearer ${t1}` }, body: list });
      expect(r.status).toBe(429);
      expect(Number(r.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      expect(Number(r.headers['retry-after'])).toBeLessThanOrEqual(10);
      expect((r.messages[0]!.error as { message: string }).message).toMatch(/Rate limit exceeded for erin: retry after \d+ s\. Each user has one budget across all their tokens and pages: 6 a minute, in bursts of up to 3/);
      // The user's other token shares the budget; another user has their own.
      expect((await rawRequest(limited.mcpUrl, { headers: { authorization: `Bearer ${t2}` }, body: list })).status).toBe(429);
      expect((await rawRequest(limited.mcpUrl, { headers: { authorization: `Bearer ${await limited.tokenFor('gus')}` }, body: list })).status).toBe(200);
      const erin = (await findUser(limited.harness.store.db, 'erin'))!;
      // The first refusal (newest first: the last row), whichever replica wrote it; each writes at most one a second.
      expect((await listAudit(limited.harness.store.db, erin.id)).filter((e) => e.outcome === 'rate_limited').at(-1)).toMatchObject({ method: 'tools/list', tokenName: 'a' });
    } finally {
      await limited.close();
    }
  });

  it('charges every message of a batch: 100 messages are 100, not one burst', async () => {
    const limited = await startGateway({ noStart: true, env: { SANDGATE_RATE_LIMIT_PER_MIN: '60', SANDGATE_RATE_LIMIT_BURST: '10' } });
    try {
      const auth = { authorization: `Bearer ${await limited.tokenFor('fay')}`, 'mcp-protocol-version': '2025-03-26' };
      const batch = (n: number) => Array.from({ length: n }, (_, i) => ({ jsonrpc: '2.0', id: i + 1, method: 'ping' }));
      const big = await rawRequest(limited.mcpUrl, { headers: auth, body: batch(100) });
      expect(big.status).toBe(429);
      expect((big.messages[0]!.error as { message: string }).message).toMatch(/This batch has 100 messages, more than the 10 a user may send at once/);
      // Six, then five: the second would take the bucket past its burst of ten.
      expect((await rawRequest(limited.mcpUrl, { headers: auth, body: batch(6) })).status).toBe(200);
      expect((await rawRequest(limited.mcpUrl, { headers: auth, body: batch(5) })).status).toBe(429);
      expect((await rawRequest(limited.mcpUrl, { headers: auth, body: batch(4) })).status).toBe(200);
      // A refusal costs its sender nothing, so it costs the audit log one row, not one per message.
      for (let i = 0; i < 3; i++) expect((await rawRequest(limited.mcpUrl, { headers: auth, body: batch(5000) })).status).toBe(429);
      const fay = (await findUser(limited.harness.store.db, 'fay'))!;
      const refused = (await listAudit(limited.harness.store.db, fay.id, { limit: 1000 })).filter((e) => e.outcome === 'rate_limited');
      expect(refused.length).toBeLessThanOrEqual(3);
      expect(refused.length).toBeGreaterThanOrEqual(1);
      expect(refused.at(-1)).toMatchObject({ method: 'ping', argsShape: { batch: 100 } });
    } finally {
      await limited.close();
    }
  });
});

describe('tools', () => {
  let alice: Client;
  beforeAll(async () => {
    alice = await connect(aliceToken);
  });
  afterAll(async () => {
    await alice?.close();
  });

  it('lists the fixed five, described for models, with input schemas', async () => {
    const { tools } = await alice.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([...TOOL_NAMES].sort());
    for (const t of tools) {
      expect(t.description!.length, t.name).toBeGreaterThan(60);
      expect(t.inputSchema.type).toBe('object');
    }
    const exec = tools.find((t) => t.name === 'execute_code')!;
    expect(exec.inputSchema.required).toEqual(['language', 'code']);
    expect((exec.inputSchema.properties as Record<string, { enum?: string[] }>).language!.enum).toEqual(['python', 'typescript', 'javascript', 'bash']);
    const search = tools.find((t) => t.name === 'search_tools')!;
    expect((search.inputSchema.properties as Record<string, { enum?: string[] }>).detail!.enum).toEqual(['names', 'descriptions', 'schemas']);
  });

  it('execute_code runs python with state kept between calls', async () => {
    expect(text(await call(alice, 'execute_code', { language: 'python', code: '1+1' }))).toMatch(/^\[result\] 2\n\[python · exit 0 · \d+ ms\]$/);
    await call(alice, 'execute_code', { language: 'python', code: 'x = 41' });
    expect(text(await call(alice, 'execute_code', { language: 'python', code: 'print("x is", x)\nx + 1' }))).toMatch(/x is 41\n\[result\] 42/);
  });

  it('execute_code runs typescript under Deno and bash', async () => {
    const ts = await call(alice, 'execute_code', { language: 'typescript', code: 'const n: number = 6 * 7;\nconsole.log(`n=${n}`);' });
    expect(ts.isError).toBeFalsy();
    expect(text(ts)).toMatch(/n=42/);
    const sh = await call(alice, 'execute_code', { language: 'bash', code: 'echo hello from $(whoami) >&2; exit 3' });
    expect(sh.isError).toBe(true);
    expect(text(sh)).toMatch(/\[stderr\]\nhello from/);
    expect(text(sh)).toMatch(/exit 3/);
  });

  it('execute_code reports errors and timeouts as tool errors the model can read', async () => {
    const err = await call(alice, 'execute_code', { language: 'python', code: '1/0' });
    expect(err.isError).toBe(true);
    expect(text(err)).toMatch(/\[error\] ZeroDivisionError: division by zero/);
    const slow = await call(alice, 'execute_code', { language: 'python', code: 'import time\ntime.sleep(30)', timeout_seconds: 1 });
    expect(slow.isError).toBe(true);
    expect(text(slow)).toMatch(/timed out/);
  });

  it('execute_code turns a permission beyond the ceiling into a readable error', async () => {
    const r = await call(alice, 'execute_code', { language: 'python', code: 'print(1)', permissions: { read: ['/etc'] } });
    expect(r.isError).toBe(true);
    expect(text(r)).toMatch(/Requires read access to "\/etc", run again with --allow-read/);
    const net = await call(alice, 'execute_code', { language: 'python', code: 'print(1)', permissions: { net: true } });
    expect(net.isError).toBe(true);
    expect(text(net)).toMatch(/net/);
  });

  it('execute_code streams output as progress when the client asks for it', async () => {
    const progress: string[] = [];
    const r = (await alice.callTool(
      { name: 'execute_code', arguments: { language: 'python', code: 'import time\nfor i in range(3):\n    print("tick", i, flush=True)\n    time.sleep(0.2)' } },
      undefined,
      { onprogress: (p) => progress.push(p.message ?? '') },
    )) as CallToolResult;
    expect(text(r)).toMatch(/tick 0\ntick 1\ntick 2/);
    expect(progress.join('')).toMatch(/stdout: tick 0/);
    expect(progress.length).toBeGreaterThanOrEqual(2);
  });

  it('execute_code returns changed files as resource links the client can read', async () => {
    const r = await call(alice, 'execute_code', {
      language: 'python',
      code: 'import os\nos.makedirs("out", exist_ok=True)\nopen("out/report.csv", "w").write("a,b\\n1,2\\n")\nopen("out/blob.bin", "wb").write(bytes(range(256)))',
    });
    expect(text(r)).toMatch(/\[files in \/workspace\] .*created out\/report\.csv \(8 B\)/);
    const links = r.content.filter((c) => c.type === 'resource_link') as { uri: string; mimeType?: string; size?: number }[];
    expect(links.map((l) => l.uri).sort()).toEqual(['file:///workspace/out/blob.bin', 'file:///workspace/out/report.csv']);
    expect(links.find((l) => l.uri.endsWith('.csv'))).toMatchObject({ mimeType: 'text/csv', size: 8 });
    const csv = await alice.readResource({ uri: 'file:///workspace/out/report.csv' });
    expect(csv.contents[0]).toMatchObject({ text: 'a,b\n1,2\n', mimeType: 'text/csv' });
    const bin = await alice.readResource({ uri: 'file:///workspace/out/blob.bin' });
    expect(Buffer.from((bin.contents[0] as { blob: string }).blob, 'base64')).toEqual(Buffer.from(Array.from({ length: 256 }, (_, i) => i)));
  });

  it('gives older clients (before 2025-06-18) no resource links, only text', async () => {
    const r = await rawRequest(gw.mcpUrl, {
      headers: { authorization: `Bearer ${aliceToken}`, 'mcp-protocol-version': '2025-03-26' },
      body: { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'write_file', arguments: { path: 'old-client.txt', content: 'x' } } },
    });
    const result = r.messages[0]!.result as CallToolResult;
    expect(result.content.map((c) => c.type)).toEqual(['text']);
  });

  it('write_file, read_file and list_files work on the workspace', async () => {
    const w = await call(alice, 'write_file', { path: 'notes/todo.md', content: '# todo\n- ünïcode ✓\n' });
    expect(text(w)).toMatch(/Wrote 23 bytes to \/workspace\/notes\/todo\.md/);
    expect(w.content.find((c) => c.type === 'resource_link')).toMatchObject({ uri: 'file:///workspace/notes/todo.md' });
    expect(text(await call(alice, 'read_file', { path: '/workspace/notes/todo.md' }))).toBe('# todo\n- ünïcode ✓\n');
    await call(alice, 'write_file', { path: 'notes/todo.md', content: '- more\n', append: true });
    expect(text(await call(alice, 'read_file', { path: 'notes/todo.md' }))).toBe('# todo\n- ünïcode ✓\n- more\n');
    expect(text(await call(alice, 'list_files', { path: 'notes' }))).toBe('/workspace/notes:\ntodo.md  30 B');
    expect(text(await call(alice, 'list_files', { recursive: true }))).toMatch(/notes\/\n[\s\S]*notes\/todo\.md {2}30 B/);
    // Code sees what write_file wrote.
    expect(text(await call(alice, 'execute_code', { language: 'bash', code: 'wc -l < notes/todo.md' }))).toMatch(/^3\n/);
  });

  it('read_file pages through large files in byte ranges without splitting characters', async () => {
    await call(alice, 'execute_code', { language: 'python', code: 'open("big.txt", "w").write("é" * 100000)' });
    const first = text(await call(alice, 'read_file', { path: 'big.txt' }));
    expect(first).toMatch(/\[\/workspace\/big\.txt: bytes 0-65536 of 200000\. Continue with offset=65536\.\]$/);
    const page = text(await call(alice, 'read_file', { path: 'big.txt', offset: 65535, length: 11 }));
    // 65535 is inside an "é": the page starts at the next character and ends on a whole one.
    expect(page).toMatch(/^é{5}\n\n\[\/workspace\/big\.txt: bytes 65536-65546 of 200000\. Continue with offset=65546\.\]$/);
    const last = text(await call(alice, 'read_file', { path: 'big.txt', offset: 199990 }));
    expect(last).toMatch(/^é{5}\n\n\[.*That is the end of the file\.\]$/);
  });

  it('read_file describes binary files instead of dumping them', async () => {
    const r = await call(alice, 'read_file', { path: 'out/blob.bin' });
    expect(r.isError).toBeFalsy();
    expect(text(r)).toMatch(/^\/workspace\/out\/blob\.bin is a binary file \(application\/octet-stream, 256 B\)/);
    expect(text(r)).toMatch(/execute_code/);
  });

  it('file tools reach /skills read-only and nothing else outside the workspace', async () => {
    expect(text(await call(alice, 'read_file', { path: '/skills/data-analysis/SKILL.md' }))).toMatch(/^---\nname: data-analysis/);
    expect(text(await call(alice, 'list_files', { path: '/skills' }))).toMatch(/calling-mcp-tools\//);
    const w = await call(alice, 'write_file', { path: '/skills/x/SKILL.md', content: 'x' });
    expect(w.isError).toBe(true);
    expect(text(w)).toMatch(/\/skills is read-only\. Save your own skills as \/workspace\/skills/);
    for (const path of ['/etc/passwd', '../../etc/passwd', '/workspace/../x', '/skills/../package.json']) {
      const r = await call(alice, 'read_file', { path });
      expect(r.isError, path).toBe(true);
      expect(text(r), path).toMatch(/outside|climbs out/);
    }
    const missing = await call(alice, 'read_file', { path: 'nope.txt' });
    expect(missing.isError).toBe(true);
    expect(text(missing)).toMatch(/no such file/);
  });

  it('file tools refuse to follow symlinks the sandbox planted', async () => {
    await call(alice, 'execute_code', { language: 'bash', code: 'ln -sf /etc/passwd link.txt; ln -sfn / rootlink' });
    for (const path of ['link.txt', 'rootlink/etc/passwd']) {
      const r = await call(alice, 'read_file', { path });
      expect(r.isError, path).toBe(true);
      expect(text(r), path).toMatch(/symbolic link/);
    }
  });

  it('exposes the workspace as a resource template', async () => {
    const { resourceTemplates } = await alice.listResourceTemplates();
    // The workspace, and the skills' files (skill://, the skills extension).
    expect(resourceTemplates).toEqual([expect.objectContaining({ uriTemplate: 'file:///workspace/{+path}', name: 'workspace-file' }), expect.objectContaining({ uriTemplate: expect.stringMatching(/^skill:\/\//) })]);
    const { resources } = await alice.listResources();
    expect(resources.map((r) => r.uri)).toEqual(expect.arrayContaining(['file:///workspace/notes/todo.md', 'file:///workspace/out/report.csv']));
    // Each has a title of its own, so clients that show titles list them apart.
    expect(resources.find((r) => r.uri === 'file:///workspace/notes/todo.md')?.title).toBe('/workspace/notes/todo.md');
    expect(new Set(resources.map((r) => r.title)).size).toBe(resources.length);
    await expect(alice.readResource({ uri: 'file:///workspace/nope.txt' })).rejects.toThrow(/no such file/);
    await expect(alice.readResource({ uri: 'file:///workspace/../../etc/passwd' })).rejects.toThrow();
  });

  it('search_tools says when no upstream servers are configured', async () => {
    const r = await call(alice, 'search_tools', { query: 'github issues' });
    expect(r.isError).toBeFalsy();
    expect(text(r)).toBe(NO_UPSTREAM_SERVERS);
  });

  it('instructions index built-in skills and the user own skills', async () => {
    expect(alice.getInstructions()).toMatch(/- data-analysis: .*\(\/skills\/data-analysis\/SKILL\.md\)/);
    await call(alice, 'write_file', {
      path: 'skills/weekly-report/SKILL.md',
      content: '---\nname: weekly-report\ndescription: Build the Monday sales report from sales.csv.\n---\n\n# Steps\n',
    });
    const again = await connect(aliceToken);
    expect(again.getInstructions()).toMatch(/- weekly-report: Build the Monday sales report from sales\.csv\. \(\/workspace\/skills\/weekly-report\/SKILL\.md\)/);
    expect(text(await call(again, 'read_file', { path: '/workspace/skills/weekly-report/SKILL.md' }))).toMatch(/# Steps/);
    await again.close();
  });

  it('audits every request with its argument shape, never the values', async () => {
    const db = gw.harness.store.db;
    const entries = await listAudit(db, (await findUser(db, 'alice'))!.id, { limit: 1000 });
    const calls = entries.filter((e) => e.method === 'tools/call');
    expect(calls.length).toBeGreaterThan(10);
    const zero = calls.find((e) => e.tool === 'execute_code' && e.outcome === 'error' && e.errorClass === 'code:ZeroDivisionError');
    expect(zero).toMatchObject({ tokenName: 'laptop', kind: 'mcp', argsShape: { language: 'string(6)', code: 'string(3)' } });
    expect(zero!.durationMs).toBeGreaterThan(0);
    expect(calls.find((e) => e.errorClass === 'timeout')).toBeDefined();
    expect(calls.find((e) => e.errorClass === 'PermissionError')).toBeDefined();
    expect(calls.find((e) => e.tool === 'read_file' && e.errorClass === 'ENOENT')).toBeDefined();
    expect(entries.find((e) => e.method === 'tools/list' && e.outcome === 'ok')).toBeDefined();
    expect(entries.find((e) => e.method === 'initialize')).toBeDefined();
    // A missing resource and a refused path are both -32602 (the SDK no longer sends -32002).
    expect(entries.filter((e) => e.method === 'resources/read' && e.outcome === 'error').map((e) => e.errorClass)).toEqual(['jsonrpc:-32602', 'jsonrpc:-32602']);
    const all = JSON.stringify(entries);
    expect(all).not.toMatch(/todo|ünïcode|ZeroDivision\(|time\.sleep|weekly-report/);
  });
});

describe('isolation across users', () => {
  let alice: Client;
  let bob: Client;
  const ALICE_SECRET = 'alice-secret-7f3a9c';
  const BOB_SECRET = 'bob-secret-c91e44';

  beforeAll(async () => {
    alice = await connect(aliceToken);
    bob = await connect(bobToken);
    await call(alice, 'write_file', { path: 'secret.txt', content: ALICE_SECRET });
    await call(bob, 'write_file', { path: 'secret.txt', content: BOB_SECRET });
    await call(bob, 'write_file', { path: 'skills/bob-only/SKILL.md', content: '---\nname: bob-only\ndescription: Bob private skill.\n---\n' });
    await call(bob, 'execute_code', { language: 'python', code: `secret = "${BOB_SECRET}"` });
  });
  afterAll(async () => {
    await alice?.close();
    await bob?.close();
  });

  it('the same path names each user own file, through every tool and resource', async () => {
    expect(text(await call(alice, 'read_file', { path: 'secret.txt' }))).toBe(ALICE_SECRET);
    expect(text(await call(bob, 'read_file', { path: 'secret.txt' }))).toBe(BOB_SECRET);
    expect((await alice.readResource({ uri: 'file:///workspace/secret.txt' })).contents[0]).toMatchObject({ text: ALICE_SECRET });
    expect((await bob.readResource({ uri: 'file:///workspace/secret.txt' })).contents[0]).toMatchObject({ text: BOB_SECRET });
    expect(text(await call(alice, 'execute_code', { language: 'bash', code: 'cat /workspace/secret.txt' }))).toMatch(new RegExp(`^${ALICE_SECRET}`));
    expect(text(await call(alice, 'list_files', { recursive: true }))).not.toMatch(/bob-only/);
  });

  it("A's code cannot see B's files, variables or sandbox", async () => {
    const r = await call(alice, 'execute_code', {
      language: 'bash',
      // The secret is split so that this script itself does not contain it.
      code: `a='${BOB_SECRET.slice(0, 6)}'; b='${BOB_SECRET.slice(6)}'; grep -rlF --exclude-dir=proc --exclude-dir=sys "$a$b" / 2>/dev/null | head -5; echo "grep done"`,
    });
    expect(text(r)).toMatch(/^grep done\n/);
    const py = await call(alice, 'execute_code', { language: 'python', code: "'secret' in globals()" });
    expect(text(py)).toMatch(/\[result\] False/);
    const bobsView = await call(bob, 'execute_code', { language: 'python', code: 'secret' });
    expect(text(bobsView)).toContain(BOB_SECRET);
  });

  it("A cannot climb into B's workspace through any path", async () => {
    const bobWs = (await findUser(gw.harness.store.db, 'bob'))!.workspaceId!;
    for (const path of [`../${bobWs}/secret.txt`, `/workspace/../${bobWs}/secret.txt`, `../../workspaces/${bobWs}/secret.txt`]) {
      const r = await call(alice, 'read_file', { path });
      expect(r.isError, path).toBe(true);
      expect(text(r)).not.toContain(BOB_SECRET);
      await expect(alice.readResource({ uri: `file:///workspace/${path}` })).rejects.toThrow();
    }
    const { resources } = await alice.listResources();
    expect(resources.some((r) => r.uri.includes('bob-only'))).toBe(false);
  });

  it("A's instructions list A's skills only", async () => {
    const [a, b] = [await connect(aliceToken), await connect(bobToken)];
    expect(b.getInstructions()).toMatch(/- bob-only: Bob private skill\. \(\/workspace\/skills\/bob-only\/SKILL\.md\)/);
    expect(a.getInstructions()).not.toMatch(/bob-only/);
    await a.close();
    await b.close();
  });

  it("A's requests are audited to A, B's to B, and neither sees the other's", async () => {
    const db = gw.harness.store.db;
    const a = await listAudit(db, (await findUser(db, 'alice'))!.id, { limit: 1000 });
    const b = await listAudit(db, (await findUser(db, 'bob'))!.id, { limit: 1000 });
    expect(a.length).toBeGreaterThan(0);
    expect(b.length).toBeGreaterThan(0);
    expect(a.every((e) => e.tokenName === 'laptop')).toBe(true);
    expect(b.every((e) => e.tokenName === 'desktop')).toBe(true);
    // The audit log lives on the host; no sandbox can reach the store.
    const r = await call(alice, 'execute_code', { language: 'bash', code: `ls ${gw.harness.dataDir} 2>&1; find / -name 'sandgate.db*' 2>/dev/null | head -3; echo end` });
    expect(text(r)).toMatch(/No such file or directory\nend/);
  });

  it('an MCP session id does not change whose state a request sees', async () => {
    const r = await rawRequest(gw.mcpUrl, {
      headers: { authorization: `Bearer ${aliceToken}`, 'mcp-protocol-version': LATEST_PROTOCOL_VERSION, 'mcp-session-id': 'bob-session' },
      body: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'read_file', arguments: { path: 'secret.txt' } } },
    });
    expect(JSON.stringify(r.messages[0])).toContain(ALICE_SECRET);
    expect(JSON.stringify(r.messages[0])).not.toContain(BOB_SECRET);
  });
});
