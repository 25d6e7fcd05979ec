/**
 * /mcp on protocol revision 2026-07-28, end to end: the v2 SDK client
 * (@modelcontextprotocol/client) over real HTTP against the gateway as main.ts builds it
 * (createGateway: real store, real PII vault, real sandbox manager on Docker + runsc).
 * The client negotiates with `server/discover` and then sends every request stateless,
 * with its `_meta` envelope; the same gateway still serves 2025 clients (mcp-http.test.ts).
 */
import { Client, CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY, StreamableHTTPClientTransport, type CallToolResult } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { listAudit } from '../src/audit/audit.js';
import { TOOL_NAMES } from '../src/mcp/server.js';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import { findUser, ensureUser } from '../src/accounts/accounts.js';
import { createToken, findTokenBySecret, revokeToken } from '../src/tokens/tokens.js';
import { generateToken } from '../src/tokens/format.js';
import { callTool, rawRequest, startGateway, toolText, type Gateway as ServedGateway } from './support/mcp.js';

const MODERN = '2026-07-28';
const EMAIL = 'maria.gonzalez@example.org';

let served: ServedGateway;
let gateway: ServedGateway['gateway'];
let mcpUrl: string;
let alice: SandboxOwner;
let aliceToken: string;

async function connect(token: string, url = mcpUrl): Promise<Client> {
  const client = new Client({ name: 'sandgate-v2-test', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return client;
}

const text = toolText;
const call = callTool<CallToolResult>;

/** A 2026-07-28 request as the v2 client frames it: version and method headers plus the `_meta` envelope. */
function modernRequest(method: string, headers: Record<string, string> = {}, params: Record<string, unknown> = {}) {
  return {
    headers: { 'mcp-protocol-version': MODERN, 'mcp-method': method, ...headers },
    body: {
      jsonrpc: '2.0',
      id: 1,
      method,
      params: { ...params, _meta: { [PROTOCOL_VERSION_META_KEY]: MODERN, [CLIENT_INFO_META_KEY]: { name: 'raw', version: '1' }, [CLIENT_CAPABILITIES_META_KEY]: {} } },
    },
  };
}

beforeAll(async () => {
  served = await startGateway({ pii: true });
  ({ gateway, mcpUrl } = served);
  expect(gateway.config.piiTokenize).toBe(true);
  expect(served.preflight?.ok, JSON.stringify(served.preflight)).toBe(true);
  const a = await ensureUser(gateway.store.db, 'alice');
  alice = { userId: a.id, name: a.name };
  aliceToken = (await createToken(gateway.store.db, { userId: a.id, name: 'v2-laptop' })).token;
});

afterAll(async () => {
  await served?.close();
});

describe('a 2026-07-28 client', () => {
  let client: Client;

  beforeAll(async () => {
    client = await connect(aliceToken);
  });
  afterAll(async () => {
    await client?.close();
  });

  it('negotiates 2026-07-28 with server/discover, and gets the instructions there', async () => {
    expect(client.getProtocolEra()).toBe('modern');
    expect(client.getNegotiatedProtocolVersion()).toBe(MODERN);
    expect(client.getServerVersion()).toMatchObject({ name: 'sandgate' });
    const discovered = await client.discover();
    expect(discovered.supportedVersions).toContain(MODERN);
    expect(discovered.capabilities).toMatchObject({ tools: {}, resources: {} });
    expect(discovered.instructions).toMatch(/- data-analysis: .*\(\/skills\/data-analysis\/SKILL\.md\)/);
    expect(client.getInstructions()).toMatch(/execute_code/);
  });

  it('lists the same five tools and the workspace resource template', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([...TOOL_NAMES].sort());
    const exec = tools.find((t) => t.name === 'execute_code')!;
    expect(exec.inputSchema).toMatchObject({ type: 'object', required: ['language', 'code'] });
    expect(Object.keys(exec.inputSchema.properties ?? {})).toEqual(['language', 'code', 'timeout_seconds', 'permissions', 'reset', 'background']);
    const { resourceTemplates } = await client.listResourceTemplates();
    // The workspace, and the skills' files (skill://, the skills extension).
    expect(resourceTemplates).toEqual([expect.objectContaining({ uriTemplate: 'file:///workspace/{+path}', name: 'workspace-file' }), expect.objectContaining({ uriTemplate: expect.stringMatching(/^skill:\/\//) })]);
  });

  it('runs code in the real sandbox, with progress and a resource link to the file it wrote', async () => {
    const progress: string[] = [];
    const r = (await client.callTool(
      { name: 'execute_code', arguments: { language: 'python', code: 'import sys\nprint("step 1"); sys.stdout.flush()\nopen("v2.txt", "w").write("from v2")\n6 * 7' } },
      { onprogress: (p) => void (p.message && progress.push(p.message)) },
    )) as CallToolResult;
    expect(r.isError).toBeFalsy();
    expect(text(r)).toMatch(/^step 1\n\[result\] 42\n/);
    expect(r._meta?.['org.sandgate/errorClass']).toBeUndefined();
    expect(progress.join('\n')).toMatch(/stdout: step 1/);
    const link = r.content.find((c) => c.type === 'resource_link');
    expect(link).toMatchObject({ uri: 'file:///workspace/v2.txt', mimeType: 'text/plain' });
    const read = await client.readResource({ uri: 'file:///workspace/v2.txt' });
    expect(read.contents[0]).toMatchObject({ text: 'from v2' });
    await expect(client.readResource({ uri: 'file:///workspace/nope.txt' })).rejects.toThrow(/no such file/);
  });

  it('tokenizes personal data in results, and resolves the tokens in code it sends back', async () => {
    await (await gateway.manager.openWorkspace(alice)).write('contact.txt', `Write to ${EMAIL} today.\n`);
    const shown = await call(client, 'execute_code', { language: 'bash', code: 'cat contact.txt' });
    expect(JSON.stringify(shown)).not.toContain(EMAIL);
    const token = /\[EMAIL_\d+\]/.exec(text(shown))?.[0];
    expect(token, text(shown)).toBeDefined();
    const read = await call(client, 'read_file', { path: 'contact.txt' });
    expect(text(read)).toBe(`Write to ${token} today.\n`);
    // The model writes the token; the sandbox works with the real value.
    await call(client, 'execute_code', { language: 'python', code: `open("reply.txt", "w").write("${token}")` });
    const { data } = await (await gateway.manager.openWorkspace(alice)).read('reply.txt');
    expect(data.toString()).toBe(EMAIL);
  });

  it('tool failures are results the model can read', async () => {
    const r = await call(client, 'execute_code', { language: 'python', code: '1/0' });
    expect(r.isError).toBe(true);
    expect(text(r)).toMatch(/ZeroDivisionError/);
  });

  it('audits each request to the token, with argument shapes only', async () => {
    const db = gateway.store.db;
    const id = (await findUser(db, 'alice'))!.id;
    // Each row is written once its response is on the way: wait for the last test's.
    await vi.waitUntil(async () => (await listAudit(db, id, { limit: 1000 })).some((e) => e.errorClass === 'code:ZeroDivisionError'), { timeout: 5000, interval: 50 });
    const entries = await listAudit(db, id, { limit: 1000 });
    expect(entries.every((e) => e.tokenName === 'v2-laptop' && e.kind === 'mcp')).toBe(true);
    expect(entries.find((e) => e.method === 'server/discover' && e.outcome === 'ok')).toBeDefined();
    expect(entries.find((e) => e.method === 'tools/list' && e.outcome === 'ok')).toBeDefined();
    expect(entries.find((e) => e.tool === 'execute_code' && e.errorClass === 'code:ZeroDivisionError')).toMatchObject({ argsShape: { language: 'string(6)', code: 'string(3)' } });
    expect(entries.find((e) => e.method === 'resources/read' && e.errorClass === 'jsonrpc:-32602')).toBeDefined();
    expect(JSON.stringify(entries)).not.toMatch(/maria|from v2|step 1/);
  });
});

describe.each(['2025-11-25', '2025-06-18', '2025-03-26'])('the same client held to %s (stateless 2025 fallback)', (version) => {
  let client: Client;

  beforeAll(async () => {
    client = new Client({ name: 'sandgate-v2-test', version: '1.0.0' }, { supportedProtocolVersions: [version] });
    await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${aliceToken}` } } }));
  });
  afterAll(async () => {
    await client?.close();
  });

  it('initializes at that version and gets the instructions', () => {
    expect(client.getProtocolEra()).toBe('legacy');
    expect(client.getNegotiatedProtocolVersion()).toBe(version);
    expect(client.getInstructions()).toMatch(/- data-analysis: /);
  });

  it('lists the tools and runs code, with resource links from 2025-06-18 on', async () => {
    expect((await client.listTools()).tools.map((t) => t.name).sort()).toEqual([...TOOL_NAMES].sort());
    const r = await call(client, 'execute_code', { language: 'python', code: `open("v${version}.txt", "w").write("x")\n1 + 1` });
    expect(text(r)).toMatch(/^\[result\] 2\n/);
    const links = r.content.filter((c) => c.type === 'resource_link');
    expect(links.length).toBe(version >= '2025-06-18' ? 1 : 0);
  });
});

describe('2026-07-28 requests pass the same gates', () => {
  it('refuses a missing or unknown token with 401 and a Bearer challenge', async () => {
    const r = await rawRequest(mcpUrl, modernRequest('tools/list'));
    expect(r.status).toBe(401);
    expect(r.headers['www-authenticate']).toMatch(/^Bearer realm="sandgate", resource_metadata="http:\/\/[^"]+\/\.well-known\/oauth-protected-resource\/mcp", scope="mcp"$/);
    await expect(connect(generateToken())).rejects.toThrow(/401|not known to this gateway/);
  });

  it('a revoked token stops working on the next request', async () => {
    const token = (await createToken(gateway.store.db, { userId: alice.userId, name: 'v2-phone' })).token;
    const client = await connect(token);
    expect((await client.listTools()).tools).toHaveLength(TOOL_NAMES.length);
    await revokeToken(gateway.store.db, (await findTokenBySecret(gateway.store.db, token))!.id);
    // Past the client's cache (tools/list may be kept five minutes): the server's answer.
    await expect(client.listTools(undefined, { cacheMode: 'bypass' })).rejects.toThrow(/401|revoked/);
    await client.close();
  });

  it('refuses a foreign Host or Origin; serves the same request without them', async () => {
    const ok = await rawRequest(mcpUrl, modernRequest('tools/list', { authorization: `Bearer ${aliceToken}` }));
    expect(ok.status, ok.text).toBe(200);
    expect((ok.messages[0]!.result as { tools: unknown[] }).tools).toHaveLength(TOOL_NAMES.length);
    const bads: Record<string, string>[] = [{ host: 'evil.example' }, { origin: 'https://evil.example' }];
    for (const bad of bads) {
      const r = await rawRequest(mcpUrl, modernRequest('tools/list', { authorization: `Bearer ${aliceToken}`, ...bad }));
      expect(r.status, JSON.stringify(bad)).toBe(403);
    }
  });

  it('answers 429 with Retry-After once the token has used its burst', async () => {
    const limited = await startGateway({ noStart: true, env: { SANDGATE_RATE_LIMIT_PER_MIN: '6', SANDGATE_RATE_LIMIT_BURST: '3' } });
    try {
      const token = await limited.tokenFor('erin', 'v2');
      const client = await connect(token, limited.mcpUrl); // server/discover: 1 of 3
      await client.listTools(undefined, { cacheMode: 'bypass' });
      await client.listResourceTemplates(undefined, { cacheMode: 'bypass' });
      await expect(client.listTools(undefined, { cacheMode: 'bypass' })).rejects.toThrow(/429|Rate limit/);
      const r = await rawRequest(limited.mcpUrl, modernRequest('tools/list', { authorization: `Bearer ${token}` }));
      expect(r.status).toBe(429);
      expect(Number(r.headers['retry-after'])).toBeGreaterThan(0);
      await client.close();
    } finally {
      await limited.close();
    }
  });
});

describe('skills, as prompts and through the skills extension', () => {
  it('offers every skill as a prompt, built-in and the user\'s own (a clash gets my-), whose text is the SKILL.md with the task after it', async () => {
    const client = await connect(aliceToken);
    await call(client, 'write_file', { path: 'skills/data-analysis/SKILL.md', content: '---\nname: data-analysis\ndescription: My own way with tables\n---\nAlways sort by date first.\n' });
    await call(client, 'write_file', { path: 'skills/report/SKILL.md', content: '---\nname: report\ndescription: Weekly report for maria.gonzalez@example.org\n---\nWrite the weekly report.\n' });
    const { prompts } = await client.listPrompts();
    const names = prompts.map((p) => p.name);
    expect(names).toEqual(expect.arrayContaining(['data-analysis', 'calling-mcp-tools', 'my-data-analysis', 'report']));
    // The description passes the model boundary like any text.
    expect(prompts.find((p) => p.name === 'report')!.description).not.toContain(EMAIL);
    const builtin = await client.getPrompt({ name: 'data-analysis', arguments: { task: 'sum the sales column' } });
    const text = (builtin.messages[0]!.content as { text: string }).text;
    expect(text).toContain('Use the "data-analysis" skill');
    expect(text).toContain('# Data analysis in the sandbox');
    expect(text).toContain('The task: sum the sales column');
    const own = await client.getPrompt({ name: 'my-data-analysis' });
    expect((own.messages[0]!.content as { text: string }).text).toContain('Always sort by date first.');
    await expect(client.getPrompt({ name: 'nope' })).rejects.toThrow(/no skill "nope"/);
    await client.close();
  });

  it('serves skills/list and skills/get, and each skill file as a skill:// resource, to a client that negotiates the extension', async () => {
    const { SkillsClient } = await import('@modelcontextprotocol/client/ext/skills');
    const client = new Client({ name: 'skills-client', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' }, capabilities: { extensions: { 'io.modelcontextprotocol/skills': {} } } as never });
    await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${aliceToken}` } } }));
    const skills = new SkillsClient(client);
    expect(skills.supported).toBe(true);
    const listing = await skills.list();
    const uris = listing.skills.map((s) => s.uri);
    expect(uris).toEqual(expect.arrayContaining(['skill://builtin/data-analysis/SKILL.md', 'skill://user/report/SKILL.md']));
    expect(listing.cacheScope).toBe('private');
    const { skill } = await skills.get('skill://builtin/data-analysis/SKILL.md');
    const file = await skills.read(skill);
    expect(file.text).toContain('# Data analysis in the sandbox');
    const mine = await client.readResource({ uri: 'skill://user/report/SKILL.md' });
    expect((mine.contents[0] as { text: string }).text).toContain('Write the weekly report.');
    expect((mine.contents[0] as { text: string }).text).not.toContain(EMAIL);
    await expect(client.readResource({ uri: 'skill://user/report/../../secret' })).rejects.toThrow();
    await client.close();
  });
});

describe('caching hints on 2026-07-28 results', () => {
  it('marks the lists every user shares public, and each user\'s own (files, skills, instructions) private', async () => {
    const hint = async (method: string) => {
      const r = await rawRequest(mcpUrl, modernRequest(method, { authorization: `Bearer ${aliceToken}` }));
      expect(r.status, r.text).toBe(200);
      const result = r.messages[0]!.result as { ttlMs?: number; cacheScope?: string };
      return { ttlMs: result.ttlMs, cacheScope: result.cacheScope };
    };
    expect(await hint('tools/list')).toEqual({ ttlMs: 300_000, cacheScope: 'public' });
    expect(await hint('resources/templates/list')).toEqual({ ttlMs: 3_600_000, cacheScope: 'public' });
    expect(await hint('resources/list')).toEqual({ ttlMs: 10_000, cacheScope: 'private' });
    expect(await hint('prompts/list')).toEqual({ ttlMs: 60_000, cacheScope: 'private' });
    expect(await hint('server/discover')).toMatchObject({ cacheScope: 'private' });
  });
});
