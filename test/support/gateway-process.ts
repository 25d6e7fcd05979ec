/**
 * A real gateway process (`src/main.ts`) for tests and benchmarks that stop, kill or run
 * several of them: its output collected, its exit awaited, its URL once it says it runs;
 * an `execute_code` call as an MCP 2026-07-28 client sends it; users with tokens in the
 * database they share, and the clean-up of what killed gateways leave.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { ensureUser, type User } from '../../src/accounts/accounts.js';
import { configFor } from '../../src/config.js';
import { MIGRATIONS } from '../../src/migrations.js';
import { LABEL_GATEWAY } from '../../src/sandboxes/docker-driver.js';
import { thaw } from '../../src/sandboxes/freezer.js';
import { dockerClient, gatewayIdFor } from '../../src/sandboxes/index.js';
import { openStore } from '../../src/store/store.js';
import { createToken } from '../../src/tokens/tokens.js';
import { REPO_ROOT } from '../../src/paths.js';
import { rawRequest, type RawResponse } from './raw-request.js';
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

/**
 * Starts `src/main.ts` with only PATH and `env` in its environment. `nodeArgs` go to node
 * before the script (e.g. `--inspect=127.0.0.1:9229` for a bench that looks inside).
 */
export function startGatewayProcess(env: Record<string, string>, nodeArgs: string[] = []): GatewayProcess {
  const child = spawn(process.execPath, [...nodeArgs, '--import', 'tsx', 'src/main.ts'], { cwd: REPO_ROOT, env: { PATH: process.env.PATH!, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
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
export function executeOverMcp(url: string, token: string, code: string): Promise<{ ok: boolean; text: string }> {
  return callTool(url, token, 'execute_code', { language: 'python', code });
}

/** The same call, its HTTP answer as it came (a refusal's status and challenge too). */
export function executeRaw(url: string, token: string, code: string): Promise<RawResponse> {
  return callToolRaw(url, token, 'execute_code', { language: 'python', code });
}

/** Tool `name` called with `args` over MCP 2026-07-28 with `token`: the result's text, or the error's. */
export async function callTool(url: string, token: string, name: string, args: Record<string, unknown>): Promise<{ ok: boolean; text: string }> {
  const r = await callToolRaw(url, token, name, args);
  const msg = r.messages[0] as { result?: { content: { text: string }[]; isError?: boolean }; error?: { message: string } } | undefined;
  if (!msg) return { ok: false, text: `HTTP ${r.status}: ${r.text.slice(0, 300)}` };
  if (msg.error) return { ok: false, text: msg.error.message };
  return { ok: !msg.result!.isError, text: msg.result!.content.map((c) => c.text).join('\n') };
}

/** The same call, its HTTP answer as it came. */
export function callToolRaw(url: string, token: string, name: string, args: Record<string, unknown>): Promise<RawResponse> {
  return rawRequest(`${url}/mcp`, {
    headers: { authorization: `Bearer ${token}`, 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': name },
    body: {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: {
        name,
        arguments: args,
        _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientInfo': { name: 'test', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': {} },
      },
    },
  });
}

/**
 * Ends `gateways` with SIGKILL, then removes what gateways of `dataDir` left: their
 * containers (thawed first: Docker cannot remove a frozen one), the workspaces they
 * mounted, and the directory.
 */
export async function killAndClean(gateways: readonly GatewayProcess[], dataDir: string): Promise<void> {
  for (const g of gateways) g.child.kill('SIGKILL');
  await Promise.all(gateways.map((g) => g.exited));
  if (!dataDir) return;
  const docker = dockerClient(configFor({ SANDGATE_DATA_DIR: dataDir }));
  for (const c of await docker.listContainers({ all: true, filters: { label: [`${LABEL_GATEWAY}=${gatewayIdFor(dataDir)}`] } })) {
    thaw(c.Id);
    await docker.getContainer(c.Id).remove({ force: true }).catch(() => {});
  }
  for (const m of fs.readFileSync('/proc/mounts', 'utf8').split('\n').map((l) => l.split(' ')[1] ?? '')) {
    if (m.startsWith(dataDir + '/')) spawnSync('umount', [m]);
  }
  fs.rmSync(dataDir, { recursive: true, force: true });
}

/** Users of these names, each with a token, in the database at `databaseUrl`. */
export async function usersWithTokens(databaseUrl: string, names: readonly string[], opts: { isAdmin?: boolean } = {}): Promise<{ user: User; token: string }[]> {
  const store = await openStore({ dataDir: os.tmpdir(), databaseUrl }, MIGRATIONS);
  try {
    const out: { user: User; token: string }[] = [];
    for (const name of names) {
      const user = await ensureUser(store.db, name, opts);
      out.push({ user, token: (await createToken(store.db, { userId: user.id, name: 'laptop' })).token });
    }
    return out;
  } finally {
    await store.close();
  }
}
