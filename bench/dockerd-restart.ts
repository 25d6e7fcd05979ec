/**
 * dockerd restarting under a gateway whose sandboxes are frozen, on the real runtime:
 * how long dockerd takes to stop (it gives up on a frozen container after 15 s unless
 * the gateway thaws it), to start again, and the users' next runs after it (each gets a
 * new sandbox: dockerd stopped the old ones).
 *
 *   node --import tsx bench/dockerd-restart.ts   (BENCH_FROZEN: sandboxes, 10)
 *
 * It stops and starts the host's dockerd (as scripts/setup-runtime.sh starts it), so it
 * skips itself where other containers run or systemd runs dockerd.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { freezeState } from '../src/sandboxes/freezer.js';
import { createHarness } from '../test/support/harness.js';
import type { SandboxOwner } from '../src/sandboxes/types.js';

const N = Number(process.env.BENCH_FROZEN ?? 10);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function dockerdPid(): number {
  const pid = Number(spawnSync('pidof', ['dockerd'], { encoding: 'utf8' }).stdout.trim().split(/\s+/)[0]);
  if (!(pid > 0)) throw new Error('dockerd is not running');
  return pid;
}

async function main(): Promise<void> {
  const others = spawnSync('docker', ['ps', '--format', '{{.Label "org.sandgate.gateway"}}'], { encoding: 'utf8' }).stdout.split('\n');
  if (others.some((l, i) => l === '' && i < others.length - 1) || fs.existsSync('/run/systemd/system')) {
    console.log('dockerd restart: skipped (containers other than sandgate\'s are running, or systemd runs dockerd)');
    return;
  }
  const h = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: '300', SANDGATE_WARM_POOL_SIZE: '1' } });
  try {
    const users: SandboxOwner[] = [];
    for (let i = 0; i < N; i++) users.push(await h.user(`u${i}`));
    for (const u of users) await h.manager.execute(u, { language: 'python', code: 'import numpy' });
    await h.manager.poolReady();
    const ids = (await h.manager.list()).map((s) => s.containerId);
    for (const t0 = Date.now(); !ids.every((id) => freezeState(id) === 'frozen'); await sleep(50)) {
      if (Date.now() - t0 > 60_000) throw new Error('the sandboxes did not freeze');
    }
    await sleep(1000);

    const pid = dockerdPid();
    let t = performance.now();
    process.kill(pid, 'SIGTERM');
    while (fs.existsSync(`/proc/${pid}`)) await sleep(20);
    const stopMs = performance.now() - t;
    t = performance.now();
    const r = spawnSync('bash', ['scripts/setup-runtime.sh'], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`setup-runtime.sh failed: ${r.stdout}${r.stderr}`);
    const startMs = performance.now() - t;
    const next: number[] = [];
    for (const u of users) {
      t = performance.now();
      const x = await h.manager.execute(u, { language: 'python', code: 'print(1)' });
      if (x.stdout.trim() !== '1') throw new Error('a run failed');
      next.push(performance.now() - t);
    }
    next.sort((a, b) => a - b);
    console.log(`dockerd restart with ${N} users' sandboxes and a pooled one frozen:`);
    console.log(`  dockerd stopped in ${(stopMs / 1000).toFixed(1)} s (it gives up on a frozen container after 15 s), started again in ${(startMs / 1000).toFixed(1)} s (setup-runtime.sh, with its preflight)`);
    console.log(`  each user's next run, on a new sandbox: p50 ${next[Math.floor(N / 2)]!.toFixed(0)} ms, max ${next[N - 1]!.toFixed(0)} ms`);
  } finally {
    await h.close();
  }
}

await main();
