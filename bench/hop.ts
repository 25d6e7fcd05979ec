/**
 * The internal hop's added latency: two gateway replicas on one Postgres and one sandbox
 * host; replica A holds a user's warm sandbox. The same `execute_code` call over MCP
 * goes straight to A, or to B, which sends it to A on the internal hop's run channel and
 * streams the answer back. Calls alternate in blocks of 20 so that host noise falls on
 * both alike.
 *
 *   node --import tsx bench/hop.ts     (BENCH_ROUNDS, default 5; BENCH_CALLS per side and round,
 *                                      default 1000; BENCH_WARMUP, default 200;
 *                                      BENCH_NODE_ARGS for both gateways' node)
 *
 * Each round starts a fresh pair of gateways (which cores they land on, and how their
 * code warms, differ from one start to the next more than from call to call). Prints
 * p50, p95 and mean of each side and their difference (the hop's own cost: a sealed
 * frame each way, the holder saying it took the run, and the processes it wakes) for
 * every round, then the median and range of the rounds' p50 differences.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { executeOverMcp, killAndClean, startGatewayProcess, usersWithTokens, type GatewayProcess } from '../test/support/gateway-process.js';
import { startPostgresCluster } from '../test/support/postgres.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CALLS = Number(process.env.BENCH_CALLS ?? 1000);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 200);
const BLOCK = 20;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

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
    const call = async (url: string) => {
      const t = performance.now();
      const r = await executeOverMcp(url, token, '1+1');
      if (!r.ok) throw new Error(`a run failed: ${r.text}`);
      return performance.now() - t;
    };
    await call(urlA);
    for (let i = 0; i < WARMUP; i++) await call(i % 2 ? urlA : urlB);
    const direct: number[] = [];
    const hop: number[] = [];
    while (direct.length < CALLS) {
      for (let i = 0; i < BLOCK; i++) direct.push(await call(urlA));
      for (let i = 0; i < BLOCK; i++) hop.push(await call(urlB));
    }
    const ms = (x: number) => `${x.toFixed(2)} ms`;
    console.log(`\nround ${n}: warm execute_code over MCP, ${direct.length} calls a side, one user whose sandbox replica A holds`);
    console.log(`straight to A:        p50 ${ms(pct(direct, 50))}  p95 ${ms(pct(direct, 95))}  mean ${ms(mean(direct))}`);
    console.log(`to B, hopped to A:    p50 ${ms(pct(hop, 50))}  p95 ${ms(pct(hop, 95))}  mean ${ms(mean(hop))}`);
    console.log(`the hop adds:         p50 ${f(pct(hop, 50) - pct(direct, 50))}  p95 ${f(pct(hop, 95) - pct(direct, 95))}  mean ${f(mean(hop) - mean(direct))}`);
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

async function main(): Promise<void> {
  const cluster = await startPostgresCluster();
  try {
    const added: number[] = [];
    for (let n = 1; n <= ROUNDS; n++) added.push(await round(cluster, n));
    const sorted = [...added].sort((x, y) => x - y);
    const median = sorted.length % 2 ? sorted[(sorted.length - 1) / 2]! : (sorted[sorted.length / 2 - 1]! + sorted[sorted.length / 2]!) / 2;
    console.log(`\nthe hop adds, p50 over ${added.length} rounds: median ${f(median)}, from ${f(sorted[0]!)} to ${f(sorted.at(-1)!)} (${added.map(f).join(', ')})`);
  } finally {
    await cluster.stop();
  }
}

await main();
