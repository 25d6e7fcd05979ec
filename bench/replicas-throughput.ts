/**
 * Throughput of warm runs with one gateway replica against two, behind Debian's HAProxy
 * (the shipped configuration) on one Postgres and one sandbox host: BENCH_USERS users
 * (default 8), each with BENCH_CLIENTS_PER_USER MCP clients (default 2) running a small
 * Python expression without a pause for BENCH_SECONDS (default 20) after a warm-up. With
 * two replicas, HAProxy spreads requests over both, so about half of all runs are sent
 * over the internal hop to the replica holding the user's sandbox.
 *
 *   node --import tsx bench/replicas-throughput.ts
 *
 * Prints runs per second, p50 and p95 latency for each, and the ratio. On a 2-core host
 * the gateways, Postgres, HAProxy and the sandboxes share two CPUs: expect CPU-bound
 * figures, not the scaling of two hosts.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { executeOverMcp, killAndClean, startGatewayProcess, usersWithTokens, type GatewayProcess } from '../test/support/gateway-process.js';
import { startHaproxy } from '../test/support/haproxy.js';
import { freePort } from '../test/support/ports.js';
import { startPostgresCluster } from '../test/support/postgres.js';

const USERS = Number(process.env.BENCH_USERS ?? 8);
const CLIENTS_PER_USER = Number(process.env.BENCH_CLIENTS_PER_USER ?? 2);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 20);
const WARMUP_SECONDS = 5;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

async function measure(replicas: number, databaseUrl: string, tokens: string[]): Promise<{ perSec: number; p50: number; p95: number; failed: number }> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-throughput-'));
  const gateways: GatewayProcess[] = [];
  const ports = await Promise.all(Array.from({ length: replicas }, () => freePort()));
  const env = (port: number) => ({
    SANDGATE_DATA_DIR: dataDir,
    SANDGATE_DATABASE_URL: databaseUrl,
    SANDGATE_PORT: String(port),
    SANDGATE_WARM_POOL_SIZE: '0',
    SANDGATE_LOG_LEVEL: 'warn',
    SANDGATE_RATE_LIMIT_PER_MIN: '1000000',
    SANDGATE_RATE_LIMIT_BURST: '100000',
  });
  let lb: Awaited<ReturnType<typeof startHaproxy>> | undefined;
  try {
    for (const port of ports) gateways.push(startGatewayProcess(env(port)));
    await Promise.all(gateways.map((g) => g.ready()));
    lb = await startHaproxy(ports);
    const url = lb.url;
    for (const token of tokens) {
      const r = await executeOverMcp(url, token, '1+1');
      if (!r.ok) throw new Error(`a first run failed: ${r.text}`);
    }
    let phase: 'warm' | 'timed' | 'done' = 'warm';
    const latencies: number[] = [];
    let failed = 0;
    const client = async (token: string) => {
      while (phase !== 'done') {
        const t = performance.now();
        const r = await executeOverMcp(url, token, '2+2');
        if (phase !== 'timed') continue;
        if (r.ok) latencies.push(performance.now() - t);
        else failed++;
      }
    };
    const clients = tokens.flatMap((token) => Array.from({ length: CLIENTS_PER_USER }, () => client(token)));
    await new Promise((r) => setTimeout(r, WARMUP_SECONDS * 1000));
    phase = 'timed';
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, SECONDS * 1000));
    phase = 'done';
    const elapsed = (performance.now() - t0) / 1000;
    await Promise.all(clients);
    return { perSec: latencies.length / elapsed, p50: pct(latencies, 50), p95: pct(latencies, 95), failed };
  } finally {
    await lb?.stop();
    await killAndClean(gateways, dataDir);
  }
}

async function main(): Promise<void> {
  const cluster = await startPostgresCluster();
  try {
    const results: Record<number, Awaited<ReturnType<typeof measure>>> = {};
    for (const replicas of [1, 2]) {
      const databaseUrl = await cluster.createDatabase();
      const tokens = (await usersWithTokens(databaseUrl, Array.from({ length: USERS }, (_, i) => `bench${i}`))).map((u) => u.token);
      results[replicas] = await measure(replicas, databaseUrl, tokens);
    }
    console.log(`\nwarm runs through HAProxy, ${USERS} users × ${CLIENTS_PER_USER} clients, ${SECONDS} s timed, ${os.cpus().length} CPUs`);
    for (const n of [1, 2]) {
      const r = results[n]!;
      console.log(`${n} replica${n > 1 ? 's' : ' '}: ${r.perSec.toFixed(1)} runs/s  p50 ${r.p50.toFixed(1)} ms  p95 ${r.p95.toFixed(1)} ms  failed ${r.failed}`);
    }
    console.log(`2 replicas / 1: ${(results[2]!.perSec / results[1]!.perSec).toFixed(2)}× the runs per second`);
  } finally {
    await cluster.stop();
  }
}

await main();
