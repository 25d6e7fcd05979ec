import { describe, expect, it } from 'vitest';
import { denoFlags, narrowPermissions, networkUnavailable, parsePermissions, PermissionError } from './permissions.js';

const ceiling = parsePermissions({ read: ['/workspace', '/skills', '/tools'], write: ['/workspace'], env: ['LANG'] });

describe('permissions', () => {
  it('denies every grant by default', () => {
    expect(parsePermissions({})).toEqual({ read: false, write: false, net: false, env: false, run: false, sys: false, ffi: false });
  });

  it('narrows within the ceiling', () => {
    const p = narrowPermissions(ceiling, { read: ['/workspace/data'], write: false });
    expect(p.read).toEqual(['/workspace/data']);
    expect(p.write).toBe(false);
    expect(p.env).toEqual(['LANG']);
  });

  it('never widens, and names the missing grant the way Deno does', () => {
    expect(() => narrowPermissions(ceiling, { read: ['/etc'] })).toThrow(PermissionError);
    expect(() => narrowPermissions(ceiling, { read: ['/etc'] })).toThrow('Requires read access to "/etc", run again with --allow-read=/etc');
    expect(() => narrowPermissions(ceiling, { write: ['/workspace/../etc'] })).toThrow('Requires write access to "/etc"');
    expect(() => narrowPermissions(ceiling, { run: true })).toThrow(/Requires run access, run again with --allow-run/);
    expect(() => narrowPermissions(ceiling, { env: ['AWS_SECRET_ACCESS_KEY'] })).toThrow(/--allow-env=AWS_SECRET_ACCESS_KEY/);
  });

  it('prefix matching respects path boundaries', () => {
    expect(() => narrowPermissions(ceiling, { read: ['/workspace2'] })).toThrow(/"\/workspace2"/);
    expect(narrowPermissions(ceiling, { read: ['/workspace/'] }).read).toEqual(['/workspace']);
  });

  it('turns a policy into Deno flags', () => {
    expect(denoFlags(ceiling)).toEqual(['--allow-read=/workspace,/skills,/tools', '--allow-write=/workspace', '--allow-env=LANG']);
    expect(denoFlags(parsePermissions({ read: true }), { read: ['/tmp/s.sock'], write: ['/tmp/s.sock'] })).toEqual(['--allow-read', '--allow-write=/tmp/s.sock']);
    expect(denoFlags(parsePermissions({}))).toEqual([]);
  });

  it('says clearly that net is not available yet', () => {
    expect(networkUnavailable(ceiling)).toBeUndefined();
    expect(networkUnavailable(parsePermissions({ net: ['example.com'] }))).toMatch(/--network none/);
  });

  it('rejects relative paths and unknown grants', () => {
    expect(() => parsePermissions({ read: ['data'] })).toThrow(/absolute/);
    expect(() => parsePermissions({ fly: true })).toThrow();
  });
});
