/**
 * What MCP tasks cost, on the real runtime (Docker + runsc, SQLite), timed on loopback:
 *
 * - a short `execute_code` (bash `true`) from a client that declares the tasks extension
 *   (a kept run, its record released at once) against the same call from one that does
 *   not, alternating in blocks so that host noise falls on both alike;
 * - a task's round trip: `background: true` answered with a task, then polled
 *   (`tasks/get`, every 20 ms here) until completed;
 * - a restart: a task whose run ends while no gateway runs; from the new gateway's start
 *   until `tasks/get` there says completed (adoption, the runner's kept record claimed).
 *
 *   node --import tsx bench/tasks.ts        (BENCH_CALLS per side, default 200; BENCH_TASKS, default 30)
 */
import { TASKS_EXTENSION } from '../src/mcp/tasks/tasks.js';
import { startGateway, type Gateway } from '../test/support/mcp.js';
import { modernRequest } from '../test/support/raw-request.js';

const CALLS = Number(process.env.BENCH_CALLS ?? 200);
const TASKS = Number(process.env.BENCH_TASKS ?? 30);
const BLOCK = 20;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const f = (ms: number) => `${ms.toFixed(2)} ms`;
const line = (name: string, xs: number[]) => console.log(`${name.padEnd(44)} p50 ${f(pct(xs, 50)).padStart(10)}  p95 ${f(pct(xs, 95)).padStart(10)}  (n=${xs.length})`);

async function request(gw: Gateway, token: string, method: string, params: Record<string, unknown>, tasks: boolean): Promise<Record<string, unknown>> {
  const m = await modernRequest(gw.mcpUrl, token, method, params, tasks ? { extensions: { [TASKS_EXTENSION]: {} } } : {});
  if (!m.result) throw new Error(`${method}: ${m.error?.message}`);
  return m.result;
}
const execute = (gw: Gateway, token: string, args: Record<string, unknown>, tasks: boolean) => request(gw, token, 'tools/call', { name: 'execute_code', arguments: args }, tasks);

async function completed(gw: Gateway, token: string, taskId: string, everyMs: number): Promise<void> {
  for (;;) {
    const t = await request(gw, token, 'tasks/get', { taskId }, true);
    if (t.status !== 'working') {
      if (t.status !== 'completed') throw new Error(`task ${t.status as string}`);
      return;
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

const env = { SANDGATE_RATE_LIMIT_PER_MIN: '1000000', SANDGATE_RATE_LIMIT_BURST: '100000' };
let gw = await startGateway({ env });
let second: Gateway | undefined;
try {
  const token = await gw.tokenFor('bench-tasks');
  const short = { language: 'bash', code: 'true' };
  for (let i = 0; i < 10; i++) await execute(gw, token, short, i % 2 === 0);
  const plain: number[] = [];
  const kept: number[] = [];
  for (let i = 0; i < CALLS / BLOCK; i++) {
    for (const [xs, tasks] of [
      [plain, false],
      [kept, true],
    ] as const) {
      for (let j = 0; j < BLOCK; j++) {
        const t = performance.now();
        const r = await execute(gw, token, short, tasks);
        xs.push(performance.now() - t);
        if (r.resultType !== 'complete') throw new Error('a short run became a task');
      }
    }
  }
  line('execute_code, client without tasks', plain);
  line('execute_code, client with tasks (kept run)', kept);

  const created: number[] = [];
  const roundTrip: number[] = [];
  for (let i = 0; i < TASKS; i++) {
    const t = performance.now();
    const r = await execute(gw, token, { ...short, background: true }, true);
    created.push(performance.now() - t);
    await completed(gw, token, r.taskId as string, 20);
    roundTrip.push(performance.now() - t);
  }
  line('background call answered with a task', created);
  line('task: call, then polled until completed', roundTrip);

  // A run that ends while no gateway runs, taken over by the next one.
  const takeover: number[] = [];
  for (let i = 0; i < 3; i++) {
    const r = await execute(gw, token, { language: 'bash', code: 'sleep 2; echo done', background: true }, true);
    const dataDir = gw.dataDir;
    await gw.close({ keepData: true });
    await new Promise((res) => setTimeout(res, 3000));
    const t = performance.now();
    second = await startGateway({ dataDir, env });
    await completed(second, token, r.taskId as string, 20);
    takeover.push(performance.now() - t);
    gw = second;
    second = undefined;
  }
  console.log(`restart → result (run ended while down)       ${takeover.map((x) => f(x)).join(', ')}  (gateway start included)`);
} finally {
  await second?.close();
  await gw.close();
}
