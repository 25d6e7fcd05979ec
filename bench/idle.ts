/**
 * What idle sandboxes cost the host, and what freezing them costs the next run, on the
 * real runtime through the sandbox manager:
 *
 * 1. Host CPU per idle sandbox, BENCH_IDLE sandboxes together over BENCH_WINDOW_S
 *    seconds: awake (freezing off), frozen with and without warm-ups, and the same number
 *    of plain runc containers as the floor, with the gateway's and dockerd's share. The
 *    host's own idle (nothing running) is measured first and taken off. Then what one
 *    warm-up of a frozen sandbox costs, by group.
 * 2. Freezing and thawing: the first run after a short freeze, and after a long idle
 *    (BENCH_LONG_IDLE_S) frozen and not frozen, against runs of a sandbox that never
 *    idles, p50/p95.
 * 3. The delay before freezing, from the figures above: CPU an awake idle sandbox burns
 *    while it waits, against what a thaw adds to the next run.
 * 4. The floor: BENCH_USERS plain runc containers with a sleep each, host CPU by process.
 * 5. BENCH_USERS idle users with numpy and pandas loaded, all frozen: host CPU while all
 *    idle, each one's next run while all others are idle (and in a burst of users one
 *    right after another), and the memory each one holds.
 *
 *   node --import tsx bench/idle.ts   (BENCH_IDLE, BENCH_WINDOW_S, BENCH_USERS, BENCH_SAMPLES,
 *   BENCH_LONG_IDLE_S, BENCH_LONG_N, BENCH_LONG_ROUNDS; BENCH_ONLY=idle, warmup, users, long or floor for one part;
 *   BENCH_REWARM_SEC sets SANDGATE_FREEZE_REWARM_SEC for the users part)
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { freezeState } from '../src/sandboxes/freezer.js';
import { sampleCgroup } from '../src/sandboxes/cgroup.js';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import { createHarness, type Harness } from '../test/support/harness.js';
import { cpuByGroup, hostBusyMs, procFootprint, processCpuMs, stalls, stallsBetween, type CpuGroup, type Stalls } from './host.js';

const IDLE = Number(process.env.BENCH_IDLE ?? 20);
const WINDOW_S = Number(process.env.BENCH_WINDOW_S ?? 30);
const USERS = Number(process.env.BENCH_USERS ?? 200);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 30);
const FREEZE_AFTER_MS = 2000;
const LONG_IDLE_S = Number(process.env.BENCH_LONG_IDLE_S ?? 120);
const LONG_N = Number(process.env.BENCH_LONG_N ?? 10);
const LONG_ROUNDS = Number(process.env.BENCH_LONG_ROUNDS ?? 3);

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const f2 = (x: number) => x.toFixed(2);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const memAvailable = () => Number(/MemAvailable:\s+(\d+) kB/.exec(fs.readFileSync('/proc/meminfo', 'utf8'))![1]) * 1024;

/** Host CPU, ms per second, over `seconds`. */
async function hostCpu(seconds: number): Promise<number> {
  const b0 = hostBusyMs();
  const t0 = performance.now();
  await sleep(seconds * 1000);
  return (hostBusyMs() - b0) / ((performance.now() - t0) / 1000);
}

/**
 * Host CPU, the containers' own (their cgroups and shims) and every group of processes
 * (`cpuByGroup`), ms per second, over `seconds`. The gateway group is this process's CPU
 * between the two scans of /proc (which take a while with thousands of processes).
 */
async function idleCost(seconds: number, ids: string[]): Promise<{ host: number; own: number; groups: Record<CpuGroup, number> }> {
  const b0 = hostBusyMs();
  const g0 = cpuByGroup(ids);
  const t0 = performance.now();
  const me0 = process.cpuUsage();
  await sleep(seconds * 1000);
  const me = process.cpuUsage(me0);
  const g1 = cpuByGroup(ids);
  const s = (performance.now() - t0) / 1000;
  const groups = Object.fromEntries(Object.keys(g1).map((k) => [k, (g1[k as CpuGroup] - g0[k as CpuGroup]) / s])) as Record<CpuGroup, number>;
  // The gateway's own, without the scans (which the host total still includes).
  groups.gateway = (me.user + me.system) / 1000 / s;
  return { host: (hostBusyMs() - b0) / s, own: groups.sandboxes, groups };
}

const idsOf = async (h: Harness) => (await h.manager.list()).map((s) => s.containerId);

async function start(h: Harness, n: number, code: string, prefix: string): Promise<SandboxOwner[]> {
  const owners: SandboxOwner[] = [];
  for (let i = 0; i < n; i++) owners.push(await h.user(`${prefix}${i}`));
  let next = 0;
  await Promise.all(
    Array.from({ length: 3 }, async () => {
      while (next < owners.length) {
        const o = owners[next++]!;
        const r = await h.manager.execute(o, { language: 'python', code });
        if (r.exitCode !== 0) throw new Error(`${o.name}: ${r.stderr}`);
      }
    }),
  );
  return owners;
}

async function allFrozen(h: Harness, timeoutMs = 120_000): Promise<void> {
  const t0 = Date.now();
  for (;;) {
    const list = await h.manager.list();
    if (list.every((s) => freezeState(s.containerId) === 'frozen')) return;
    if (Date.now() - t0 > timeoutMs) throw new Error('sandboxes did not all freeze');
    await sleep(200);
  }
}

async function runMs(h: Harness, o: SandboxOwner): Promise<number> {
  const t = performance.now();
  const r = await h.manager.execute(o, { language: 'python', code: 'print(1)' });
  if (r.stdout.trim() !== '1') throw new Error('a run failed');
  return performance.now() - t;
}

async function main(): Promise<void> {
  const baseline = await hostCpu(10);
  console.log(`host with nothing running: ${f2(baseline)} ms of CPU per s`);
  const only = process.env.BENCH_ONLY;
  if (only === 'floor') return floor(baseline);
  if (only === 'warmup') return warmUpCost();
  if (only === 'idle') {
    await idlePerSandbox(baseline);
    await warmUpCost();
    return;
  }
  if (only === 'long') {
    const h = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: String(FREEZE_AFTER_MS) } });
    try {
      await longIdle(h, await h.user('busy'));
    } finally {
      await h.close();
    }
    return;
  }
  if (only !== 'users') {
    await fewIdle(baseline);
    await floor(baseline);
  }
  await manyUsers(baseline);
}

/** Runs `f` with `n` plain runc containers (a sleep each) started and settled, then removes them. */
async function withRuncContainers<T>(n: number, f: (ids: string[]) => Promise<T>): Promise<T> {
  const ids: string[] = [];
  try {
    for (let i = 0; i < n; i++) {
      ids.push(execFileSync('docker', ['run', '-d', '--runtime=runc', '--network=none', '--read-only', '--cap-drop=ALL', '--label', 'org.sandgate.bench=idle', '--entrypoint', '/bin/sleep', 'sandgate/sandbox:latest', 'infinity']).toString().trim());
    }
    await sleep(3000);
    return await f(ids);
  } finally {
    if (ids.length) execFileSync('docker', ['rm', '-f', ...ids], { stdio: 'ignore' });
  }
}

/**
 * What BENCH_USERS containers cost this host whatever runs in them: plain runc ones with
 * a sleep. Their shims and the host's own work for each process are a floor no sandbox
 * can go under while it is one container.
 */
async function floor(baseline: number): Promise<void> {
  const { host, groups } = await withRuncContainers(USERS, (ids) => idleCost(WINDOW_S, ids));
  const share = (k: CpuGroup) => `${k} ${f2(groups[k] / 20)} %`;
  console.log(`${USERS} plain runc containers (a sleep each), over ${WINDOW_S} s: the whole host ${f2(host / 20)} % of the 2 cores (with nothing running: ${f2(baseline / 20)} %)`);
  console.log(`    by process, % of the 2 cores: ${(['sandboxes', 'init', 'docker', 'gateway', 'kernel', 'other'] as const).map(share).join(', ')}`);
}

type Cost = { host: number; own: number; groups: Record<CpuGroup, number> };

/** IDLE sandboxes of one harness, started with a `pass` each and left idle (frozen once `settled` says so), over WINDOW_S. */
async function idleSandboxes(env: Record<string, string>, prefix: string, settled: (h: Harness) => Promise<void>): Promise<Cost> {
  const h = await createHarness({ env });
  try {
    await start(h, IDLE, 'pass', prefix);
    await settled(h);
    return await idleCost(WINDOW_S, await idsOf(h));
  } finally {
    await h.close();
  }
}

/** 1. Idle CPU per sandbox: awake, frozen (with and without warm-ups), runc. Returns the awake one's, ms/s. */
async function idlePerSandbox(baseline: number): Promise<number> {
  const frozenEnv = { SANDGATE_FREEZE_AFTER_MS: String(FREEZE_AFTER_MS) };
  const settleFrozen = async (h: Harness) => {
    await allFrozen(h);
    await sleep(1000);
  };
  const awakeCost = await idleSandboxes({ SANDGATE_FREEZE_AFTER_MS: '0' }, 'awake', async () => void (await sleep(3000)));
  const frozenCost = await idleSandboxes(frozenEnv, 'frozen', settleFrozen);
  const coldCost = await idleSandboxes({ ...frozenEnv, SANDGATE_FREEZE_REWARM_SEC: '0' }, 'cold', settleFrozen);
  const runcCost = await withRuncContainers(IDLE, async (ids) => idleCost(WINDOW_S, ids));
  // The gateway's and dockerd's share: a warm-up's thaw and freeze are kernel work done in
  // the gateway's writes to the cgroup, and its round trip goes through dockerd and the shim.
  const per = (c: Cost) => `${f2(c.own / IDLE).padStart(6)}   gateway and docker ${f2((c.groups.gateway + c.groups.docker) / IDLE).padStart(5)}   (whole host, less its idle: ${f2((c.host - baseline) / IDLE)})`;
  console.log(`idle CPU per sandbox, ${IDLE} together over ${WINDOW_S} s, ms of CPU per s: its own processes (cgroup + shim)`);
  console.log(`  gVisor (systrap), awake:                 ${per(awakeCost)}`);
  console.log(`  gVisor (systrap), frozen, with warm-ups: ${per(frozenCost)}`);
  console.log(`  gVisor (systrap), frozen, no warm-ups:   ${per(coldCost)}`);
  console.log(`  runc container (floor):                  ${per(runcCost)}`);
  return awakeCost.own / IDLE;
}

/**
 * What one warm-up costs the host: a frozen data-stack sandbox warmed every second
 * (SANDGATE_FREEZE_REWARM_SEC=1) over WINDOW_S, against the same left frozen, by group:
 * its cgroup, its shim, dockerd with containerd (the round trip goes through the attach
 * stream) and the gateway (which thaws and freezes the cgroup).
 */
async function warmUpCost(): Promise<void> {
  const measure = async (rewarm: string) => {
    const h = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: String(FREEZE_AFTER_MS), SANDGATE_FREEZE_REWARM_SEC: rewarm } });
    try {
      await start(h, 1, 'import numpy, pandas\ndf = pandas.DataFrame({"a": numpy.arange(1000)})', `w${rewarm}-`);
      await allFrozen(h);
      await sleep(1000);
      const [box] = await h.manager.list();
      const cg0 = sampleCgroup(box!.containerId)!.cpuNs;
      const c = await idleCost(WINDOW_S, [box!.containerId]);
      const cgroupMs = (sampleCgroup(box!.containerId)!.cpuNs - cg0) / 1e6 / WINDOW_S;
      return { cgroup: cgroupMs, shim: c.groups.sandboxes - cgroupMs, docker: c.groups.docker, gateway: c.groups.gateway };
    } finally {
      await h.close();
    }
  };
  const warmed = await measure('1');
  const left = await measure('0');
  const parts = (['cgroup', 'shim', 'docker', 'gateway'] as const).map((k) => `${k} ${f2(warmed[k] - left[k])}`);
  const total = (['cgroup', 'shim', 'docker', 'gateway'] as const).reduce((sum, k) => sum + warmed[k] - left[k], 0);
  console.log(`one warm-up (a frozen data-stack sandbox warmed every second for ${WINDOW_S} s, less the same left frozen), ms of host CPU: ${f2(total)} (${parts.join(', ')}); every 30 s: ${f2(total / 30)} ms/s per frozen sandbox`);
}

async function fewIdle(baseline: number): Promise<void> {
  const awakePer = await idlePerSandbox(baseline);
  await warmUpCost();

  // 2. Freeze and thaw on the run's path: a short freeze, then a long idle.
  const h = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: String(FREEZE_AFTER_MS) } });
  try {
    const [busy, idler] = [await h.user('busy'), await h.user('idler')];
    for (let i = 0; i < 20; i++) {
      await runMs(h, busy);
      await runMs(h, idler);
    }
    const warm: number[] = [];
    for (let i = 0; i < 200; i++) warm.push(await runMs(h, busy));
    const afterIdle: number[] = [];
    const [idlerBox] = (await h.manager.list()).filter((s) => s.user === 'idler');
    for (let i = 0; i < SAMPLES; i++) {
      // Idle until frozen, and a while longer.
      while (freezeState(idlerBox!.containerId) !== 'frozen') await sleep(5);
      await sleep(500);
      afterIdle.push(await runMs(h, idler));
    }
    console.log('execute_code print(1) through the manager (ms):');
    console.log(`  never idle:                   p50 ${f2(pct(warm, 50))}   p95 ${f2(pct(warm, 95))}   (n=${warm.length})`);
    console.log(`  first run after a short freeze: p50 ${f2(pct(afterIdle, 50))}   p95 ${f2(pct(afterIdle, 95))}   (n=${afterIdle.length}); added p50 ${f2(pct(afterIdle, 50) - pct(warm, 50))}`);
    await longIdle(h, busy);
    // 3. The delay: an awake idle sandbox burns awakeCost ms/s until it freezes.
    console.log(`freezing delay ${FREEZE_AFTER_MS} ms: an idle period costs at most ${f2((awakePer * FREEZE_AFTER_MS) / 1000)} ms of host CPU before the freeze, against ${f2(pct(afterIdle, 50) - pct(warm, 50))} ms added to the next run`);
    console.log(`  (delays of 0.5 / 2 / 10 / 60 s: ${[0.5, 2, 10, 60].map((s) => f2(awakePer * s)).join(' / ')} ms of CPU per idle period)`);
  } finally {
    await h.close();
  }
}

/**
 * The first run after a long idle, as a team gateway sees it: one user works all along
 * (a run every second: the never-idle sandbox, and a host that is not idle either) while
 * LONG_N users each leave their sandbox for LONG_IDLE_S. Three groups of them: frozen
 * with the periodic warm-ups (the default), frozen without them, and never frozen (what
 * an idle period costs the next run without any freezing). Runs never overlap.
 */
async function longIdle(h: Harness, busy: SandboxOwner): Promise<void> {
  const coldH = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: String(FREEZE_AFTER_MS), SANDGATE_FREEZE_REWARM_SEC: '0' } });
  const awakeH = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: '0' } });
  try {
    const groups = await Promise.all(
      [
        { name: `frozen, warmed up every ${h.config.freezeRewarmSec} s`, h, ms: [] as number[] },
        { name: 'frozen, no warm-ups', h: coldH, ms: [] as number[] },
        { name: 'never frozen', h: awakeH, ms: [] as number[] },
      ].map(async (g) => ({ ...g, users: await Promise.all(Array.from({ length: LONG_N }, (_, i) => g.h.user(`long${i}`))) })),
    );
    for (const g of groups) for (const o of g.users) await runMs(g.h, o);
    let lock = Promise.resolve();
    const serial = <T>(f: () => Promise<T>): Promise<T> => {
      const r = lock.then(f);
      lock = r.then(
        () => undefined,
        () => undefined,
      );
      return r;
    };
    const never: number[] = [];
    let working = true;
    const worker = (async () => {
      while (working) {
        never.push(await serial(() => runMs(h, busy)));
        await sleep(1000);
      }
    })();
    try {
      for (let round = 0; round < LONG_ROUNDS; round++) {
        await sleep(LONG_IDLE_S * 1000);
        for (let i = 0; i < LONG_N; i++) {
          // Each group goes first in turn.
          for (let k = 0; k < groups.length; k++) {
            const g = groups[(i + round + k) % groups.length]!;
            g.ms.push(await serial(() => runMs(g.h, g.users[i]!)));
          }
        }
      }
    } finally {
      working = false;
      await worker;
    }
    console.log(`first run after ${LONG_IDLE_S} s idle (${LONG_N} users x ${LONG_ROUNDS} rounds per group, while one user runs code every second; ms):`);
    console.log(`  never idle (that user):  p50 ${f2(pct(never, 50))}   p95 ${f2(pct(never, 95))}   (n=${never.length})`);
    for (const g of groups) console.log(`  ${`${g.name}:`.padEnd(40)} p50 ${f2(pct(g.ms, 50))}   p95 ${f2(pct(g.ms, 95))}   (n=${g.ms.length}); added p50 ${f2(pct(g.ms, 50) - pct(never, 50))}`);
  } finally {
    await coldH.close();
    await awakeH.close();
  }
}

/** 4. Many idle users with the data stack loaded. */
async function manyUsers(baseline: number): Promise<void> {
  const before = memAvailable();
  const denoHost = process.env.SANDGATE_DENO_HOST ?? 'start';
  const rewarm = process.env.BENCH_REWARM_SEC;
  const many = await createHarness({
    env: { SANDGATE_FREEZE_AFTER_MS: String(FREEZE_AFTER_MS), SANDGATE_IDLE_TIMEOUT_SEC: '86400', SANDGATE_DENO_HOST: denoHost, ...(rewarm ? { SANDGATE_FREEZE_REWARM_SEC: rewarm } : {}) },
  });
  try {
    const t0 = performance.now();
    const owners = await start(many, USERS, 'import numpy, pandas\ndf = pandas.DataFrame({"a": numpy.arange(1000)})', 'u');
    console.log(`${USERS} users (SANDGATE_DENO_HOST=${denoHost}${rewarm ? `, SANDGATE_FREEZE_REWARM_SEC=${rewarm}` : ''}) started with numpy and pandas loaded in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
    await allFrozen(many, 300_000);
    await sleep(2000);
    const boxes = await many.manager.list();
    // How pid 1 spends its CPU over the window: evenly, or in bursts that hold a core.
    const slices: number[] = [];
    let last = processCpuMs(1);
    const sampler = setInterval(() => {
      const now = processCpuMs(1);
      slices.push(now - last);
      last = now;
    }, 100);
    const { host: cpu, own, groups } = await idleCost(WINDOW_S, boxes.map((b) => b.containerId)).finally(() => clearInterval(sampler));
    const bursts = slices.filter((ms) => ms >= 50).length;
    console.log(`  pid 1 over the window, per 100 ms: p50 ${f2(pct(slices, 50))} ms, p95 ${f2(pct(slices, 95))} ms, max ${f2(Math.max(...slices))} ms; ${bursts} slices of 50 ms or more in ${WINDOW_S} s`);
    const mem = boxes.map((s) => sampleCgroup(s.containerId)?.memoryBytes ?? NaN).filter(Number.isFinite);
    const heldBytes = before - memAvailable();
    console.log(`  all idle and frozen: the sandboxes' own processes ${f2(own)} ms/s = ${f2(own / 20)} % of the 2 cores; the whole host ${f2(cpu / 20)} % (with nothing running: ${f2(baseline / 20)} %)`);
    const share = (k: CpuGroup) => `${k} ${f2(groups[k] / 20)} %`;
    console.log(`    by process, % of the 2 cores: ${(['sandboxes', 'init', 'docker', 'gateway', 'kernel', 'other'] as const).map(share).join(', ')}`);
    const footprint = procFootprint(boxes.map((b) => b.containerId));
    console.log(`  each sandbox shows the host ${footprint.processes} processes listing ${footprint.fdEntries} open-file entries in all (p50; what the VM's agent walks)`);
    console.log(`  memory per idle user: ${(pct(mem, 50) / 1048576).toFixed(0)} MiB in its cgroup (p50; p95 ${(pct(mem, 95) / 1048576).toFixed(0)}), ${(heldBytes / USERS / 1048576).toFixed(0)} MiB of host memory each (MemAvailable fell ${(heldBytes / 1073741824).toFixed(1)} GiB)`);
    // Each user's next run while every other user is idle: after each run the bench waits
    // for that sandbox to freeze again, so that the next user's run finds all others frozen.
    const boxOf = new Map((await many.manager.list()).map((s) => [s.userId, s.containerId]));
    const next: number[] = [];
    const during: Stalls[] = [];
    for (const o of owners.slice(0, Math.min(USERS, 60))) {
      const s0 = stalls();
      next.push(await runMs(many, o));
      during.push(stallsBetween(s0, stalls()));
      const t0 = Date.now();
      while (freezeState(boxOf.get(o.userId)!) !== 'frozen' && Date.now() - t0 < 10_000) await sleep(50);
      await sleep(100);
    }
    // A burst: users one right after another, each sandbox still awake (its freeze delay)
    // while the next ones thaw and run.
    const burst: number[] = [];
    for (const o of owners.slice(Math.min(USERS, 120), Math.min(USERS, 180))) burst.push(await runMs(many, o));
    await sleep(3 * FREEZE_AFTER_MS);
    // What the host went through during the slowest runs, against a typical one.
    const order = next.map((ms, i) => i).sort((a, b) => next[b]! - next[a]!);
    const show = (i: number) => {
      const d = during[i]!;
      return `${f2(next[i]!)} ms (stalls: cpu ${f2(d.cpu)}, memory ${f2(d.memory)}, io ${f2(d.io)} ms; ${d.majorFaults} major faults; steal ${d.steal} ms; pid 1 ran ${f2(d.init)} ms)`;
    };
    console.log(`  slowest next runs: ${order.slice(0, 4).map(show).join('; ')}`);
    console.log(`  a median one: ${show(order[Math.floor(order.length / 2)]!)}`);
    // A chat turn thaws the sandbox when it begins (prepare), while the model thinks.
    const prepared: number[] = [];
    for (const o of owners.slice(Math.min(USERS, 60), Math.min(USERS, 120))) {
      many.manager.prepare(o);
      await sleep(1000);
      prepared.push(await runMs(many, o));
    }
    const warm: number[] = [];
    for (let i = 0; i < 100; i++) warm.push(await runMs(many, owners[0]!));
    if (prepared.length) console.log(`  next run of a frozen user whose chat turn began 1 s earlier: p50 ${f2(pct(prepared, 50))} ms, p95 ${f2(pct(prepared, 95))} ms (n=${prepared.length})`);
    console.log(`  next run of a frozen user, all others idle: p50 ${f2(pct(next, 50))} ms, p95 ${f2(pct(next, 95))} ms (n=${next.length}); the same user never idle: p50 ${f2(pct(warm, 50))} ms; added ${f2(pct(next, 50) - pct(warm, 50))} ms`);
    if (burst.length) console.log(`  a burst of ${burst.length} users' next runs one after another (each awake for its freeze delay while the next ones run): p50 ${f2(pct(burst, 50))} ms, p95 ${f2(pct(burst, 95))} ms`);
  } finally {
    await many.close();
  }
}

await main();
