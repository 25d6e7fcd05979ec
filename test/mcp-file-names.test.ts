/**
 * File names that are not UTF-8, over the real /mcp endpoint (the SDK's client, real
 * tokens, the real sandbox): file names are bytes, and code may write any of them.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callTool, startGateway, toolText, type Gateway } from './support/mcp.js';

let gw: Gateway;
let client: Client;

beforeAll(async () => {
  gw = await startGateway();
  client = new Client({ name: 'sandgate-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gw.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${await gw.tokenFor('nora', 'laptop')}` } } }));
});
afterAll(async () => {
  await client?.close();
  await gw?.close();
});

describe('a file name that is not UTF-8', () => {
  it('keeps the run’s output and result, and links the file by its bytes so it can be read', async () => {
    const code = ["open(b'/workspace/bad\\xff.txt', 'wb').write(b'made by code')", "open('/workspace/fine.txt', 'w').write('ok')", "print('the output survives')", '6 * 7'].join('\n');
    const r = await callTool<CallToolResult>(client, 'execute_code', { language: 'python', code });
    const text = toolText(r);
    expect(r.isError, text).toBeFalsy();
    expect(text).toContain('the output survives');
    expect(text).toContain('[result] 42');
    expect(text).not.toMatch(/internal error/i);
    const links = r.content.filter((c) => c.type === 'resource_link') as { uri: string; name: string }[];
    expect(links.map((l) => l.uri).sort()).toEqual(['file:///workspace/bad%FF.txt', 'file:///workspace/fine.txt']);
    // The link opens the very file.
    const read = await client.readResource({ uri: 'file:///workspace/bad%FF.txt' });
    expect(read.contents[0]).toMatchObject({ uri: 'file:///workspace/bad%FF.txt', text: 'made by code' });
    // Listing the workspace still works with such a name in it, and lists that file by its bytes too.
    const listed = await client.listResources();
    expect(listed.resources.map((x) => x.uri)).toContain('file:///workspace/fine.txt');
    expect(listed.resources.map((x) => x.uri)).toContain('file:///workspace/bad%FF.txt');
  });

  it('names a file in a folder that is not UTF-8, and a name of several undecodable bytes', async () => {
    const code = ["import os", "os.makedirs(b'/workspace/d\\xe9j\\xe0', exist_ok=True)", "open(b'/workspace/d\\xe9j\\xe0/caf\\xc3\\xa9 \\x80\\xfe.csv', 'wb').write(b'a,b\\n1,2\\n')", "print('done')"].join('\n');
    const r = await callTool<CallToolResult>(client, 'execute_code', { language: 'python', code });
    expect(r.isError, toolText(r)).toBeFalsy();
    expect(toolText(r)).toContain('done');
    const link = r.content.find((c) => c.type === 'resource_link') as { uri: string } | undefined;
    // A valid UTF-8 character (é as C3 A9) stays one; each stray byte is itself.
    expect(link?.uri).toBe('file:///workspace/d%E9j%E0/caf%C3%A9%20%80%FE.csv');
    const read = await client.readResource({ uri: link!.uri });
    expect(read.contents[0]).toMatchObject({ text: 'a,b\n1,2\n' });
  });
});
