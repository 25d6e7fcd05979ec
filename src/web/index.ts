/**
 * The web app a team member sees: sign-in, chat, files, tokens, settings, admin, each page
 * server-rendered (Eta) and made live with htmx and socket.io. webApp() builds the pages'
 * handlers and the guards they pass (sessions, sign-in, CSRF, the rate limit, body
 * parsers); the route table (src/routes.ts) says which path each answers, after /mcp and
 * /v1 (which authenticate with tokens, not cookies). Sessions and the page headers apply
 * to WEB_PATHS only.
 */
import type http from 'node:http';
import express, { type RequestHandler } from 'express';
import type pg from 'pg';
import type { Agent } from '../agent/agent.js';
import type { ProviderKeys } from '../agent/provider-keys.js';
import type { Config } from '../config.js';
import type { RateLimiter } from '../limits/rate-limit.js';
import type { Logger } from '../logger.js';
import type { ModelBoundary } from '../pii/boundary.js';
import type { SandboxExecution } from '../sandboxes/execution.js';
import type { SandboxInspection } from '../sandboxes/inspection.js';
import type { SandboxStops } from '../sandboxes/stops.js';
import type { Db } from '../store/store.js';
import type { Upstream } from '../upstream/index.js';
import { adminPage, type AdminPage } from './admin/page.js';
import { authenticatorsFor } from '../auth/index.js';
import { webSessions, type WebSessions } from '../auth/session-middleware.js';
import { signInPage, type SignInHandlers } from './sign-in/page.js';
import { chatPage, type ChatPage } from './chat/page.js';
import { filesPage, type FilesPage } from './files/page.js';
import { LiveHub } from './live/hub.js';
import { securityHeaders, vendorFile } from './render.js';
import { settingsPage, type SettingsPage } from './settings/page.js';
import type { EgressSecrets } from '../egress/index.js';
import { tokensPage, type TokensPage } from './tokens/page.js';
import { chatStoreRoom, webRateLimit } from './limits.js';

export interface WebAppDeps {
  config: Config;
  db: Db;
  logger: Logger;
  agent: Agent;
  boundary: ModelBoundary;
  sandboxes: SandboxExecution & SandboxStops & SandboxInspection;
  keys: ProviderKeys;
  upstream: Upstream;
  /** Secrets for one host each, which users add for their own code's requests. */
  egressSecrets: EgressSecrets;
  /** The users' request budget, shared with /mcp and /v1 (chat messages and file routes take from it). */
  rateLimiter: RateLimiter;
  /** The sandbox preflight's last verdict, for the admin page. */
  preflight: () => { ok: boolean; checks: Record<string, { ok: boolean; detail: string }> };
  /** The store's Postgres pool (Store.pgPool), absent on SQLite: live updates then cross gateways (LiveHub). */
  pgPool?: pg.Pool;
  /** Seals the live updates that pass through the database (on Postgres, with replicas). */
  liveKey?: Buffer;
}

export interface WebApp {
  auth: WebSessions;
  live: LiveHub;
  admin: AdminPage;
  /** GET /vendor/:file: htmx and the socket.io client. */
  vendor: RequestHandler;
  /** GET /: the chat for a signed-in user, the sign-in page for anyone else. */
  home: RequestHandler;
  /** The guards the route table places before the pages' handlers. */
  guards: WebGuards;
  /** Each page's handlers, by page. */
  pages: { signIn: SignInHandlers; chat: ChatPage; files: FilesPage; tokens: TokensPage; settings: SettingsPage; admin: AdminPage };
  /** Starts the live channel on the server the app is served by. */
  attach(server: http.Server): void;
  close(): Promise<void>;
}

/** What a page's route passes before its handler, by the name the route table (src/routes.ts) uses. */
export interface WebGuards {
  /** The page headers, then the session: every page path passes it first. */
  page: RequestHandler[];
  /** A signed-in member who may come in now; else to /login (a 401 for htmx). */
  signedIn: RequestHandler;
  /** The page's security token, from the header htmx sends or the form; after the body is parsed. */
  csrf: RequestHandler;
  /** One request from the user's budget, shared with their tokens on /mcp and /v1. */
  limited: RequestHandler;
  /** Room in the user's store quota for a chat message (after the body is parsed). */
  storeRoom: RequestHandler;
  /** A urlencoded form of at most 16 kB. */
  form: RequestHandler;
  /** A urlencoded form of at most 1 MB: a chat message. */
  chatForm: RequestHandler;
}

/** The paths that are pages of the web app (and so get sessions and page headers). */
export const WEB_PATHS = ['/login', '/auth', '/logout', '/chat', '/c', '/files', '/tokens', '/settings', '/admin', '/oauth/authorize'];

/**
 * A urlencoded form of at most `limit`. A post without a body, or with a body of another
 * type, is read as an empty form (Express 5 leaves `req.body` undefined for it), so that a
 * handler finds no field rather than no form.
 */
function urlencodedForm(limit: string): RequestHandler {
  const parse = express.urlencoded({ extended: false, limit });
  return function form(req, res, next) {
    parse(req, res, (err?: unknown) => {
      if (err) return next(err);
      req.body ??= {};
      next();
    });
  };
}

export function webApp(deps: WebAppDeps): WebApp {
  // The live channel needs the sessions, and signing out needs the live channel.
  const signedOut = { notify: (_userId: number, _everywhere: boolean, _sid: string) => {} };
  const auth = webSessions({ config: deps.config, db: deps.db, logger: deps.logger, onSignOut: (userId, everywhere, req) => signedOut.notify(userId, everywhere, req.sessionID) });
  const signIn = signInPage({ config: deps.config, db: deps.db, logger: deps.logger, sessions: auth, authenticators: authenticatorsFor({ config: deps.config, db: deps.db, logger: deps.logger, membership: auth.membership }) });
  const hub = new LiveHub({ config: deps.config, db: deps.db, logger: deps.logger, boundary: deps.boundary, auth, pgPool: deps.pgPool, liveKey: deps.liveKey });
  const live = hub;
  signedOut.notify = (userId, everywhere, sid) => hub.signedOut(userId, everywhere, sid);
  deps.sandboxes.onFilesChanged((owner) => hub.filesChanged(owner.userId));
  hub.onTurnStopAsked((userId, conversationId) => deps.agent.cancelTurn(userId, conversationId));
  // A member GitHub no longer lists loses what runs for them now, as a disabled user does (their live pages: LiveHub).
  auth.membership.onAccessLost((userId) => {
    deps.agent.cancelUser(userId);
    deps.sandboxes.stopUser(userId, { kill: true, cause: 'when your access to this gateway ended (GitHub no longer lists you on its allow-list)' }).catch((e: unknown) => deps.logger.warn({ err: e, userId }, 'could not stop the sandbox of a member who lost access'));
  });

  const guards: WebGuards = {
    page: [securityHeaders, ...auth.session],
    signedIn: auth.requireUser,
    csrf: auth.csrf,
    limited: webRateLimit(deps.rateLimiter),
    storeRoom: chatStoreRoom(deps),
    form: urlencodedForm('16kb'),
    chatForm: urlencodedForm('1mb'),
  };
  const chat = chatPage({ db: deps.db, logger: deps.logger, agent: deps.agent, boundary: deps.boundary, auth, live });
  const files = filesPage({ config: deps.config, sandboxes: deps.sandboxes, auth });
  const tokens = tokensPage({ config: deps.config, db: deps.db, auth });
  const settings = settingsPage({ db: deps.db, agent: deps.agent, keys: deps.keys, upstream: deps.upstream, secrets: deps.egressSecrets, auth });
  const admin = adminPage({ config: deps.config, db: deps.db, logger: deps.logger, sandboxes: deps.sandboxes, agent: deps.agent, upstream: deps.upstream, auth, live, preflight: deps.preflight });
  return {
    auth,
    live,
    admin,
    guards,
    pages: { signIn, chat, files, tokens, settings, admin },
    vendor: vendorFile,
    home: (req, res) => res.redirect(303, req.user ? '/chat' : '/login'),
    attach: (server) => hub.attach(server),
    async close() {
      admin.close();
      auth.close();
      await hub.close();
    },
  };
}
