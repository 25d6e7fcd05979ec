/**
 * The web app a team member sees: sign-in, chat, files, tokens, settings, each page
 * server-rendered (Eta) and made live with htmx and socket.io. Mounted after /mcp and
 * /v1 (which authenticate with tokens, not cookies); sessions and the page headers apply
 * to its own paths only.
 */
import type http from 'node:http';
import express, { type Router } from 'express';
import type { Agent } from '../agent/agent.js';
import type { ProviderKeys } from '../agent/provider-keys.js';
import type { Config } from '../config.js';
import type { RateLimiter } from '../limits/rate-limit.js';
import type { Logger } from '../logger.js';
import type { ModelBoundary } from '../pii/boundary.js';
import type { SandboxManager } from '../sandboxes/manager.js';
import type { Db } from '../store/store.js';
import type { Upstream } from '../upstream/index.js';
import { adminRoutes, type AdminApp } from './admin/routes.js';
import { webAuth, type WebAuth } from './sign-in/routes.js';
import { chatRoutes } from './chat/routes.js';
import { filesRoutes } from './files/routes.js';
import { LiveHub } from './live/hub.js';
import { securityHeaders, vendorRoutes } from './render.js';
import { settingsRoutes } from './settings/routes.js';
import { tokensRoutes } from './tokens/routes.js';

export interface WebAppDeps {
  config: Config;
  db: Db;
  logger: Logger;
  agent: Agent;
  boundary: ModelBoundary;
  sandboxes: SandboxManager;
  keys: ProviderKeys;
  upstream: Upstream;
  /** The users' request budget, shared with /mcp and /v1 (chat messages and file routes take from it). */
  rateLimiter: RateLimiter;
  /** The sandbox preflight's last verdict, for the admin page. */
  preflight: () => { ok: boolean; checks: Record<string, { ok: boolean; detail: string }> };
}

export interface WebApp {
  router: Router;
  auth: WebAuth;
  live: LiveHub;
  admin: AdminApp;
  /** Starts the live channel on the server the app is served by. */
  attach(server: http.Server): void;
  close(): Promise<void>;
}

/** The paths that are pages of the web app (and so get sessions and page headers). */
export const WEB_PATHS = ['/login', '/auth', '/logout', '/chat', '/c', '/files', '/tokens', '/settings', '/admin'];

export function webApp(deps: WebAppDeps): WebApp {
  // The live channel needs the sessions, and signing out needs the live channel.
  const signedOut = { notify: (_userId: number, _everywhere: boolean, _sid: string) => {} };
  const auth = webAuth({ config: deps.config, db: deps.db, logger: deps.logger, onSignOut: (userId, everywhere, req) => signedOut.notify(userId, everywhere, req.sessionID) });
  const hub = new LiveHub({ config: deps.config, db: deps.db, logger: deps.logger, boundary: deps.boundary, auth });
  const live = hub;
  signedOut.notify = (userId, everywhere, sid) => hub.signedOut(userId, everywhere, sid);
  deps.sandboxes.onFilesChanged((owner) => hub.filesChanged(owner.userId));
  // A member GitHub no longer lists loses what runs for them now, as a disabled user does (their live pages: LiveHub).
  auth.membership.onAccessLost((userId) => {
    deps.agent.cancelUser(userId);
    deps.sandboxes.stopUser(userId, { kill: true, cause: 'when your access to this gateway ended (GitHub no longer lists you on its allow-list)' }).catch((e: unknown) => deps.logger.warn({ err: e, userId }, 'could not stop the sandbox of a member who lost access'));
  });

  const router = express.Router();
  router.use(vendorRoutes());
  const page = [securityHeaders, ...auth.session];
  router.get('/', ...page, (req, res) => res.redirect(303, req.user ? '/chat' : '/login'));
  router.use(WEB_PATHS, ...page);
  router.use(auth.routes);
  router.use(chatRoutes({ config: deps.config, db: deps.db, logger: deps.logger, agent: deps.agent, boundary: deps.boundary, auth, live, limiter: deps.rateLimiter }));
  router.use(filesRoutes({ config: deps.config, sandboxes: deps.sandboxes, auth, limiter: deps.rateLimiter }));
  router.use(tokensRoutes({ config: deps.config, db: deps.db, auth, limiter: deps.rateLimiter }));
  router.use(settingsRoutes({ db: deps.db, agent: deps.agent, keys: deps.keys, upstream: deps.upstream, auth }));
  const admin = adminRoutes({ config: deps.config, db: deps.db, logger: deps.logger, sandboxes: deps.sandboxes, agent: deps.agent, upstream: deps.upstream, auth, live, preflight: deps.preflight });
  router.use(admin.router);
  return {
    router,
    auth,
    live,
    admin,
    attach: (server) => hub.attach(server),
    async close() {
      admin.close();
      auth.close();
      await hub.close();
    },
  };
}
