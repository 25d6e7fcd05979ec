/**
 * TypeScript, JavaScript and bash without a process per run, on the real runtime: the
 * Deno host keeps top-level names between TypeScript runs, per permission set, with
 * Deno enforcing each run's own permissions; a runaway loop is killed at its timeout and
 * the next run works; bash runs in one long-lived shell. And the host's channel cannot be
 * reached by other code in the sandbox.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import { createHarness, type Harness } from './support/harness.js';

describe('languages kept warm in the sandbox', () => {
  let h: Harness;
  let alice: SandboxOwner;

  beforeAll(async () => {
    h = await createHarness();
    alice = await h.user('alice');
  });
  afterAll(async () => {
    await h?.close();
  });

  const ts = (code: string, more: Partial<Parameters<Harness['manager']['execute']>[1]> = {}) =>
    h.manager.execute(alice, { language: 'typescript', code, ...more });

  it('keeps top-level names, functions, classes and imports between TypeScript runs, and shows the last value', async () => {
    const first = await ts(
      [
        'import { join } from "node:path";',
        'const greeting: string = "hello";',
        'let count = 0;',
        'function bump(by: number): number { count += by; return count; }',
        'class Box<T> { constructor(public value: T) {} }',
        'await Deno.writeTextFile("/workspace/notes.txt", greeting);',
      ].join('\n'),
    );
    expect(first.stderr).toBe('');
    expect(first.exitCode).toBe(0);
    expect(first.files.map((f) => f.path)).toEqual(['notes.txt']);
    const second = await ts('bump(2); bump(3)');
    expect(second.result).toBe('5');
    const third = await h.manager.execute(alice, { language: 'javascript', code: '[join("a", greeting), new Box(count).value]' });
    expect(third.result).toBe('[ "a/hello", 5 ]');
    // An error is reported with the cell's own line, and the state survives it.
    const failed = await ts('const fine = 1;\nthrow new RangeError("line two")');
    expect(failed.exitCode).toBe(1);
    expect(failed.error).toMatchObject({ name: 'RangeError', message: 'line two' });
    expect(failed.stderr).toMatch(/error: Uncaught RangeError: line two\n\s+at .*cell-\d+\.ts:2:/);
    expect((await ts('[fine, count]')).result).toBe('[ 1, 5 ]');
    // reset starts afresh.
    const reset = await ts('typeof count', { reset: true });
    expect(reset.result).toBe('"undefined"');
  });

  it('enforces each run’s own permissions and never lets a narrower run use what a wider one defined', async () => {
    await h.manager.execute(alice, { language: 'bash', code: 'mkdir -p public && echo open > public/a.txt && echo secret > secret.txt' });
    const wide = await ts('const readSecret = () => Deno.readTextFileSync("/workspace/secret.txt").trim(); readSecret()');
    expect(wide.result).toBe('"secret"');
    // Narrowed inside what the container mounts: Deno enforces it in a worker of its own.
    const narrow = { read: ['/workspace/public', '/skills', '/tools'] };
    const own = await ts('Deno.readTextFileSync("/workspace/public/a.txt").trim()', { permissions: narrow });
    expect(own.result).toBe('"open"');
    expect(own.notice).toBeUndefined(); // in the host, not a separate process
    const denied = await ts('Deno.readTextFileSync("/workspace/secret.txt")', { permissions: narrow });
    expect(denied.exitCode).toBe(1);
    expect(denied.stderr).toContain('Requires read access to "/workspace/secret.txt", run again with the --allow-read flag');
    const borrowed = await ts('typeof readSecret', { permissions: narrow });
    expect(borrowed.result).toBe('"undefined"');
    // Back with the wider permissions, their state is there.
    expect((await ts('readSecret()')).result).toBe('"secret"');
    // A narrowing of the file system itself runs as a separate process, and says so.
    const hidden = await ts('console.log(typeof readSecret)', { permissions: { read: ['/tools'], write: [] } });
    expect(hidden.stdout).toBe('undefined\n');
    expect(hidden.notice).toMatch(/separate Deno process because its permissions are narrowed/);
  });

  it('kills a runaway TypeScript loop at its timeout, says the state is gone, and the next run works', async () => {
    await ts('const before = 42');
    const loop = await ts('while (true) {}', { timeoutSec: 2 });
    expect(loop).toMatchObject({ timedOut: true, killed: true, restarted: true, exitCode: null });
    expect(loop.notice).toMatch(/timed out after 2 s.*The Deno host was restarted/);
    const next = await ts('console.log(typeof before, 6 * 7)');
    expect(next.stdout).toBe('undefined 42\n');
    expect(next.exitCode).toBe(0);
  });

  it('streams and caps TypeScript output like Python’s', async () => {
    const chunks: string[] = [];
    const r = await ts('for (let i = 0; i < 3; i++) { console.log("line", i); await new Promise((r) => setTimeout(r, 150)); }', {
      onOutput: (_s, d) => chunks.push(d),
    });
    expect(r.stdout).toBe('line 0\nline 1\nline 2\n');
    expect(chunks.length).toBeGreaterThan(1); // streamed as it came, not at the end
    const flood = await ts('const s = "x".repeat(1 << 20); for (let i = 0; i < 4; i++) console.log(s)');
    expect(flood.truncated.stdout).toBeGreaterThan(0);
    expect(flood.stderr).toMatch(/output truncated/);
    expect((await ts('"still here"')).result).toBe('"still here"');
  });

  it('runs bash in one shell: variables kept, environment, directory and options reset, exit gives its code', async () => {
    const sh = (code: string) => h.manager.execute(alice, { language: 'bash', code });
    expect((await sh('n=7; cd /tmp; export EXTRA=1; set -u')).exitCode).toBe(0);
    const r = await sh('echo "$n $(pwd) ${EXTRA:-none} ${UNSET:-ok}"; env | grep -c ^EXTRA=');
    expect(r.stdout).toBe('7 /workspace 1 ok\n0\n'); // a shell variable now, not exported
    const ended = await sh('echo bye; exit 4');
    expect(ended).toMatchObject({ stdout: 'bye\n', exitCode: 4, killed: false, restarted: true });
    expect((await sh('echo "[${n:-gone}]"')).stdout).toBe('[gone]\n');
    const slow = await h.manager.execute(alice, { language: 'bash', code: 'sleep 30', timeoutSec: 1 });
    expect(slow).toMatchObject({ timedOut: true, killed: true });
    expect((await sh('echo back')).stdout).toBe('back\n');
  });

  it('keeps the Deno host’s channel out of reach of other code in the sandbox', async () => {
    await ts('1');
    // The channel's name is in the host's command line (its own permissions), but nobody
    // listens there once the host is in, its folder cannot be listed, and the host's end
    // cannot be opened again through /proc.
    const probe = await h.manager.execute(alice, {
      language: 'python',
      code: [
        'import os, re, json, socket',
        'found, connected, reopened = [], [], []',
        'for pid in filter(str.isdigit, os.listdir("/proc")):',
        '    try:',
        '        cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode()',
        '        fds = os.listdir(f"/proc/{pid}/fd")',
        '    except OSError:',
        '        continue',
        '    found += re.findall(r"/tmp/\\.sandgate/deno/[0-9a-f]+\\.sock", cmd)',
        '    for fd in fds:',
        '        try:',
        '            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):',
        '                os.close(os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR | os.O_NONBLOCK))',
        '                reopened.append(f"{pid}/{fd}")',
        '        except OSError:',
        '            pass',
        'for path in found:',
        '    s = socket.socket(socket.AF_UNIX)',
        '    try:',
        '        s.connect(path)',
        '        connected.append(path)',
        '    except OSError:',
        '        pass',
        '    s.close()',
        'try:',
        '    os.listdir("/tmp/.sandgate/deno")',
        '    listed = True',
        'except PermissionError:',
        '    listed = False',
        'print(json.dumps({"found": len(found), "connected": connected, "reopened": reopened, "listed": listed}))',
      ].join('\n'),
    });
    expect(probe.stderr).toBe('');
    const out = JSON.parse(probe.stdout);
    expect(out.found).toBeGreaterThan(0);
    expect(out.connected).toEqual([]);
    expect(out.reopened).toEqual([]);
    expect(out.listed).toBe(false);
    expect((await ts('"host fine"')).result).toBe('"host fine"');
  });
});
