/**
 * The route table: every path the gateway serves, in the order a request meets them, with
 * the guards each passes before its handler. Read top to bottom, it answers "what answers
 * this address, and what is checked first?":
 *
 *   /mcp          MCP over Streamable HTTP, bearer token (src/http/mcp-endpoint.ts)
 *   /v1           the OpenAI-compatible API, bearer token (src/http/openai-api.ts)
 *   /.well-known/oauth-*, /oauth   MCP clients' OAuth: metadata, token, registration, revocation
 *                 (no cookies); /oauth/authorize is a page (src/http/oauth.ts)
 *   pages         the web app, session cookie (src/web/, one folder per page)
 *   /admin/metrics  Prometheus metrics, behind the admin gate (or SANDGATE_METRICS_LISTEN, a listener of its own: src/http/metrics.ts)
 *   /healthz, /readyz, /static
 *   /internal     runs, stops and listings another replica asks for, signed with the replica key (src/http/internal.ts)
 *
 * Guards, by name: `page` (page headers, then the session: on page paths only),
 * `signedIn` (a member who may come in now; else to /login), `csrf` (the page's security
 * token, after the body is parsed), `limited` (one request from the user's budget, shared
 * with their tokens), `form` / `chatForm` (a urlencoded body, 16 kB / 1 MB), `storeRoom`
 * (room in the user's store quota for a chat message). The admin pages pass their own gate
 * (an admin's session or an admin's token) before anything else under /admin.
 *
 * Order matters: /mcp comes first, so that an MCP call meets no other route; sessions and
 * page headers apply to WEB_PATHS and `/` only, so /mcp, /v1, health and static files
 * never open a session. What no route answered, and every error, is answered by
 * src/http/errors.ts, which createApp (src/app.ts) places after this table.
 */
import type express from 'express';
import type { RequestHandler } from 'express';
import { health, type ReadinessCheck } from './http/health.js';
import type { OpenAiApi } from './http/openai-api.js';
import { staticFiles } from './http/static.js';
import { metricsEndpoint } from './http/metrics.js';
import type { Store } from './store/store.js';
import type { Logger } from './logger.js';
import type { OAuthRoutes } from './http/oauth.js';
import { WEB_PATHS, type WebApp } from './web/index.js';

export interface RouteParts {
  store: Store;
  /** Where /readyz says why the store did not answer. */
  logger?: Logger;
  /** Extra /readyz checks (Docker, runsc preflight, image); keyed by name. */
  readiness?: Record<string, ReadinessCheck>;
  /** The /mcp endpoint: one handler that matches its paths itself. */
  mcp?: RequestHandler;
  /** The /v1 API. */
  v1?: OpenAiApi;
  /** The web app: its pages and the guards they pass. */
  web?: WebApp;
  /** The internal hop's end, on a replica of several (src/http/internal.ts). */
  internal?: Record<string, RequestHandler[]>;
  /** The authorization server for MCP clients (src/http/oauth.ts); none: SANDGATE_OAUTH=false. */
  oauth?: OAuthRoutes;
}

export function routes(app: express.Express, parts: RouteParts): void {
  // --- /mcp: first. One handler, which matches `/mcp` itself (no Router walk per call):
  //   POST   /mcp          host/origin, bearer token, JSON body (4 MB), rate limit → MCP
  //   GET    /mcp, DELETE  host/origin, bearer token → 405 (stateless: no stream)
  //   *      /mcp/…        host/origin, bearer token → on to the 404 below
  if (parts.mcp) app.use(parts.mcp);

  // --- /internal: runs another replica sends for a sandbox this one holds; signed with the replica key
  for (const [path, handlers] of Object.entries(parts.internal ?? {})) app.post(path, ...handlers);

  // --- /v1: host/origin and bearer token (`v1.checks`), then the user's budget before the body is read
  const v1 = parts.v1;
  if (v1) {
    app.get('/v1/models', ...v1.checks, v1.rateLimit, v1.models);
    app.post('/v1/chat/completions', ...v1.checks, v1.rateLimit, v1.body, v1.completions);
    app.all('/v1/{*rest}', v1.unknownRoute);
    app.use(v1.errors);
  }

  // --- OAuth for MCP clients: metadata and the machine endpoints (no cookies, any origin; budgets per client)
  const oauth = parts.oauth;
  if (oauth) {
    for (const [path, handler] of Object.entries(oauth.metadata)) app.all(path, handler);
    app.all('/oauth/token', ...oauth.token);
    app.all('/oauth/register', ...oauth.register);
    app.all('/oauth/revoke', ...oauth.revoke);
  }

  // --- pages
  const web = parts.web;
  if (web) {
    const { page, signedIn, csrf, limited, storeRoom, form, chatForm } = web.guards;
    const { signIn, chat, files, tokens, settings, admin } = web.pages;
    app.get('/vendor/:file', web.vendor);
    app.get('/', ...page, web.home);
    app.use(WEB_PATHS, ...page);

    // sign-in (who signs in: src/auth/index.ts; GET /auth/:name and its callback serve every provider there)
    app.get('/login', signIn.login);
    app.get('/auth/:name', signIn.start);
    app.get('/auth/:name/callback', signIn.callback);
    app.get('/login/link/:secret', signIn.linkPage);
    app.post('/login/link', form, csrf, signIn.link);
    app.post('/logout', form, csrf, signIn.logout);
    app.post('/logout/all', form, csrf, signIn.logoutAll);

    // an app's authorization request (sign-in first when there is no session), and the consent page's answer
    if (oauth) {
      app.get('/oauth/authorize', oauth.authorize);
      app.post('/oauth/authorize', signedIn, form, csrf, limited, oauth.decide);
    }

    // chat
    app.get('/chat', signedIn, chat.index);
    app.post('/chat/new', signedIn, chatForm, csrf, limited, chat.create);
    app.get('/c/:id', signedIn, chat.show);
    app.get('/c/:id/transcript', signedIn, chat.transcript);
    app.post('/c/:id/send', signedIn, chatForm, csrf, limited, storeRoom, chat.send);
    app.post('/c/:id/stop', signedIn, chatForm, csrf, limited, chat.stop);
    app.post('/c/:id/model', signedIn, chatForm, csrf, chat.setModel);
    app.post('/c/:id/delete', signedIn, chatForm, csrf, limited, chat.remove);

    // files: every one opens the user's workspace, so each takes a request from their budget
    app.get('/files', signedIn, limited, files.browse);
    app.get('/files/tree', signedIn, limited, files.tree);
    app.get('/files/open', signedIn, limited, files.open);
    app.get('/files/preview', signedIn, limited, files.preview);
    app.get('/files/table', signedIn, limited, files.table);
    app.get('/files/raw', signedIn, limited, files.raw);
    app.post('/files/upload', signedIn, csrf, limited, files.upload);
    app.post('/files/mkdir', signedIn, form, csrf, limited, files.mkdir);
    app.post('/files/rename', signedIn, form, csrf, limited, files.rename);
    app.post('/files/delete', signedIn, form, csrf, limited, files.remove);

    // tokens
    app.get('/tokens', signedIn, tokens.index);
    app.post('/tokens', signedIn, form, csrf, limited, tokens.create);
    app.post('/tokens/:id/revoke', signedIn, form, csrf, limited, tokens.revoke);
    app.post('/tokens/api-conversations/delete', signedIn, form, csrf, tokens.deleteApiConversations);

    // settings
    app.get('/settings', signedIn, settings.index);
    app.post('/settings/model', signedIn, form, csrf, settings.setModel);
    app.post('/settings/keys/:provider', signedIn, form, csrf, settings.saveKey);
    app.post('/settings/keys/:provider/delete', signedIn, form, csrf, settings.deleteKey);
    app.post('/settings/credentials', signedIn, form, csrf, settings.saveCredential);
    app.post('/settings/credentials/delete', signedIn, form, csrf, settings.deleteCredential);
    app.post('/settings/secrets', signedIn, form, csrf, settings.saveSecret);
    app.post('/settings/secrets/delete', signedIn, form, csrf, settings.deleteSecret);

    // admin: the gate first, on all of /admin, so that no admin path can miss it
    app.use('/admin', admin.gate);
    app.get('/admin', admin.sandboxes);
    app.get('/admin/sandboxes/rows', admin.sandboxRows);
    app.post('/admin/sandboxes/:userId/stop', form, csrf, admin.stopSandbox);
    app.post('/admin/sandboxes/:userId/kill', form, csrf, admin.killSandbox);
    app.post('/admin/sandboxes/stop-idle', form, csrf, admin.stopIdle);
    app.post('/admin/orphans/remove', form, csrf, admin.removeOrphans);
    app.get('/admin/users', admin.users);
    app.post('/admin/users/:id/disable', form, csrf, admin.disableUser);
    app.post('/admin/users/:id/enable', form, csrf, admin.enableUser);
    app.post('/admin/users/:id/permissions', form, csrf, admin.setPermissions);
    app.post('/admin/users/:id/delete', form, csrf, admin.deleteUser);
    app.get('/admin/tokens', admin.tokens);
    app.post('/admin/tokens/:id/revoke', form, csrf, admin.revokeToken);
    app.get('/admin/audit', admin.audit);
    app.get('/admin/audit.csv', admin.auditCsv);
    app.get('/admin/usage', admin.usage);
    app.get('/admin/upstream', admin.upstream);
    app.get('/admin/network', admin.network);
    app.post('/admin/upstream/:name/reconnect', form, csrf, admin.reconnectUpstream);
    app.get('/admin/api/sandboxes', admin.apiSandboxes);
    app.get('/admin/api/users', admin.apiUsers);
    app.get('/admin/api/usage', admin.apiUsage);
    app.get('/admin/metrics', metricsEndpoint());
  }

  // --- health and static files
  const probes = health(parts.store, parts.readiness ?? {}, parts.logger);
  app.get('/healthz', probes.live);
  app.get('/readyz', probes.ready);
  app.use('/static', staticFiles());
}
