/**
 * The only way out of an upstream server's network namespace: an HTTP proxy on a Unix
 * socket, one per connection, that applies the server's network policy host by host.
 * (host/upstream_launcher.py relays 127.0.0.1:<port> inside the namespace to it; the
 * server finds it through HTTP_PROXY / HTTPS_PROXY.)
 *
 * Both proxy forms are served: CONNECT host:port (HTTPS, and what undici uses for every
 * request) and plain HTTP with an absolute URI. For each request the host is resolved
 * here, every address is checked, and the connection goes to the address that was
 * checked, so a name cannot resolve to something else between the check and the use.
 *
 * - `public`: any host whose addresses are all public unicast; loopback, private,
 *   link-local, unique-local, carrier-grade NAT, multicast and reserved ranges are
 *   refused (the gateway's own port, the cloud metadata endpoint, the office LAN).
 * - `allow`: only the listed hosts (`api.github.com`, `*.example.com`, `10.0.0.5:8080`);
 *   a listed name that resolves to a non-public address is still refused unless the
 *   entry is that literal address (or `localhost`).
 */
import { Resolver } from 'node:dns/promises';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { isPublicAddress } from '../addresses.js';
import type { Logger } from '../logger.js';
import type { NetworkPolicy } from './config.js';

export interface EgressProxy {
  socketPath: string;
  close(): Promise<void>;
}

export interface EgressProxyOptions {
  socketPath: string;
  policy: Exclude<NetworkPolicy, { kind: 'none' } | { kind: 'host' }>;
  /** Owner of the socket (the server's uid): the launcher relays as that user. */
  uid: number;
  gid: number;
  /** Names the server in log lines. */
  label: string;
  logger?: Logger;
  /** How long a tunnel may stay silent before it is closed. */
  idleMs?: number;
}

/** Tunnels and plain requests one proxy carries at once, and host lookups it waits for at once. */
const MAX_OPEN = 64;
const MAX_LOOKUPS = 16;

/**
 * Names are resolved with c-ares (DNS only, with a timeout), not getaddrinfo: the latter
 * runs on libuv's four threads, which the gateway's file access shares, so a server
 * asking for slow names could stall the gateway. /etc/hosts is not read; `localhost` is
 * the loopback addresses.
 */
const resolver = new Resolver({ timeout: 3000, tries: 2 });
let lookups = 0;

async function addressesOf(host: string): Promise<string[]> {
  if (host.toLowerCase() === 'localhost') return ['127.0.0.1', '::1'];
  if (lookups >= MAX_LOOKUPS) throw new Error('too many lookups at once');
  lookups++;
  try {
    const found = await Promise.allSettled([resolver.resolve4(host), resolver.resolve6(host)]);
    return found.flatMap((r) => (r.status === 'fulfilled' ? r.value : []));
  } finally {
    lookups--;
  }
}

/** Why a destination is refused, or undefined when it may be reached. */
export type Verdict = { ok: true; address: string; port: number } | { ok: false; reason: string };

function allowedBy(policy: EgressProxyOptions['policy'], host: string, port: number): { allowed: boolean; literal: boolean } {
  if (policy.kind === 'public') return { allowed: true, literal: false };
  const h = host.toLowerCase();
  for (const rule of policy.hosts) {
    if (rule.port !== undefined && rule.port !== port) continue;
    const matches = rule.host.startsWith('*.') ? h.endsWith(rule.host.slice(1)) && h.length > rule.host.length - 1 : h === rule.host;
    if (matches) return { allowed: true, literal: net.isIP(rule.host) !== 0 || rule.host === 'localhost' };
  }
  return { allowed: false, literal: false };
}

/** Decides where a request for host:port may go, resolving the name once. */
export async function decide(policy: EgressProxyOptions['policy'], host: string, port: number): Promise<Verdict> {
  if (!host || !Number.isInteger(port) || port < 1 || port > 65535) return { ok: false, reason: 'not a host and port' };
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  const { allowed, literal } = allowedBy(policy, bare, port);
  if (!allowed) return { ok: false, reason: `${bare}:${port} is not on this server's allow-list (sandgate.network.allow)` };
  let addresses: string[];
  try {
    addresses = net.isIP(bare) ? [bare] : await addressesOf(bare);
  } catch {
    return { ok: false, reason: `${bare} could not be resolved` };
  }
  if (!addresses.length) return { ok: false, reason: `${bare} has no address` };
  if (!literal) {
    const blocked = addresses.find((a) => !isPublicAddress(a));
    if (blocked) return { ok: false, reason: `${bare} resolves to ${blocked}, a loopback, private or reserved address` };
  }
  return { ok: true, address: addresses[0]!, port };
}

function hostPort(authority: string, defaultPort: number): { host: string; port: number } {
  const m = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(authority);
  return m ? { host: m[1]!, port: m[2] ? Number(m[2]) : defaultPort } : { host: '', port: 0 };
}

export async function startEgressProxy(opts: EgressProxyOptions): Promise<EgressProxy> {
  const idleMs = opts.idleMs ?? 120_000;
  const log = opts.logger?.child({ module: 'egress', server: opts.label });
  const refuse = (what: string, reason: string) => log?.warn({ destination: what, reason }, 'upstream server network request refused');

  const tunnels = new Set<net.Socket>();
  let requests = 0;
  const server = http.createServer((req, res) => {
    if (requests + tunnels.size >= MAX_OPEN) {
      res.writeHead(503).end('sandgate egress proxy: too many open connections\n');
      return;
    }
    requests++;
    res.on('close', () => requests--);
    // Plain HTTP through a proxy: an absolute URI.
    let url: URL;
    try {
      url = new URL(req.url ?? '');
    } catch {
      res.writeHead(400).end('sandgate egress proxy: absolute http:// URLs and CONNECT only\n');
      return;
    }
    if (url.protocol !== 'http:') {
      res.writeHead(400).end('sandgate egress proxy: use CONNECT for https\n');
      return;
    }
    const port = url.port ? Number(url.port) : 80;
    void decide(opts.policy, url.hostname, port).then((v) => {
      if (!v.ok) {
        refuse(`${url.hostname}:${port}`, v.reason);
        res.writeHead(403, { 'content-type': 'text/plain' }).end(`sandgate refused this request: ${v.reason}\n`);
        return;
      }
      const headers: http.OutgoingHttpHeaders = { ...req.headers, host: url.host };
      delete headers['proxy-connection'];
      delete headers['proxy-authorization'];
      const upstream = http.request({ host: v.address, port: v.port, method: req.method, path: `${url.pathname}${url.search}`, headers, setHost: false }, (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers);
        r.pipe(res);
      });
      upstream.setTimeout(idleMs, () => upstream.destroy(new Error('idle')));
      upstream.on('error', () => {
        if (!res.headersSent) res.writeHead(502).end('sandgate egress proxy: the destination did not answer\n');
        else res.destroy();
      });
      req.pipe(upstream);
    });
  });

  server.on('connect', (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
    const { host, port } = hostPort(req.url ?? '', 443);
    client.on('error', () => {});
    if (requests + tunnels.size >= MAX_OPEN) {
      client.end('HTTP/1.1 503 Service Unavailable\r\n\r\n');
      return;
    }
    tunnels.add(client);
    client.on('close', () => tunnels.delete(client));
    void decide(opts.policy, host, port).then((v) => {
      if (!v.ok) {
        refuse(`${host}:${port}`, v.reason);
        client.end(`HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\n\r\nsandgate refused this request: ${v.reason}\n`);
        return;
      }
      const upstream = net.connect({ host: v.address, port: v.port }, () => {
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        if (head.length) upstream.write(head);
        upstream.pipe(client);
        client.pipe(upstream);
      });
      upstream.setTimeout(idleMs, () => upstream.destroy());
      client.setTimeout(idleMs, () => client.destroy());
      upstream.on('error', () => client.end('HTTP/1.1 502 Bad Gateway\r\n\r\n'));
      client.on('close', () => upstream.destroy());
    });
  });

  fs.rmSync(opts.socketPath, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.socketPath, () => resolve());
  });
  fs.chmodSync(opts.socketPath, 0o600);
  if (process.getuid?.() === 0) fs.chownSync(opts.socketPath, opts.uid, opts.gid);
  return {
    socketPath: opts.socketPath,
    async close() {
      server.closeAllConnections();
      for (const t of tunnels) t.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      fs.rmSync(opts.socketPath, { force: true });
    },
  };
}
