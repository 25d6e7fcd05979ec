/**
 * Failover between two gateway replicas on one Postgres and one sandbox host: the replica
 * holding a user's sandbox is killed with SIGKILL, and the user's MCP client asks the
 * other one until a run is answered (retrying every 100 ms while the answer is
 * held_elsewhere; a run waits for the lease up to a lease time and a second before it is
 * refused). Each round kills the replica that holds the sandbox then, and starts
 * a fresh process in its place for the next round.
 *
 *   node --import tsx bench/failover.ts     (BENCH_ROUNDS, default 5; SANDGATE_REPLICA_LEASE_MS, default the setting's)
 *
 * Prints the time from the kill to the first answered run (min, p50, max), with the
 * lease time it follows from, and the p50 of a refused run (the answer a client gets
 * while the lease has not run out).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { configFor } from '../src/config.js';
import { executeOverMcp, killAndClean, startGatewayProcess, usersWithTokens, type GatewayProcess } from '../test/support/gateway-process.js';
import { startPostgresCluster } from '../test/support/postgres.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

async function main(): Promise<void> {
  const cluster = await startPostgresCluster();
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-failover-'));
  const config = configFor({ SANDGATE_DATA_DIR: dataDir, ...(process.env.SANDGATE_REPLICA_LEASE_MS && { SANDGATE_REPLICA_LEASE_MS: process.env.SANDGATE_REPLICA_LEASE_MS }) });
  const gateways: GatewayProcess[] = [];
  try {
    const databaseUrl = await cluster.createDatabase();
    const [{ token }] = await usersWithTokens(databaseUrl, ['bench']);

    const env = { SANDGATE_DATA_DIR: dataDir, SANDGATE_DATABASE_URL: databaseUrl, SANDGATE_PORT: '0', SANDGATE_WARM_POOL_SIZE: '0', SANDGATE_LOG_LEVEL: 'warn', SANDGATE_REPLICA_LEASE_MS: String(config.replicaLeaseMs) };
    const start = async () => {
      const g = startGatewayProcess(env);
      gateways.push(g);
      return { g, url: await g.ready() };
    };
    let holder = await start();
    let other = await start();
    const first = await executeOverMcp(holder.url, token, '1+1');
    if (!first.ok) throw new Error(`the first run failed: ${first.text}`);

    const failovers: number[] = [];
    const refusals: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      holder.g.child.kill('SIGKILL');
      await holder.g.exited;
      const killedAt = performance.now();
      for (;;) {
        const t = performance.now();
        const r = await executeOverMcp(other.url, token, '1+1');
        if (r.ok) break;
        if (!/held by another gateway/.test(r.text)) throw new Error(`unexpected answer during failover: ${r.text}`);
        refusals.push(performance.now() - t);
        if (performance.now() - killedAt > 10 * config.replicaLeaseMs + 30_000) throw new Error('no failover');
        await new Promise((r) => setTimeout(r, 100));
      }
      failovers.push(performance.now() - killedAt);
      process.stderr.write(`round ${round + 1}: ${(failovers.at(-1)! / 1000).toFixed(2)} s\n`);
      // The survivor holds the sandbox now; a fresh process takes the dead one's place.
      holder = other;
      other = await start();
    }
    const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
    console.log(`\nfailover: the holder of a user's sandbox killed with SIGKILL → the other replica's first answered run (${ROUNDS} rounds)`);
    console.log(`lease time (SANDGATE_REPLICA_LEASE_MS): ${s(config.replicaLeaseMs)}`);
    console.log(`kill → answered: min ${s(Math.min(...failovers))}, p50 ${s(pct(failovers, 50))}, max ${s(Math.max(...failovers))}`);
    // A run asked meanwhile waits for the lease up to a lease time and a second, then is refused.
    console.log(refusals.length ? `a run refused meanwhile (held_elsewhere): p50 ${pct(refusals, 50).toFixed(1)} ms over ${refusals.length} refusals` : 'no run was refused meanwhile: each waited for the lease');
  } finally {
    await killAndClean(gateways, dataDir);
    await cluster.stop();
  }
}

await main();
