/**
 * What the store costs on the request path, on each database: the token check every MCP
 * request makes (verifyToken: one SELECT, plus the last-used UPDATE at most once a
 * second per token), the audit row it writes (recordAudit: one INSERT) and the take from
 * the user's rate limit when the buckets are in the store (StoreRateLimiter: one upsert,
 * what every request pays on Postgres), one at a time and with 20 callers at once. SQLite is the file in a temporary data directory; Postgres
 * is a throw-away cluster of Debian's postgresql on loopback, with its default durability
 * (fsync and synchronous commit on), through the gateway's own pool.
 *
 *   node --import tsx bench/store.ts      (BENCH_CALLS, default 5000; BENCH_DATABASES=sqlite,postgres)
 *
 * Prints p50, p95 and calls/s per operation and database.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openStore, type Store } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';
import { ensureUser } from '../src/accounts/accounts.js';
import { createToken, verifyToken } from '../src/tokens/tokens.js';
import { recordAudit } from '../src/audit/audit.js';
import { StoreRateLimiter } from '../src/limits/store-rate-limit.js';
import { userBudgetKey } from '../src/limits/rate-limit.js';
import { startPostgresCluster, type PgCluster } from '../test/support/postgres.js';

const CALLS = Number(process.env.BENCH_CALLS ?? 5000);
const DATABASES = (process.env.BENCH_DATABASES ?? 'sqlite,postgres').split(',');
const CONCURRENCY = 20;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const ms = (x: number) => `${x.toFixed(3)} ms`;

async function time(label: string, n: number, concurrency: number, op: (i: number) => Promise<unknown>): Promise<void> {
  const lat: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        const i = next++;
        const s = performance.now();
        await op(i);
        lat.push(performance.now() - s);
      }
    }),
  );
  const secs = (performance.now() - t0) / 1000;
  console.log(`  ${label.padEnd(40)} p50 ${ms(pct(lat, 50)).padStart(10)}  p95 ${ms(pct(lat, 95)).padStart(10)}  ${Math.round(n / secs).toString().padStart(6)}/s`);
}

async function measure(name: string, store: Store): Promise<void> {
  console.log(`${name} (${store.location})`);
  const users = await Promise.all(Array.from({ length: CONCURRENCY }, (_, i) => ensureUser(store.db, `bench-${i}`)));
  const tokens = await Promise.all(users.map((u) => createToken(store.db, { userId: u.id, name: 'bench' }).then((t) => t.token)));
  const check = async (i: number) => {
    const r = await verifyToken(store.db, tokens[i % tokens.length]);
    if (!r.ok) throw new Error(r.message);
  };
  const audit = (i: number) =>
    recordAudit(store.db, { userId: users[i % users.length]!.id, via: 'token', tokenId: 1, tokenName: 'bench', kind: 'mcp', method: 'tools/call', tool: 'execute_code', args: { code: 'x' }, durationMs: 1.5, outcome: 'ok' });
  // A budget no run spends: every take is a spend, the path a request that passes pays.
  const limiter = new StoreRateLimiter(store.db, { perMinute: 1_000_000, burst: 1_000_000 }, 'bench');
  const take = async (i: number) => {
    const d = await limiter.take(userBudgetKey(users[i % users.length]!.id));
    if (!d.ok) throw new Error('the bench budget ran out');
  };
  // Warm-up: statements prepared, pool connections open, the JIT settled.
  await time('warm-up (not counted)', Math.min(CALLS, 2000), CONCURRENCY, async (i) => {
    await check(i);
    await audit(i);
    await take(i);
  });
  await time('token check, one at a time', CALLS, 1, check);
  await time('audit write, one at a time', CALLS, 1, audit);
  await time('rate-limit take, one at a time', CALLS, 1, take);
  await time(`token check, ${CONCURRENCY} at once`, CALLS, CONCURRENCY, check);
  await time(`audit write, ${CONCURRENCY} at once`, CALLS, CONCURRENCY, audit);
  await time(`rate-limit take, ${CONCURRENCY} at once`, CALLS, CONCURRENCY, take);
}

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-store-'));
let cluster: PgCluster | undefined;
try {
  for (const d of DATABASES) {
    if (d === 'sqlite') {
      const store = await openStore({ dataDir: path.join(work, 'sqlite') }, MIGRATIONS);
      await measure('SQLite', store);
      await store.close();
    } else if (d === 'postgres') {
      fs.chmodSync(work, 0o711);
      cluster = await startPostgresCluster({ durable: true });
      const store = await openStore({ dataDir: path.join(work, 'pg'), databaseUrl: await cluster.createDatabase() }, MIGRATIONS);
      await measure('Postgres', store);
      await store.close();
    }
  }
} finally {
  await cluster?.stop();
  fs.rmSync(work, { recursive: true, force: true });
}
