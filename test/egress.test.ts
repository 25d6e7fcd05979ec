/**
 * Controlled network for sandbox code, end to end on the real runtime: code in a gVisor
 * sandbox with no network interface reaches the stand-in hosts of test/support/egress.ts
 * only through its runner's relay and the gateway's egress proxy, as its run's `net`
 * grant allows. pip installs from a PEP 503 stand-in into the user's workspace; refused
 * destinations (not listed, IP literals, names resolving to loopback, to the gateway or to
 * unlisted private addresses) say why; a host's secret reaches that host only.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureUser, getUser, setUserPermissions } from '../src/accounts/accounts.js';
import { queryAudit } from '../src/audit/audit.js';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import { startNetworkStandins, type NetworkStandins } from './support/egress.js';
import { startGateway, type Gateway } from './support/mcp.js';
import { modernRequest } from './support/raw-request.js';
import { webSession } from './support/web-session.js';

const READ = {
  read: ['/workspace', '/skills', '/tools'],
  write: ['/workspace'],
};

describe('egress from sandboxes', () => {
  let outside: NetworkStandins;
  let served: Gateway;
  let ann: SandboxOwner;
  let bob: SandboxOwner;
  let secret: string;

  const run = (owner: SandboxOwner, language: 'python' | 'bash' | 'typescript', code: string, permissions?: Record<string, unknown>) =>
    served.harness.manager.execute(owner, {
      language,
      code,
      timeoutSec: 60,
      ...(permissions && { permissions }),
    });

  beforeAll(async () => {
    outside = await startNetworkStandins();
    secret = fs.readFileSync(path.join(outside.dir, 'secret'), 'utf8');
    served = await startGateway({
      env: {
        SANDGATE_DEFAULT_PERMISSIONS: JSON.stringify(READ),
        ...outside.settings,
        SANDGATE_EGRESS_SECRETS: JSON.stringify({
          API_KEY: { host: 'api.test', value: secret, port: 8443 },
        }),
        SANDGATE_EGRESS_MAX_CONNECTIONS: '2',
      },
    });
    ann = await served.harness.user('egress-ann');
    bob = await served.harness.user('egress-bob');
    // Ann may reach the registries and a few hosts; Bob has the default: no network.
    await setUserPermissions(
      served.harness.store.db,
      'egress-ann',
      JSON.stringify({
        ...READ,
        net: ['registries', 'api.test', 'pkgs.test:8443', 'other.test:8080', 'loop.test', 'gw.test', 'private.test', 'nowhere.test'],
      }),
    );
  }, 120_000);

  afterAll(async () => {
    await served?.close();
    await outside?.close();
  });

  it('pip installs from the registry into the workspace: importable in the next run and after a sandbox restart', async () => {
    const install = await run(ann, 'bash', 'pip install sgdemo 2>&1 | tail -n 3');
    expect(install.stdout).toMatch(/Successfully installed sgdemo-1.0/);
    expect((await run(ann, 'python', 'import sgdemo; print(sgdemo.VALUE, sgdemo.__file__)')).stdout).toMatch(/^42 \/workspace\/\.local\/lib\/python3\.\d+\/site-packages\/sgdemo\/__init__\.py/);
    expect((await run(ann, 'bash', 'pip list --user 2>/dev/null')).stdout).toMatch(/sgdemo\s+1\.0/);
    await served.harness.manager.stopUser(ann.userId);
    expect((await run(ann, 'python', 'import sgdemo; print(sgdemo.VALUE)')).stdout.trim()).toBe('42');
    // And removed the same way.
    expect((await run(ann, 'bash', 'pip uninstall -y sgdemo 2>&1 | tail -n 1')).stdout).toMatch(/Successfully uninstalled sgdemo-1.0/);
  }, 180_000);

  it('imports an npm package in TypeScript through the registry, and keeps it in the workspace', async () => {
    const code = "import { pad } from 'npm:sg-pad@1.0.0';\nconsole.log(pad('x', 4));";
    const first = await run(ann, 'typescript', code);
    expect(first.stdout.trim(), first.stderr).toBe('***x');
    await served.harness.manager.stopUser(ann.userId);
    // After a restart, with no network for the run: from Deno's cache in the workspace.
    const again = await run(ann, 'typescript', code, { net: false });
    expect(again.stdout.trim(), again.stderr).toBe('***x');
    expect((await run(ann, 'bash', 'ls /workspace/.cache/deno/npm/pkgs.test_8080/npm/sg-pad 2>&1 || find /workspace/.cache/deno -maxdepth 4 -name "sg-pad*"')).stdout).toMatch(/1\.0\.0|sg-pad/);
  }, 120_000);

  it('refuses the same install without a grant, naming the missing one as Deno does', async () => {
    // Over https, as from PyPI: pip prints the refused tunnel's reason when it retries.
    const pip = 'pip install --retries 1 --index-url https://pkgs.test:8443/simple/ sgdemo 2>&1';
    const r = await run(bob, 'bash', pip);
    expect(r.stdout).toMatch(/Tunnel connection failed: 403 Requires net access to "pkgs\.test:8443", run again with --allow-net=pkgs\.test/);
    // A run may narrow its grant: Ann's run without the registries is refused the same way, by the proxy.
    const narrowed = await run(ann, 'bash', pip, { net: ['api.test'] });
    expect(narrowed.stdout).toMatch(/Tunnel connection failed: 403 Requires net access to "pkgs\.test:8443", run again with --allow-net=pkgs\.test/);
    // And a run cannot ask for more than the ceiling.
    await expect(run(bob, 'python', '1', { net: ['registries'] })).rejects.toThrow(/Requires net access to "registries", run again with --allow-net=registries/);
  }, 120_000);

  it('reaches an allowed host, and refuses one not listed, an IP literal, and names resolving to loopback, the gateway or unlisted private addresses', async () => {
    const code = `
import urllib.request, urllib.error
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return 'OK ' + r.read().decode().strip()
    except urllib.error.HTTPError as e:
        return 'HTTP %d %s' % (e.code, e.read().decode().strip())
    except Exception as e:
        return 'ERR %s' % e
for u in ['http://other.test:8080/hello', 'http://pkgs.test:8080/simple/', 'http://${outside.outside}:8080/x', 'http://loop.test:8080/', 'http://gw.test:8080/', 'http://private.test:8080/', 'http://elsewhere.test:8080/']:
    print(u, '=>', get(u))
`;
    const out = (await run(ann, 'python', code)).stdout;
    expect(out).toMatch(/other\.test:8080\/hello => OK hello from other\.test:8080\/hello/);
    expect(out).toMatch(/pkgs\.test:8080\/simple\/ => OK .*sgdemo/);
    expect(out).toMatch(new RegExp(`${outside.outside.replace(/\./g, '\\.')}:8080/x => HTTP 403 .*is an IP address`));
    expect(out).toMatch(/loop\.test:8080\/ => HTTP 403 .*resolves to 127\.0\.0\.1, an address of the sandgate host itself/);
    expect(out).toMatch(/gw\.test:8080\/ => HTTP 403 .*an address of the sandgate host itself/);
    expect(out).toMatch(/private\.test:8080\/ => HTTP 403 .*resolves to 10\.99\.0\.1, a private address/);
    expect(out).toMatch(/elsewhere\.test:8080\/ => HTTP 403 sandgate refused this connection: Requires net access to "elsewhere\.test:8080", run again with --allow-net=elsewhere\.test/);
    // HTTPS as CONNECT, checked the same way (curl prints the proxy's refusal).
    const curl = await run(ann, 'bash', 'curl -sS -o /dev/null https://loop.test:8443/ 2>&1; curl -sS -o /dev/null https://elsewhere.test/ 2>&1; true');
    expect(curl.stdout).toMatch(/403/);
    // Deno's fetch goes the same way.
    const ts = await run(ann, 'typescript', `const r = await fetch('http://other.test:8080/from-deno'); console.log(r.status, (await r.text()).trim());`);
    expect(ts.stdout.trim()).toBe('200 hello from other.test:8080/from-deno');
    // Every connection is an audit row: host, port, bytes, outcome and why.
    const rows = (
      await queryAudit(served.harness.store.db, {
        userId: ann.userId,
        kind: 'egress',
        limit: 200,
      })
    ).filter((r) => r.kind === 'egress');
    const other = rows.find((r) => r.tool === 'other.test/8080' && r.outcome === 'ok');
    expect(other?.argsShape).toMatchObject({
      sent: expect.any(Number),
      received: expect.any(Number),
    });
    expect((other?.argsShape as { received: number }).received).toBeGreaterThan(0);
    expect(rows.some((r) => r.outcome === 'denied' && ['ip_literal', 'private_address', 'own_address', 'not_allowed'].includes(r.errorClass ?? ''))).toBe(true);
    // And on the admin page: each connection with its user, host, port, bytes, outcome and why.
    const admin = await webSession(served, await ensureUser(served.harness.store.db, 'egress-admin', { isAdmin: true }));
    const network = await (await admin.get('/admin/network', { htmx: false })).text();
    expect(network).toMatch(/<td>egress-ann<\/td><td>http<\/td><td>other\.test<\/td><td class="num">8080<\/td>/);
    expect(network).toMatch(/<td>egress-ann<\/td><td>http<\/td><td>gw\.test<\/td><td class="num">8080<\/td><td class="num">0\.0<\/td><td class="num">0\.0<\/td><td>denied<\/td><td>own_address<\/td>|<td>denied<\/td><td>(ip_literal|private_address|not_allowed)<\/td>/);
  }, 120_000);

  it('refuses a tunnel to an allowed host whose TLS asks for another name on the same address', async () => {
    // pkgs.test, api.test and other.test share one address, as names on one CDN do: a
    // tunnel opened to pkgs.test:8443 must not become a TLS session with api.test.
    const code = `
import os, socket, ssl, urllib.parse
proxy = urllib.parse.urlsplit(os.environ.get('HTTPS_PROXY') or os.environ['https_proxy'])
def hello(name):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
    s.sendall(b'CONNECT pkgs.test:8443 HTTP/1.1\\r\\nHost: pkgs.test:8443\\r\\n\\r\\n')
    answer = b''
    while b'\\r\\n\\r\\n' not in answer:
        answer += s.recv(1)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        t = ctx.wrap_socket(s, server_hostname=name)
        return 'TLS ' + t.version()
    except Exception as e:
        return 'ERR ' + str(e)
    finally:
        s.close()
for name in ['pkgs.test', 'PKGS.test.', 'api.test']:
    print(name, '=>', hello(name))
`;
    const out = (await run(ann, 'python', code)).stdout;
    expect(out).toMatch(/^pkgs\.test => TLS TLSv1\.3$/m);
    expect(out).toMatch(/^PKGS\.test\. => TLS TLSv1\.3$/m);
    expect(out).toMatch(/^api\.test => ERR .*ALERT_ACCESS_DENIED/m);
    const rows = (await queryAudit(served.harness.store.db, { userId: ann.userId, kind: 'egress', limit: 200 })).filter((r) => r.tool === 'pkgs.test/8443');
    expect(rows.filter((r) => r.outcome === 'denied' && r.errorClass === 'sni_mismatch')).toHaveLength(1);
    expect(rows.filter((r) => r.outcome === 'ok')).toHaveLength(2);
  }, 120_000);

  it("adds a host's secret to requests for that host only, and code never sees it", async () => {
    const r = await run(
      ann,
      'python',
      `
import json, os, urllib.request
with urllib.request.urlopen('http://api.test/v1/whoami', timeout=10) as resp:
    print('API', resp.read().decode())
# Everything code can see: its environment, every file it may read, every host it may call with a placeholder.
print(json.dumps(dict(os.environ)))
for root in ['/workspace', '/tmp', '/tools', '/skills']:
    for d, _, files in os.walk(root):
        for f in files:
            try:
                print(open(os.path.join(d, f), 'rb').read()[:100000].decode('latin-1'))
            except Exception:
                pass
req = urllib.request.Request('http://other.test:8080/collect', headers={'authorization': 'Bearer $API_KEY'})
print(urllib.request.urlopen(req, timeout=10).read().decode())
`,
    );
    expect(r.stdout).toMatch(/API \{"authorized":true,"path":"\/v1\/whoami"\}/);
    expect(r.stdout + r.stderr).not.toContain(secret);
    // HTTPS straight to the host would carry no secret: refused, saying how to ask.
    const tunnel = await run(ann, 'bash', "curl -sv https://api.test:8443/v1/whoami 2>&1 | grep '< HTTP'; true");
    expect(tunnel.stdout).toMatch(/< HTTP\/1\.1 403 sandgate adds the secret API_KEY to requests for api\.test: request http:\/\/api\.test:8443\//);
    // It arrived at its host, over TLS, and nowhere else.
    const seen = outside.requests();
    expect(seen.some((q) => q.port === 8443 && q.headers.authorization === `Bearer ${secret}`)).toBe(true);
    expect(seen.filter((q) => q.port !== 8443).some((q) => JSON.stringify(q).includes(secret))).toBe(false);
    // Nor in the workspace, the audit log, or the gateway's own files.
    const audit = JSON.stringify(await queryAudit(served.harness.store.db, { limit: 1000 }));
    expect(audit).not.toContain(secret);
  }, 120_000);

  it('lets a user store a secret of their own on the settings page, which wins over the team\'s for them', async () => {
    const cara = await served.harness.user('egress-cara');
    await setUserPermissions(served.harness.store.db, 'egress-cara', JSON.stringify({ ...READ, net: ['api.test'] }));
    const web = await webSession(served, (await getUser(served.harness.store.db, cara.userId))!);
    const whoami = async () => (await run(cara, 'python', "import urllib.request, urllib.error\ntry:\n    print(urllib.request.urlopen('http://api.test/v1/whoami', timeout=10).read().decode())\nexcept urllib.error.HTTPError as e:\n    print(e.read().decode())")).stdout.trim();
    expect(await whoami()).toBe('{"authorized":true,"path":"/v1/whoami"}');
    expect(await (await web.get('/settings', { htmx: false })).text()).toMatch(/<code>API_KEY<\/code> for <code>api\.test<\/code>/);
    const own = 'cara-own-value-0d2f';
    const saved = await web.post('/settings/secrets', { name: 'MY_API', host: 'api.test', port: '8443', header: 'authorization', prefix: 'Bearer ', value: own });
    expect(saved.status).toBe(200);
    const page = await saved.text();
    expect(page).toMatch(/MY_API for api\.test is saved/);
    expect(page).not.toContain(own);
    // Hers is sent now (the stand-in accepts only the team's), and only for her.
    expect(await whoami()).toBe('{"authorized":false,"path":"/v1/whoami"}');
    expect(outside.requests().some((q) => q.port === 8443 && q.headers.authorization === `Bearer ${own}`)).toBe(true);
    expect((await run(ann, 'python', "import urllib.request\nprint(urllib.request.urlopen('http://api.test/v1/whoami', timeout=10).read().decode())")).stdout).toMatch(/"authorized":true/);
    // A malformed one is refused, saying why; removing hers brings back the team's.
    const bad = await web.post('/settings/secrets', { name: 'lower', host: 'api.test', value: 'x' });
    expect(bad.status).toBe(400);
    expect(await bad.text()).toMatch(/use capitals, digits and _/);
    expect(await (await web.post('/settings/secrets/delete', { host: 'api.test' })).text()).toMatch(/Your secret for api\.test is removed/);
    expect(await whoami()).toBe('{"authorized":true,"path":"/v1/whoami"}');
  }, 120_000);

  it('bounds the connections one user has open at once; another user runs meanwhile', async () => {
    const flood = run(
      ann,
      'python',
      `
import threading, urllib.request, urllib.error
codes = []
def get():
    try:
        urllib.request.urlopen('http://other.test:8080/big?bytes=4000000', timeout=30).read()
        codes.append(200)
    except urllib.error.HTTPError as e:
        codes.append(e.code)
    except Exception as e:
        codes.append(str(e)[:40])
ts = [threading.Thread(target=get) for _ in range(6)]
[t.start() for t in ts]
[t.join() for t in ts]
print(sorted(codes, key=str))
`,
    );
    const others = await run(bob, 'python', 'print(6 * 7)');
    expect(others.stdout.trim()).toBe('42');
    const flooded = await flood;
    const out = flooded.stdout + flooded.stderr;
    expect(out).toMatch(/200/);
    expect(out).toMatch(/429/);
  }, 120_000);

  it('records pipelined requests on a connection closed early, and gives their slots back', async () => {
    const before = (await queryAudit(served.harness.store.db, { userId: ann.userId, kind: 'egress', limit: 1000 })).length;
    const r = await run(
      ann,
      'python',
      `
import socket, time, urllib.request
for _ in range(6):
    s = socket.create_connection(('127.0.0.1', 3128))
    s.sendall(b''.join(b'GET http://other.test:8080/p%d HTTP/1.1\\r\\nHost: other.test:8080\\r\\n\\r\\n' % i for i in range(3)))
    s.close()
time.sleep(0.5)
# With slots leaked, these two (SANDGATE_EGRESS_MAX_CONNECTIONS=2) would be refused.
print(urllib.request.urlopen('http://other.test:8080/after', timeout=10).read().decode().strip())
print(urllib.request.urlopen('http://other.test:8080/after2', timeout=10).read().decode().strip())
`,
    );
    expect(r.stdout + r.stderr).toMatch(/hello from other\.test:8080\/after\nhello from other\.test:8080\/after2/);
    const rows = (await queryAudit(served.harness.store.db, { userId: ann.userId, kind: 'egress', limit: 1000 })).length;
    // Every request that was read is a row (each connection's first at least), the two after them too.
    expect(rows - before).toBeGreaterThanOrEqual(8);
  }, 60_000);

  it("carries an MCP client's run end to end", async () => {
    const token = await served.tokenFor('egress-ann');
    const m = await modernRequest(served.mcpUrl, token, 'tools/call', {
      name: 'execute_code',
      arguments: {
        language: 'python',
        code: "import urllib.request\nprint(urllib.request.urlopen('http://other.test:8080/mcp', timeout=10).read().decode())",
        permissions: { net: ['other.test'] },
      },
    });
    const text = ((m as { result?: { content?: { text?: string }[] } }).result?.content ?? []).map((c) => c.text).join('\n');
    expect(text).toMatch(/hello from other\.test:8080\/mcp/);
  }, 60_000);
});
