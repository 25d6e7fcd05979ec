import { describe, expect, it } from 'vitest';
import { registryEntries } from '../sandboxes/net-grants.js';
import { Destinations } from './destinations.js';
import { checkSecret } from './secrets.js';

describe('where a connection out of a sandbox may go', () => {
  const listed = new Destinations({ dns: [], privateNets: ['10.20.0.0/16', 'fd00::/8', '100.64.0.0/10'], registries: registryEntries(['https://pypi.org/simple/']) });

  it('refuses loopback, link-local, unlisted private, and metadata services even inside listed ranges', () => {
    for (const a of ['127.0.0.1', '::1', '::ffff:127.0.0.1', '169.254.169.254', 'fe80::1', '192.168.1.1', '10.21.0.1', '0.0.0.0', '224.0.0.1', 'fd00:ec2::254', '100.100.100.200', '::ffff:100.100.100.200', '168.63.129.16']) {
      expect(listed.addressRefusal(a, 'h'), a).toBeDefined();
    }
    for (const a of ['10.20.3.4', 'fd00::5', '100.64.1.1', '8.8.8.8', '2606:4700::1111']) expect(listed.addressRefusal(a, 'h'), a).toBeUndefined();
  });

  it('refuses IP literals and hosts the grant does not name, before any lookup', async () => {
    expect(await listed.decide(true, '10.20.3.4', 80)).toMatchObject({ ok: false, why: 'ip_literal' });
    expect(await listed.decide(true, '[::1]', 80)).toMatchObject({ ok: false, why: 'ip_literal' });
    expect(await listed.decide(['api.example.com:443'], 'api.example.com', 80)).toMatchObject({ ok: false, why: 'not_allowed' });
    expect(await listed.decide(['registries'], 'evil.example', 443)).toMatchObject({ ok: false, why: 'not_allowed', message: expect.stringContaining('--allow-net=evil.example') });
    expect(listed.grantedHost(['registries'], 'PyPI.org.')).toBe(true);
    expect(listed.grantedHost(false, 'pypi.org')).toBe(false);
  });
});

describe('a host secret', () => {
  it('takes only what a header can carry', () => {
    expect(checkSecret('KEY', { host: 'api.example.com', value: 'abc' })).toMatchObject({ header: 'authorization', prefix: 'Bearer ', port: 443 });
    for (const value of ['a\r\nx-evil: 1', 'caf\u00e9', 'a\u0001b']) expect(() => checkSecret('KEY', { host: 'api.example.com', value }), JSON.stringify(value)).toThrow(/printable ASCII/);
    expect(() => checkSecret('KEY', { host: '*.example.com', value: 'a' })).toThrow(/one host name/);
    expect(() => checkSecret('KEY', { host: 'api.example.com', value: 'a', header: 'proxy-authorization' })).toThrow(/header name/);
    expect(() => checkSecret('key', { host: 'api.example.com', value: 'a' })).toThrow(/capitals/);
  });
});
