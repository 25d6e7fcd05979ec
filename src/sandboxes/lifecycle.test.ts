import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lifecycle } from './lifecycle.js';
import { sandboxRecord } from './records.js';
import { getUser } from '../accounts/accounts.js';
import { doneFor, ScriptedDriver } from '../../test/support/fake-drivers.js';
import { createHarness, type Harness } from '../../test/support/harness.js';

describe('SandboxManager: lifecycle', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness({ env: { SANDGATE_WARM_POOL_SIZE: '1', SANDGATE_WARM_POOL_PRELOAD: 'numpy,pandas' } });
    await h.manager.poolReady();
  });
  afterAll(() => h.close());

  it('hands a pooled sandbox with the data stack imported to a new user', async () => {
    const bob = await h.user('bob');
    expect(h.manager.poolSize).toBe(1);
    const r = await h.manager.execute(bob, { language: 'python', code: 'import sys\n"pandas" in sys.modules and "numpy" in sys.modules' });
    expect(r.result).toBe('True');
    // numpy's BLAS was sized to the sandbox's 1 CPU at the preload (2 threads on this 2-core host otherwise).
    const threads = await h.manager.execute(bob, { language: 'python', code: 'import os\nlen(os.listdir("/proc/self/task"))' });
    expect(threads.result).toBe('1');
    // The pool refills in the background.
    await h.manager.poolReady();
    expect(h.manager.poolSize).toBe(1);
  });

  it('keeps the workspace when the sandbox is stopped and replaced', async () => {
    const carol = await h.user('carol');
    await h.manager.execute(carol, { language: 'bash', code: 'echo persisted > note.txt' });
    const [before] = (await h.manager.list()).filter((s) => s.user === 'carol');
    expect(await h.manager.stopUser(carol.userId)).toBe(true);
    expect((await h.manager.list()).some((s) => s.user === 'carol')).toBe(false);
    const r = await h.manager.execute(carol, { language: 'bash', code: 'cat note.txt' });
    expect(r.stdout).toBe('persisted\n');
    const [after] = (await h.manager.list()).filter((s) => s.user === 'carol');
    expect(after!.containerId).not.toBe(before!.containerId);
  });

  it('stops idle sandboxes, but never one that is running code', async () => {
    const dave = await h.user('dave');
    const erin = await h.user('erin');
    await h.manager.execute(dave, { language: 'python', code: '1' });
    const long = h.manager.execute(erin, { language: 'bash', code: 'sleep 3; echo done' });
    await new Promise((r) => setTimeout(r, 1500));
    await h.manager.reap(Date.now() + 10 * 24 * 3600 * 1000);
    const users = (await h.manager.list()).map((s) => s.user);
    expect(users).not.toContain('dave');
    expect(users).toContain('erin');
    expect((await long).stdout).toBe('done\n');
  });

  it('counts every execution in the store, at the latest when the sandbox stops', async () => {
    const gina = await h.user('gina');
    const row = async () => (await sandboxRecord(h.store.db, gina.userId))!;
    for (let i = 0; i < 5; i++) await h.manager.execute(gina, { language: 'python', code: `${i}` });
    // The first run is written at once; the next ones wait for the interval or the stop.
    expect((await row()).executions).toBe(1);
    const [live] = (await h.manager.list()).filter((s) => s.user === 'gina');
    expect(await h.manager.stopUser(gina.userId)).toBe(true);
    expect(await row()).toMatchObject({ executions: 5, lastUsedAt: live!.lastActivity });
  });

  it('reports stats for the admin page', async () => {
    const frank = await h.user('frank');
    await h.manager.execute(frank, { language: 'bash', code: 'head -c 1000000 /dev/urandom > blob' });
    const [s] = (await h.manager.list({ stats: true })).filter((x) => x.user === 'frank');
    expect(s!.stats!.memoryBytes).toBeGreaterThan(1_000_000);
    expect(s!.stats!.memoryLimitBytes).toBeGreaterThan(0);
    expect(s!.workspace!.usedBytes).toBeGreaterThanOrEqual(1_000_000);
    expect(s!.workspace!.limitBytes).toBeGreaterThan(s!.workspace!.usedBytes);
    expect(s!.lastActivity).toBeGreaterThanOrEqual(s!.startedAt);
  });
});

describe('SandboxManager: gateway restart', () => {
  it('adopts running sandboxes (Python state intact) and removes what it cannot place', async () => {
    const first = await createHarness({ env: { SANDGATE_WARM_POOL_SIZE: '1' } });
    const gina = await first.user('gina');
    await first.manager.poolReady();
    await first.manager.execute(gina, { language: 'python', code: 'survivor = "still here"' });
    const dataDir = first.dataDir;
    // A crash-like stop: every container keeps running, nothing is cleaned.
    await first.manager.shutdown({ detachOnly: true });
    await first.store.close();

    const second = await createHarness({ dataDir });
    try {
      const g = await second.user('gina');
      expect((await second.manager.list()).map((s) => s.user)).toEqual(['gina']);
      const r = await second.manager.execute(g, { language: 'python', code: 'survivor' });
      expect(r.result).toBe("'still here'");
      expect(second.manager.poolSize).toBe(0);
      // The pooled container of the first run was removed, not adopted: no orphans.
      const docker = (await import('./index.js')).dockerClient(second.config);
      const left = await docker.listContainers({ all: true, filters: { label: [`org.sandgate.gateway=${(await import('./index.js')).gatewayIdFor(dataDir)}`] } });
      expect(left.length).toBe(1);
    } finally {
      await second.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('unmounts at shutdown every workspace but those of sandboxes left running', async () => {
    // A space in the path: /proc/self/mountinfo writes it as \040.
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate shutdown-'));
    const first = await createHarness({ dataDir });
    let firstOpen = true;
    let second: Harness | undefined;
    try {
      const ann = await first.user('ann');
      const bob = await first.user('bob');
      await first.manager.execute(ann, { language: 'bash', code: 'echo kept > a.txt' });
      await first.manager.execute(bob, { language: 'python', code: 'kept = 1' });
      await first.manager.stopUser(ann.userId);
      const workspaceOf = async (userId: number) => path.join(dataDir, 'workspaces', (await getUser(first.store.db, userId))!.workspaceId!);
      const mounted = (p: string) => fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').some((l) => l.split(' ')[4] === fs.realpathSync(p).replaceAll(' ', '\\040'));
      const [annWs, bobWs] = [await workspaceOf(ann.userId), await workspaceOf(bob.userId)];
      expect([mounted(annWs), mounted(bobWs)]).toEqual([true, true]);

      await first.manager.shutdown();
      await first.store.close();
      firstOpen = false;
      // Ann's sandbox had stopped: her workspace is unmounted, its files still in the image.
      expect([mounted(annWs), mounted(bobWs)]).toEqual([false, true]);

      second = await createHarness({ dataDir });
      expect((await second.manager.execute(await second.user('bob'), { language: 'python', code: 'kept' })).result).toBe('1');
      expect((await second.manager.execute(await second.user('ann'), { language: 'bash', code: 'cat a.txt' })).stdout).toBe('kept\n');
    } finally {
      // Whatever failed: stop every sandbox the test started and unmount its workspaces.
      if (firstOpen) await first.close();
      await (second ?? (await createHarness({ dataDir }))).close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('SandboxManager: a first run while the file browser opens the workspace (scripted sandboxes, no Docker)', () => {
  it('runs the user on the workspace they were given, never on the pooled one', async () => {
    const driver = new ScriptedDriver((exec, write) => write(doneFor(exec.id)));
    const h = await createHarness({
      driver,
      prepareTools: async () => {},
      env: { SANDGATE_WARM_POOL_SIZE: '1', SANDGATE_WARM_POOL_PRELOAD: '', SANDGATE_WORKSPACE_BACKEND: 'directory', SANDGATE_FREEZE_AFTER_MS: '0' },
    });
    try {
      await h.manager.poolReady();
      const [pooled] = h.manager.pooled();
      const ann = await h.user('ann');
      // The interleaving: the start reads that ann has no workspace yet, then her file
      // browser (openWorkspace) claims one, then the start takes the pooled sandbox.
      const lifecycle = (h.manager as unknown as { lifecycle: Lifecycle }).lifecycle;
      const read = lifecycle.workspaceIdFor.bind(lifecycle);
      let opened = false;
      lifecycle.workspaceIdFor = async (owner, create) => {
        const id = await read(owner, create);
        if (!create && !opened) {
          opened = true;
          await h.manager.openWorkspace(owner);
        }
        return id;
      };
      const r = await h.manager.execute(ann, { language: 'python', code: '1' });
      expect(r.exitCode).toBe(0);
      const theirs = (await getUser(h.store.db, ann.userId))!.workspaceId;
      expect(theirs).not.toBe(pooled!.workspaceId);
      const [live] = (await h.manager.list()).filter((s) => s.user === 'ann');
      expect(live!.workspaceId).toBe(theirs);
      expect(live!.containerId).not.toBe(pooled!.containerId);
      // The pooled sandbox and its workspace (nobody's) are gone; the pool refills.
      expect(driver.stopped).toContain(pooled!.containerId);
      expect(fs.existsSync(path.join(h.dataDir, 'workspaces', pooled!.workspaceId))).toBe(false);
      await h.manager.poolReady();
    } finally {
      await h.close();
    }
  });
});
