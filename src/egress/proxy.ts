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
import { readClientHello, sameHost } from './client-hello.js';

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

/** A TLS alert record: fatal (2), access_denied (49). */
const ACCESS_DENIED_ALERT = Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31]);

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
    this.deps.log.debug({ user: ctx.conn.owner.name, destination: `${host.slice(0, 253)}:${port}`, why: r.why }, 'egress refused');
    return `sandgate refused this connection: ${r.message}\n`;
  }

  private async tunnel(req: http.IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    const ctx = this.context(req.socket);
    const { host, port } = hostPort(req.url ?? '', 443);
    if (!ctx) return void client.destroy();
    const userId = ctx.conn.owner.userId;
    // The reason phrase carries the message: it is what pip and curl print of a refused tunnel.
    const answer = (status: string, text: string): void => {
      const [code] = status.split(' ');
      const phrase = `${code} ${text
        .replace(/^sandgate refused this connection: /, '')
        .replace(/[^\x20-\x7e]/g, ' ')
        .trim()
        .slice(0, 400)}`;
      client.end(`HTTP/1.1 ${phrase}\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n${text}`);
    };
    const limit = this.deps.limits.admit(userId);
    if (!limit.ok) return answer('429 Too Many Requests', this.refused(ctx, 'connect', host, port, { why: 'limit', message: limit.message }, 'rate_limited'));
    const meter = limit.meter;
    meter.sent(headerBytes(req));
    const started = Date.now();
    let outcome: EgressRecord['outcome'] = 'ok';
    let why: EgressReason | undefined;
    let recorded = false;
    let established = false;
    let upstream: net.Socket | undefined;
    // Registered before anything waits: however the connection ends, its slot is given back and it is recorded once.
    const finish = () => {
      if (meter.ended) return;
      meter.end();
      upstream?.destroy();
      client.destroy();
      if (!recorded) {
        recorded = true;
        this.deps.record({ userId, method: 'connect', host, port, sent: meter.sentBytes, received: meter.receivedBytes, durationMs: Date.now() - started, outcome, why });
      }
    };
    const refuse = (status: string, r: Pick<Refusal, 'why' | 'message'>) => {
      recorded = true;
      meter.end();
      answer(status, this.refused(ctx, 'connect', host, port, r));
    };
    client.once('close', finish);
    try {
      const verdict = await this.deps.destinations.decide(ctx.conn.grant, host, port, userId);
      if (meter.ended) return;
      if (!verdict.ok) return refuse('403 Forbidden', verdict);
      const secret = await this.deps.secrets.forHost(userId, host);
      if (meter.ended) return;
      if (secret) {
        return refuse('403 Forbidden', {
          why: 'secret_host',
          message: `sandgate adds the secret ${secret.name} to requests for ${host}: request http://${host}${port === 443 ? '' : `:${port}`}/… (plain http to the proxy; sandgate makes the TLS connection to ${host} itself)`,
        });
      }
      const socket = (upstream = net.connect({ host: verdict.address, port: verdict.port }));
      socket.once('connect', () => {
        established = true;
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        // The host's answers flow at once (a server may speak first); the client's first
        // bytes wait until their ClientHello names this host.
        meter.pipe(socket, client, 'received');
        let first = head;
        const passOn = () => {
          client.off('data', peek);
          client.off('end', endEarly);
          meter.sent(first.length);
          if (first.length) socket.write(first);
          meter.pipe(client, socket, 'sent');
        };
        const endEarly = () => socket.end();
        const peek = (chunk?: Buffer) => {
          if (chunk) first = Buffer.concat([first, chunk]);
          const hello = readClientHello(first);
          if (hello.kind === 'more') return;
          // Not TLS: the bytes go to the address checked above, like any other.
          if (hello.kind === 'not-tls' || (hello.kind === 'hello' && (hello.serverName === undefined || sameHost(hello.serverName, host)))) return passOn();
          outcome = 'denied';
          why = 'sni_mismatch';
          client.off('data', peek);
          this.deps.log.debug(
            { user: ctx.conn.owner.name, destination: `${host}:${port}`, hello: hello.kind === 'hello' ? hello.serverName?.slice(0, 253) : hello.detail },
            'egress tunnel refused: its TLS names another host',
          );
          // Nothing more from the host; a TLS alert (fatal, access_denied) is what the
          // client's TLS library can show.
          socket.removeAllListeners('data');
          socket.pause();
          client.end(ACCESS_DENIED_ALERT, () => socket.destroy());
        };
        client.on('data', peek);
        client.once('end', endEarly);
        if (first.length) peek();
      });
      socket.setTimeout(this.idleMs, () => socket.destroy());
      socket.on('error', () => {
        outcome = 'error';
        why = 'unreachable';
        // After the 200 the client speaks TLS: no more words of ours in its stream.
        if (!established && !client.destroyed) answer('502 Bad Gateway', `sandgate: ${host}:${port} did not answer\n`);
        else client.destroy();
      });
      socket.on('close', finish);
    } catch (e) {
      outcome = 'error';
      why = 'unreachable';
      this.deps.log.warn({ err: e, user: ctx.conn.owner.name }, 'egress tunnel failed');
      if (!established && !client.destroyed) answer('502 Bad Gateway', 'sandgate: the connection could not be made\n');
      finish();
    }
  }

  private async plain(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const ctx = this.context(req.socket);
    if (!ctx) return void res.destroy();
    const userId = ctx.conn.owner.userId;
    let url: URL;
    try {
      url = new URL(req.url ?? '');
      if (url.protocol !== 'http:') throw new Error('not http');
    } catch {
      res.writeHead(400, { 'content-type': 'text/plain' }).end('sandgate egress proxy: absolute http:// URLs (through HTTP_PROXY) and CONNECT only\n');
      return;
    }
    const host = url.hostname;
    const limit = this.deps.limits.admit(userId);
    if (!limit.ok) {
      res.writeHead(429, { 'content-type': 'text/plain' }).end(this.refused(ctx, 'http', host, Number(url.port) || 80, { why: 'limit', message: limit.message }, 'rate_limited'));
      return;
    }
    const meter = limit.meter;
    meter.sent(headerBytes(req));
    const started = Date.now();
    let port = Number(url.port) || 80;
    let outcome: EgressRecord['outcome'] = 'ok';
    let recorded = false;
    let upstream: http.ClientRequest | undefined;
    const socket = req.socket;
    // Registered before anything waits (a pipelined request's response may never be
    // written, and its connection can close meanwhile): the slot is given back and the
    // request recorded once, however it ends.
    const finish = () => {
      socket.off('close', finish);
      if (meter.ended) return;
      meter.end();
      upstream?.destroy();
      if (!recorded) {
        recorded = true;
        this.deps.record({
          userId,
          method: 'http',
          host,
          port,
          sent: meter.sentBytes,
          received: meter.receivedBytes,
          durationMs: Date.now() - started,
          outcome: res.writableFinished && outcome === 'ok' ? 'ok' : outcome === 'ok' ? 'error' : outcome,
        });
      }
    };
    res.once('close', finish);
    socket.once('close', finish);
    const refuse = (status: number, r: Pick<Refusal, 'why' | 'message'>) => {
      recorded = true;
      meter.end();
      if (!res.headersSent) res.writeHead(status, { 'content-type': 'text/plain' }).end(this.refused(ctx, 'http', host, port, r));
    };
    try {
      // A secret is looked up only for a host the grant names at all.
      const secret = this.deps.destinations.grantedHost(ctx.conn.grant, host) ? await this.deps.secrets.forHost(userId, host) : undefined;
      // With a secret, plain http from the sandbox is https from here, to the host's TLS port.
      if (!url.port && secret) port = secret.port;
      const verdict = await this.deps.destinations.decide(ctx.conn.grant, host, port, userId);
      if (meter.ended) return;
      if (!verdict.ok) return refuse(403, verdict);
      const headers: http.OutgoingHttpHeaders = {};
      for (const [k, v] of Object.entries(req.headers)) if (!HOP_HEADERS.includes(k) && v !== undefined) headers[k] = v;
      headers.host = url.host;
      if (secret) applySecret(headers, secret);
      const options: https.RequestOptions = {
        host: verdict.address,
        port: verdict.port,
        method: req.method,
        path: `${url.pathname}${url.search}`,
        headers,
        setHost: false,
        agent: false,
      };
      const respond = (r: http.IncomingMessage) => {
        const out: http.OutgoingHttpHeaders = {};
        for (const [k, v] of Object.entries(r.headers)) if (!HOP_HEADERS.includes(k) && v !== undefined) out[k] = v;
        meter.received(headerBytes(r));
        res.writeHead(r.statusCode ?? 502, out);
        meter.pipe(r, res, 'received');
      };
      const request = (upstream = secret ? https.request({ ...options, servername: host, ...(this.ca ? { ca: this.ca } : {}) }, respond) : http.request(options, respond));
      request.setTimeout(this.idleMs, () => request.destroy(new Error('idle')));
      request.on('error', (e) => {
        outcome = 'error';
        const tlsFailure = secret && /certificate|self.signed|unable to verify/i.test(e.message);
        if (!res.headersSent) {
          res.writeHead(502, { 'content-type': 'text/plain' }).end(`sandgate: ${host}:${port} ${tlsFailure ? `did not show a certificate sandgate trusts (${e.message})` : 'did not answer'}\n`);
        } else res.destroy();
      });
      meter.pipe(req, request, 'sent');
    } catch (e) {
      outcome = 'error';
      this.deps.log.warn({ err: e, user: ctx.conn.owner.name }, 'egress request failed');
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' }).end('sandgate: the request could not be made\n');
      finish();
    }
  }

  async close(): Promise<void> {
    for (const s of this.open) s.destroy();
    this.server.closeAllConnections();
  }
}

/** The bytes of a message's header lines, counted like its body. */
function headerBytes(m: http.IncomingMessage): number {
  let n = 0;
  for (const h of m.rawHeaders) n += h.length + 2;
  return n + (m.url?.length ?? 0) + 16;
}

/** Sets the secret's header on a request for its host, whatever the sandbox sent in its place. */
function applySecret(headers: http.OutgoingHttpHeaders, secret: HostSecret): void {
  for (const k of Object.keys(headers)) if (k.toLowerCase() === secret.header) delete headers[k];
  headers[secret.header] = `${secret.prefix}${secret.value}`;
}
