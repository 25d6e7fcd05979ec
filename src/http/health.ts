/**
 * /healthz: the process is up. /readyz: every dependency a request needs is there:
 * the store answers, Docker answers, the runsc preflight passed, the image exists.
 * The two handlers are placed by the route table (src/routes.ts).
 */
import type { RequestHandler } from 'express';
import type { Store } from '../store/store.js';
import type { Logger } from '../logger.js';

export type ReadinessCheck = () => Promise<{ ok: boolean; detail?: string }>;

export interface Health {
  /** GET /healthz */
  live: RequestHandler;
  /** GET /readyz */
  ready: RequestHandler;
}

export function health(store: Store, checks: Record<string, ReadinessCheck>, logger?: Logger): Health {
  return {
    live: function healthz(_req, res) {
      res.json({ status: 'ok' });
    },
    ready: async function readyz(_req, res) {
      const results: Record<string, { ok: boolean; detail?: string }> = {};
      const all: Record<string, ReadinessCheck> = {
        store: async () => {
          // Unauthenticated: the driver's words (host names, roles) stay out of the answer.
          const error = await store.ping().then(
            () => undefined,
            (e: Error) => e,
          );
          if (error) logger?.warn({ err: error, store: store.location }, 'readiness: the store does not answer');
          return error ? { ok: false, detail: `the ${store.dialect === 'postgres' ? 'Postgres' : 'SQLite'} database does not answer (the gateway's log says why)` } : { ok: true };
        },
        ...checks,
      };
      await Promise.all(
        Object.entries(all).map(async ([name, check]) => {
          try {
            results[name] = await check();
          } catch (e) {
            results[name] = { ok: false, detail: (e as Error).message };
          }
        }),
      );
      const ok = Object.values(results).every((r) => r.ok);
      res.status(ok ? 200 : 503).json({ status: ok ? 'ready' : 'not ready', checks: results });
    },
  };
}
