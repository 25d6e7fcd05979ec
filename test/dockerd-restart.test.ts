/**
 * dockerd restarting while sandboxes are frozen, on the real runtime. dockerd can neither
 * stop a frozen container (its shutdown waits 15 s, then leaves it) nor start while one
 * exists (it waits forever for the container's state). A running gateway thaws its
 * sandboxes as soon as dockerd closes its API; what a killed gateway left frozen is
 * thawed by the next start: scripts/setup-runtime.sh, or the gateway itself.
 *
 * These tests stop and start the host's dockerd: they run only where dockerd runs in the
 * background as scripts/setup-runtime.sh starts it (not under systemd), no container but
 * sandgate's is running, and SANDGATE_TEST_NO_DOCKERD_RESTART is not set.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { configFor } from '../src/config.js';
import { FROZEN_RECORDS, freeze, freezeState, thaw } from '../src/sandboxes/freezer.js';
import { dockerClient, gatewayIdFor } from '../src/sandboxes/index.js';
import { createHarness, type Harness } from './support/harness.js';

const DOCKERD_LOG = '/var/log/sandgate-dockerd.log';
/** Containers on this host that are not sandgate's: a dockerd restart would stop them. */
const othersRunning = spawnSync('docker', ['ps', '--format', '{{.Label "org.sandgate.gateway"}}'], { encoding: 'utf8' })
  .stdout.split('\n')
  .some((l, i, all) => l === '' && i < all.length - 1);
const canRestart = !fs.existsSync('/run/systemd/system') && process.getuid?.() === 0 && !othersRunning && !process.env.SANDGATE_TEST_NO_DOCKERD_RESTART;
const docker = dockerClient(configFor({}));

function dockerdPid(): number | undefined {
  const r = spawnSync('pidof', ['dockerd'], { encoding: 'utf8' });
  const pid = Number(r.stdout.trim().split(/\s+/)[0]);
  return pid > 0 ? pid : undefined;
}

async function untilAsync(cond: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond().catch(() => false))) {
    if (Date.now() > end) throw new Error(`${what}: not in ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Stops dockerd with SIGTERM, as an operator would; returns what it logged meanwhile. */
async function stopDockerd(): Promise<string> {
  const pid = dockerdPid();
  if (!pid) throw new Error('dockerd is not running');
  const from = fs.existsSync(DOCKERD_LOG) ? fs.statSync(DOCKERD_LOG).size : 0;
  process.kill(pid, 'SIGTERM');
  await untilAsync(async () => !fs.existsSync(`/proc/${pid}`), 60_000, 'dockerd exits');
  const fd = fs.openSync(DOCKERD_LOG, 'r');
  try {
    const buf = Buffer.alloc(fs.fstatSync(fd).size - from);
    fs.readSync(fd, buf, 0, buf.length, from);
    return buf.toString('utf8');
  } finally {
    fs.closeSync(fd);
  }
}

/** Starts dockerd the way the README's commands do. */
function setupRuntime(): { status: number | null; output: string } {
  const r = spawnSync('bash', ['scripts/setup-runtime.sh'], { encoding: 'utf8', timeout: 120_000 });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

/** Whether dockerd answers within `ms` (one that is starting accepts connections and answers nothing). */
function answers(ms = 2000): Promise<boolean> {
  return Promise.race([docker.ping().then(() => true, () => false), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);
}

/** Whatever happened, the next test file finds dockerd up. */
async function dockerdBack(): Promise<void> {
  for (const rec of fs.existsSync(FROZEN_RECORDS) ? fs.readdirSync(FROZEN_RECORDS) : []) thaw(rec);
  if (!(await answers(10_000))) setupRuntime();
}

const frozen = (ids: string[]) => ids.length > 0 && ids.every((id) => freezeState(id) === 'frozen');

describe.skipIf(!canRestart)('dockerd restarting with frozen sandboxes', () => {
  let h: Harness | undefined;
  afterAll(async () => {
    await dockerdBack();
    await h?.close();
  });

  it('a running gateway thaws them as dockerd stops, so it stops at once and starts again; users lose no file and their next run works', async () => {
    h = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: '300', SANDGATE_WARM_POOL_SIZE: '1' } });
    const ann = await h.user('ann');
    await h.manager.execute(ann, { language: 'python', code: 'open("/workspace/kept.txt", "w").write("still here")\nx = 1' });
    await h.manager.poolReady();
    const mine = async () => docker.listContainers({ all: true, filters: { label: [`org.sandgate.gateway=${gatewayIdFor(h!.dataDir)}`] } });
    const ids = async () => (await mine()).map((c) => c.Id);
    await untilAsync(async () => (await ids()).length === 2 && frozen(await ids()), 30_000, 'the user and pool sandboxes freeze');
    const before = await ids();
    expect(fs.readdirSync(FROZEN_RECORDS)).toEqual(expect.arrayContaining(before));

    const log = await stopDockerd();
    // dockerd stopped its containers itself: none had to be given up on.
    expect(log).toMatch(/Processing signal 'terminated'/);
    expect(log).not.toMatch(/Force shutdown daemon/);
    for (const id of before) expect(freezeState(id)).not.toBe('frozen');
    expect(fs.readdirSync(FROZEN_RECORDS).filter((r) => before.includes(r))).toEqual([]);

    const started = setupRuntime();
    expect(started.status, started.output).toBe(0);
    // Back: the user's next run gets a new sandbox with the workspace as it was.
    const r = await h.manager.execute(ann, { language: 'python', code: 'print(open("/workspace/kept.txt").read())' });
    expect(r.stdout.trim()).toBe('still here');
    // The containers dockerd stopped are removed, the pool refills, and idle sandboxes freeze again.
    await untilAsync(async () => (await mine()).every((c) => !before.includes(c.Id)), 30_000, 'stopped containers removed');
    await untilAsync(async () => (await ids()).length === 2 && frozen(await ids()), 60_000, 'freezing again');
    expect((await mine()).map((c) => c.State)).toEqual(['running', 'running']);
  });

  it('a gateway killed while its sandbox is frozen: dockerd stops without it, and the next start thaws it before starting dockerd', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-restart-'));
    const env = { SANDGATE_DATA_DIR: dataDir, SANDGATE_PORT: '0', SANDGATE_WARM_POOL_SIZE: '1', SANDGATE_FREEZE_AFTER_MS: '300' };
    const mine = async () => (await docker.listContainers({ all: true, filters: { label: [`org.sandgate.gateway=${gatewayIdFor(dataDir)}`] } })).map((c) => c.Id);
    const gateway = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { env: { PATH: process.env.PATH!, ...env }, stdio: 'ignore' });
    const exited = new Promise((r) => gateway.on('exit', r));
    let frozenId: string | undefined;
    try {
      await untilAsync(async () => (await mine()).length === 1 && frozen(await mine()), 90_000, 'the pooled sandbox freezes');
      [frozenId] = await mine();
      gateway.kill('SIGKILL');
      await exited;
      expect(fs.readFileSync(path.join(FROZEN_RECORDS, frozenId!), 'utf8')).toMatch(new RegExp(`^${gatewayIdFor(dataDir)} ${gateway.pid} \\d+\n$`));

      // With nobody to thaw it, dockerd gives up on the frozen container after 15 s.
      expect(await stopDockerd()).toMatch(/Force shutdown daemon/);
      expect(freezeState(frozenId!)).toBe('frozen');
      const started = setupRuntime();
      expect(started.status, started.output).toBe(0);
      expect(started.output).toContain(`thawed sandbox ${frozenId!.slice(0, 12)}`);
      expect(fs.existsSync(path.join(FROZEN_RECORDS, frozenId!))).toBe(false);
      // The container that was to stop has stopped; the next gateway removes it.
      await untilAsync(async () => (await docker.getContainer(frozenId!).inspect()).State.Running === false, 30_000, 'the container stops');
    } finally {
      gateway.kill('SIGKILL');
      await dockerdBack();
      for (const id of await mine()) await docker.getContainer(id).remove({ force: true }).catch(() => {});
      spawnSync('bash', ['-c', `grep -o ' ${dataDir}[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l`]);
    }
  });

  it('a gateway started alone (no setup script) thaws what its killed run left frozen, and a dockerd waiting on it comes up', async () => {
    const h1 = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: '300' } });
    const h2Env = { SANDGATE_FREEZE_AFTER_MS: '300' };
    let h2: Harness | undefined;
    const bo = await h1.user('bo');
    try {
      await h1.manager.execute(bo, { language: 'python', code: 'print(1)' });
      const [id] = (await h1.manager.list()).map((s) => s.containerId);
      await untilAsync(async () => frozen([id!]), 30_000, 'frozen');
      // As a crash would: the gateway is gone, the sandbox stays frozen and written down.
      await h1.manager.shutdown({ detachOnly: true });
      expect(freezeState(id!)).toBe('frozen');
      await stopDockerd();
      // dockerd started directly, as systemd would: it waits for the frozen container.
      const dockerd = spawn('setsid', ['dockerd'], { stdio: ['ignore', fs.openSync(DOCKERD_LOG, 'a'), fs.openSync(DOCKERD_LOG, 'a')], detached: true });
      dockerd.unref();
      await new Promise((r) => setTimeout(r, 4000));
      expect(await answers()).toBe(false);
      // The same gateway (same data directory) starts again: it thaws before asking dockerd.
      h2 = await createHarness({ dataDir: h1.dataDir, env: h2Env, noInit: true });
      expect(h2.manager.thawLeftFrozen()).toBe(1);
      await untilAsync(() => answers(), 60_000, 'dockerd comes up');
      await h2.manager.init();
      const r = await h2.manager.execute(await h2.user('bo'), { language: 'python', code: 'print(2)' });
      expect(r.stdout.trim()).toBe('2');
    } finally {
      await dockerdBack();
      await h2?.close();
      await h1.store.close();
    }
  });

  it("setup-runtime.sh thaws what the records name of gateways no longer running, and drops those records; a running gateway's and other containers are left", async () => {
    const start = () => docker.createContainer({ Image: 'sandgate/sandbox', Entrypoint: ['/bin/sleep'], Cmd: ['600'], HostConfig: { Runtime: 'runsc', NetworkMode: 'none' } });
    const [killed, running, other] = [await start(), await start(), await start()];
    try {
      for (const c of [killed, running, other]) await c.start();
      expect(await freeze(killed.id, { owner: 'test' })).toBe(true);
      // As a gateway that is gone left it: a pid that no process has any more.
      const gonePid = spawnSync('true').pid;
      fs.writeFileSync(path.join(FROZEN_RECORDS, killed.id), `test ${gonePid} 12345\n`);
      // This process is a gateway still running: its record is its own to thaw.
      expect(await freeze(running.id, { owner: 'test' })).toBe(true);
      // Frozen by someone else (docker pause does this to runc containers): not ours to thaw.
      expect(await freeze(other.id, { records: fs.mkdtempSync(path.join(os.tmpdir(), 'other-records-')) })).toBe(true);
      const r = setupRuntime();
      expect(r.status, r.output).toBe(0);
      expect(r.output).toContain(`thawed sandbox ${killed.id.slice(0, 12)}`);
      expect(freezeState(killed.id)).toBe('thawed');
      expect(fs.existsSync(path.join(FROZEN_RECORDS, killed.id))).toBe(false);
      expect(freezeState(running.id)).toBe('frozen');
      expect(fs.existsSync(path.join(FROZEN_RECORDS, running.id))).toBe(true);
      expect(freezeState(other.id)).toBe('frozen');
    } finally {
      for (const c of [killed, running, other]) {
        thaw(c.id);
        await c.remove({ force: true }).catch(() => {});
      }
    }
  });

  it('a records directory others could write to is refused: nothing freezes, and the script thaws nothing it names', async () => {
    const c = await docker.createContainer({ Image: 'sandgate/sandbox', Entrypoint: ['/bin/sleep'], Cmd: ['600'], HostConfig: { Runtime: 'runsc', NetworkMode: 'none' } });
    const open = fs.mkdtempSync(path.join(os.tmpdir(), 'open-records-'));
    fs.chmodSync(open, 0o777);
    const target = fs.mkdtempSync(path.join(os.tmpdir(), 'link-target-'));
    const link = path.join(os.tmpdir(), `records-link-${process.pid}`);
    fs.symlinkSync(target, link);
    try {
      await c.start();
      expect(await freeze(c.id, { records: open })).toBe(false);
      expect(await freeze(c.id, { records: link })).toBe(false);
      expect(freezeState(c.id)).toBe('thawed');
      // Nor does the script thaw what such a directory names: a record planted there by
      // anyone who can write to it, for a container frozen by someone else.
      expect(await freeze(c.id, { records: fs.mkdtempSync(path.join(os.tmpdir(), 'other-records-')) })).toBe(true);
      fs.writeFileSync(path.join(open, c.id), 'planted 0 0\n');
      const r = spawnSync('bash', ['scripts/thaw-frozen.sh'], { encoding: 'utf8', env: { ...process.env, SANDGATE_FROZEN_RECORDS: open } });
      expect(r.stderr).toContain('not a directory only root can write to');
      expect(freezeState(c.id)).toBe('frozen');
      expect(fs.existsSync(path.join(open, c.id))).toBe(true);
    } finally {
      fs.rmSync(link);
      thaw(c.id);
      await c.remove({ force: true }).catch(() => {});
    }
  });
});
