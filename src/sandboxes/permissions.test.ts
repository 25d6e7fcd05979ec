import { describe, expect, it } from 'vitest';
import { denoFlags, narrowPermissions, parsePermissions, PermissionError, widenPermissions } from './permissions.js';
import { registryEntries } from './net-grants.js';

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

  it('narrows net as Deno names it: hosts, ports, wildcards and the registries', () => {
    const registries = registryEntries(['https://pypi.org/simple/', 'https://files.pythonhosted.org/', 'http://npm.internal:8080/']);
    const net = parsePermissions({ net: ['registries', 'api.example.com:443', '*.data.example.org'] });
    expect(narrowPermissions(net, { net: ['pypi.org', 'files.pythonhosted.org'] }, registries).net).toEqual(['pypi.org:443', 'files.pythonhosted.org:443']);
    expect(narrowPermissions(net, { net: ['api.example.com'] }, registries).net).toEqual(['api.example.com:443']);
    expect(narrowPermissions(net, { net: ['x.data.example.org:8443'] }, registries).net).toEqual(['x.data.example.org:8443']);
    expect(narrowPermissions(net, { net: ['registries'] }, registries).net).toEqual(['registries']);
    // Beyond the ceiling, an IP literal, a port the ceiling does not give: refused, saying what is missing.
    expect(() => narrowPermissions(net, { net: ['evil.example.com'] }, registries)).toThrow('Requires net access to "evil.example.com", run again with --allow-net=evil.example.com');
    expect(() => narrowPermissions(net, { net: ['data.example.org'] }, registries)).toThrow(/Requires net access/);
    expect(() => narrowPermissions(net, { net: ['api.example.com:80'] }, registries)).toThrow(/Requires net access/);
    expect(() => narrowPermissions(net, { net: ['10.0.0.1'] }, registries)).toThrow(/IP addresses are never reached/);
    expect(() => narrowPermissions(ceiling, { net: ['pypi.org'] }, registries)).toThrow('Requires net access to "pypi.org"');
    expect(() => narrowPermissions(ceiling, { net: ['registries'] }, registries)).toThrow(/--allow-net=registries/);
    // Deno's flags spell the registries out; a wildcard opens Deno's own check (the proxy applies it).
    expect(denoFlags(net, {}, registries)).toEqual(['--allow-net']);
    expect(denoFlags(parsePermissions({ net: ['registries'] }), {}, registries)).toEqual(['--allow-net=pypi.org:443,files.pythonhosted.org:443,npm.internal:8080']);
  });

  it("adds a team's grants to a member's ceiling", () => {
    const wider = widenPermissions(ceiling, parsePermissions({ net: ['registries'], read: ['/data'] }));
    expect(wider.net).toEqual(['registries']);
    expect(wider.read).toEqual(['/workspace', '/skills', '/tools', '/data']);
    expect(widenPermissions(ceiling, parsePermissions({ env: true })).env).toBe(true);
  });

  it('rejects relative paths and unknown grants', () => {
    expect(() => parsePermissions({ read: ['data'] })).toThrow(/absolute/);
    expect(() => parsePermissions({ fly: true })).toThrow();
  });
});
