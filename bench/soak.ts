/**
 * A soak: many clients for minutes against one real gateway process (src/main.ts, SQLite,
 * Docker with runsc), everything on loopback. Each client loops over a mix of what a team
 * does, with a pause between steps:
 *
 * - `run`: MCP `execute_code` (Python, now and then bash), as a 2026-07-28 client sends it;
 * - `file`: MCP `write_file`, `read_file` or `list_files`;
 * - `chat`: a /v1 chat completion with the stand-in model (one in four asks for a run first);
 * - `page`: a signed-in page load (/chat, /files, /tokens, /settings).
 *
 * Clients share users (SOAK_USERS of them; a team's people each have a few clients), so
 * each user's budget is raised to what their clients send. It prints errors by kind,
 * p50/p95 per operation for each minute, and the gateway's memory and open handles
 * (from its metrics listener; the heap also right after a full collection, asked for
 * through the gateway's inspector on a loopback port) at the start, after the first
 * minute and at the end.
 *
 *   node --import tsx bench/soak.ts   (SOAK_CLIENTS 100, SOAK_MINUTES 10, SOAK_USERS 10, SOAK_PAUSE_MS 1000)
 */
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ensureUser } from '../src/accounts/accounts.js';
import { configFor } from '../src/config.js';
import { MIGRATIONS } from '../src/migrations.js';
import { openStore } from '../src/store/store.js';
import { createToken } from '../src/tokens/tokens.js';
import { killAndClean, startGatewayProcess } from '../test/support/gateway-process.js';
import { startStandin } from '../test/support/model-standins.js';
import { freePort } from '../test/support/ports.js';
import { rawRequest } from '../test/support/raw-request.js';
import { webSession, type WebSession } from '../test/support/web-session.js';
import WebSocket from 'ws';

const CLIENTS = Number(process.env.SOAK_CLIENTS ?? 100);
const MINUTES = Number(process.env.SOAK_MINUTES ?? 10);
const USERS = Number(process.env.SOAK_USERS ?? 10);
const PAUSE_MS = Number(process.env.SOAK_PAUSE_MS ?? 1000);

type Op = 'run' | 'file' | 'chat' | 'page';
const OPS: Op[] = ['run', 'file', 'chat', 'page'];

interface Sample {
  op: Op;
  minute: number;
  ms: number;
}

const samples: Sample[] = [];
const errors = new Map<string, number>();
const fail = (kind: string) => errors.set(kind, (errors.get(kind) ?? 0) + 1);
const pct = (xs: number[], p: number) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]! : NaN);

/** The mix, out of 20 steps: 8 runs, 4 file tools, 3 chats, 5 page loads. */
const opFor = (k: number): Op => (k < 8 ? 'run' : k < 12 ? 'file' : k < 15 ? 'chat' : 'page');

let mcpId = 0;
/** One MCP tools/call; throws a described error for anything but a result without isError. */
async function tool(url: string, token: string, name: string, args: Record<string, unknown>): Promise<string> {
  const r = await rawRequest(`${url}/mcp`, {
    headers: { authorization: `Bearer ${token}`, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': name },
    body: {
      jsonrpc: '2.0',
      id: ++mcpId,
      method: 'tools/call',
      params: {
        name,
        arguments: args,
        _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientInfo': { name: 'soak', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': {} },
      },
    },
  });
  if (r.status !== 200) throw new Error(`http ${r.status}`);
  const msg = r.messages[0] as { result?: { isError?: boolean; content: { text?: string }[] }; error?: { code: number } } | undefined;
  if (!msg) throw new Error('no message');
  if (msg.error) throw new Error(`jsonrpc ${msg.error.code}`);
  const text = msg.result!.content.map((c) => c.text ?? '').join('');
  if (msg.result!.isError) throw new Error(`${name} isError`);
  return text;
}

interface GatewayStats {
  rssMb: number;
  heapMb: number;
  /** The heap that survives a full collection: what the gateway really holds. */
  liveHeapMb: number;
  handles: number;
}

/**
 * The gateway's memory and open handles, from its metrics listener: read once as it is,
 * then again right after a full collection asked for through its inspector (loopback, a
 * port only this bench knows), so garbage not yet collected does not count as growth.
 */
async function gatewayStats(metricsUrl: string, inspector: Inspector): Promise<GatewayStats> {
  const read = async () => {
    const text = await (await fetch(metricsUrl)).text();
    return (name: string) => Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? NaN);
  };
  const before = await read();
  await inspector.call('HeapProfiler.collectGarbage');
  const after = await read();
  return { rssMb: after('process_resident_memory_bytes') / 1048576, heapMb: before('nodejs_heap_size_used_bytes') / 1048576, liveHeapMb: after('nodejs_heap_size_used_bytes') / 1048576, handles: after('nodejs_active_handles_total') };
}

interface Inspector {
  call(method: string): Promise<unknown>;
  close(): void;
}

/** A DevTools protocol client on the gateway's inspector. */
async function openInspector(port: number): Promise<Inspector> {
  const [target] = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { webSocketDebuggerUrl: string }[];
  const ws = new WebSocket(target!.webSocketDebuggerUrl);
  await once(ws, 'open');
  const waiting = new Map<number, { resolve: (r: unknown) => void; reject: (e: Error) => void }>();
  ws.on('message', (data) => {
    const m = JSON.parse(String(data)) as { id?: number; result?: unknown; error?: { message: string } };
    const w = m.id === undefined ? undefined : waiting.get(m.id);
    if (!w) return;
    waiting.delete(m.id!);
    if (m.error) w.reject(new Error(m.error.message));
    else w.resolve(m.result);
  });
  let id = 0;
  return {
    call: (method) =>
      new Promise((resolve, reject) => {
        waiting.set(++id, { resolve, reject });
        ws.send(JSON.stringify({ id, method }));
      }),
    close: () => ws.close(),
  };
}

async function main() {
  const model = await startStandin('anthropic', (req) =>
    /run/.test(req.lastUserText) && req.lastToolResult === undefined
      ? { text: ['Running.'], toolCalls: [{ name: 'execute_code', args: { language: 'python', code: 'print(sum(range(100)))' } }], usage: { input: 200, output: 20 } }
      : { text: ['All ', 'done.'], usage: { input: 120, output: 4 } },
  );
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-soak-'));
  const metricsPort = await freePort();
  const env = {
    SANDGATE_DATA_DIR: dataDir,
    SANDGATE_PORT: '0',
    SANDGATE_LOG_LEVEL: 'warn',
    SANDGATE_METRICS_LISTEN: `127.0.0.1:${metricsPort}`,
    SANDGATE_ANTHROPIC_API_KEY: 'sk-soak',
    SANDGATE_ANTHROPIC_BASE_URL: model.baseURL,
    SANDGATE_MODELS: 'anthropic:claude-soak',
    // Each user here has CLIENTS / USERS clients: their budget is that many people's.
    SANDGATE_RATE_LIMIT_PER_MIN: String(300 * Math.ceil(CLIENTS / USERS)),
    SANDGATE_RATE_LIMIT_BURST: String(60 * Math.ceil(CLIENTS / USERS)),
    SANDGATE_WARM_POOL_SIZE: '2',
    // e.g. --heapsnapshot-signal=SIGUSR2, to look inside the gateway while it runs.
    ...(process.env.SOAK_NODE_OPTIONS && { NODE_OPTIONS: process.env.SOAK_NODE_OPTIONS }),
  };
  const inspectPort = await freePort();
  const g = startGatewayProcess(env, [`--inspect=127.0.0.1:${inspectPort}`]);
  const url = await g.ready();
  const inspector = await openInspector(inspectPort);
  const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
  const store = await openStore(configFor(env), MIGRATIONS);
  const users = await Promise.all(
    Array.from({ length: USERS }, async (_, i) => {
      const user = await ensureUser(store.db, `soak-${i}`);
      const token = (await createToken(store.db, { userId: user.id, name: 'soak' })).token;
      return { user, token, web: undefined as WebSession | undefined };
    }),
  );
  for (const u of users) u.web = await webSession({ url, db: store.db }, u.user);
  // Each user's sandbox started before the clock runs: the soak measures warm use.
  await Promise.all(users.map((u) => tool(url, u.token, 'execute_code', { language: 'python', code: 'print(1)' })));
  const atStart = await gatewayStats(metricsUrl, inspector);
  console.log(`soak: ${CLIENTS} clients, ${USERS} users, ${MINUTES} min, pause ~${PAUSE_MS} ms; gateway at ${url}`);

  const t0 = Date.now();
  const end = t0 + MINUTES * 60_000;
  let afterFirstMinute: GatewayStats | undefined;
  const firstMinute = setTimeout(() => void gatewayStats(metricsUrl, inspector).then((s) => (afterFirstMinute = s)), 60_000);

  const step = async (client: number, n: number): Promise<void> => {
    const u = users[client % USERS]!;
    const op = opFor((client * 7 + n) % 20);
    const started = performance.now();
    try {
      if (op === 'run') {
        const out = await tool(url, u.token, 'execute_code', n % 5 === 0 ? { language: 'bash', code: `echo ${n}` } : { language: 'python', code: `print(${client} + ${n})` });
        if (!out.includes(String(n % 5 === 0 ? n : client + n))) fail('run: wrong output');
      } else if (op === 'file') {
        const name = `soak/c${client}.txt`;
        if (n % 3 === 0) await tool(url, u.token, 'write_file', { path: name, content: `client ${client} step ${n}\n`.repeat(20) });
        else if (n % 3 === 1) await tool(url, u.token, 'list_files', { path: '/workspace' });
        else await tool(url, u.token, 'read_file', { path: name }).catch((e: Error) => (/isError/.test(e.message) ? '' : Promise.reject(e)));
      } else if (op === 'chat') {
        const r = await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${u.token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'anthropic:claude-soak', messages: [{ role: 'user', content: n % 4 === 0 ? 'please run something' : `hello ${n}` }] }),
        });
        const body = await r.text();
        if (r.status !== 200) throw new Error(`http ${r.status}`);
        if (!/done\./.test(body)) fail('chat: unexpected answer');
      } else {
        const page = ['/chat', '/files', '/tokens', '/settings'][n % 4]!;
        const r = await u.web!.get(page, { htmx: false });
        await r.text();
        if (r.status !== 200) throw new Error(`http ${r.status}`);
      }
      samples.push({ op, minute: Math.floor((Date.now() - t0) / 60_000), ms: performance.now() - started });
    } catch (e) {
      const m = (e as Error).message;
      fail(`${op}: ${/^http \d+|^jsonrpc -?\d+|isError/.test(m) ? m : `network (${(e as Error).name}: ${m.slice(0, 60)})`}`);
    }
  };

  await Promise.all(
    Array.from({ length: CLIENTS }, async (_, client) => {
      // Spread over the first pause, as people arrive.
      await new Promise((r) => setTimeout(r, Math.random() * PAUSE_MS));
      for (let n = 0; Date.now() < end; n++) {
        await step(client, n);
        await new Promise((r) => setTimeout(r, PAUSE_MS * (0.5 + Math.random())));
      }
    }),
  );
  clearTimeout(firstMinute);
  const atEnd = await gatewayStats(metricsUrl, inspector);
  const fivexx = /^sandgate_http_requests_total\{[^}]*status="5\d\d"[^}]*\} (\S+)/gm;
  const metricsText = await (await fetch(metricsUrl)).text();
  const serverErrors = [...metricsText.matchAll(fivexx)].reduce((a, m) => a + Number(m[1]), 0);

  console.log(`\noperations: ${samples.length} ok, ${[...errors.values()].reduce((a, b) => a + b, 0)} failed; the gateway counted ${serverErrors} 5xx answers`);
  for (const [kind, n] of [...errors].sort((a, b) => b[1] - a[1])) console.log(`  error ${kind}: ${n}`);
  console.log('\np50 / p95 (ms) per operation, by minute:');
  console.log(`${'minute'.padEnd(8)}${OPS.map((o) => o.padStart(22)).join('')}`);
  for (let m = 0; m < MINUTES; m++) {
    const cells = OPS.map((op) => {
      const xs = samples.filter((s) => s.op === op && s.minute === m).map((s) => s.ms);
      return `${pct(xs, 50).toFixed(0)} / ${pct(xs, 95).toFixed(0)} (${xs.length})`.padStart(22);
    });
    console.log(`${String(m + 1).padEnd(8)}${cells.join('')}`);
  }
  const runsIn = (m: number) => samples.filter((s) => s.op === 'run' && s.minute === m).map((s) => s.ms);
  const firstP95 = pct(runsIn(0), 95);
  const lastP95 = pct(runsIn(MINUTES - 1), 95);
  const show = (s: GatewayStats | undefined) =>
    s ? `rss ${s.rssMb.toFixed(0)} MiB, heap ${s.heapMb.toFixed(0)} MiB, live heap ${s.liveHeapMb.toFixed(0)} MiB, ${s.handles} handles` : 'not read';
  const growth = (a: number, b: number) => `${(((b - a) / a) * 100).toFixed(1)}%`;
  console.log(`\ngateway at start:             ${show(atStart)}`);
  console.log(`gateway after the 1st minute: ${show(afterFirstMinute)}`);
  console.log(`gateway at the end:           ${show(atEnd)}`);
  console.log('(heap as it was; live heap and the rest right after a full collection)');
  if (afterFirstMinute) {
    const f = afterFirstMinute;
    console.log(`memory at the end vs after the 1st minute: live heap ${growth(f.liveHeapMb, atEnd.liveHeapMb)}, rss ${growth(f.rssMb, atEnd.rssMb)}, heap as it was ${growth(f.heapMb, atEnd.heapMb)}`);
  }
  console.log(`warm run p95: first minute ${firstP95.toFixed(1)} ms, last minute ${lastP95.toFixed(1)} ms (${(lastP95 / firstP95).toFixed(2)}x)`);

  inspector.close();
  await store.close();
  g.child.kill('SIGTERM');
  await g.exited;
  await killAndClean([g], dataDir);
  await model.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
