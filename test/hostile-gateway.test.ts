/**
 * Hostile code against the gateway's own code around the sandbox (not gVisor): the file
 * tools racing a sandbox that swaps folders for symlinks, forged runner messages, names
 * chosen to smuggle personal data into the audit log, a workspace built to make every
 * scan slow, and processes that detach to outlive their run. Real runtime: Docker with
 * runsc, the real image, the real MCP client over HTTP.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listAudit } from '../src/audit/audit.js';
import { findUser, getUser } from '../src/accounts/accounts.js';
import { callTool, startGateway, toolText, type Gateway } from './support/mcp.js';

let gw: Gateway;
let mallory: Client;
let mallory2: Client;
let canary: string;
const CANARY_TEXT = 'CANARY: the host must never see this change';

async function connect(token: string): Promise<Client> {
  const client = new Client({ name: 'hostile', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gw.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return client;
}

const run = async (client: Client, language: string, code: string, timeout_seconds = 60) => {
  const r = await callTool<CallToolResult>(client, 'execute_code', { language, code, timeout_seconds });
  return { text: toolText(r), result: r };
};

/** A file's contents and metadata, to compare before and after an attack. */
function fingerprint(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of fs.readdirSync(dir).sort()) {
    const st = fs.lstatSync(path.join(dir, name));
    out[name] = `${st.uid}:${st.gid}:${(st.mode & 0o7777).toString(8)}:${st.size}:${st.isFile() ? fs.readFileSync(path.join(dir, name), 'utf8') : 'dir'}`;
  }
  return out;
}

beforeAll(async () => {
  gw = await startGateway({ env: { SANDGATE_OUTPUT_LIMIT_KB: '16', SANDGATE_RATE_LIMIT_PER_MIN: '100000', SANDGATE_RATE_LIMIT_BURST: '10000' } });
  const token = await gw.tokenFor('mallory');
  mallory = await connect(token);
  mallory2 = await connect(token);
  canary = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-canary-'));
  for (const name of ['x.txt', 'y.txt', 'canary-secret.txt']) fs.writeFileSync(path.join(canary, name), CANARY_TEXT);
  fs.mkdirSync(path.join(canary, 'sub'));
});

afterAll(async () => {
  await mallory?.close();
  await mallory2?.close();
  await gw?.close();
  fs.rmSync(canary, { recursive: true, force: true });
});

describe('file tools racing a sandbox that swaps folders for symlinks', () => {
  it('a won race reaches nothing outside the workspace and never acts as root', async () => {
    const victimToken = await gw.tokenFor('victim');
    const victim = await connect(victimToken);
    await callTool(victim, 'write_file', { path: 'x.txt', content: 'victim data' });
    await callTool(victim, 'write_file', { path: 'victim-secret.txt', content: 'victim data' });
    const victimWs = path.join(gw.harness.dataDir, 'workspaces', (await getUser(gw.harness.store.db, (await findUser(gw.harness.store.db, 'victim'))!.id))!.workspaceId!);
    await victim.close();
    await run(mallory, 'bash', 'mkdir -p race/d race/parked && echo mine > race/d/x.txt');
    const before = { canary: fingerprint(canary), victim: fingerprint(victimWs), data: fingerprint(gw.harness.dataDir) };

    // The attacker knows every host path it would like to reach.
    const targets = [canary, victimWs, gw.harness.dataDir, '/', '/etc'];
    const fileTargets = [path.join(canary, 'x.txt'), path.join(victimWs, 'x.txt'), path.join(gw.harness.dataDir, 'sandgate.db')];
    const attack = run(
      mallory,
      'python',
      `import os, time
targets, files = ${JSON.stringify(targets)}, ${JSON.stringify(fileTargets)}
end, swaps, junk = time.time() + 8, 0, 0

def reset():
    # The gateway may have made a fresh race/d while ours was parked: set it aside.
    global junk
    for step in (lambda: os.unlink('race/d/x.txt') if os.path.islink('race/d/x.txt') else None,
                 lambda: os.unlink('race/d') if os.path.islink('race/d') else None,
                 lambda: os.rename('race/d', 'race/junk-%d' % junk) if os.path.exists('race/parked/d') and os.path.isdir('race/d') else None,
                 lambda: os.rename('race/parked/d', 'race/d') if os.path.exists('race/parked/d') else None,
                 lambda: os.replace('race/parked/x.txt', 'race/d/x.txt') if os.path.exists('race/parked/x.txt') else None):
        try:
            step()
        except OSError:
            pass
    junk += 1

while time.time() < end:
    for t, f in zip(targets, files + files[:2]):
        try:
            os.rename('race/d', 'race/parked/d')
            os.symlink(t, 'race/d')
            os.unlink('race/d')
            os.rename('race/parked/d', 'race/d')
            os.rename('race/d/x.txt', 'race/parked/x.txt')
            os.symlink(f, 'race/d/x.txt')
            os.unlink('race/d/x.txt')
            os.rename('race/parked/x.txt', 'race/d/x.txt')
            swaps += 1
        except OSError:
            reset()
swaps`,
    );

    const seen: string[] = [];
    const deadline = Date.now() + 7000;
    let calls = 0;
    while (Date.now() < deadline) {
      const results = await Promise.allSettled([
        callTool<CallToolResult>(mallory2, 'read_file', { path: 'race/d/x.txt' }),
        callTool<CallToolResult>(mallory2, 'write_file', { path: 'race/d/x.txt', content: 'written by the gateway' }),
        callTool<CallToolResult>(mallory2, 'write_file', { path: 'race/d/made/by/gateway.txt', content: 'new' }),
        callTool<CallToolResult>(mallory2, 'list_files', { path: 'race/d', recursive: true }),
        callTool<CallToolResult>(mallory2, 'list_files', { path: 'race', recursive: true }),
        mallory2.readResource({ uri: 'file:///workspace/race/d/x.txt' }),
      ]);
      calls += results.length;
      for (const r of results) seen.push(r.status === 'fulfilled' ? JSON.stringify(r.value) : String(r.reason));
    }
    const swaps = Number((await attack).text.match(/\[result\] (\d+)/)?.[1]);
    expect(swaps, 'the attack ran').toBeGreaterThan(100);
    expect(calls).toBeGreaterThan(100);

    // Nothing outside mallory's workspace changed: contents, sizes, owners, modes, names.
    expect(fingerprint(canary)).toEqual(before.canary);
    expect(fingerprint(victimWs)).toEqual(before.victim);
    const dataAfter = fingerprint(gw.harness.dataDir);
    for (const name of ['sandgate.db', 'pii.key', 'upstream.key']) if (before.data[name]) expect(dataAfter[name]?.split(':').slice(0, 3)).toEqual(before.data[name]!.split(':').slice(0, 3));
    expect(Object.keys(dataAfter).filter((n) => !(n in before.data) && !n.startsWith('sandgate.db'))).toEqual([]);
    // And nothing outside it was listed or read.
    const all = seen.join('\n');
    for (const leak of ['canary-secret', 'CANARY', 'victim-secret', 'victim data', 'sandgate.db', 'pii.key', 'passwd', 'workspaces/']) {
      expect(all, leak).not.toContain(leak);
    }
  });
});

describe('forged runner messages', () => {
  it('code cannot write into the runner channel, trace the runner, or pass a done of its own', async () => {
    await run(mallory, 'bash', 'true'); // the bash shell and the Deno host are up, with their channels
    expect((await run(mallory, 'typescript', '1')).text).toContain('[result] 1');
    const { text, result } = await run(
      mallory,
      'python',
      `import os, json, ctypes, stat
line = json.dumps({"type": "done", "id": os.environ["SANDGATE_EXEC_ID"], "exitCode": 0, "durationMs": 1, "timedOut": False,
  "killed": False, "restarted": False, "truncated": {"stdout": 0, "stderr": 0}, "result": "'FORGED'",
  "files": [{"path": "../../../etc/shadow", "size": 1, "change": "created"}]}).encode() + b"\\n"
flood = b'{"type":"stdout","id":"%s","data":"%s"}\\n' % (os.environ["SANDGATE_EXEC_ID"].encode(), b"A" * 65536)
outcome = {}
for pid in (p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()):
    try:
        fds = os.listdir(f'/proc/{pid}/fd')
    except OSError as e:
        outcome[pid] = e.errno; continue
    for fd in fds:
        try:
            f = os.open(f'/proc/{pid}/fd/{fd}', os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            outcome[f'{pid}/{fd}'] = e.errno; continue
        try:
            st = os.fstat(f)
            os.write(f, line)
            for _ in range(100): os.write(f, flood)
            # A file of this user's own (a Deno cache under /tmp) it could write by its name anyway.
            own = stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() or os.readlink(f'/proc/{pid}/fd/{fd}') == '/dev/null'
            outcome[f'{pid}/{fd}'] = 'own file' if own else 'WROTE ' + os.readlink(f'/proc/{pid}/fd/{fd}')
        except OSError as e:
            outcome[f'{pid}/{fd}'] = e.errno
        finally:
            os.close(f)
libc = ctypes.CDLL(None, use_errno=True)
traced = [libc.ptrace(16, int(p), 0, 0) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]
print(json.dumps(outcome))
print('ptrace', traced)
'genuine'`,
    );
    expect(text).toContain("[result] 'genuine'");
    expect(text).not.toContain('FORGED');
    expect(text).not.toContain('WROTE');
    expect(text).toMatch(/ptrace \[(-1(, )?)+\]/);
    expect(JSON.stringify(result.content)).not.toContain('shadow');
    // The next runs of this user are just as genuine.
    expect((await run(mallory, 'python', '6 * 7')).text).toContain('[result] 42');
    expect((await run(mallory, 'typescript', '6 * 7')).text).toContain('[result] 42');
    expect((await run(mallory, 'bash', 'echo $((6 * 7))')).text).toContain('42');
  });

  it('bash cannot forge a Python result for a later run', async () => {
    await run(
      mallory,
      'bash',
      `for f in /proc/[0-9]*/fd/*; do printf '{"id":"x","exitCode":0,"result":"FORGED"}\\n' > "$f"; done 2>/dev/null; true`,
    );
    expect((await run(mallory, 'python', '1 + 1')).text).toContain('[result] 2');
  });
});

describe('the audit log keeps shapes, never names code chose', () => {
  it('an exception class named after an e-mail address is stored as code:other', async () => {
    const { result } = await run(mallory, 'python', 'ann_lee_at_example_com = type("ann_lee_at_example_com", (Exception,), {})\nraise ann_lee_at_example_com("x")');
    expect(result.isError).toBe(true);
    await new Promise((r) => setTimeout(r, 200)); // audit rows are written after the response
    const rows = await listAudit(gw.harness.store.db, (await findUser(gw.harness.store.db, 'mallory'))!.id, { limit: 5 });
    expect(rows[0]).toMatchObject({ method: 'tools/call', tool: 'execute_code', outcome: 'error', errorClass: 'code:other' });
    expect(JSON.stringify(rows)).not.toMatch(/ann_lee|example/);
  });
});

describe('a workspace built to make every run slow', () => {
  it('folders nested thousands deep: the scan stops at its depth, says so, and the next run stays fast', async () => {
    // Deeper than PATH_MAX allows one path to name: built one level at a time.
    const built = await run(mallory, 'python', "import os\nhere = os.getcwd()\nos.mkdir('deep'); os.chdir('deep')\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')\nos.chdir(here)\n'built'");
    expect(built.text).toContain("[result] 'built'");
    const t0 = performance.now();
    const next = await run(mallory, 'python', 'open("after.txt", "w").write("1")');
    const ms = performance.now() - t0;
    expect(next.text).toContain('more than 64 levels deep');
    expect(next.text).toContain('created after.txt');
    // Scanning 3,000 levels by path cost seconds per run; bounded, it is one run's usual time.
    expect(ms).toBeLessThan(3000);
  });

  it('a name too long is a tool error the user can read, not an internal error', async () => {
    const r = await callTool<CallToolResult>(mallory, 'write_file', { path: `${'n'.repeat(300)}.txt`, content: 'x' });
    expect(r.isError).toBe(true);
    expect(toolText(r)).toMatch(/longer than 255 bytes/);
    expect(toolText(r)).not.toMatch(/internal error/);
  });
});

describe('processes that detach', () => {
  it('end with their run, however they detach; Python children that did not detach live on with the kernel', async () => {
    await run(mallory, 'bash', 'setsid sleep 301 & (setsid sh -c "sleep 302" &) ; nohup setsid sleep 303 >/dev/null 2>&1 & true');
    await run(mallory, 'python', 'import subprocess\nsubprocess.Popen(["sleep", "304"], start_new_session=True)\nkept = subprocess.Popen(["sleep", "305"])');
    // A detached process whose main thread exits alone: its leader shows as a zombie while a thread runs on.
    await run(
      mallory,
      'python',
      `import os, threading, time, ctypes
if os.fork() == 0:
    os.setsid()
    def beat():
        while True:
            open('/workspace/heartbeat', 'w').write(str(time.time()))
            time.sleep(0.05)
    threading.Thread(target=beat).start()
    time.sleep(0.2)
    ctypes.CDLL(None).syscall(60, 0)  # exit(2) of this thread only
time.sleep(0.5)`,
    );
    // What ps lists (its stdout): the shell may add to stderr its own notice of a job it
    // saw killed ("Killed  setsid sleep 301"), which names the process without it running.
    const ps = (await run(mallory, 'bash', 'ps -eo args --no-headers')).text.split('\n[stderr]')[0]!;
    for (const n of [301, 302, 303, 304]) expect(ps).not.toContain(`sleep ${n}`);
    expect(ps).toContain('sleep 305');
    // The runner is the container's init: the detached ones became its children, and it reaped them.
    const orphans = (await run(mallory, 'bash', "ps -eo stat=,ppid= | awk '$1 ~ /^Z/ && $2 == 1' | wc -l")).text;
    expect(orphans, 'dead orphans left unreaped').toMatch(/^0$/m);
    expect((await run(mallory, 'bash', 'ps -o pid=,args= -p 1')).text).toMatch(/^\s*1 .*python3.*sandgate_runner\.boot/m);
    const beat1 = (await run(mallory, 'bash', 'sleep 0.3; cat heartbeat')).text.split('\n')[0];
    const beat2 = (await run(mallory, 'bash', 'sleep 0.3; cat heartbeat')).text.split('\n')[0];
    expect(beat2, 'the zombie-led process was still writing').toBe(beat1);
  });
});
