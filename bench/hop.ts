/**
 * The internal hop's added latency: two gateway replicas on one Postgres and one sandbox
 * host; replica A holds a user's warm sandbox. The same `execute_code` call over MCP
 * goes straight to A, or to B, which sends it to A on the internal hop's run channel and
 * streams the answer back. Calls alternate in blocks of 20 so that host noise falls on
 * both alike.
 *
 *   node --import tsx bench/hop.ts     (BENCH_ROUNDS, default 5; BENCH_CALLS per side and round,
 *                                      default 1000; BENCH_WARMUP, default 200;
 *                                      BENCH_TASKS=1 for a client declaring MCP tasks;
 *                                      BENCH_NODE_ARGS for both gateways' node)
 *
 * Each round starts a fresh pair of gateways (which cores they land on, and how their
 * code warms, differ from one start to the next more than from call to call). Prints
 * p50, p95 and mean of each side, the CPU time each gateway spent a call on each side
 * (/proc/PID/stat), and their difference (the hop's own cost: a sealed
 * frame each way, the holder saying it took the run, and the processes it wakes) for
 * every round, then the median and range of the rounds' p50 differences.
 *
 * Then the floor on this host (BENCH_FLOOR=0 skips it): the same alternation against two
 * bare Node processes, one answering each request after 2 ms, the other relaying it on a
 * kept WebSocket (the same `ws` library, a "taken" frame and an answer frame). What the
 * hop adds beyond that is the gateways' own work and the cost of waking them.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { executeOverMcp, killAndClean, startGatewayProcess, usersWithTokens, type GatewayProcess } from '../test/support/gateway-process.js';
import { startPostgresCluster } from '../test/support/postgres.js';
import { modernRequest } from '../test/support/raw-request.js';
import { TASKS_EXTENSION } from '../src/mcp/tasks/tasks.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CALLS = Number(process.env.BENCH_CALLS ?? 1000);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 200);
const BLOCK = 20;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/**
 * WARMUP calls, then CALLS timed calls of each side in alternating blocks of BLOCK. With
 * `cpu` (each process's CPU time so far, in ms), also the CPU time each process spent on
 * each side's blocks, per call.
 */
async function alternated(direct: () => Promise<number>, hopped: () => Promise<number>, cpu?: () => number[]): Promise<[number[], number[], number[][]]> {
  for (let i = 0; i < WARMUP; i++) await (i % 2 ? direct() : hopped());
  const times: [number[], number[]] = [[], []];
  const spent: number[][] = [[], []];
  const block = async (side: 0 | 1, call: () => Promise<number>) => {
    const before = cpu?.() ?? [];
    for (let i = 0; i < BLOCK; i++) times[side].push(await call());
    const after = cpu?.() ?? [];
    after.forEach((t, k) => (spent[side]![k] = (spent[side]![k] ?? 0) + t - before[k]!));
  };
  while (times[0].length < CALLS) {
    await block(0, direct);
    await block(1, hopped);
  }
  return [times[0], times[1], spent.map((side, k) => side.map((t) => t / times[k as 0 | 1].length))];
}

const CLOCK_TICKS = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
/** The CPU time (user and system) process `pid` has used, in ms (proc(5): fields 14 and 15 of its stat). */
const cpuMsOf = (pid: number): number => {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
};

const f = (ms: number) => `${ms >= 0 ? '+' : ''}${ms.toFixed(2)} ms`;

/** One round: a fresh pair of gateways on a fresh database; the p50 the hop adds. */
async function round(cluster: Awaited<ReturnType<typeof startPostgresCluster>>, n: number): Promise<number> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-hop-'));
  const gateways: GatewayProcess[] = [];
  try {
    const databaseUrl = await cluster.createDatabase();
    const [{ token }] = await usersWithTokens(databaseUrl, ['bench']);

    // PII off and a generous rate limit: only the hop differs between the two sides.
    const env = { SANDGATE_DATA_DIR: dataDir, SANDGATE_DATABASE_URL: databaseUrl, SANDGATE_PORT: '0', SANDGATE_WARM_POOL_SIZE: '0', SANDGATE_LOG_LEVEL: 'warn', SANDGATE_PII_TOKENIZE: 'false', SANDGATE_RATE_LIMIT_PER_MIN: '1000000', SANDGATE_RATE_LIMIT_BURST: '100000' };
    // e.g. BENCH_NODE_ARGS='--cpu-prof --cpu-prof-dir=/tmp/prof', to see where a hop's time goes.
    const nodeArgs = process.env.BENCH_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
    const a = startGatewayProcess(env, nodeArgs);
    const b = startGatewayProcess(env, nodeArgs);
    gateways.push(a, b);
    const [urlA, urlB] = await Promise.all([a.ready(), b.ready()]);
    // BENCH_TASKS=1: a client that declares MCP tasks (its runs are kept runs, which live where the sandbox does).
    const tasks = process.env.BENCH_TASKS === '1';
    const call = async (url: string) => {
      const t = performance.now();
      if (tasks) {
        const m = await modernRequest(`${url}/mcp`, token, 'tools/call', { name: 'execute_code', arguments: { language: 'python', code: '1+1' } }, { extensions: { [TASKS_EXTENSION]: {} } });
        if (m.result?.resultType !== 'complete') throw new Error(`a run failed: ${JSON.stringify(m).slice(0, 300)}`);
      } else {
        const r = await executeOverMcp(url, token, '1+1');
        if (!r.ok) throw new Error(`a run failed: ${r.text}`);
      }
      return performance.now() - t;
    };
    await call(urlA);
    const pids = [a.child.pid!, b.child.pid!];
    const [direct, hop, cpu] = await alternated(() => call(urlA), () => call(urlB), () => pids.map(cpuMsOf));
    const ms = (x: number) => `${x.toFixed(2)} ms`;
    console.log(`\nround ${n}: warm execute_code over MCP${tasks ? ' (a client declaring tasks)' : ''}, ${direct.length} calls a side, one user whose sandbox replica A holds`);
    console.log(`straight to A:        p50 ${ms(pct(direct, 50))}  p95 ${ms(pct(direct, 95))}  mean ${ms(mean(direct))}   CPU a call: A ${ms(cpu[0]![0]!)}, B ${ms(cpu[0]![1]!)}`);
    console.log(`to B, hopped to A:    p50 ${ms(pct(hop, 50))}  p95 ${ms(pct(hop, 95))}  mean ${ms(mean(hop))}   CPU a call: A ${ms(cpu[1]![0]!)}, B ${ms(cpu[1]![1]!)}`);
    console.log(`the hop adds:         p50 ${f(pct(hop, 50) - pct(direct, 50))}  p95 ${f(pct(hop, 95) - pct(direct, 95))}  mean ${f(mean(hop) - mean(direct))}   CPU a call, both gateways: ${f(cpu[1]![0]! + cpu[1]![1]! - cpu[0]![0]! - cpu[0]![1]!)}`);
    return pct(hop, 50) - pct(direct, 50);
  } finally {
    // A profile is written when node exits on its own: stopped, not killed, when asked for one.
    if (process.env.BENCH_NODE_ARGS) {
      for (const g of gateways) g.child.kill('SIGTERM');
      await Promise.race([Promise.all(gateways.map((g) => g.exited)), new Promise((r) => setTimeout(r, 30_000))]);
    }
    await killAndClean(gateways, dataDir);
  }
}

const medianOf = (xs: number[]) => {
  const s = [...xs].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** A bare holder (HTTP and WebSocket, answering after 2 ms) and a bare relay in front of it: two Node processes, nothing else. */
const FLOOR_HOLDER = `
import http from 'node:http';
import { WebSocketServer } from 'ws';
const srv = http.createServer((req, res) => { req.resume(); req.on('end', () => setTimeout(() => res.end('{"ok":true}'), 2)); });
new WebSocketServer({ server: srv, perMessageDeflate: false }).on('connection', (ws) => ws.on('message', (d) => {
  const { id } = JSON.parse(d);
  ws.send(JSON.stringify({ id, line: { t: 'wait' } }));
  setTimeout(() => ws.send(JSON.stringify({ id, line: { t: 'done' } })), 2);
}));
srv.listen(0, '127.0.0.1', () => console.log(srv.address().port));`;
const FLOOR_RELAY = `
import http from 'node:http';
import WebSocket from 'ws';
const ws = new WebSocket('ws://127.0.0.1:' + process.argv[1] + '/', { perMessageDeflate: false });
const waiting = new Map();
let next = 0;
ws.on('message', (d) => { const { id, line } = JSON.parse(d); if (line.t === 'done') { waiting.get(id)(); waiting.delete(id); } });
ws.on('open', () => {
  const srv = http.createServer((req, res) => { req.resume(); req.on('end', () => { const id = ++next; waiting.set(id, () => res.end('{"ok":true}')); ws.send(JSON.stringify({ id, code: '1+1' })); }); });
  srv.listen(0, '127.0.0.1', () => console.log(srv.address().port));
});`;

/** The floor: the p50 a bare relay adds on this host, measured as the rounds are. */
async function floor(): Promise<number> {
  const children: ChildProcess[] = [];
  const start = (code: string, ...args: string[]) =>
    new Promise<number>((resolve, reject) => {
      const child = spawn(process.execPath, ['--input-type=module', '-e', code, ...args], { cwd: path.resolve(import.meta.dirname, '..'), stdio: ['ignore', 'pipe', 'inherit'] });
      children.push(child);
      child.stdout!.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
      child.once('exit', (c) => reject(new Error(`a floor process ended (${c})`)));
    });
  try {
    const holder = await start(FLOOR_HOLDER);
    const relay = await start(FLOOR_RELAY, String(holder));
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const call = (port: number) =>
      new Promise<number>((resolve, reject) => {
        const t = performance.now();
        const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/', agent }, (res) => {
          res.resume();
          res.on('end', () => resolve(performance.now() - t));
        });
        req.on('error', reject);
        req.end('{"code":"1+1"}');
      });
    const [direct, relayed] = await alternated(() => call(holder), () => call(relay));
    agent.destroy();
    return pct(relayed, 50) - pct(direct, 50);
  } finally {
    for (const c of children) c.kill('SIGKILL');
  }
}

async function main(): Promise<void> {
  const cluster = await startPostgresCluster();
  try {
    const added: number[] = [];
    for (let n = 1; n <= ROUNDS; n++) added.push(await round(cluster, n));
    const sorted = [...added].sort((x, y) => x - y);
    console.log(`\nthe hop adds, p50 over ${added.length} rounds: median ${f(medianOf(added))}, from ${f(sorted[0]!)} to ${f(sorted.at(-1)!)} (${added.map(f).join(', ')})`);
  } finally {
    await cluster.stop();
  }
  if (process.env.BENCH_FLOOR === '0') return;
  const floors: number[] = [];
  for (let n = 0; n < 3; n++) floors.push(await floor());
  console.log(`the floor on this host, a bare WebSocket relay between two Node processes: p50 adds ${f(medianOf(floors))} (${floors.map(f).join(', ')})`);
}

await main();
