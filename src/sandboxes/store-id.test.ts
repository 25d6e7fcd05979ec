import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { storeIdOf } from './volumes.js';

describe('a workspaces folder’s store id', () => {
  const dirs: string[] = [];
  const folder = () => {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-store-id-'));
    dirs.push(d);
    return d;
  };
  afterEach(() => {
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });

  it('is made once and read the same by every gateway on the folder; another folder has another', () => {
    const a = folder();
    const id = storeIdOf(a);
    expect(id).toMatch(/^[A-Za-z0-9_-]{16}$/);
    expect(storeIdOf(a)).toBe(id);
    expect(fs.readdirSync(a)).toEqual(['.store-id']);
    expect(storeIdOf(folder())).not.toBe(id);
  });

  it('refuses a file that does not hold one, naming it', () => {
    const a = folder();
    fs.writeFileSync(path.join(a, '.store-id'), '../../etc\n');
    expect(() => storeIdOf(a)).toThrow(/\.store-id does not hold a workspace store id/);
  });
});
