import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { Workspace, WorkspaceError } from './workspace.js';

let root: string;
let outside: string;
let ws: Workspace;

beforeEach(() => {
  const base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-ws-')));
  root = path.join(base, 'ws');
  outside = path.join(base, 'secret');
  fs.mkdirSync(root);
  fs.mkdirSync(outside);
  fs.writeFileSync(path.join(outside, 'key'), 'TOP SECRET');
  ws = new Workspace(root);
});

const code = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (e) {
    return (e as WorkspaceError).code;
  }
  return 'ok';
};

describe('Workspace (host-side access)', () => {
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
    if (process.getuid?.() !== 0) return;
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
