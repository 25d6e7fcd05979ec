/**
 * Idle sandboxes are frozen (their cgroup), on the real runtime: the next run thaws them
 * with their state intact; a run in progress is never frozen; every path that stops,
 * kills, reaps or adopts a sandbox works on a frozen one within seconds; the warm pool's
 * sandboxes freeze too.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stopUserSandbox } from '../src/cli/sandboxes.js';
import { cgroupPaths, forgetCgroup } from '../src/sandboxes/cgroup.js';
import { freeze, freezeState, thaw, thawLeftFrozen } from '../src/sandboxes/freezer.js';
import { dockerClient, gatewayIdFor } from '../src/sandboxes/index.js';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import { getUser } from '../src/accounts/accounts.js';
import { createHarness, type Harness } from './support/harness.js';
import { until } from './support/until.js';

const DELAY = '300';
let h: Harness;

beforeAll(async () => {
  h = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: DELAY } });
});
afterAll(async () => {
  await h?.close();
});

async function containerOf(harness: Harness, name: string): Promise<string> {
  const s = (await harness.manager.list()).find((x) => x.user === name);
  if (!s) throw new Error(`${name} has no sandbox`);
  return s.containerId;
}

/** A user whose sandbox has run `code`, and that sandbox's container id. */
async function userWithSandbox(harness: Harness, name: string, code: string): Promise<[SandboxOwner, string]> {
  const owner = await harness.user(name);
  await harness.manager.execute(owner, { language: 'python', code });
  return [owner, await containerOf(harness, name)];
}

async function frozenSoon(id: string): Promise<void> {
  const t0 = Date.now();
  while (freezeState(id) !== 'frozen') {
    if (Date.now() - t0 > 10_000) throw new Error(`not frozen: ${freezeState(id)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function timed<T>(f: () => Promise<T>): Promise<[T, number]> {
  const t = performance.now();
  const r = await f();
  return [r, performance.now() - t];
}

describe('freezing idle sandboxes', () => {
  it('freezes an idle sandbox, and its next run thaws it with Python state intact', async () => {
    const [ann, id] = await userWithSandbox(h, 'ann', 'x = 41\nimport numpy');
    await frozenSoon(id);
    expect((await h.manager.list()).find((s) => s.user === 'ann')?.frozen).toBe(true);
    const r = await h.manager.execute(ann, { language: 'python', code: 'print(x + 1, numpy.__name__)' });
    expect(r.stdout.trim()).toBe('42 numpy');
    expect(freezeState(id)).toBe('thawed');
    await frozenSoon(id);
  });

  it('thaws a sandbox when a chat turn begins (prepare), and freezes it again if no run comes', async () => {
    const [jo, id] = await userWithSandbox(h, 'jo', 'kept = "yes"');
    await frozenSoon(id);
    h.manager.prepare(jo);
    expect(freezeState(id)).toBe('thawed');
    await frozenSoon(id);
    expect((await h.manager.execute(jo, { language: 'python', code: 'print(kept)' })).stdout.trim()).toBe('yes');
  });

  it('never freezes a sandbox while a run is in progress, nor with runs queued', async () => {
    const [bo, id] = await userWithSandbox(h, 'bo', 'pass');
    const states = new Set<string>();
    const watch = setInterval(() => states.add(freezeState(id)), 20);
    const runs = [
      h.manager.execute(bo, { language: 'python', code: 'import time\ntime.sleep(1.2)\nprint("one")' }),
      h.manager.execute(bo, { language: 'bash', code: 'sleep 0.8; echo two' }),
    ];
    const [a, b] = await Promise.all(runs);
    clearInterval(watch);
    expect([a.stdout.trim(), b.stdout.trim()]).toEqual(['one', 'two']);
    expect(states).toEqual(new Set(['thawed']));
  });

  it('stops, kills and reaps frozen sandboxes within seconds, and the CLI removes one', async () => {
    const names = ['cy', 'di', 'ed', 'fay'];
    for (const n of names) await h.manager.execute(await h.user(n), { language: 'python', code: 'pass' });
    const ids = await Promise.all(names.map((n) => containerOf(h, n)));
    for (const id of ids) await frozenSoon(id);
    const docker = dockerClient(h.config);
    const gone = async (id: string) => !(await docker.listContainers({ all: true })).some((c) => c.Id === id);

    const [cy, di, fay] = [await h.user('cy'), await h.user('di'), await h.user('fay')];
    const [stopped, stopMs] = await timed(() => h.manager.stopUser(cy.userId, { by: 'root' }));
    expect(stopped).toBe(true);
    expect(stopMs).toBeLessThan(5_000);
    expect(await gone(ids[0]!)).toBe(true);

    const [killed, killMs] = await timed(() => h.manager.stopUser(di.userId, { kill: true, by: 'root' }));
    expect(killed).toBe(true);
    expect(killMs).toBeLessThan(5_000);
    expect(await gone(ids[1]!)).toBe(true);

    // The reaper, at a time when every sandbox is past its idle timeout.
    const [, reapMs] = await timed(() => h.manager.reap(Date.now() + h.config.idleTimeoutSec * 1000 + 60_000));
    expect(reapMs).toBeLessThan(10_000);
    expect(await gone(ids[2]!)).toBe(true);
    expect((await h.manager.list()).map((s) => s.user)).not.toContain('ed');

    // fay was reaped too; start her again, let her freeze, and stop her from the CLI's code path.
    await h.manager.execute(fay, { language: 'python', code: 'pass' });
    const fayId = await containerOf(h, 'fay');
    await frozenSoon(fayId);
    const fayUser = (await getUser(h.store.db, fay.userId))!;
    const [n, cliMs] = await timed(() => stopUserSandbox(h.manager['deps'].driver, h.store.db, fayUser));
    expect(n).toBe(1);
    expect(cliMs).toBeLessThan(5_000);
    expect(await gone(fayId)).toBe(true);
    // The manager hears its runner go, and the next run starts afresh.
    expect((await h.manager.execute(fay, { language: 'python', code: 'print(3)' })).stdout.trim()).toBe('3');
  });

  it('after a crash with sandboxes frozen, the next start thaws and adopts them, and nothing is stuck', async () => {
    const first = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: DELAY, SANDGATE_WARM_POOL_SIZE: '1' } });
    const dataDir = first.dataDir;
    const gina = await first.user('gina');
    await first.manager.execute(gina, { language: 'python', code: 'survivor = "still here"' });
    await first.manager.poolReady();
    const id = await containerOf(first, 'gina');
    const poolId = first.manager.pooled()[0]!.containerId;
    await frozenSoon(id);
    await frozenSoon(poolId);
    // A crash: nothing is thawed, stopped or unmounted.
    await first.manager.shutdown({ detachOnly: true });
    await first.store.close();
    expect(freezeState(id)).toBe('frozen');

    const [second, startMs] = await timed(() => createHarness({ dataDir, env: { SANDGATE_FREEZE_AFTER_MS: DELAY } }));
    try {
      expect(startMs).toBeLessThan(30_000);
      const r = await second.manager.execute(await second.user('gina'), { language: 'python', code: 'survivor' });
      expect(r.result).toBe("'still here'");
      const docker = dockerClient(second.config);
      const left = await docker.listContainers({ all: true, filters: { label: [`org.sandgate.gateway=${gatewayIdFor(dataDir)}`] } });
      // gina's, adopted; the frozen pooled one was thawed and removed.
      expect(left.map((c) => c.Id)).toEqual([id]);
    } finally {
      await second.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('freezes the warm pool’s sandboxes while they wait, and a user who takes one is served at once', async () => {
    const pooled = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: DELAY, SANDGATE_WARM_POOL_SIZE: '1' } });
    try {
      await pooled.manager.poolReady();
      const id = pooled.manager.pooled()[0]!.containerId;
      await frozenSoon(id);
      await until(() => pooled.manager.pooled()[0]?.frozen === true);
      const hal = await pooled.user('hal');
      const [r, ms] = await timed(() => pooled.manager.execute(hal, { language: 'python', code: 'print("from the pool")' }));
      expect(r.stdout.trim()).toBe('from the pool');
      expect(await containerOf(pooled, 'hal')).toBe(id);
      expect(ms).toBeLessThan(2_000);
    } finally {
      await pooled.close();
    }
  });
});

describe('the runsc platform setting', () => {
  it('runs sandboxes on ptrace when asked, and the preflight says which platform is in use', async () => {
    const ptrace = await createHarness({ env: { SANDGATE_RUNSC_PLATFORM: 'ptrace', SANDGATE_FREEZE_AFTER_MS: DELAY } });
    try {
      const checks = await ptrace.manager['deps'].driver.health({ full: true });
      expect(checks.runtime).toEqual({ ok: true, detail: 'runsc-ptrace runs hardened containers (platform ptrace)' });
      const ivy = await ptrace.user('ivy');
      const r = await ptrace.manager.execute(ivy, { language: 'python', code: 'x = 7\nprint(x * 6)' });
      expect(r.stdout.trim()).toBe('42');
      // Frozen and thawed the same way.
      await frozenSoon(await containerOf(ptrace, 'ivy'));
      expect((await ptrace.manager.execute(ivy, { language: 'python', code: 'print(x)' })).stdout.trim()).toBe('7');
    } finally {
      await ptrace.close();
    }
    const systrap = await h.manager['deps'].driver.health({ full: true });
    expect(systrap.runtime?.detail).toBe('runsc runs hardened containers (platform systrap)');
  });
});

describe('keeping frozen sandboxes warm', () => {
  let w: Harness;
  beforeAll(async () => {
    w = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: DELAY, SANDGATE_FREEZE_REWARM_SEC: '1' } });
  });
  afterAll(async () => {
    await w?.close();
  });
  const liveOf = (userId: number) => w.manager['users'].get(userId)!;

  it('thaws a frozen sandbox for a round trip through its Python kernel every SANDGATE_FREEZE_REWARM_SEC, and freezes it again', async () => {
    const [kim, id] = await userWithSandbox(w, 'kim', 'x = 5');
    await frozenSoon(id);
    const warmUps: string[] = [];
    const lastActivity = liveOf(kim.userId).lastActivity;
    const off = liveOf(kim.userId).handle.onEvent((e) => {
      if (e.type === 'preloaded' && !e.error) warmUps.push(e.id);
    });
    await new Promise((r) => setTimeout(r, 3_500));
    off();
    expect(warmUps.length).toBeGreaterThanOrEqual(2);
    expect(warmUps.every((i) => i.startsWith('warm'))).toBe(true);
    await frozenSoon(id);
    // A warm-up is not use: the idle timeout still counts from the last run, and state is intact.
    expect(liveOf(kim.userId).lastActivity).toBe(lastActivity);
    expect((await w.manager.execute(kim, { language: 'python', code: 'print(x)' })).stdout.trim()).toBe('5');
  });

  it('never freezes a run that arrives during a warm-up, and keeps the order of runs', async () => {
    const [lee, id] = await userWithSandbox(w, 'lee', 'n = 0');
    const seen = new Set<string>();
    const watch = setInterval(() => {
      if (liveOf(lee.userId).run) seen.add(freezeState(id));
    }, 5);
    try {
      for (let i = 1; i <= 10; i++) {
        // Land at any point of the freeze / warm-up cycle.
        await new Promise((r) => setTimeout(r, Math.random() * 1_400));
        const r = await w.manager.execute(lee, { language: 'python', code: 'import time\ntime.sleep(0.1)\nn += 1\nprint(n)' });
        expect(r.stdout.trim()).toBe(String(i));
      }
    } finally {
      clearInterval(watch);
    }
    expect(seen).toEqual(new Set(['thawed']));
    await frozenSoon(id);
  });

  it('a Python kernel that ends while its sandbox idles is reported by the next run, though warm-ups started another meanwhile', async () => {
    const ned = await w.user('ned');
    await w.manager.execute(ned, { language: 'python', code: 'z = 1\nimport os, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.2), os._exit(5))).start()' });
    // Frozen, then warmed up once or twice: the first warm-up finds the kernel gone.
    await new Promise((r) => setTimeout(r, 2_500));
    const r = await w.manager.execute(ned, { language: 'python', code: '"z" in globals()' });
    expect(r.result).toBe('False');
    expect(r.restarted).toBe(true);
    expect(r.notice).toMatch(/^The Python kernel had ended since the last execution \(exit code 5\) and was started again\. Variables and imports from earlier executions are gone\./);
    const again = await w.manager.execute(ned, { language: 'python', code: 'z = 2\nz' });
    expect([again.result, again.restarted, again.notice]).toEqual(['2', false, undefined]);
  });

  it('stops and kills a sandbox at any point of its freeze and warm-up cycle within seconds, and nothing is left frozen', async () => {
    const docker = dockerClient(w.config);
    for (let i = 0; i < 6; i++) {
      const [mo, id] = await userWithSandbox(w, `mo${i}`, 'pass');
      await new Promise((r) => setTimeout(r, 300 + Math.random() * 1_500));
      const [stopped, ms] = await timed(() => w.manager.stopUser(mo.userId, { kill: i % 2 === 1, by: 'root' }));
      expect(stopped).toBe(true);
      expect(ms).toBeLessThan(5_000);
      expect((await docker.listContainers({ all: true })).some((c) => c.Id === id)).toBe(false);
    }
    // A warm-up that was under way when its sandbox went does not outlive it.
    await new Promise((r) => setTimeout(r, 1_500));
    expect((await w.manager.list()).map((s) => s.user).filter((u) => u.startsWith('mo'))).toEqual([]);
  });
});

/**
 * The cgroup v2 freezer on this kernel. Where Docker keeps its containers on cgroup v2,
 * every test above runs on it. On a host with cgroup v1 and v2's hierarchy mounted beside
 * it (/sys/fs/cgroup/unified, with no controllers: freezing is part of v2's core), the
 * sandbox's processes are put in a v2 cgroup of their own too, and the freezer is pointed
 * at a cgroup root where that one stands as Docker's would.
 */
const UNIFIED = '/sys/fs/cgroup/unified';
const hybrid = fs.existsSync(path.join(UNIFIED, 'cgroup.procs')) && !fs.existsSync('/sys/fs/cgroup/cgroup.controllers');

describe.skipIf(!hybrid)('the cgroup v2 freezer (cgroup.freeze, cgroup.events)', () => {
  let v: Harness;
  beforeAll(async () => {
    // No v1 freezing here: only the v2 freezer touches these sandboxes.
    v = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: '0' } });
  });
  afterAll(async () => {
    await v?.close();
  });

  it('freezes a real sandbox: a run waits until the thaw, then finds its Python state', async () => {
    const [kim, id] = await userWithSandbox(v, 'kim', 'y = 7');
    const group = path.join(UNIFIED, `sandgate-test-${process.pid}`);
    const leaf = path.join(group, 'docker', id);
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cgroup-root-'));
    const records = fs.mkdtempSync(path.join(os.tmpdir(), 'frozen-records-'));
    const pids = fs.readFileSync(path.join(cgroupPaths(id)!.freezer, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
    fs.mkdirSync(leaf, { recursive: true });
    try {
      for (const pid of pids) fs.writeFileSync(path.join(leaf, 'cgroup.procs'), pid);
      fs.writeFileSync(path.join(root, 'cgroup.controllers'), '');
      fs.symlinkSync(path.join(group, 'docker'), path.join(root, 'docker'));
      expect(cgroupPaths(id, root)?.version).toBe(2);

      expect(await freeze(id, { root, records, owner: 'v2' })).toBe(true);
      expect(fs.readFileSync(path.join(leaf, 'cgroup.events'), 'utf8')).toMatch(/^frozen 1$/m);
      expect(freezeState(id, root)).toBe('frozen');
      expect(fs.readFileSync(path.join(records, id), 'utf8')).toMatch(new RegExp(`^v2 ${process.pid} \\d+\n$`));
      let answered = false;
      const run = v.manager.execute(kim, { language: 'python', code: 'print(y * 6)' }).finally(() => (answered = true));
      await new Promise((r) => setTimeout(r, 1_000));
      expect(answered).toBe(false);

      expect(thaw(id, { root, records })).toBe(true);
      expect((await run).stdout.trim()).toBe('42');
      expect(freezeState(id, root)).toBe('thawed');
      expect(fs.existsSync(path.join(records, id))).toBe(false);
      // A record left behind, as a killed gateway leaves it, is thawed by the next start.
      expect(await freeze(id, { root, records, owner: 'v2' })).toBe(true);
      expect(thawLeftFrozen('someone else', { root, records })).toBe(0);
      expect(freezeState(id, root)).toBe('frozen');
      expect(thawLeftFrozen('v2', { root, records })).toBe(1);
      expect(freezeState(id, root)).toBe('thawed');
    } finally {
      fs.writeFileSync(path.join(leaf, 'cgroup.freeze'), '0');
      // Back to the root of v2's hierarchy, with whatever they started meanwhile.
      for (let left = fs.readFileSync(path.join(leaf, 'cgroup.procs'), 'utf8'); left; left = fs.readFileSync(path.join(leaf, 'cgroup.procs'), 'utf8')) {
        for (const pid of left.split('\n').filter(Boolean)) {
          try {
            fs.writeFileSync(path.join(UNIFIED, 'cgroup.procs'), pid);
          } catch {
            // exited
          }
        }
      }
      fs.rmdirSync(leaf);
      fs.rmdirSync(path.join(group, 'docker'));
      fs.rmdirSync(group);
      forgetCgroup(id, root);
    }
  });
});
