import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { storeIdOf, storeProbes } from './volumes.js';

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

  it('is never read through a link', () => {
    const a = folder();
    fs.writeFileSync(path.join(a, 'elsewhere'), 'AbCdEfGh12345678\n');
    fs.symlinkSync(path.join(a, 'elsewhere'), path.join(a, '.store-id'));
    expect(() => storeIdOf(a)).toThrow();
  });

  it('keeps store probes as files of the gateway alone, named only by a replica id, never read through a link', () => {
    const a = folder();
    const probes = storeProbes(a);
    const word = probes.write('host-1a2b3c');
    expect(probes.read('host-1a2b3c')).toBe(word);
    expect(fs.statSync(path.join(a, '.store-probe-host-1a2b3c')).mode & 0o777).toBe(0o600);
    // Another folder with the same name is another store: it has no such probe.
    expect(storeProbes(folder()).read('host-1a2b3c')).toBeUndefined();
    for (const id of ['../.store-id', 'a/b', '', 'x'.repeat(101)]) {
      expect(probes.read(id), id).toBeUndefined();
      expect(() => probes.write(id), id).toThrow(/not a replica id/);
    }
    fs.symlinkSync('/etc/hostname', path.join(a, '.store-probe-linked'));
    expect(() => probes.read('linked')).toThrow();
    probes.remove('host-1a2b3c');
    expect(probes.read('host-1a2b3c')).toBeUndefined();
  });
});
