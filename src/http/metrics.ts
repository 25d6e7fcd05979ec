/**
 * The HTTP side of the metrics (src/telemetry/metrics.ts): each request counted by its
 * route's template once answered, and the two ways a scrape reaches them, neither public:
 *
 * - `metricsListener`: a listener of its own (SANDGATE_METRICS_LISTEN, off by default),
 *   serving GET /metrics and nothing else, for a Prometheus on the same host or a private
 *   network. It answers anyone who reaches it: keep it off public interfaces.
 * - `metricsEndpoint`: GET /admin/metrics on the gateway's own port, behind the admin
 *   page's gate: an admin's API token (`Authorization: Bearer …`) or session; anyone
 *   else is refused as for any admin page.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Request, RequestHandler } from 'express';
import type { Logger } from '../logger.js';
import * as metrics from '../telemetry/metrics.js';

/** Paths served by a handler that matches them itself (no Express route to name them). */
const SELF_ROUTED: [prefix: string, template: string][] = [
  ['/mcp', '/mcp'],
  ['/static/', '/static/*'],
  ['/vendor/', '/vendor/:file'],
];

/** The template a request matched ('/c/:id'), never its path: the label's values stay few. */
export function routeTemplate(req: Request): string {
  if (req.route?.path && typeof req.route.path === 'string') return `${req.baseUrl}${req.route.path}`;
  const path = req.originalUrl.split('?')[0] ?? '';
  for (const [prefix, template] of SELF_ROUTED) if (path === prefix || path.startsWith(prefix.endsWith('/') ? prefix : `${prefix}/`)) return template;
  return 'unmatched';
}

const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** Counts each request, by method, route template and status ('aborted': the client left first), once it is over. */
export function requestMetrics(): RequestHandler {
  return function requestMetrics(req, res, next) {
    const started = performance.now();
    // 'close' comes after 'finish', and alone when the client left before the answer ended.
    res.once('close', () => {
      const method = METHODS.has(req.method) ? req.method : 'other';
      const route = routeTemplate(req);
      metrics.httpRequests.inc({ method, route, status: res.writableFinished ? String(res.statusCode) : 'aborted' });
      metrics.httpSeconds.observe({ method, route }, metrics.secondsSince(started));
    });
    next();
  };
}

/** Serves the exposition: mounted behind the admin gate (GET /admin/metrics). */
export function metricsEndpoint(): RequestHandler {
  return async function metricsEndpoint(_req, res, next) {
    try {
      const { contentType, body } = await metrics.exposition();
      res.set('cache-control', 'no-store').type(contentType).send(body);
    } catch (e) {
      next(e);
    }
  };
}

/** Where the metrics listener is, once it listens. */
export interface MetricsListener {
  address: AddressInfo;
  close(): Promise<void>;
}

/** Parses `host:port` (`[v6]:port`), as SANDGATE_METRICS_LISTEN takes it. */
export function parseListen(value: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(value.trim());
  const port = Number(m?.[3]);
  if (!m || !(port >= 0 && port <= 65535)) throw new Error(`"${value}" is not host:port (e.g. 127.0.0.1:9464)`);
  return { host: m[1] ?? m[2]!, port };
}

/** Starts the metrics listener on `listen` (host:port): GET /metrics, and 404 for anything else. */
export async function metricsListener(listen: string, log: Logger): Promise<MetricsListener> {
  const { host, port } = parseListen(listen);
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: this listener serves GET /metrics only\n');
      return;
    }
    metrics.exposition().then(
      ({ contentType, body }) => res.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-store' }).end(req.method === 'HEAD' ? undefined : body),
      (e: unknown) => {
        log.error({ err: e }, 'could not collect the metrics');
        res.writeHead(500, { 'content-type': 'text/plain' }).end('the metrics could not be collected\n');
      },
    );
  });
  server.headersTimeout = 10_000;
  server.requestTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  log.info({ address: `${address.address}:${address.port}` }, 'metrics listener: GET /metrics');
  return {
    address,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
