/**
 * /healthz: the process is up. /readyz: every dependency a request needs is there:
 * the store answers, Docker answers, the runsc preflight passed, the image exists.
 */
import { Router } from 'express';
import type { Store } from '../store/store.js';

export type ReadinessCheck = () => Promise<{ ok: boolean; detail?: string }>;

export function healthRoutes(store: Store, checks: Record<string, ReadinessCheck>): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', async (_req, res) => {
    const results: Record<string, { ok: boolean; detail?: string }> = {};
    const all: Record<string, ReadinessCheck> = {
      store: async () => {
        store.db.prepare('SELECT 1').get();
        return { ok: true };
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
  });
  return router;
}
