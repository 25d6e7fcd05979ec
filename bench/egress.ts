/**
 * What the egress path costs, on the real runtime (Docker + runsc, SQLite) against the
 * stand-ins of test/support/egress.ts (a network namespace on this host):
 *
 * - the proxy's added latency per request: N plain-HTTP GETs from Python inside a
 *   sandbox, one connection each, through the relay, the runner's channel and the proxy,
 *   against the same GETs made by Python on the host straight to the stand-in;
 * - `pip install` of the stand-in wheel (the run's wall time, pip's own start included);
 * - isolation: another user's warm run (python `1`) p95, idle and while one user floods
 *   the proxy with concurrent downloads.
 *
 *   node --import tsx bench/egress.ts     (BENCH_REQUESTS, default 300; BENCH_RUNS, default 100)
 */
import { spawnSync } from 'node:child_process';
import { setUserPermissions } from '../src/accounts/accounts.js';
import { startNetworkStandins } from '../test/support/egress.js';
import { startGateway } from '../test/support/mcp.js';

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 300);
const RUNS = Number(process.env.BENCH_RUNS ?? 100);
const READ = {
  read: ['/workspace', '/skills', '/tools'],
  write: ['/workspace'],
};
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const f = (ms: number) => `${ms.toFixed(2)} ms`;
const line = (name: string, xs: number[]) => console.log(`${name.padEnd(52)} p50 ${f(pct(xs, 50)).padStart(10)}  p95 ${f(pct(xs, 95)).padStart(10)}  (n=${xs.length})`);

/**
 * Python timing n GETs: through the proxy (absolute URIs to 127.0.0.1:3128, as
 * HTTP_PROXY makes urllib send them) or straight to the stand-in; a connection each, or
 * one kept alive for all (as requests.Session does).
 */
const timing = (target: { proxy: true } | { host: string }, n: number, keepAlive: boolean) => `
import http.client, time, json
ts = []
def connect():
    return http.client.HTTPConnection(${'proxy' in target ? "'127.0.0.1', 3128" : `'${'host' in target ? target.host : ''}', 8080`}, timeout=10)
c = connect()
for i in range(${n}):
    t = time.perf_counter()
    if ${keepAlive ? 'False' : 'True'}:
        c = connect()
    c.request('GET', ${'proxy' in target ? "'http://other.test:8080/t'" : "'/t'"}, headers={'Host': 'other.test:8080'})
    r = c.getresponse(); r.read()
    if ${keepAlive ? 'False' : 'True'}:
        c.close()
    ts.append((time.perf_counter() - t) * 1000)
print(json.dumps(ts))
`;

async function main() {
  const outside = await startNetworkStandins();
  const gw = await startGateway({
    env: {
      SANDGATE_DEFAULT_PERMISSIONS: JSON.stringify(READ),
      ...outside.settings,
      SANDGATE_EGRESS_MAX_CONNECTIONS: '64',
      ...(process.env.BENCH_KB_PER_SEC && {
        SANDGATE_EGRESS_KB_PER_SEC: process.env.BENCH_KB_PER_SEC,
      }),
    },
  });
  try {
    const ann = await gw.harness.user('bench-egress-ann');
    const bob = await gw.harness.user('bench-egress-bob');
    await setUserPermissions(gw.harness.store.db, ann.name, JSON.stringify({ ...READ, net: ['registries', 'other.test:8080'] }));
    const run = (owner: typeof ann, language: 'python' | 'bash', code: string) => gw.harness.manager.execute(owner, { language, code, timeoutSec: 300 });
    await run(ann, 'python', '1');
    await run(bob, 'python', '1');

    for (const keepAlive of [false, true]) {
      const through = JSON.parse((await run(ann, 'python', timing({ proxy: true }, REQUESTS, keepAlive))).stdout) as number[];
      const direct = JSON.parse(spawnSync('python3', ['-c', timing({ host: outside.outside }, REQUESTS, keepAlive)], { encoding: 'utf8' }).stdout) as number[];
      console.log(`egress proxy, ${REQUESTS} GETs of a few bytes, ${keepAlive ? 'one connection kept alive' : 'one connection each'}`);
      line('  host → stand-in, straight', direct.slice(10));
      line('  sandbox → relay → gateway proxy → stand-in', through.slice(10));
      console.log(`  added p50: ${f(pct(through.slice(10), 50) - pct(direct.slice(10), 50))}`);
    }

    const installs: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await run(ann, 'bash', 'pip install --force-reinstall -q sgdemo');
      if (r.exitCode !== 0) throw new Error(r.stdout + r.stderr);
      installs.push(r.durationMs);
    }
    line('pip install sgdemo (the run, pip start included)', installs);

    const warm = async () => {
      const xs: number[] = [];
      for (let i = 0; i < RUNS; i++) {
        const t = performance.now();
        await run(bob, 'python', '1');
        xs.push(performance.now() - t);
      }
      return xs;
    };
    const idle = await warm();
    let flooding = true;
    const flood = (async () => {
      let rounds = 0;
      while (flooding) {
        await run(
          ann,
          'python',
          `
import threading, urllib.request
def get():
    try: urllib.request.urlopen('http://other.test:8080/big?bytes=8000000', timeout=60).read()
    except Exception: pass
ts = [threading.Thread(target=get) for _ in range(16)]
[t.start() for t in ts]; [t.join() for t in ts]`,
        );
        rounds++;
      }
      return rounds;
    })();
    await new Promise((r) => setTimeout(r, 1000));
    const busy = await warm();
    flooding = false;
    const rounds = await flood;
    line("another user's warm run, idle", idle);
    line("another user's warm run, during a flood", busy);
    console.log(`  p95 ratio ${(pct(busy, 95) / pct(idle, 95)).toFixed(2)}× (flood: ${rounds} rounds of 16 downloads of 8 MB)`);
  } finally {
    await gw.close();
    await outside.close();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
