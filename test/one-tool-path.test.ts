/**
 * One tool path: the same tool calls made over /mcp with an API token and in process by
 * a conversation of the built-in agent (src/mcp/serve.ts `connectInProcess`) give the
 * same results and the same audit rows (but for how the caller came), through the same
 * PII boundary, each in its own scope; cancelling an in-process call stops the run in
 * the sandbox. Real sandbox, real store, the PII boundary on as in production.
 */
import { Client as HttpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { listAudit, type AuditRecord } from '../src/audit/audit.js';
import type { Caller } from '../src/auth/caller.js';
import { connectInProcess, type InProcessConnection } from '../src/mcp/serve.js';
import { findUser } from '../src/accounts/accounts.js';
import { startGateway, toolText, type Gateway } from './support/mcp.js';

let gw: Gateway;
let http: HttpClient;
let agent: InProcessConnection;

/** The calls both paths make, in order; each is named for the comparison. */
const CALLS: [string, Record<string, unknown>][] = [
  ['write_file', { path: 'notes/contact.txt', content: 'Write to ann.lee@example.com about the 42 invoices.\n' }],
  ['read_file', { path: 'notes/contact.txt' }],
  ['list_files', { path: 'notes' }],
  ['execute_code', { language: 'python', code: 'text = open("notes/contact.txt").read()\nprint(text.split()[2])\nlen(text)' }],
  ['execute_code', { language: 'bash', code: 'cat notes/contact.txt | wc -w' }],
  ['read_file', { path: 'notes/missing.txt' }],
  ['execute_code', { language: 'python', code: 'open("/etc/shadow").read()', permissions: { read: ['/workspace'] } }],
  ['search_tools', { query: 'github issues' }],
];

const shape = (r: AuditRecord) => ({ method: r.method, tool: r.tool, argsShape: r.argsShape, outcome: r.outcome, errorClass: r.errorClass, kind: r.kind });
/** Result text with the run times taken out (`[python · exit 0 · 12 ms]`). */
const comparable = (text: string) => text.replace(/ · \d+ ms\]/g, ' · N ms]');

beforeAll(async () => {
  gw = await startGateway({ pii: true });
  http = new HttpClient({ name: 'claude-code', version: '1' });
  await http.connect(new StreamableHTTPClientTransport(new URL(gw.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${await gw.tokenFor('ada', 'laptop')}` } } }));
  const ada = (await findUser(gw.harness.store.db, 'ada'))!;
  const caller: Caller = { user: ada, via: { kind: 'agent', conversationId: 'conv-1' } };
  agent = await connectInProcess(gw.tools, caller);
});

afterAll(async () => {
  await http?.close();
  await agent?.close();
  await gw?.close();
});

describe('one tool path', () => {
  it('over /mcp and in process: the same tools, results and audit rows', async () => {
    const httpTools = (await http.listTools()).tools.map((t) => [t.name, t.inputSchema]);
    const agentTools = (await agent.client.listTools()).tools.map((t) => [t.name, t.inputSchema]);
    expect(agentTools).toEqual(httpTools);
    expect(agent.instructions).toContain('execute_code runs python');

    const ada = (await findUser(gw.harness.store.db, 'ada'))!;
    const results: Record<'http' | 'agent', string[]> = { http: [], agent: [] };
    for (const [name, args] of CALLS) {
      // The same workspace for both: each path's write happens before its reads.
      results.http.push(comparable(toolText(await http.callTool({ name, arguments: args }))));
      results.agent.push(comparable(toolText(await agent.client.callTool({ name, arguments: args }))));
    }
    expect(results.agent).toEqual(results.http);
    // The PII boundary is on for both: the model side of either never sees the address.
    expect(results.http[1]).toContain('Write to [EMAIL_1] about the 42 invoices.');
    expect(results.http[3]).toContain('[EMAIL_1]');
    expect(results.http.join('\n')).not.toContain('ann.lee@example.com');
    expect(results.http[5]).toMatch(/no such file or directory/);

    // Each row is written once its response is on the way: wait for the last ones.
    await vi.waitUntil(async () => (await listAudit(gw.harness.store.db, ada.id, { limit: 100 })).filter((r) => r.method === 'tools/call').length >= 2 * CALLS.length, {
      timeout: 10_000,
      interval: 50,
    });
    const rows = (await listAudit(gw.harness.store.db, ada.id, { limit: 100 }))
      .filter((r) => r.method === 'tools/call')
      .reverse();
    const byToken = rows.filter((r) => r.via === 'token');
    const byAgent = rows.filter((r) => r.via === 'agent');
    expect(byToken.map(shape)).toEqual(byAgent.map(shape));
    expect(byToken.map((r) => r.tool)).toEqual(CALLS.map(([name]) => name));
    expect(byToken.every((r) => r.tokenName === 'laptop' && r.conversationId === null)).toBe(true);
    expect(byAgent.every((r) => r.conversationId === 'conv-1' && r.tokenId === null)).toBe(true);
    expect(byToken.map((r) => r.errorClass)).toContain('ENOENT');
  });

  it('each caller has its own PII scope: a conversation does not resolve the token client\'s tokens, and the other way round', async () => {
    const other = await connectInProcess(gw.tools, { user: (await findUser(gw.harness.store.db, 'ada'))!, via: { kind: 'agent', conversationId: 'conv-2' } });
    try {
      await other.client.callTool({ name: 'write_file', arguments: { path: 'z.txt', content: 'zed@example.com' } });
      // A fresh scope numbers its values in the order it meets them.
      expect(toolText(await other.client.callTool({ name: 'read_file', arguments: { path: 'z.txt' } }))).toBe('[EMAIL_1]');
      expect(toolText(await other.client.callTool({ name: 'read_file', arguments: { path: 'notes/contact.txt' } }))).toContain('Write to [EMAIL_2]');
      // The conversation's [EMAIL_1] is zed; the token client's is ann: neither reaches the other.
      expect(toolText(await other.client.callTool({ name: 'execute_code', arguments: { language: 'python', code: 'print("[EMAIL_1]" == "zed@example.com")' } }))).toContain('True');
      const echoed = toolText(await http.callTool({ name: 'execute_code', arguments: { language: 'python', code: 'print("[EMAIL_2]")' } }));
      expect(echoed).toContain('Note: [EMAIL_2] is not a token this conversation knows');
    } finally {
      await other.close();
    }
  });

  it('cancelling an in-process call stops the run in the sandbox', async () => {
    const abort = new AbortController();
    const call = agent.client.callTool({ name: 'execute_code', arguments: { language: 'bash', code: 'sleep 30 & wait; echo finished' } }, { signal: abort.signal });
    await new Promise((r) => setTimeout(r, 1000));
    abort.abort();
    await expect(call).rejects.toThrow();
    await new Promise((r) => setTimeout(r, 500));
    const ps = toolText(await agent.client.callTool({ name: 'execute_code', arguments: { language: 'bash', code: 'ps -eo args --no-headers' } }));
    expect(ps).not.toContain('sleep 30');
  });
});
