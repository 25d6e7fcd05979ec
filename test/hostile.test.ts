/**
 * Hostile code against the real runsc sandbox. For every attack: the execution gets a
 * clear result, the gateway stays up, the attacker's next execution works (in a
 * replacement sandbox if needed), and another user's execution running at the same
 * time completes normally.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ExecuteResult, SandboxOwner } from '../src/sandboxes/types.js';
import type { Language } from '../src/sandboxes/protocol.js';
import { createHarness, type Harness } from './support/harness.js';

let h: Harness;
let mallory: SandboxOwner;
let victim: SandboxOwner;
const hostSecret = path.join(os.tmpdir(), `sandgate-host-secret-${process.pid}`);

beforeAll(async () => {
  fs.writeFileSync(hostSecret, 'host secret');
  h = await createHarness({
    env: {
      SANDGATE_SANDBOX_MEMORY_MB: '512',
      SANDGATE_SANDBOX_TMP_MB: '32',
      SANDGATE_WORKSPACE_MB: '64',
      SANDGATE_OUTPUT_LIMIT_KB: '16',
      SANDGATE_EXEC_TIMEOUT_SEC: '20',
    },
  });
  mallory = await h.user('mallory');
  victim = await h.user('victim');
  await h.manager.execute(victim, { language: 'bash', code: 'echo mine > precious.txt' });
  await h.manager.execute(mallory, { language: 'bash', code: 'echo mine > precious.txt' });
});

afterAll(async () => {
  fs.rmSync(hostSecret, { force: true });
  await h?.close();
});

/** A modest job for the other user, run while the attack runs. */
const VICTIM_JOB = 'import hashlib\nh = b"x"\nfor _ in range(200_000):\n    h = hashlib.sha256(h).digest()\nh.hex()[:16]';
let expectedVictim: string | undefined;

async function underAttack(language: Language, code: string, timeoutSec = 20): Promise<ExecuteResult> {
  const attack = h.manager.execute(mallory, { language, code, timeoutSec });
  await new Promise((r) => setTimeout(r, 300));
  const other = await h.manager.execute(victim, { language: 'python', code: VICTIM_JOB });
  expect(other.exitCode, other.stderr).toBe(0);
  expectedVictim ??= other.result!;
  expect(other.result).toBe(expectedVictim);
  const result = await attack;
  // The attacker's next execution works, and their workspace survived.
  const next = await h.manager.execute(mallory, { language: 'bash', code: 'cat precious.txt' });
  expect(next.stdout, JSON.stringify(next)).toBe('mine\n');
  const mine = await h.manager.execute(victim, { language: 'bash', code: 'cat precious.txt' });
  expect(mine.stdout).toBe('mine\n');
  return result;
}

describe('hostile code', () => {
  it('fork bomb: processes are capped, the bomb is killed at its timeout', async () => {
    // The classic bomb backgrounds itself and returns at once; its offspring must not outlive the execution.
    const classic = await underAttack('bash', ':(){ :|:& };:', 8);
    expect(classic.exitCode).not.toBeNull();
    const psAfter = await h.manager.execute(mallory, { language: 'bash', code: 'ps -e --no-headers | wc -l' });
    expect(Number(psAfter.stdout.trim())).toBeLessThan(20);
    // A foreground bomb hits the process limit and is killed at its timeout.
    const r = await underAttack('bash', 'bomb() { bomb | bomb; }; bomb', 6);
    expect(r.timedOut).toBe(true);
    expect(r.stderr).toMatch(/Resource temporarily unavailable/);
    const ps = await h.manager.execute(mallory, { language: 'bash', code: 'ps -e --no-headers | wc -l' });
    expect(Number(ps.stdout.trim())).toBeLessThan(20);
  });

  it('python fork loop: killed with the interpreter restarted', async () => {
    const r = await underAttack('python', 'import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass', 6);
    expect(r.killed).toBe(true);
    expect(r.restarted).toBe(true);
  });

  it('memory bomb: ends with a clear result, memory limit holds', async () => {
    const r = await underAttack('python', 'blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))');
    expect(r.exitCode).not.toBe(0);
    expect(`${r.stderr} ${r.notice ?? ''} ${r.error?.name ?? ''}`).toMatch(/MemoryError|memory|killed/i);
  });

  it('filling /tmp: ENOSPC for the attacker, /tmp usable again afterwards', async () => {
    const r = await underAttack('bash', 'dd if=/dev/zero of=/tmp/fill bs=1M count=200');
    expect(r.stderr).toMatch(/No space left on device/);
    const ts = await h.manager.execute(mallory, { language: 'typescript', code: 'console.log("deno still works")' });
    expect(ts.stdout).toBe('deno still works\n');
  });

  it('filling the workspace: its size limit holds and the host disk is untouched', async () => {
    const before = fs.statfsSync(h.dataDir);
    const r = await underAttack('bash', 'dd if=/dev/zero of=/workspace/fill bs=1M count=500; df -m /workspace | tail -1');
    expect(r.stderr).toMatch(/No space left on device/);
    const after = fs.statfsSync(h.dataDir);
    expect((before.bavail - after.bavail) * before.bsize).toBeLessThan(100 * 1024 * 1024);
    const ws = await h.manager.execute(mallory, { language: 'bash', code: 'rm /workspace/fill && echo freed' });
    expect(ws.stdout).toBe('freed\n');
  });

  it('output flood: cut at the cap, still answers in time', async () => {
    const r = await underAttack('bash', 'yes flood', 3);
    expect(r.timedOut).toBe(true);
    expect(Buffer.byteLength(r.stdout)).toBeLessThanOrEqual(16 * 1024);
    expect(r.truncated.stdout).toBeGreaterThan(1024 * 1024);
  });

  it('infinite loop: killed at the timeout', async () => {
    const r = await underAttack('python', 'while True:\n    pass', 3);
    expect(r.timedOut).toBe(true);
    expect(r.notice).toMatch(/3 ?s|time limit|timed out/i);
  });

  it('thousands of files: created, reported in bounded form', async () => {
    const r = await underAttack('bash', 'mkdir -p many && cd many && for i in $(seq 1 5000); do : > f$i; done; ls | wc -l', 60);
    expect(r.stdout.trim()).toBe('5000');
    expect(r.files.length).toBeGreaterThan(0);
    expect(JSON.stringify(r.files).length).toBeLessThan(1024 * 1024);
    await h.manager.execute(mallory, { language: 'bash', code: 'rm -rf many' });
  });

  it('network: unreachable from every language', async () => {
    const py = await underAttack(
      'python',
      'import socket\ntry:\n    socket.create_connection(("1.1.1.1", 53), timeout=3)\n    print("CONNECTED")\nexcept OSError as e:\n    print("blocked:", e)',
    );
    expect(py.stdout).toMatch(/^blocked:/);
    const dns = await h.manager.execute(mallory, { language: 'python', code: 'import socket\ntry:\n    socket.getaddrinfo("example.com", 80)\n    print("RESOLVED")\nexcept OSError as e:\n    print("blocked")' });
    expect(dns.stdout.trim()).toBe('blocked');
    const ts = await h.manager.execute(mallory, { language: 'typescript', code: 'await fetch("http://1.1.1.1/")' });
    expect(ts.stderr).toMatch(/Requires net access/);
  });

  it('host files and the Docker socket are out of reach', async () => {
    const r = await underAttack(
      'bash',
      `cat ${hostSecret} 2>&1; ls -la /var/run/docker.sock /run/docker.sock 2>&1; find / -xdev -name 'docker.sock' 2>/dev/null | head; cat /etc/shadow 2>&1; grep -l SANDGATE /proc/1/environ 2>&1; echo end`,
    );
    expect(r.stdout).not.toMatch(/host secret/);
    expect(r.stdout).toMatch(/No such file or directory/);
    expect(r.stdout).not.toMatch(/srw/);
    expect(r.stdout).toMatch(/shadow: Permission denied/);
    expect(r.stdout).toMatch(/end\n$/);
  });

  it('narrowed permissions cannot be undone', async () => {
    // Every trick that could make /workspace writable or show /skills and /tools again,
    // tried from inside a narrowed execution; each line says whether it worked. (Nothing
    // is written to /tmp: an earlier test may have filled it.)
    const syscalls = [
      'import ctypes',
      'libc = ctypes.CDLL(None, use_errno=True)',
      'calls = [(165, b"/workspace", b"/workspace", None, ctypes.c_ulong(32 | 4096), None), (166, b"/skills", 2),',
      '         (272, 0x10000000 | 0x20000), (56, ctypes.c_ulong(0x10000000 | 17), None, None, None, None),',
      '         (308, 0, 0), (428, -100, b"/workspace", 1), (430, b"tmpfs", 0), (442, -100, b"/workspace", 0, None, 0),',
      '         (155, b"/tmp", b"/tmp"), (161, b"/tmp",)]',
      'print("raw system calls:", "UNDONE" if any(libc.syscall(*c) >= 0 for c in calls) else "blocked")',
    ].join('\n');
    const code = String.raw`
attempt() { if sh -c "$2" >/dev/null 2>&1; then echo "$1: UNDONE"; else echo "$1: blocked"; fi; }
attempt "unshare + remount rw" 'unshare -rm sh -c "mount -o remount,bind,rw /workspace && touch /workspace/undone"'
attempt "remount rw" 'mount -o remount,rw /workspace && touch /workspace/undone'
attempt "umount /skills" 'umount /skills; ls -A /skills | grep -q .'
attempt "lazy umount /skills" 'umount -l /skills; ls -A /skills | grep -q .'
attempt "unshare + umount" 'unshare -rm sh -c "umount -l /skills; ls -A /skills | grep -q ."'
attempt "unshare + bind over /workspace" 'unshare -rm sh -c "mount --bind /tmp /workspace"'
attempt "nsenter the runner" 'nsenter -t 1 -U -m --preserve-credentials touch /workspace/undone'
attempt "runner visible" 'ps -eo args | grep -q "[s]andgate_runner.parent"'
attempt "write /workspace" 'touch /workspace/undone'
attempt "list /skills" 'ls -A /skills | grep -q .'
attempt "list /tools" 'ls -A /tools | grep -q .'
python3 -c '${syscalls}'
setsid sleep 300 > /dev/null 2>&1 &
echo end`;
    const narrowed = { write: false as const, read: ['/workspace'] };
    const r = await h.manager.execute(mallory, { language: 'bash', code, permissions: narrowed });
    expect(r.stdout, JSON.stringify(r)).toMatch(/end\n$/);
    expect(r.stdout.match(/: blocked$/gm)?.length, r.stdout).toBe(12);
    // Nothing was written, nothing outlived the execution, and plain executions are unaffected.
    const after = await h.manager.execute(mallory, {
      language: 'bash',
      code: 'ls /workspace/undone 2>&1; ps -eo args | grep -c "[s]leep 300"; ls -A /skills | wc -l; touch /workspace/ok && echo writable',
    });
    expect(after.stdout).toMatch(/No such file or directory\n0\n[1-9]\d*\nwritable\n$/);
    // The Python interpreter of a narrowed execution is just as locked in.
    const py = await h.manager.execute(mallory, {
      language: 'python',
      code: `import subprocess\nsubprocess.run(["python3", "-c", ${JSON.stringify(syscalls)}], capture_output=True, text=True).stdout`,
      permissions: narrowed,
    });
    expect(py.result, py.stderr).toBe("'raw system calls: blocked\\n'");
  });

  it('a narrowed execution cannot leave code in Deno’s cache for later, wider runs', async () => {
    // Deno runs what its cache holds (compiled code, modules) in every later TypeScript
    // run, whatever that run's permissions: the cache is read-only to a narrowed one.
    await h.manager.execute(mallory, { language: 'typescript', code: '1' });
    const narrowed = { write: false as const, read: ['/workspace'] };
    const plant = await h.manager.execute(mallory, {
      language: 'bash',
      code: 'for f in /tmp/.deno/planted /tmp/.deno/v8_code_cache_v2; do if echo x >> "$f" 2>/dev/null; then echo "$f: WRITTEN"; else echo "$f: refused"; fi; done',
      permissions: narrowed,
    });
    expect(plant.stdout, JSON.stringify(plant)).toBe('/tmp/.deno/planted: refused\n/tmp/.deno/v8_code_cache_v2: refused\n');
    // Narrowed TypeScript still runs (Deno works with a cache it cannot write) ...
    const ts = await h.manager.execute(mallory, { language: 'typescript', code: 'console.log(6 * 7)', permissions: narrowed });
    expect([ts.exitCode, ts.stdout, ts.stderr]).toEqual([0, '42\n', '']);
    // ... and wider runs write the cache as before.
    const wide = await h.manager.execute(mallory, { language: 'bash', code: 'ls /tmp/.deno/planted 2>&1; touch /tmp/.deno/ok && echo writable' });
    expect(wide.stdout).toMatch(/No such file or directory\nwritable\n$/);
  });

  it('root and capabilities cannot be gained', async () => {
    const r = await underAttack(
      'python',
      'import os, subprocess\nout = []\ntry:\n    os.setuid(0)\n    out.append("setuid ok")\nexcept PermissionError:\n    out.append("setuid denied")\nout.append(subprocess.run(["su", "-c", "id"], input=b"", capture_output=True).returncode != 0 and "su denied" or "su ok")\nout.append(open("/proc/self/status").read().split("CapEff:")[1].split()[0])\nout.append(str(os.geteuid()))\nout',
    );
    expect(r.result).toBe("['setuid denied', 'su denied', '0000000000000000', '1000']");
  });

  it('a .pth file in the workspace never runs as root when the sandbox starts', async () => {
    // HOME is /workspace, so ~/.local/lib/python3.X/site-packages is the user's: Python
    // executes every `import` line of a .pth file there in any interpreter that loads user
    // site-packages. The runner is root in the sandbox; it must not be one of them. The
    // mark goes into a directory anyone may write to, as root has no DAC_OVERRIDE here.
    const plant = [
      'import os, sys',
      'site = "/workspace/.local/lib/python%d.%d/site-packages" % sys.version_info[:2]',
      'os.makedirs(site, exist_ok=True)',
      'os.makedirs("/workspace/pth-marks", exist_ok=True)',
      'os.chmod("/workspace/pth-marks", 0o777)',
      'with open(site + "/zz-hostile.pth", "w") as f:',
      '    f.write("import os; open(\'/workspace/pth-marks/ran-as-\' + str(os.getuid()), \'w\').close()\\n")',
      'sorted(os.listdir("/workspace/pth-marks"))',
    ].join('\n');
    const planted = await underAttack('python', plant);
    expect(planted.result, planted.stderr).toBe('[]');
    // The next execution runs in a new container on the same workspace: a fresh runner start.
    expect(await h.manager.stopUser(mallory.userId, { by: 'root' })).toBe(true);
    const after = await h.manager.execute(mallory, { language: 'python', code: 'import os\nsorted(os.listdir("/workspace/pth-marks"))' });
    // The user's own interpreter (uid 1000) loads their site-packages: their own code, run
    // as them. Root never ran it.
    expect(after.result, after.stderr).toBe("['ran-as-1000']");
    await h.manager.execute(mallory, { language: 'bash', code: 'rm -rf /workspace/.local /workspace/pth-marks' });
  });
});
