/**
 * File operations across sandbox hosts: two gateways on one Postgres, each with a data
 * directory (a workspace store) of its own, as gateways on two hosts with workspaces on
 * their own disks. A user's files are on host A. The same MCP `read_file` and
 * `write_file` go straight to A, or to B, which sends each to A over the internal hop
 * (/internal/v2/workspace); calls alternate in blocks of 20.
 *
 *   node --import tsx bench/hosts.ts     (BENCH_CALLS per side and size, default 300)
 *
 * Prints p50 and p95 of each side for a 1 KiB file and a 1 MiB one, and what the hop adds.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { callTool, executeOverMcp, killAndClean, startGatewayProcess, usersWithTokens, type GatewayProcess } from '../test/support/gateway-process.js';
import { startPostgresCluster } from '../test/support/postgres.js';

const CALLS = Number(process.env.BENCH_CALLS ?? 300);
const BLOCK = 20;
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const ms = (x: number) => `${x.toFixed(2)} ms`;

async function timed(fn: () => Promise<{ ok: boolean; text: string }>): Promise<number> {
  const t = performance.now();
  const r = await fn();
  if (!r.ok) throw new Error(`a call failed: ${r.text.slice(0, 300)}`);
  return performance.now() - t;
}

async function main(): Promise<void> {
  const cluster = await startPostgresCluster();
  const dirA = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-host-a-'));
  const dirB = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-host-b-'));
  const gateways: GatewayProcess[] = [];
  try {
    const databaseUrl = await cluster.createDatabase();
    const [{ token }] = await usersWithTokens(databaseUrl, ['ann']);
    const env = (dataDir: string) => ({ SANDGATE_DATA_DIR: dataDir, SANDGATE_DATABASE_URL: databaseUrl, SANDGATE_PORT: '0', SANDGATE_WARM_POOL_SIZE: '0', SANDGATE_RATE_LIMIT_PER_MIN: '1000000', SANDGATE_RATE_LIMIT_BURST: '100000' });
    const a = startGatewayProcess(env(dirA));
    gateways.push(a);
    const urlA = await a.ready();
    for (const f of fs.readdirSync(dirA).filter((f) => f.endsWith('.key'))) fs.copyFileSync(path.join(dirA, f), path.join(dirB, f));
    const b = startGatewayProcess(env(dirB));
    gateways.push(b);
    const urlB = await b.ready();
    // The files on A: its sandbox writes them.
    const made = await executeOverMcp(urlA, token, "open('/workspace/small.txt', 'w').write('x' * 1024)\nopen('/workspace/large.txt', 'w').write('y' * (1024 * 1024))");
    if (!made.ok) throw new Error(made.text);
    console.log(`file operations for a user whose files are on host A, ${CALLS} calls a side, alternating in blocks of ${BLOCK}`);
    for (const [label, call] of [
      ['read_file 1 KiB', (url: string) => callTool(url, token, 'read_file', { path: 'small.txt' })],
      ['read_file 1 MiB', (url: string) => callTool(url, token, 'read_file', { path: 'large.txt' })],
      ['write_file 1 KiB', (url: string) => callTool(url, token, 'write_file', { path: 'w.txt', content: 'z'.repeat(1024) })],
    ] as const) {
      for (let i = 0; i < 20; i++) await timed(() => call(i % 2 ? urlA : urlB));
      const direct: number[] = [];
      const hopped: number[] = [];
      while (direct.length < CALLS) {
        for (let i = 0; i < BLOCK; i++) direct.push(await timed(() => call(urlA)));
        for (let i = 0; i < BLOCK; i++) hopped.push(await timed(() => call(urlB)));
      }
      console.log(
        `${label.padEnd(17)} on A: p50 ${ms(pct(direct, 50))} p95 ${ms(pct(direct, 95))} | through B: p50 ${ms(pct(hopped, 50))} p95 ${ms(pct(hopped, 95))} | the hop adds ${ms(pct(hopped, 50) - pct(direct, 50))} p50`,
      );
    }
  } finally {
    await killAndClean(gateways, dirA);
    await killAndClean([], dirB);
    await cluster.stop();
  }
}

await main();
