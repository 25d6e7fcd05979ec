/**
 * The official MCP conformance suite (@modelcontextprotocol/conformance) against /mcp:
 * its server scenarios that apply to a gateway like this one. The others call test tools
 * and prompts of the suite's own reference server (`test_simple_text`,
 * `test_simple_prompt`, …), ask for logging or completions of prompts this server does
 * not offer, or need sampling and elicitation from the client; they are listed in
 * NOT_APPLICABLE with why.
 *
 * The suite's server mode has no way to send credentials, so it reaches /mcp through a
 * relay that adds one user's personal token to each request and changes nothing else.
 * It needs Node 22's fs.globSync; on Node 20 test/support/conformance/ gives it glob's.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type Gateway } from './support/mcp.js';

const APPLICABLE = ['server-initialize', 'ping', 'tools-list', 'resources-list', 'prompts-list', 'dns-rebinding-protection'];
/** Scenarios of the suite that do not apply here, and why (read by nothing: the list is for the reader). */
export const NOT_APPLICABLE: Record<string, string> = {
  'logging-set-level': 'the gateway declares no logging capability',
  'completion-complete': 'asks for completions of the reference server\'s own prompt',
  'tools-call-*': 'call the reference server\'s test tools',
  'prompts-get-*': 'get the reference server\'s test prompts',
  'resources-read-*, resources-templates-read, resources-subscribe, resources-unsubscribe': 'read the reference server\'s test resources; this server has no subscriptions',
  'elicitation-*, json-schema-2020-12': 'need the reference server\'s test tools',
  'server-sse-*': 'stateful SSE streams; this server is stateless (every request a POST)',
};

let gw: Gateway;
let relay: http.Server;
let url: string;
let out: string;

beforeAll(async () => {
  gw = await startGateway();
  const token = await gw.tokenFor('conformance', 'suite');
  const target = new URL(gw.mcpUrl);
  relay = http.createServer((req, res) => {
    const up = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: { ...req.headers, authorization: `Bearer ${token}` } }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(relay.address() as AddressInfo).port}/mcp`;
  out = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-conformance-'));
});

afterAll(async () => {
  await new Promise((r) => relay?.close(r));
  await gw?.close();
  if (out) fs.rmSync(out, { recursive: true, force: true });
});

const suite = path.join(process.cwd(), 'node_modules/@modelcontextprotocol/conformance/dist/index.js');
const register = path.join(process.cwd(), 'test/support/conformance/register.mjs');

describe('the MCP conformance suite', () => {
  it.each(APPLICABLE)('%s passes', async (scenario) => {
    const r = await new Promise<{ code: number; stdout: string }>((resolve) =>
      execFile(process.execPath, ['--import', register, suite, 'server', '--url', url, '--scenario', scenario, '-o', out], { encoding: 'utf8', timeout: 90_000 }, (e, stdout, stderr) =>
        resolve({ code: e ? Number((e as { code?: number }).code ?? 1) : 0, stdout: stdout + stderr }),
      ),
    );
    expect(r.stdout, r.stdout).toMatch(/Passed: (\d+)\/\1, 0 failed/);
    expect(r.code, r.stdout).toBe(0);
  });
});
