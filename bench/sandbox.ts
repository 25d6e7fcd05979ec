/**
 * Sandbox speed and memory, measured in one run so the ratios hold on a noisy machine:
 *   node --import tsx bench/sandbox.ts [--quick]
 *
 * - `docker exec … python3 -c 1+1` under runsc (the slow path sandgate avoids);
 * - warm Python round trip (`1+1`) through the SandboxManager;
 * - first execution of a brand-new user, with and without the warm pool;
 * - TypeScript through Deno;
 * - host memory of an idle sandbox, bare and with numpy+pandas imported, and how many
 *   idle sandboxes fit in 24 GiB: the container's own cgroup figures, and what each
 *   added sandbox takes from the host as a whole;
 * - host CPU an idle sandbox keeps using: a gVisor sentry's Go runtime wakes about a
 *   thousand times a second even when nothing runs in it.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';
import { dockerClient } from '../src/sandboxes/index.js';
import { createHarness, type Harness } from '../test/support/harness.js';
import { hostBusyMs } from './host.js';

const run = promisify(execFile);
const quick = process.argv.includes('--quick');
const N = quick ? 20 : 200;

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}
const fmt = (ms: number) => (ms < 10 ? ms.toFixed(2) : ms.toFixed(0));
function report(name: string, xs: number[]): number {
  const p50 = pct(xs, 50);
  console.log(`${name.padEnd(52)} p50 ${fmt(p50).padStart(7)} ms   p95 ${fmt(pct(xs, 95)).padStart(7)} ms   (n=${xs.length})`);
  return p50;
}

async function timeIt(n: number, fn: (i: number) => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn(i);
    out.push(performance.now() - t0);
  }
  return out;
}

/**
 * Host memory of one idle container, two ways:
 * - as `docker stats` reports it: cgroup usage less *inactive* page cache (so it swings
 *   with how much of the image's files the host happens to keep in active cache);
 * - the container's own memory: the cgroup's rss + shmem (gVisor keeps the sandbox's
 *   memory in a shared memory file), without any page cache.
 */
async function hostMemoryMb(h: Harness, user: string): Promise<{ dockerStats: number; own: number }> {
  const [s] = (await h.manager.list({ stats: true })).filter((x) => x.user === user);
  const info = await dockerClient(h.config).getContainer(s!.containerId).inspect();
  const cg = fs.readFileSync(`/proc/${info.State.Pid}/cgroup`, 'utf8').split('\n');
  const v1 = cg.find((l) => /:memory:/.test(l));
  const rel = (v1 ?? cg.find((l) => l.startsWith('0::'))!).split(':').slice(2).join(':');
  const statFile = v1 ? `/sys/fs/cgroup/memory${rel}/memory.stat` : `/sys/fs/cgroup${rel}/memory.stat`;
  const stat = Object.fromEntries(
    fs.readFileSync(statFile, 'utf8').split('\n').filter(Boolean).map((l) => [l.split(' ')[0]!, Number(l.split(' ')[1])]),
  );
  const own = (stat.rss ?? stat.anon ?? 0) + (stat.shmem ?? 0);
  return { dockerStats: s!.stats!.memoryBytes / 2 ** 20, own: own / 2 ** 20 };
}

async function main() {
  console.log(`sandgate sandbox bench (${quick ? 'quick' : 'full'}), ${new Date().toISOString()}`);
  const h = await createHarness({ env: { SANDGATE_WARM_POOL_SIZE: '0', SANDGATE_LOG_LEVEL: 'silent' } });
  try {
    const owner = await h.user('bench');
    await h.manager.execute(owner, { language: 'python', code: '1' });

    // Memory first, while the sandbox has run nothing but the runner's own start.
    await new Promise((r) => setTimeout(r, 1000));
    const bare = await hostMemoryMb(h, 'bench');
    await h.manager.execute(owner, { language: 'python', code: 'import numpy, pandas' });
    await new Promise((r) => setTimeout(r, 1000));
    const stack = await hostMemoryMb(h, 'bench');
    for (const [name, m] of [['bare', bare], ['numpy+pandas', stack]] as const) {
      console.log(
        `${`idle sandbox host memory, ${name}`.padEnd(52)} own ${m.own.toFixed(1)} MB (${Math.floor((24 * 1024) / m.own)} fit in 24 GiB)   docker stats ${m.dockerStats.toFixed(1)} MB`,
      );
    }
    await h.manager.stopUser(owner.userId);
    await h.manager.execute(owner, { language: 'python', code: '1' });
    const [sb] = await h.manager.list();

    const dockerExec = await timeIt(quick ? 5 : 30, () => run('docker', ['exec', sb!.containerId, 'python3', '-c', '1+1']));
    const viaManager = await timeIt(N, () => h.manager.execute(owner, { language: 'python', code: '1+1' }));
    const pExec = report('docker exec python3 -c 1+1 (runsc)', dockerExec);
    const pWarm = report('warm python 1+1 through the manager', viaManager);
    console.log(`  -> ${(pExec / pWarm).toFixed(0)}x faster than docker exec`);

    await h.manager.execute(owner, { language: 'typescript', code: 'console.log(1)' });
    report('typescript via deno (console.log(1+1))', await timeIt(quick ? 5 : 30, () => h.manager.execute(owner, { language: 'typescript', code: 'console.log(1+1)' })));
    report('bash (echo)', await timeIt(quick ? 5 : 30, () => h.manager.execute(owner, { language: 'bash', code: 'echo 2' })));

  } finally {
    await h.close();
  }

}

/** Memory in use on the host (MemTotal - MemAvailable), MiB. */
function hostUsedMb(): number {
  const m = Object.fromEntries(
    fs.readFileSync('/proc/meminfo', 'utf8').split('\n').filter(Boolean).map((l) => [l.split(':')[0]!, parseInt(l.split(':')[1]!, 10)]),
  );
  return (m.MemTotal! - m.MemAvailable!) / 1024;
}

/** CPU the whole host is busy for, in ms per second, over `ms`. */
async function hostBusyMsPerSec(ms: number): Promise<number> {
  const busy = hostBusyMs();
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, ms));
  return ((hostBusyMs() - busy) * 1000) / (performance.now() - t0);
}

/**
 * What one more idle sandbox costs the host, everything included: the gVisor sentry and
 * gofer, containerd's shim, the runner and kernel, the gateway's own share, page cache
 * the sandboxes do not share. Starts `n` sandboxes and divides the rise in the host's
 * used memory by `n`; one sandbox is started first so the image's shared files are
 * already cached.
 */
async function marginalMemory(n: number): Promise<{ bare: number; stack: number; idleCpu: number }> {
  const hm = await createHarness({ env: { SANDGATE_WARM_POOL_SIZE: '0', SANDGATE_LOG_LEVEL: 'silent' } });
  const settle = () => new Promise((r) => setTimeout(r, 3000));
  try {
    await hm.manager.execute(await hm.user('mem-first'), { language: 'python', code: 'import numpy, pandas' });
    await settle();
    const before = hostUsedMb();
    const busyBefore = await hostBusyMsPerSec(10_000);
    for (let i = 0; i < n; i++) await hm.manager.execute(await hm.user(`mem${i}`), { language: 'python', code: '1' });
    await settle();
    const bare = (hostUsedMb() - before) / n;
    const idleCpu = ((await hostBusyMsPerSec(10_000)) - busyBefore) / n;
    for (let i = 0; i < n; i++) await hm.manager.execute(await hm.user(`mem${i}`), { language: 'python', code: 'import numpy, pandas' });
    await settle();
    return { bare, stack: (hostUsedMb() - before) / n, idleCpu };
  } finally {
    await hm.close();
  }
}

async function firstRun(pool: number): Promise<number[]> {
  const hp = await createHarness({ env: { SANDGATE_WARM_POOL_SIZE: String(pool), SANDGATE_WARM_POOL_PRELOAD: 'numpy,pandas', SANDGATE_LOG_LEVEL: 'silent' } });
  const out: number[] = [];
  try {
    for (let i = 0; i < (quick ? 3 : 10); i++) {
      if (pool) await hp.manager.poolReady();
      const owner = await hp.user(`new${pool}x${i}`);
      const t0 = performance.now();
      const r = await hp.manager.execute(owner, { language: 'python', code: 'import numpy, pandas\n1+1' });
      out.push(performance.now() - t0);
      if (r.result !== '2') throw new Error(JSON.stringify(r));
      // Stop it so sandboxes do not pile up on a 2-core machine.
      await hp.manager.stopUser(owner.userId);
    }
  } finally {
    await hp.close();
  }
  return out;
}

await main().then(async () => {
  const n = Number(process.env.BENCH_MEMORY_SANDBOXES ?? (quick ? 4 : 10));
  const m = await marginalMemory(n);
  console.log(
    `${`host memory per added idle sandbox (${n} started)`.padEnd(52)} bare ${m.bare.toFixed(1)} MB (${Math.floor((24 * 1024) / m.bare)} fit in 24 GiB)   numpy+pandas ${m.stack.toFixed(1)} MB (${Math.floor((24 * 1024) / m.stack)} fit)`,
  );
  console.log(
    `${`host CPU per added idle sandbox (${n} started)`.padEnd(52)} ${m.idleCpu.toFixed(1)} ms/s (${((m.idleCpu / 1000) * 100).toFixed(1)}% of a core; ${Math.floor(2000 / m.idleCpu)} idle sandboxes would fill 2 cores)`,
  );
  report('first run of a new user, warm pool (numpy+pandas)', await firstRun(1));
  report('first run of a new user, no pool (cold start)', await firstRun(0));
});
