/**
 * createApp(deps) composes the gateway from its parts and returns the Express app: the
 * request context first, then the route table (src/routes.ts), then the answers for what
 * no route answered and for every error. It never listens (main.ts does), so tests drive
 * it with supertest and no port.
 */
import express from 'express';
import type { Config } from './config.js';
import type { Logger } from './logger.js';
import type { Store } from './store/store.js';
import type { ReadinessCheck } from './http/health.js';
import type { OpenAiApi } from './http/openai-api.js';
import { errorHandler, notFound, setOwnOrigin } from './http/errors.js';
import { requestContext } from './http/request-context.js';
import { requestMetrics } from './http/metrics.js';
import { requestSpans } from './http/traces.js';
import { routes } from './routes.js';
import type { WebApp } from './web/index.js';
import type { OAuthRoutes } from './http/oauth.js';

export interface AppDeps {
  config: Config;
  store: Store;
  logger: Logger;
  /** Extra /readyz checks (Docker, runsc preflight, image); keyed by name. */
  readiness?: Record<string, ReadinessCheck>;
  /** The /mcp endpoint (src/http/mcp-endpoint.ts); none: no /mcp. */
  mcp?: express.RequestHandler;
  /** The /v1 API (src/http/openai-api.ts); none: no /v1. */
  v1?: OpenAiApi;
  /** The web app (src/web/index.ts); none: no pages. */
  web?: WebApp;
  /** The internal hop's end (src/http/internal.ts): on a replica only. */
  internal?: Record<string, express.RequestHandler[]>;
  /** The authorization server for MCP clients (src/http/oauth.ts). */
  oauth?: OAuthRoutes;
  /** Routes of a test's own, mounted ahead of the route table. */
  mount?: (app: express.Express) => void;
}

export function createApp(deps: AppDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', false);
  setOwnOrigin(app, deps.config);
  // First, so that everything a request starts can be traced back to it.
  app.use(requestContext());
  app.use(requestMetrics());
  app.use(requestSpans());
  deps.mount?.(app);
  routes(app, deps);
  app.use(notFound());
  app.use(errorHandler(deps.logger));
  return app;
}
