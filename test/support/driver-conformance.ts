/**
 * The suite every SandboxDriver must pass (Hono's runTest pattern): call
 * `runDriverConformance({ name, newDriver, spec })` from the driver's test file.
 * Known gaps of a driver are listed in `skip` with a reason.
 */
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ExecDone, ExecRequest, RunnerEvent } from '../../src/sandboxes/protocol.js';
import type { SandboxDriver, SandboxHandle, SandboxSpec } from '../../src/sandboxes/types.js';

export interface ConformanceOptions {
  name: string;
  newDriver: () => Promise<SandboxDriver> | SandboxDriver;
  /** A spec for a sandbox owned by `owner` with a fresh writable workspace. */
  spec: (owner: { userId: number; name: string }) => Promise<SandboxSpec> | SandboxSpec;
  skip?: { reason: string; tests: string[] }[];
}

/** Runs one execution over a handle and collects its output. */
export async function execOn(
  handle: SandboxHandle,
  language: ExecRequest['language'],
  code: string,
  extra: Partial<ExecRequest> = {},
): Promise<ExecDone & { stdout: string; stderr: string }> {
  const id = `t${crypto.randomBytes(4).toString('hex')}`;
  let stdout = '';
  let stderr = '';
  const done = new Promise<ExecDone>((resolve, reject) => {
    const off = handle.onEvent((e: RunnerEvent) => {
      if (!('id' in e) || e.id !== id) return;
      if (e.type === 'stdout') stdout += e.data;
      else if (e.type === 'stderr') stderr += e.data;
      else if (e.type === 'done') {
        off();
        resolve(e);
      }
    });
    handle.onExit((r) => reject(new Error(`sandbox exited: ${r}`)));
  });
  const request: ExecRequest = {
    op: 'exec',
    id,
    language,
    code,
    timeoutMs: 30_000,
    outputLimit: 65536,
    env: { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: '/workspace', LANG: 'C.UTF-8' },
    denoFlags: [],
    ...extra,
  };
  handle.send(request);
  return { ...(await done), stdout, stderr };
}

export function runDriverConformance(opts: ConformanceOptions): void {
  const skipped = new Set(opts.skip?.flatMap((s) => s.tests) ?? []);
  const test = (name: string, fn: () => Promise<void>) => (skipped.has(name) ? it.skip(name, fn) : it(name, fn));

  describe(`SandboxDriver conformance: ${opts.name}`, () => {
    let driver: SandboxDriver;
    let handle: SandboxHandle;
    let startError: unknown;
    const owner = { userId: 4242, name: `conformance-${crypto.randomBytes(3).toString('hex')}` };

    beforeAll(async () => {
      driver = await opts.newDriver();
      // A driver whose sandboxes cannot start still owes the tests below that hold without one.
      try {
        handle = await driver.start(await opts.spec(owner));
      } catch (e) {
        startError = e;
      }
    });
    afterAll(async () => {
      if (handle) await driver.stop(handle.id);
    });

    test('health names each check and says what it found', async () => {
      const checks = await driver.health();
      expect(Object.keys(checks).length).toBeGreaterThan(0);
      for (const [name, c] of Object.entries(checks)) {
        expect(typeof c.ok, name).toBe('boolean');
        expect(c.detail.length, name).toBeGreaterThan(0);
      }
    });

    test('a start gives a running sandbox, or fails and leaves none behind', async () => {
      const mine = (await driver.list()).filter((s) => s.ownerId === owner.userId);
      if (startError) {
        expect(startError).toBeInstanceOf(Error);
        expect(mine).toEqual([]);
      } else {
        expect(mine.map((s) => s.running)).toEqual([true]);
      }
    });

    test('stop of a sandbox that does not exist is not an error, and it cannot be attached', async () => {
      await driver.stop('0'.repeat(64));
      expect(await driver.attach('0'.repeat(64))).toBeUndefined();
    });

    test('start resolves with a connected runner', async () => {
      expect(handle.exited).toBe(false);
      const r = await execOn(handle, 'python', '1+1');
      expect(r.result).toBe('2');
      expect(r.exitCode).toBe(0);
    });

    test('list finds the sandbox with its owner', async () => {
      const found = (await driver.list()).find((s) => s.id === handle.id);
      expect(found).toBeDefined();
      expect(found!.owner).toBe(owner.name);
      expect(found!.ownerId).toBe(owner.userId);
      expect(found!.running).toBe(true);
    });

    test('the sandbox runs under gVisor as a non-root user on a read-only root', async () => {
      const r = await execOn(
        handle,
        'bash',
        'dmesg | head -n 3; echo "uid=$(id -u)"; awk \'$2 == "/" { split($4, o, ","); print "rootfs=" o[1] }\' /proc/mounts; grep CapEff /proc/self/status; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | sed "s/^/iface=/"; env | sort',
      );
      expect(r.stdout).toMatch(/gVisor/);
      expect(r.stdout).toMatch(/uid=1000/);
      expect(r.stdout).toMatch(/^rootfs=ro$/m);
      expect(r.stdout).toMatch(/CapEff:\s+0000000000000000/);
      // No network: at most the loopback interface.
      expect(r.stdout.split('\n').filter((l) => l.startsWith('iface=') && l !== 'iface=lo')).toEqual([]);
      for (const name of Object.keys(process.env).filter((k) => /SECRET|TOKEN|KEY|SANDGATE/.test(k))) {
        expect(r.stdout).not.toContain(`${name}=`);
      }
    });

    test('only /workspace and /tmp are writable', async () => {
      const r = await execOn(handle, 'bash', 'for d in /workspace /tmp /etc /usr /opt /home /skills /tools; do if touch "$d/.w" 2>/dev/null; then echo "$d writable"; rm -f "$d/.w"; fi; done');
      expect(r.stdout.trim().split('\n').sort()).toEqual(['/tmp writable', '/workspace writable']);
    });

    test('attach reconnects to a running sandbox', async () => {
      const again = await driver.attach(handle.id);
      expect(again).toBeDefined();
      const r = await execOn(again!, 'python', '6*7');
      expect(r.result).toBe('42');
    });

    test('stats report memory and a limit', async () => {
      const s = await handle.stats();
      expect(s.memoryBytes).toBeGreaterThan(0);
      expect(s.memoryLimitBytes).toBeGreaterThan(0);
    });

    test('stop removes the sandbox, ends its runner, and tolerates a missing one', async () => {
      const spare = await driver.start(await opts.spec({ userId: owner.userId + 1, name: `${owner.name}-b` }));
      const exited = new Promise<string>((r) => spare.onExit(r));
      await driver.stop(spare.id);
      await exited;
      expect(spare.exited).toBe(true);
      expect((await driver.list()).some((s) => s.id === spare.id)).toBe(false);
      await driver.stop(spare.id);
      expect(await driver.attach(spare.id)).toBeUndefined();
    });
  });
}
