import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SANDBOX_GID, SANDBOX_UID, Workspace, WorkspaceError } from './workspace.js';
import { TOO_LATE_MESSAGE, WorkspaceHelper } from './workspace-helper.js';

let root: string;
let outside: string;
let helper: WorkspaceHelper;
let ws: Workspace;
const asRoot = process.getuid?.() === 0;

beforeEach(() => {
  const base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-ws-')));
  root = path.join(base, 'ws');
  outside = path.join(base, 'secret');
  fs.mkdirSync(root);
  fs.mkdirSync(outside);
  fs.writeFileSync(path.join(outside, 'key'), 'TOP SECRET');
  // As in a real workspace, the sandbox user owns its top (volumes.ts: root_owner).
  if (asRoot) fs.chownSync(root, SANDBOX_UID, SANDBOX_GID);
  helper = new WorkspaceHelper({ root, uid: SANDBOX_UID, gid: SANDBOX_GID });
  ws = new Workspace(helper);
});

afterEach(async () => {
  await helper.close(true);
});

const code = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (e) {
    return (e as WorkspaceError).code;
  }
  return 'ok';
};

describe('Workspace (through its confined helper)', () => {
  it('writes, reads with ranges, lists and removes', async () => {
    await ws.write('a/b/c.txt', 'hello world');
    expect((await ws.read('/workspace/a/b/c.txt')).data.toString()).toBe('hello world');
    const part = await ws.read('a/b/c.txt', { offset: 6, length: 3 });
    expect(part.data.toString()).toBe('wor');
    expect(part.size).toBe(11);
    expect((await ws.list('', { recursive: true })).map((e) => `${e.type}:${e.path}`)).toEqual(['dir:a', 'dir:a/b', 'file:a/b/c.txt']);
    await ws.remove('a');
    expect(await ws.list()).toEqual([]);
  });

  it('files the gateway creates belong to the sandbox user', async () => {
    if (!asRoot) return;
    await ws.write('d/owned.txt', 'x');
    expect(fs.statSync(path.join(root, 'd/owned.txt')).uid).toBe(1000);
    expect(fs.statSync(path.join(root, 'd')).uid).toBe(1000);
  });

  it('refuses .. and absolute paths outside', async () => {
    expect(await code(ws.read('../secret/key'))).toBe('EOUTSIDE');
    expect(await code(ws.read('a/../../secret/key'))).toBe('EOUTSIDE');
    expect(await code(ws.read('/etc/passwd'))).toBe('EOUTSIDE');
    expect(await code(ws.write('../escape.txt', 'x'))).toBe('EOUTSIDE');
    expect(fs.existsSync(path.join(root, '..', 'escape.txt'))).toBe(false);
  });

  it('never follows a symlink planted in the workspace', async () => {
    fs.symlinkSync(path.join(outside, 'key'), path.join(root, 'link'));
    fs.symlinkSync(outside, path.join(root, 'dirlink'));
    expect(await code(ws.read('link'))).toBe('EOUTSIDE');
    expect(await code(ws.read('dirlink/key'))).toBe('EOUTSIDE');
    expect(await code(ws.write('link', 'pwned'))).toBe('EOUTSIDE');
    expect(await code(ws.write('dirlink/new.txt', 'pwned'))).toBe('EOUTSIDE');
    expect(await code(ws.list('dirlink'))).toBe('EOUTSIDE');
    expect(await code(ws.remove('dirlink/key'))).toBe('EOUTSIDE');
    expect(fs.readFileSync(path.join(outside, 'key'), 'utf8')).toBe('TOP SECRET');
    expect(fs.existsSync(path.join(outside, 'new.txt'))).toBe(false);
    // Listing skips links instead of descending into them.
    expect((await ws.list('', { recursive: true })).map((e) => e.path)).toEqual([]);
    // Removing the link removes the link, not its target.
    await ws.remove('dirlink');
    expect(fs.existsSync(path.join(outside, 'key'))).toBe(true);
  });

  it('reports missing files, directories and non-files clearly', async () => {
    expect(await code(ws.read('nope.txt'))).toBe('ENOENT');
    await ws.mkdirs('dir');
    expect(await code(ws.read('dir'))).toBe('EISDIR');
    await ws.write('f', 'x');
    expect(await code(ws.list('f'))).toBe('ENOTDIR');
    expect(await code(ws.write('f/g', 'x'))).toBe('ENOTDIR');
    expect(await code(ws.remove(''))).toBe('EINVAL');
  });
});

describe('Workspace helper confinement', () => {
  it('a FIFO or device is refused, never blocked on; writes never truncate one', async () => {
    execFileSync('mkfifo', [path.join(root, 'pipe')]);
    if (asRoot) fs.chownSync(path.join(root, 'pipe'), SANDBOX_UID, SANDBOX_GID); // as if the sandbox made it
    expect(await code(ws.read('pipe'))).toBe('EINVAL');
    expect(await code(ws.write('pipe', 'x'))).toBe('EINVAL');
    expect(fs.statSync(path.join(root, 'pipe')).isFIFO()).toBe(true);
    expect((await ws.list('')).map((e) => e.path)).toEqual([]);
  });

  it('user mistakes are clear errors, not internal ones', async () => {
    expect(await code(ws.write(`${'n'.repeat(300)}.txt`, 'x'))).toBe('ENAMETOOLONG');
    expect(await code(ws.read(`${'d/'.repeat(3000)}f`))).toMatch(/ENAMETOOLONG|ENOENT/);
    await ws.write('a.txt', 'x');
    await ws.rename('a.txt', 'moved/b.txt');
    expect((await ws.read('moved/b.txt')).data.toString()).toBe('x');
    await ws.write('c.txt', 'y');
    expect(await code(ws.rename('c.txt', 'moved/b.txt'))).toBe('EEXIST');
    expect(await code(ws.rename('moved', 'moved/inside'))).toBe('EINVAL');
  });

  it('cannot reach outside its workspace even through a path it is given', async () => {
    // The helper is chrooted: its own view of "/" is the workspace.
    fs.writeFileSync(path.join(root, 'inside.txt'), 'in');
    const { reply, data } = await helper.request({ op: 'read', path: 'inside.txt' });
    expect(reply.ok).toBe(true);
    expect(data!.toString()).toBe('in');
    // A request the gateway would never send (.., an absolute path) is refused anyway.
    expect((await helper.request({ op: 'read', path: '../secret/key' })).reply.code).toBe('EINVAL');
    expect((await helper.request({ op: 'stat', path: 'etc/passwd' })).reply.code).toBe('ENOENT');
  });

  it('deep trees are listed within their bounds', async () => {
    await ws.mkdirs(Array(100).fill('d').join('/'));
    const listing = await ws.list('', { recursive: true });
    expect(listing.length).toBe(65);
    expect(listing.stopped).toBe('depth');
    await ws.remove('d');
    expect(await ws.list('')).toEqual([]);
  });

  it('names built to bloat a listing (undecodable, long, thousands of links) keep it bounded', async () => {
    // 15 folders with 250-byte names that are not UTF-8, and 2,000 hard links at the bottom.
    execFileSync('python3', [
      '-c',
      "import os,sys\nos.chdir(sys.argv[1])\nn=b'\\xff'*250\nfor _ in range(15):\n    os.mkdir(n); os.chdir(n)\nopen('f','w').write('x')\nfor i in range(2000):\n    os.link('f', b'\\xfe'*200 + str(i).encode())",
      root,
    ]);
    execFileSync('chown', ['-R', `${SANDBOX_UID}:${SANDBOX_GID}`, root]);
    const t0 = performance.now();
    const listing = await ws.list('', { recursive: true, limit: 20_000 });
    const ms = performance.now() - t0;
    expect(listing.length).toBeGreaterThan(15);
    expect(listing.stopped).toBe('limit');
    expect(Buffer.byteLength(JSON.stringify(listing))).toBeLessThan(4 * 1024 * 1024);
    // Each undecodable byte arrives as its lone surrogate (the name the helper opens it by), not as an escape of an escape.
    expect(listing[0]!.path).toBe('\udcff'.repeat(250));
    expect((await ws.stat(listing[0]!.path)).type).toBe('dir');
    expect(ms).toBeLessThan(5000);
  });

  it('a request with a deadline waits behind the others and is refused, with nothing done, once it has passed', async () => {
    await ws.write('up.txt', '1');
    const helperProcess = `workspace_helper.py ${root} `;
    // The helper stops answering for a while (busy with another request, say).
    execFileSync('pkill', ['-STOP', '-f', helperProcess]);
    let lateWrite: Promise<unknown>, inTime: Promise<unknown>;
    try {
      const before = helper.request({ op: 'write', path: 'before.txt' }, Buffer.from('a'));
      lateWrite = helper.request({ op: 'write', path: 'late.txt' }, Buffer.from('b'), Date.now() + 150);
      const after = helper.request({ op: 'write', path: 'after.txt' }, Buffer.from('c'));
      inTime = helper.request({ op: 'write', path: 'in-time.txt' }, Buffer.from('d'), Date.now() + 20_000);
      let refused = false;
      lateWrite.catch(() => (refused = true));
      await new Promise((r) => setTimeout(r, 600));
      // Refused at its deadline, while the helper is still busy: not only once those before it are answered.
      expect(refused).toBe(true);
      execFileSync('pkill', ['-CONT', '-f', helperProcess]);
      expect((await before).reply.ok).toBe(true);
      expect((await after).reply.ok).toBe(true);
    } finally {
      execFileSync('pkill', ['-CONT', '-f', helperProcess]);
    }
    await expect(lateWrite).rejects.toThrow(TOO_LATE_MESSAGE);
    expect(((await inTime) as { reply: { ok: boolean } }).reply.ok).toBe(true);
    // The late one did nothing; those around it were done, in order.
    expect(fs.existsSync(path.join(root, 'late.txt'))).toBe(false);
    for (const [f, d] of [['before.txt', 'a'], ['after.txt', 'c'], ['in-time.txt', 'd']]) expect(fs.readFileSync(path.join(root, f!), 'utf8')).toBe(d);
  });

  it('a helper that dies is replaced on the next request', async () => {
    await ws.write('x.txt', '1');
    execFileSync('pkill', ['-KILL', '-f', `workspace_helper.py ${root} `]);
    await new Promise((r) => setTimeout(r, 100));
    expect((await ws.read('x.txt')).data.toString()).toBe('1');
  });
});
