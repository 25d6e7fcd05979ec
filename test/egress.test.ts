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
import { setUserPermissions } from '../src/accounts/accounts.js';
import { queryAudit } from '../src/audit/audit.js';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import { startNetworkStandins, type NetworkStandins } from './support/egress.js';
import { startGateway, type Gateway } from './support/mcp.js';
import { modernRequest } from './support/raw-request.js';

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
        SANDGATE_EGRESS_DNS: outside.dns,
        SANDGATE_EGRESS_PRIVATE_NETS: outside.subnet,
        SANDGATE_EGRESS_PIP_INDEX: 'http://pkgs.test:8080/simple/',
        SANDGATE_EGRESS_PIP_FILES: '',
        SANDGATE_EGRESS_NPM_REGISTRY: 'http://pkgs.test:8080/npm/',
        SANDGATE_EGRESS_CA_FILE: outside.caFile,
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
        net: ['registries', 'api.test', 'other.test:8080', 'loop.test', 'gw.test', 'private.test', 'nowhere.test'],
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
