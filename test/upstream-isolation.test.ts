/**
 * Stdio upstream servers have no more reach than a sandbox: each connection runs as a
 * uid of its own (never root), in network, pid and IPC namespaces of its own, with the
 * network its `sandgate.network` policy gives it. A real MCP server (test/fixtures/
 * net-probe-server.mjs) reports what it can reach; "the gateway" is an HTTP server on the
 * host's loopback that nothing but the `host` policy may reach.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../src/store/store.js';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import { isPublicAddress } from '../src/addresses.js';
import { decide } from '../src/upstream/egress-proxy.js';
import { UpstreamHub } from '../src/upstream/hub.js';
import { UPSTREAM_UID_BASE } from '../src/upstream/identities.js';
import { hubHomes, nodeServer, openStoreWithUsers, serversFrom } from './support/upstream.js';

const PROBE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'net-probe-server.mjs');
const asRoot = process.getuid?.() === 0;

let dataDir: string;
let store: Store;
let alice: SandboxOwner;
let bob: SandboxOwner;
let gateway: http.Server;
let standin: http.Server;
let gatewayPort: number;
let standinPort: number;
let hub: UpstreamHub;

async function listen(body: string): Promise<[http.Server, number]> {
  const s = http.createServer((_req, res) => res.end(body));
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  return [s, (s.address() as AddressInfo).port];
}

async function probe(owner: SandboxOwner, server: string, tool: string, args: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
  const r = await hub.callTool(owner, server, tool, args);
  return JSON.parse((r.content as { text: string }[])[0]!.text) as Record<string, unknown>;
}

beforeAll(async () => {
  ({ dataDir, store, owners: [alice, bob] } = await openStoreWithUsers('isolation', ['alice', 'bob']));
  [gateway, gatewayPort] = await listen('the gateway itself');
  [standin, standinPort] = await listen('hello from an allowed host');
  hub = new UpstreamHub({
    servers: serversFrom({
      closed: nodeServer(PROBE, [], { sandgate: { allowUsers: ['*'] } }),
      mine: nodeServer(PROBE, [], { sandgate: { scope: 'per-user', allowUsers: ['*'] } }),
      internet: nodeServer(PROBE, [], { sandgate: { allowUsers: ['*'], network: 'public' } }),
      listed: nodeServer(PROBE, [], { sandgate: { allowUsers: ['*'], network: { allow: [`127.0.0.1:${standinPort}`] } } }),
    }),
    dataDir,
    ...hubHomes(dataDir, store.db),
  });
});

afterAll(async () => {
  await hub?.close();
  gateway?.close();
  standin?.close();
  await store?.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
  fs.rmSync(`${dataDir}-homes`, { recursive: true, force: true });
});

describe('upstream servers run unprivileged', () => {
  it('each connection has a uid of its own and a home only it can enter', async () => {
    const a = await probe(alice, 'mine', 'whoami');
    const b = await probe(bob, 'mine', 'whoami');
    const shared = await probe(alice, 'closed', 'whoami');
    if (asRoot) {
      for (const who of [a, b, shared]) expect(who.uid as number).toBeGreaterThan(UPSTREAM_UID_BASE);
      expect(new Set([a.uid, b.uid, shared.uid]).size).toBe(3);
    } else {
      // A gateway that is not root cannot hand out uids: servers run as its own user.
      expect(a.uid).toBe(process.getuid?.());
    }
    expect(a.home).not.toBe(b.home);
    await probe(alice, 'mine', 'write', { path: `${a.home as string}/notes.txt`, data: 'alice only' });
    expect(await probe(alice, 'mine', 'read', { path: `${a.home as string}/notes.txt` })).toEqual({ data: 'alice only' });
    if (asRoot) {
      expect(await probe(bob, 'mine', 'read', { path: `${a.home as string}/notes.txt` })).toEqual({ error: 'EACCES' });
      expect(await probe(bob, 'mine', 'read', { path: path.join(dataDir, 'sandgate.db') })).toEqual({ error: 'EACCES' });
      expect(await probe(bob, 'mine', 'read', { path: '/etc/shadow' })).toEqual({ error: 'EACCES' });
    }
  });

  it('a connection keeps its uid and its files when it restarts', async () => {
    const before = await probe(alice, 'mine', 'whoami');
    await hub.close();
    hub = new UpstreamHub({ servers: hub.servers(), dataDir, ...hubHomes(dataDir, store.db) });
    const after = await probe(alice, 'mine', 'whoami');
    expect(after.uid).toBe(before.uid);
    expect(await probe(alice, 'mine', 'read', { path: `${after.home as string}/notes.txt` })).toEqual({ data: 'alice only' });
  });
});

describe('upstream network policies', () => {
  it('none (the default): no network at all, not even the host loopback', async () => {
    const fetched = await probe(alice, 'closed', 'fetch_url', { url: `http://127.0.0.1:${gatewayPort}/` });
    expect(fetched.error).toBeDefined();
    expect(await probe(alice, 'closed', 'connect', { host: '127.0.0.1', port: gatewayPort })).toEqual({ error: 'ECONNREFUSED' });
    expect((await probe(alice, 'closed', 'whoami')).proxy).toBeNull();
  });

  it('public: the internet only; loopback and private addresses are refused', async () => {
    for (const url of [`http://127.0.0.1:${gatewayPort}/`, `http://localhost:${gatewayPort}/`, `https://127.0.0.1:${gatewayPort}/`, 'http://169.254.169.254/latest/meta-data/']) {
      const r = await probe(alice, 'internet', 'fetch_url', { url });
      expect(JSON.stringify(r), url).not.toContain('the gateway itself');
      // fetch tunnels through CONNECT, which the proxy answers 403.
      expect(String(r.error), url).toMatch(/Proxy response \(403\)/);
    }
    // Around the proxy there is nothing: its own loopback has no gateway on it.
    expect(await probe(alice, 'internet', 'connect', { host: '127.0.0.1', port: gatewayPort })).toEqual({ error: 'ECONNREFUSED' });
  });

  it('allow: only the listed hosts, through CONNECT and through plain HTTP alike', async () => {
    expect(await probe(alice, 'listed', 'fetch_url', { url: `http://127.0.0.1:${standinPort}/x` })).toEqual({ status: 200, body: 'hello from an allowed host' });
    expect(String((await probe(alice, 'listed', 'fetch_url', { url: `http://127.0.0.1:${gatewayPort}/` })).error)).toMatch(/Proxy response \(403\)/);
    expect(await probe(alice, 'listed', 'proxy_get', { url: `http://127.0.0.1:${standinPort}/y` })).toEqual({ status: 200, body: 'hello from an allowed host' });
    const other = await probe(alice, 'listed', 'proxy_get', { url: `http://127.0.0.1:${gatewayPort}/` });
    expect(other.status).toBe(403);
    expect(other.body).toContain(`127.0.0.1:${gatewayPort} is not on this server's allow-list`);
  });
});

describe('egress decisions', () => {
  it('knows which addresses are public', () => {
    for (const a of ['8.8.8.8', '2606:4700::1111']) expect(isPublicAddress(a), a).toBe(true);
    for (const a of ['127.0.0.1', '10.1.2.3', '172.16.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '::1', 'fe80::1', 'fd00::1', '::ffff:127.0.0.1', '::7f00:1', '::10.0.0.5', '224.0.0.1', 'nope']) {
      expect(isPublicAddress(a), a).toBe(false);
    }
  });

  it('allow-lists match names, wildcards and ports; names that resolve to private addresses stay refused', async () => {
    const policy = { kind: 'allow' as const, hosts: [{ host: '*.example.com' }, { host: 'localhost' }, { host: 'api.test', port: 443 }] };
    expect(await decide(policy, 'evil.com', 443)).toMatchObject({ ok: false });
    expect(await decide(policy, 'example.com', 443)).toMatchObject({ ok: false, reason: expect.stringContaining('allow-list') });
    expect(await decide(policy, 'api.test', 80)).toMatchObject({ ok: false });
    expect(await decide(policy, 'localhost', 8080)).toMatchObject({ ok: true });
    expect(await decide({ kind: 'public' }, 'localhost', 8080)).toMatchObject({ ok: false, reason: expect.stringContaining('loopback') });
  });
});
