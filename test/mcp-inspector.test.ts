/**
 * The MCP Inspector's CLI (@modelcontextprotocol/inspector --cli, the client the MCP
 * project ships for this) lists and calls sandgate's tools over Streamable HTTP.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOOL_NAMES } from '../src/mcp/server.js';
import { startGateway, type Gateway } from './support/mcp.js';

const run = promisify(execFile);
const INSPECTOR = fileURLToPath(new URL('../node_modules/@modelcontextprotocol/inspector/cli/build/cli.js', import.meta.url));
const BEARER = fileURLToPath(new URL('./mcp-inspector-bearer.js', import.meta.url));

let gw: Gateway;
let token: string;

async function inspector(args: string[], opts: { token?: string } = {}): Promise<{ stdout: string; stderr: string }> {
  return run(process.execPath, [INSPECTOR, '--cli', gw.mcpUrl, '--transport', 'http', ...args], {
    env: { ...process.env, NODE_OPTIONS: `--import ${BEARER}`, SANDGATE_TOKEN: opts.token ?? token, SANDGATE_MCP_URL: gw.mcpUrl },
    timeout: 60_000,
  });
}

beforeAll(async () => {
  gw = await startGateway();
  token = await gw.tokenFor('inspector-user', 'inspector');
});
afterAll(async () => {
  await gw?.close();
});

describe('MCP Inspector CLI', () => {
  it('lists the tools', async () => {
    const { stdout } = await inspector(['--method', 'tools/list']);
    const { tools } = JSON.parse(stdout) as { tools: { name: string }[] };
    expect(tools.map((t) => t.name).sort()).toEqual([...TOOL_NAMES].sort());
  });

  it('calls execute_code and the file tools', async () => {
    const exec = JSON.parse(
      (await inspector(['--method', 'tools/call', '--tool-name', 'execute_code', '--tool-arg', 'language=python', '--tool-arg', 'code=open("hello.txt","w").write("hi from inspector")\n6*7'])).stdout,
    ) as { content: { type: string; text?: string; uri?: string }[] };
    expect(exec.content[0]!.text).toMatch(/\[result\] 42/);
    expect(exec.content.find((c) => c.type === 'resource_link')?.uri).toBe('file:///workspace/hello.txt');
    const read = JSON.parse((await inspector(['--method', 'tools/call', '--tool-name', 'read_file', '--tool-arg', 'path=hello.txt'])).stdout) as { content: { text: string }[] };
    expect(read.content[0]!.text).toBe('hi from inspector');
    const list = JSON.parse((await inspector(['--method', 'resources/templates/list'])).stdout) as { resourceTemplates: { uriTemplate: string }[] };
    expect(list.resourceTemplates[0]!.uriTemplate).toBe('file:///workspace/{+path}');
  });

  it('fails with the 401 message when the token is wrong', async () => {
    const err = (await inspector(['--method', 'tools/list'], { token: 'sgp_wrong' }).catch((e: { stderr: string; code: number }) => e)) as { stderr: string; code: number };
    expect(err.code).not.toBe(0);
    expect(err.stderr).toMatch(/401|not a well-formed sandgate token/);
  });
});
