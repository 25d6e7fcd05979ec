import { PassThrough } from 'node:stream';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, type Harness } from '../../test/support/harness.js';
import { until } from '../../test/support/until.js';
import { setUserDisabled, suspendUser } from '../accounts/accounts.js';
import { PermissionError } from './permissions.js';
import type { SandboxOwner } from './types.js';

describe('SandboxManager: executions', () => {
  let h: Harness;
  let alice: SandboxOwner;
  beforeAll(async () => {
    h = await createHarness({ env: { SANDGATE_OUTPUT_LIMIT_KB: '16' } });
    alice = await h.user('alice');
  });
  afterAll(() => h.close());

  it('keeps Python state between calls and returns the final expression', async () => {
    const a = await h.manager.execute(alice, { language: 'python', code: 'import math\nx = 20\nprint("set")' });
    expect(a.stdout).toBe('set\n');
    expect(a.result ?? null).toBeNull();
    const b = await h.manager.execute(alice, { language: 'python', code: 'x * 2 + math.floor(2.5)' });
    expect(b.result).toBe('42');
    expect(b.exitCode).toBe(0);
    expect(b.durationMs).toBeGreaterThan(0);
  });

  it("sizes numpy's thread pool to the sandbox's CPU limit, in every language", async () => {
    const py = await h.manager.execute(alice, { language: 'python', code: 'import os, numpy\nnumpy.ones((300, 300)) @ numpy.ones((300, 300))\n(len(os.listdir("/proc/self/task")), os.environ["OPENBLAS_NUM_THREADS"])' });
    // gVisor shows the host's CPUs (2 here, so OpenBLAS would start a second thread); the sandbox may use 1.
    expect(py.result).toBe("(1, '1')");
    const sh = await h.manager.execute(alice, { language: 'bash', code: 'echo $OPENBLAS_NUM_THREADS $OMP_NUM_THREADS' });
    expect(sh.stdout).toBe('1 1\n');
  });

  it('never starts a run cancelled while it waited its turn', async () => {
    const first = h.manager.execute(alice, { language: 'python', code: 'import time\ntime.sleep(1.5)\n"first"' });
    const cancel = new AbortController();
    const second = h.manager.execute(alice, { language: 'bash', code: 'echo ran > cancelled-run.txt', signal: cancel.signal });
    await new Promise((r) => setTimeout(r, 300));
    cancel.abort();
    expect((await first).result).toBe("'first'");
    const r = await second;
    expect(r.notice).toMatch(/cancelled before it started/);
    // Its code never ran: no file, even after the runner had all the time it needed.
    const check = await h.manager.execute(alice, { language: 'bash', code: 'test -e cancelled-run.txt && echo present || echo absent' });
    expect(check.stdout.trim()).toBe('absent');
  });

  it('reports a Python exception with its traceback', async () => {
    const r = await h.manager.execute(alice, { language: 'python', code: 'def f():\n    return 1/0\nf()' });
    expect(r.exitCode).toBe(1);
    expect(r.error?.name).toBe('ZeroDivisionError');
    expect(r.stderr).toMatch(/ZeroDivisionError: division by zero/);
  });

  it('streams output while the code runs', async () => {
    const chunks: { at: number; data: string }[] = [];
    const t0 = Date.now();
    const r = await h.manager.execute(alice, {
      language: 'python',
      code: 'import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.4)',
      onOutput: (_s, data) => chunks.push({ at: Date.now() - t0, data }),
    });
    expect(r.stdout).toBe('0\n1\n2\n');
    expect(chunks.length).toBeGreaterThanOrEqual(2);
    expect(chunks[0]!.at).toBeLessThan(r.durationMs);
  });

  it('runs TypeScript under Deno with flags from the policy', async () => {
    const ok = await h.manager.execute(alice, {
      language: 'typescript',
      code: 'const n: number = 21;\nawait Deno.writeTextFile("/workspace/from-deno.txt", "hi");\nconsole.log(n * 2);',
    });
    expect(ok.stderr).toBe('');
    expect(ok.stdout.trim()).toBe('42');
    expect(ok.files).toContainEqual(expect.objectContaining({ path: 'from-deno.txt', change: 'created' }));
    const denied = await h.manager.execute(alice, { language: 'typescript', code: 'console.log(await Deno.readTextFile("/etc/passwd"))' });
    expect(denied.exitCode).not.toBe(0);
    expect(denied.stderr).toMatch(/NotCapable: Requires read access to "\/etc\/passwd", run again with the --allow-read flag/);
    const js = await h.manager.execute(alice, { language: 'javascript', code: 'console.log([1,2,3].map(x => x * 2).join(","))' });
    expect(js.stdout.trim()).toBe('2,4,6');
  });

  it('runs bash in /workspace', async () => {
    const r = await h.manager.execute(alice, { language: 'bash', code: 'pwd; echo hello > greeting.txt; cat greeting.txt; exit 3' });
    expect(r.stdout).toBe('/workspace\nhello\n');
    expect(r.exitCode).toBe(3);
    expect(r.files).toContainEqual(expect.objectContaining({ path: 'greeting.txt', change: 'created' }));
  });

  it('reports files created, modified and deleted', async () => {
    await h.manager.execute(alice, { language: 'bash', code: 'echo 1 > keep.txt; echo 1 > gone.txt' });
    const r = await h.manager.execute(alice, { language: 'bash', code: 'echo 22 >> keep.txt; rm gone.txt; mkdir -p d; echo x > d/new.txt' });
    const byPath = Object.fromEntries(r.files.map((f) => [f.path, f.change]));
    expect(byPath).toMatchObject({ 'keep.txt': 'modified', 'gone.txt': 'deleted', 'd/new.txt': 'created' });
  });

  it('does not count the gateway\'s own writes as the next execution\'s changes', async () => {
    await h.manager.execute(alice, { language: 'bash', code: 'true' });
    const ws = await h.manager.openWorkspace(alice);
    await ws.write('from-host/note.txt', 'written by the gateway');
    const r = await h.manager.execute(alice, { language: 'bash', code: 'cat from-host/note.txt; echo x > from-code.txt' });
    expect(r.stdout).toBe('written by the gateway');
    expect(r.files.map((f) => f.path)).toEqual(['from-code.txt']);
    // And with no host write in between, changes are still found from the last scan.
    const next = await h.manager.execute(alice, { language: 'bash', code: 'echo y >> from-code.txt' });
    expect(next.files).toEqual([expect.objectContaining({ path: 'from-code.txt', change: 'modified' })]);
  });

  it('saves matplotlib figures automatically', async () => {
    const r = await h.manager.execute(alice, {
      language: 'python',
      code: 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("squares")',
    });
    const figs = r.files.filter((f) => f.path.startsWith('figures/') && f.path.endsWith('.png'));
    expect(figs.length).toBe(1);
    const png = await (await h.manager.openWorkspace(alice)).read(figs[0]!.path);
    expect(png.data.subarray(1, 4).toString()).toBe('PNG');
  });

  it('cuts output beyond the cap with a notice', async () => {
    const r = await h.manager.execute(alice, { language: 'python', code: 'print("x" * 1_000_000)' });
    expect(r.stdout.length).toBeLessThanOrEqual(16 * 1024);
    expect(r.truncated.stdout).toBeGreaterThan(900_000);
    expect(r.stderr + (r.notice ?? '')).toMatch(/truncated/);
  });

  it('kills code at its timeout, keeps files, and the next call works', async () => {
    await h.manager.execute(alice, { language: 'python', code: 'kept = 1\nopen("before-timeout.txt", "w").write("safe")' });
    const t0 = Date.now();
    const r = await h.manager.execute(alice, { language: 'python', code: 'while True:\n    pass', timeoutSec: 2 });
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(r.timedOut).toBe(true);
    expect(r.killed).toBe(true);
    expect(r.restarted).toBe(true);
    expect(r.notice).toMatch(/variables/i);
    const next = await h.manager.execute(alice, { language: 'python', code: 'open("before-timeout.txt").read()' });
    expect(next.result).toBe("'safe'");
    const lost = await h.manager.execute(alice, { language: 'python', code: 'kept' });
    expect(lost.error?.name).toBe('NameError');
    const bash = await h.manager.execute(alice, { language: 'bash', code: 'sleep 100 & sleep 100; echo never', timeoutSec: 1 });
    expect(bash.timedOut).toBe(true);
    expect(bash.stdout).not.toMatch(/never/);
    const ps = await h.manager.execute(alice, { language: 'bash', code: 'ps -eo comm | grep -c "^sleep" || true' });
    expect(ps.stdout.trim()).toBe('0');
  });

  it('refuses permissions beyond the ceiling, the network included, naming the grant', async () => {
    await expect(h.manager.execute(alice, { language: 'python', code: '1', permissions: { read: ['/etc'] } })).rejects.toThrow(
      'Requires read access to "/etc", run again with --allow-read=/etc',
    );
    await expect(h.manager.execute(alice, { language: 'python', code: '1', permissions: { net: true } })).rejects.toThrow(PermissionError);
    await expect(h.manager.execute(alice, { language: 'python', code: '1', permissions: { net: ['pypi.org'] } })).rejects.toThrow('Requires net access to "pypi.org", run again with --allow-net=pypi.org');
  });

  it('enforces a narrowed request in every language', async () => {
    const ro = { write: false as const };
    const py = await h.manager.execute(alice, { language: 'python', code: 'open("/workspace/nope.txt", "w")', permissions: ro });
    expect(py.stderr).toMatch(/Read-only file system/);
    const sh = await h.manager.execute(alice, { language: 'bash', code: 'touch /workspace/nope.txt', permissions: ro });
    expect(sh.exitCode).not.toBe(0);
    expect(sh.stderr).toMatch(/Read-only file system/);
    const ts = await h.manager.execute(alice, { language: 'typescript', code: 'await Deno.writeTextFile("/workspace/nope.txt", "x")', permissions: ro });
    expect(ts.stderr).toMatch(/Requires write access to "\/workspace\/nope.txt"/);
    const hidden = await h.manager.execute(alice, { language: 'bash', code: 'ls /skills | wc -l; cat /workspace/greeting.txt', permissions: { read: ['/workspace'] } });
    expect(hidden.stdout.split('\n')[0]).toBe('0');
    expect(hidden.stdout).toMatch(/hello/);
    // The narrowing does not stick: the next plain call may write again.
    const after = await h.manager.execute(alice, { language: 'bash', code: 'touch /workspace/ok.txt && echo ok' });
    expect(after.stdout.trim()).toBe('ok');
    const back = await h.manager.execute(alice, { language: 'python', code: 'import os\nos.path.exists("/workspace/nope.txt")' });
    expect(back.result).toBe('False');
  });

  it("ends a killed group's members that the runner inherited at once, without waiting out the kill loop", async () => {
    // The runner is the container's init: when a group's leader dies first, its members
    // become the runner's children, and each stays in the group until it reaps them.
    await h.manager.execute(alice, { language: 'python', code: '1' });
    const [sb] = (await h.manager.list()).filter((s) => s.userId === alice.userId);
    // The runner's diagnostics: its stderr, heard from now on (the container keeps no log).
    const docker = new Docker();
    const attached = (await docker.getContainer(sb!.containerId).attach({ stream: true, stdout: false, stderr: true })) as unknown as NodeJS.ReadableStream & { destroy(): void };
    let stderr = '';
    const sink = new PassThrough();
    sink.on('data', (d: Buffer) => (stderr += d.toString()));
    docker.modem.demuxStream(attached, new PassThrough(), sink);
    try {
      const narrowed = await h.manager.execute(alice, { language: 'python', code: 'print("narrowed")', permissions: { write: false } });
      expect(narrowed.stdout).toBe('narrowed\n');
      const background = await h.manager.execute(alice, { language: 'bash', code: 'sleep 30 & echo started' });
      expect(background.stdout).toBe('started\n');
      await h.manager.execute(alice, { language: 'python', code: 'import sys; print("mark", file=sys.stderr)' });
      await new Promise((r) => setTimeout(r, 300));
    } finally {
      attached.destroy();
    }
    expect(stderr).not.toMatch(/still has members/);
  });

  it('reaps an inherited process that outlived its parent in the kernel and died later', async () => {
    // sh exits at once and its sleep lives on in the kernel's session, which is kept: the
    // runner (init) inherits it, and it dies after the sweep that saw it alive.
    await h.manager.execute(alice, { language: 'python', code: 'import os\nos.system("sleep 1 &")' });
    await new Promise((r) => setTimeout(r, 1500));
    await h.manager.execute(alice, { language: 'python', code: 'pass' });
    const zombies = await h.manager.execute(alice, { language: 'bash', code: "ps -eo stat=,ppid= | awk '$1 ~ /^Z/ && $2 == 1' | wc -l" });
    expect(zombies.stdout.trim()).toBe('0');
  });

  it('rejects a bad request before it reaches the sandbox', async () => {
    await expect(h.manager.execute(alice, { language: 'cobol' as never, code: '' })).rejects.toThrow(/unknown language/);
    await expect(h.manager.execute(alice, { language: 'python', code: '1', timeoutSec: 100_000 })).rejects.toThrow(/SANDGATE_EXEC_MAX_TIMEOUT_SEC/);
    await expect(h.manager.execute(alice, { language: 'python', code: 'x'.repeat(2_000_000) })).rejects.toThrow(/at most/);
  });

  describe('an account disabled or suspended', () => {
    const refused = { name: 'SandboxError', reason: 'account_disabled', status: 403 };
    /** Every container of the user's, running or not, as Docker lists them. */
    const containersOf = async (owner: SandboxOwner) => (await h.manager['deps'].driver.list()).filter((c) => c.ownerId === owner.userId);
    const holds = async (owner: SandboxOwner) => (await h.manager.list()).some((s) => s.userId === owner.userId) || h.manager.startingUsers().includes(owner.userId);

    it('runs no code and opens no workspace, and nothing starts', async () => {
      const dan = await h.user('dan');
      await setUserDisabled(h.store.db, dan.userId, true);
      await expect(h.manager.execute(dan, { language: 'python', code: '1' })).rejects.toMatchObject({ ...refused, message: expect.stringMatching(/disabled on this gateway/) });
      await expect(h.manager.openWorkspace(dan)).rejects.toMatchObject(refused);
      const sue = await h.user('sue');
      await suspendUser(h.store.db, sue.userId, 'no longer in the team');
      await expect(h.manager.execute(sue, { language: 'bash', code: 'true' })).rejects.toMatchObject({ ...refused, message: expect.stringMatching(/lost access/) });
      for (const who of [dan, sue]) {
        expect(await holds(who)).toBe(false);
        expect(await containersOf(who)).toEqual([]);
      }
      // Enabled again, the same account runs code as before.
      await setUserDisabled(h.store.db, dan.userId, false);
      expect((await h.manager.execute(dan, { language: 'bash', code: 'echo back' })).stdout).toBe('back\n');
      await h.manager.stopUser(dan.userId, { kill: true });
    });

    it('stops a sandbox whose start was under way when the account was disabled', async () => {
      const liz = await h.user('liz');
      const run = h.manager.execute(liz, { language: 'bash', code: 'echo started' });
      // Once the account is read, the container starts: the admin page's stopUser finds no sandbox to stop yet.
      await until(() => h.manager.startingUsers().includes(liz.userId));
      expect(await h.manager.stopUser(liz.userId, { kill: true })).toBe(false);
      await setUserDisabled(h.store.db, liz.userId, true);
      await expect(run).rejects.toMatchObject(refused);
      expect(await holds(liz)).toBe(false);
      expect(await containersOf(liz)).toEqual([]);
    });

    it('refuses the runs that waited on a sandbox killed because its user was disabled', async () => {
      const kim = await h.user('kim');
      await h.manager.execute(kim, { language: 'bash', code: 'true' });
      const first = h.manager.execute(kim, { language: 'bash', code: 'sleep 30' });
      // Settled while the test awaits the first run: its outcome is caught now, read below.
      const waiting = h.manager.execute(kim, { language: 'bash', code: 'echo should not run' }).catch((e: unknown) => e);
      await new Promise((r) => setTimeout(r, 300));
      await setUserDisabled(h.store.db, kim.userId, true);
      expect(await h.manager.stopUser(kim.userId, { kill: true })).toBe(true);
      expect(await first).toMatchObject({ killed: true });
      // It goes back through execute, which refuses it: no fresh sandbox starts for the disabled user.
      expect(await waiting).toMatchObject(refused);
      expect(await holds(kim)).toBe(false);
      expect(await containersOf(kim)).toEqual([]);
    });
  });

  it('cancels an execution through its AbortSignal', async () => {
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 500);
    const r = await h.manager.execute(alice, { language: 'bash', code: 'sleep 30', signal: ac.signal });
    expect(r.killed).toBe(true);
    expect(r.durationMs).toBeLessThan(10_000);
  });
});
