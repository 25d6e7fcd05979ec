/**
 * createApp(deps) composes the gateway from its parts and returns the Express app.
 * It never listens (main.ts does), so tests drive it with supertest and no port.
 */
import express from 'express';
import type { Config } from './config.js';
import type { Logger } from './logger.js';
import type { Store } from './store/store.js';
import { healthRoutes, type ReadinessCheck } from './http/health.js';
import { errorHandler, notFound } from './http/errors.js';
import { requestContext } from './http/request-context.js';
import { staticRoutes } from './http/static.js';

export interface AppDeps {
  config: Config;
  store: Store;
  logger: Logger;
  /** Extra /readyz checks (Docker, runsc preflight, image); keyed by name. */
  readiness?: Record<string, ReadinessCheck>;
  /**
   * Mounts more routes (MCP endpoint, pages) onto the app, ahead of the built-in ones:
   * an MCP call then meets no other route first.
   */
  mount?: (app: express.Express) => void;
}

export function createApp(deps: AppDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', false);
  // First, so that everything a request starts can be traced back to it.
  app.use(requestContext());
  deps.mount?.(app);
  app.use(healthRoutes(deps.store, deps.readiness ?? {}));
  app.use(staticRoutes());
  app.use(notFound());
  app.use(errorHandler(deps.logger));
  return app;
}
