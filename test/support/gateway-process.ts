/**
 * A real gateway process (`src/main.ts`) for tests and benchmarks that stop, kill or run
 * several of them: its output collected, its exit awaited, its URL once it says it runs;
 * and an `execute_code` call as an MCP 2026-07-28 client sends it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { REPO_ROOT } from '../../src/paths.js';
import { rawRequest } from './mcp.js';
import { until } from './until.js';

export interface GatewayProcess {
  child: ChildProcess;
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
  /** Everything it printed so far, standard output and error together. */
  output(): string;
  /** Its URL, once it printed that it runs (within `ms`). */
  ready(ms?: number): Promise<string>;
}

const RUNNING = /sandgate is running at (http:\/\/\S+)/;

/** Starts `src/main.ts` with only PATH and `env` in its environment. */
export function startGatewayProcess(env: Record<string, string>): GatewayProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { cwd: REPO_ROOT, env: { PATH: process.env.PATH!, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  return {
    child,
    exited,
    output: () => out,
    ready: async (ms = 150_000) => {
      await until(() => RUNNING.test(out), ms).catch((e: Error) => {
        throw new Error(`${e.message}: the gateway did not say it runs; it printed:\n${out.slice(-3000)}`);
      });
      return RUNNING.exec(out)![1]!;
    },
  };
}

const MODERN = '2026-07-28';

/** `execute_code` of `code` (Python) over MCP 2026-07-28 with `token`: the result's text, or the error's. */
export async function executeOverMcp(url: string, token: string, code: string): Promise<{ ok: boolean; text: string }> {
  const r = await rawRequest(`${url}/mcp`, {
    headers: { authorization: `Bearer ${token}`, 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'execute_code' },
    body: {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: {
        name: 'execute_code',
        arguments: { language: 'python', code },
        _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientInfo': { name: 'test', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': {} },
      },
    },
  });
  const msg = r.messages[0] as { result?: { content: { text: string }[]; isError?: boolean }; error?: { message: string } } | undefined;
  if (!msg) return { ok: false, text: `HTTP ${r.status}: ${r.text.slice(0, 300)}` };
  if (msg.error) return { ok: false, text: msg.error.message };
  return { ok: !msg.result!.isError, text: msg.result!.content.map((c) => c.text).join('\n') };
}
