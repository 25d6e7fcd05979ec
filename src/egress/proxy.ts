/**
 * The egress proxy: serves the connections code in sandboxes opens to its egress port
 * (src/sandboxes/egress-route.ts brings them here as streams; no socket listens). An
 * HTTP proxy in both forms ordinary tools speak:
 *
 * - CONNECT host:port (HTTPS; pip, curl, requests, Deno's fetch): checked against the
 *   run's `net` grant and the address rules (destinations.ts), then a byte tunnel. The
 *   TLS inside is the sandbox's own, end to end with the host.
 * - plain HTTP with an absolute URI: checked the same way. For a host with a secret
 *   (secrets.ts) this is the only way: the proxy makes the TLS connection to the host
 *   itself (verifying its certificate) and adds the secret's header, so the value never
 *   enters the sandbox; a CONNECT to such a host is refused, saying so.
 *
 * Per user: connections open at once, bytes per hour and a rate across their
 * connections (limits.ts). Every connection, reached or refused, is an audit row
 * (host, port, bytes each way, why refused); never a header or a body.
 */
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import type { Duplex } from 'node:stream';
import type { Logger } from '../logger.js';
import type { EgressReason } from '../reasons.js';
import type { SandboxConnection } from '../sandboxes/egress-route.js';
import type { Destinations, Refusal } from './destinations.js';
import type { EgressLimits, Meter } from './limits.js';
import type { EgressSecrets, HostSecret } from './secrets.js';

export interface EgressRecord {
  userId: number;
  method: 'connect' | 'http';
  host: string;
  port: number;
  sent: number;
  received: number;
  durationMs: number;
  outcome: 'ok' | 'denied' | 'error' | 'rate_limited';
  why?: EgressReason;
}

export interface EgressProxyDeps {
  destinations: Destinations;
  limits: EgressLimits;
  secrets: EgressSecrets;
  /** Extra CAs trusted for the TLS the proxy makes itself (SANDGATE_EGRESS_CA_FILE), added to the system's. */
  ca?: string[];
  record: (r: EgressRecord) => void;
  log: Logger;
  /** How long a connection may stay silent. */
  idleMs?: number;
}

interface Context {
  conn: SandboxConnection;
  meter?: Meter;
}

function hostPort(authority: string, defaultPort: number): { host: string; port: number } {
  const m = /^(\[[^\]]+\]|[^:[\]]+)(?::(\d{1,5}))?$/.exec(authority);
  return m ? { host: m[1]!, port: m[2] ? Number(m[2]) : defaultPort } : { host: '', port: 0 };
}

const HOP_HEADERS = ['proxy-connection', 'proxy-authorization', 'connection', 'keep-alive', 'te', 'trailer', 'upgrade'];

export class EgressProxy {
  private readonly server: http.Server;
  private readonly contexts = new WeakMap<object, Context>();
  private readonly open = new Set<Duplex>();
  private readonly idleMs: number;
  private readonly ca?: string[];

  constructor(private readonly deps: EgressProxyDeps) {
    this.idleMs = deps.idleMs ?? 120_000;
    this.ca = deps.ca?.length ? [...tls.rootCertificates, ...deps.ca] : undefined;
    // Headers of at most 16 KiB; keep-alive between requests of one connection.
    this.server = http.createServer({ maxHeaderSize: 16 * 1024, requestTimeout: 60_000 }, (req, res) => void this.plain(req, res));
    this.server.on('connect', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => void this.tunnel(req, socket, head));
    this.server.on('clientError', (_err, socket: Duplex) => {
      if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
      else socket.destroy();
    });
  }

  /** Serves one connection from a sandbox (the EgressHandler). */
  handle = (conn: SandboxConnection): void => {
    const s = conn.stream as Duplex & Record<string, unknown>;
    // What the HTTP server calls on a socket, for a stream that is not one.
    s.setTimeout ??= () => s;
    s.setNoDelay ??= () => s;
    s.setKeepAlive ??= () => s;
    s.remoteAddress ??= '127.0.0.1';
    this.contexts.set(s, { conn });
    this.open.add(s);
    s.on('close', () => this.open.delete(s));
    s.on('error', () => {});
    this.server.emit('connection', s);
  };

  private context(socket: object): Context | undefined {
    return this.contexts.get(socket);
  }

  /** A refusal: the audit row and a readable answer for the code that asked. */
  private refused(ctx: Context, method: 'connect' | 'http', host: string, port: number, r: Pick<Refusal, 'why' | 'message'>, outcome: 'denied' | 'rate_limited' = 'denied'): string {
    this.deps.record({
      userId: ctx.conn.owner.userId,
      method,
      host,
      port,
      sent: 0,
      received: 0,
      durationMs: 0,
      outcome,
      why: r.why,
    });
    this.deps.log.info({ user: ctx.conn.owner.name, destination: `${host}:${port}`, why: r.why }, 'egress refused');
    return `sandgate refused this connection: ${r.message}\n`;
  }

  private async tunnel(req: http.IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    const ctx = this.context(req.socket);
    const { host, port } = hostPort(req.url ?? '', 443);
    if (!ctx) return void client.destroy();
    // The reason phrase carries the message: it is what pip and curl print of a refused tunnel.
    const answer = (status: string, text: string): void => {
      const [code] = status.split(' ');
      const phrase =
        code === '200'
          ? status
          : `${code} ${text
              .replace(/^sandgate refused this connection: /, '')
              .replace(/[^\x20-\x7e]/g, ' ')
              .trim()
              .slice(0, 400)}`;
      client.end(`HTTP/1.1 ${phrase}\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n${text}`);
    };
    const limit = this.deps.limits.admit(ctx.conn.owner.userId);
    if (!limit.ok) return answer('429 Too Many Requests', this.refused(ctx, 'connect', host, port, { why: 'limit', message: limit.message }, 'rate_limited'));
    const meter = limit.meter;
    const verdict = await this.deps.destinations.decide(ctx.conn.grant, host, port);
    if (!verdict.ok) {
      meter.end();
      return answer('403 Forbidden', this.refused(ctx, 'connect', host, port, verdict));
    }
    const secret = await this.deps.secrets.forHost(ctx.conn.owner.userId, host);
    if (secret) {
      meter.end();
      return answer(
        '403 Forbidden',
        this.refused(ctx, 'connect', host, port, {
          why: 'secret_host',
          message: `sandgate adds the secret ${secret.name} to requests for ${host}: request http://${host}${port === 443 ? '' : `:${port}`}/… (plain http to the proxy; sandgate makes the TLS connection to ${host} itself)`,
        }),
      );
    }
    const started = Date.now();
    const upstream = net.connect({ host: verdict.address, port: verdict.port });
    let outcome: EgressRecord['outcome'] = 'ok';
    let why: EgressReason | undefined;
    upstream.once('connect', () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length) {
        meter.sent(head.length);
        upstream.write(head);
      }
      meter.pipe(client, upstream, 'sent');
      meter.pipe(upstream, client, 'received');
    });
    upstream.setTimeout(this.idleMs, () => upstream.destroy());
    upstream.on('error', () => {
      outcome = 'error';
      why = 'unreachable';
      if (!client.destroyed) answer('502 Bad Gateway', `sandgate: ${host}:${port} did not answer\n`);
    });
    const finish = () => {
      if (meter.ended) return;
      meter.end();
      upstream.destroy();
      client.destroy();
      this.deps.record({
        userId: ctx.conn.owner.userId,
        method: 'connect',
        host,
        port,
        sent: meter.sentBytes,
        received: meter.receivedBytes,
        durationMs: Date.now() - started,
        outcome,
        why,
      });
    };
    upstream.on('close', finish);
    client.on('close', finish);
  }

  private async plain(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const ctx = this.context(req.socket);
    if (!ctx) return void res.destroy();
    let url: URL;
    try {
      url = new URL(req.url ?? '');
      if (url.protocol !== 'http:') throw new Error('not http');
    } catch {
      res.writeHead(400, { 'content-type': 'text/plain' }).end('sandgate egress proxy: absolute http:// URLs (through HTTP_PROXY) and CONNECT only\n');
      return;
    }
    const host = url.hostname;
    const secret = await this.deps.secrets.forHost(ctx.conn.owner.userId, host);
    // With a secret, plain http from the sandbox is https from here, to the host's TLS port.
    const port = url.port ? Number(url.port) : secret ? secret.port : 80;
    const limit = this.deps.limits.admit(ctx.conn.owner.userId);
    if (!limit.ok) {
      res.writeHead(429, { 'content-type': 'text/plain' }).end(this.refused(ctx, 'http', host, port, { why: 'limit', message: limit.message }, 'rate_limited'));
      return;
    }
    const meter = limit.meter;
    const verdict = await this.deps.destinations.decide(ctx.conn.grant, host, port);
    if (!verdict.ok) {
      meter.end();
      res.writeHead(403, { 'content-type': 'text/plain' }).end(this.refused(ctx, 'http', host, port, verdict));
      return;
    }
    const started = Date.now();
    const headers: http.OutgoingHttpHeaders = {};
    for (const [k, v] of Object.entries(req.headers)) if (!HOP_HEADERS.includes(k) && v !== undefined) headers[k] = v;
    headers.host = url.host;
    if (secret) applySecret(headers, secret);
    let outcome: EgressRecord['outcome'] = 'ok';
    const options: https.RequestOptions = {
      host: verdict.address,
      port: verdict.port,
      method: req.method,
      path: `${url.pathname}${url.search}`,
      headers,
      setHost: false,
      agent: false,
    };
    const upstream = secret ? https.request({ ...options, servername: host, ...(this.ca ? { ca: this.ca } : {}) }, respond) : http.request(options, respond);
    function respond(r: http.IncomingMessage) {
      const out: http.OutgoingHttpHeaders = {};
      for (const [k, v] of Object.entries(r.headers)) if (!HOP_HEADERS.includes(k) && v !== undefined) out[k] = v;
      res.writeHead(r.statusCode ?? 502, out);
      meter.pipe(r, res, 'received');
    }
    upstream.setTimeout(this.idleMs, () => upstream.destroy(new Error('idle')));
    upstream.on('error', (e) => {
      outcome = 'error';
      const tlsFailure = secret && /certificate|self.signed|unable to verify/i.test(e.message);
      if (!res.headersSent) {
        res.writeHead(502, { 'content-type': 'text/plain' }).end(`sandgate: ${host}:${port} ${tlsFailure ? `did not show a certificate sandgate trusts (${e.message})` : 'did not answer'}\n`);
      } else res.destroy();
    });
    meter.pipe(req, upstream, 'sent');
    res.on('close', () => {
      if (meter.ended) return;
      meter.end();
      upstream.destroy();
      this.deps.record({
        userId: ctx.conn.owner.userId,
        method: 'http',
        host,
        port,
        sent: meter.sentBytes,
        received: meter.receivedBytes,
        durationMs: Date.now() - started,
        outcome: res.writableFinished && outcome === 'ok' ? 'ok' : outcome === 'ok' ? 'error' : outcome,
      });
    });
  }

  async close(): Promise<void> {
    for (const s of this.open) s.destroy();
    this.server.closeAllConnections();
  }
}

/** Sets the secret's header on a request for its host, whatever the sandbox sent in its place. */
function applySecret(headers: http.OutgoingHttpHeaders, secret: HostSecret): void {
  for (const k of Object.keys(headers)) if (k.toLowerCase() === secret.header) delete headers[k];
  headers[secret.header] = `${secret.prefix}${secret.value}`;
}
