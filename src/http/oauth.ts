/**
 * The gateway as its own OAuth 2.1 authorization server for MCP clients (the MCP
 * specification's authorization), with sign-in delegated to the web app's own (GitHub,
 * or the one-time link) and a consent page.
 *
 *   GET  /.well-known/oauth-protected-resource[/mcp]  RFC 9728: /mcp, and who issues its tokens
 *   GET  /.well-known/oauth-authorization-server      RFC 8414: the endpoints below, what they take
 *   GET  /oauth/authorize   a request checked; to sign-in first, then the consent page
 *                           (or straight back with a code when the user already allowed the app)
 *   POST /oauth/authorize   the consent page's answer: back to the app with a code, or access_denied
 *   POST /oauth/token       authorization_code (PKCE S256) and refresh_token grants
 *   POST /oauth/register    dynamic client registration (RFC 7591), bounded (./clients.ts)
 *   POST /oauth/revoke      RFC 7009
 *
 * Every redirect back to an app carries `iss` (RFC 9207), so an app talking to several
 * servers can tell whose answer it got. An error goes back to an app only for a user who
 * allowed that app before; otherwise it is a page, never a redirect. The machine endpoints
 * take no cookies and answer any origin (CORS), as browser-based clients need. Failed
 * token requests are budgeted per client and registrations together, in the store, so
 * gateways behind one load balancer share the budgets.
 */
import crypto from 'node:crypto';
import express, { type Request, type RequestHandler, type Response } from 'express';
import { recordAudit } from '../audit/audit.js';
import type { WebSessions } from '../auth/session-middleware.js';
import type { Config } from '../config.js';
import type { RateLimiter } from '../limits/rate-limit.js';
import type { Logger } from '../logger.js';
import type { Db } from '../store/store.js';
import { PAGE_CSP, renderPage } from '../web/render.js';
import { ClientMetadataError, ClientStore, redirectUriMatches, REGISTRATION_MAX_BYTES, type OAuthClient } from '../oauth/clients.js';
import { exchangeCode, GrantError, grantFor, issueCode, liveGrant, MCP_SCOPE, refreshTokens, revokeBySecret, type GrantEvent } from '../oauth/grants.js';
import { endpoint, issuerOf, mcpResource, resourceMetadataPath, serverMetadataPath } from '../oauth/urls.js';

declare module 'express-session' {
  interface SessionData {
    /** Where to go once signed in (an authorization request that found no session), and when it was asked (src/web/sign-in/page.ts honours it for ten minutes). */
    returnTo?: { path: string; at: number };
    /** Authorization requests waiting on the consent page, by id (a few at most). */
    oauthPending?: Record<string, PendingRequest>;
  }
}

/** An authorization request the user is asked about, as checked. */
interface PendingRequest {
  clientId: string;
  /** The redirect URI used; `given` false when the request named none (the client's only one). */
  redirectUri: string;
  given: boolean;
  state?: string;
  codeChallenge: string;
  resource: string;
  scope: string;
  at: number;
}

/** Pending requests a session keeps; the oldest goes first. */
const MAX_PENDING = 5;
/** How long a consent page may wait for its answer. */
const PENDING_MS = 10 * 60_000;

export interface OAuthServerDeps {
  config: Config;
  db: Db;
  logger: Logger;
  clients: ClientStore;
  /**
   * Budgets: failed token requests per client (`oauth-token-failures:<client>`; a success
   * is never held back, so nobody can spend a popular app's budget to lock its users
   * out), registrations together (`oauth-register`).
   */
  limiters: { tokenFailures: RateLimiter; register: RateLimiter };
  auth: WebSessions;
}

export interface OAuthRoutes {
  /** Paths and handlers of the metadata documents (GET, no cookies). */
  metadata: Record<string, RequestHandler>;
  /** GET /oauth/authorize, after the page guards (sessions). */
  authorize: RequestHandler;
  /** POST /oauth/authorize, after the page guards, sign-in, the form and its CSRF check. */
  decide: RequestHandler;
  /** POST /oauth/token, /oauth/register, /oauth/revoke, each whole (CORS, body, budget, handler). */
  token: RequestHandler[];
  register: RequestHandler[];
  revoke: RequestHandler[];
}

/** Access-Control for the machine endpoints: any origin, no credentials (they take none). */
const cors: RequestHandler = (req, res, next) => {
  res.set({ 'Access-Control-Allow-Origin': '*', 'Access-Control-Allow-Headers': 'authorization, content-type, mcp-protocol-version', 'Access-Control-Allow-Methods': 'GET, POST, OPTIONS', 'Access-Control-Max-Age': '600' });
  if (req.method === 'OPTIONS') return void res.status(204).end();
  next();
};

/** An OAuth error answer (RFC 6749 §5.2), never cached. */
function oauthError(res: Response, status: number, error: string, description: string): void {
  res.status(status).set({ 'Cache-Control': 'no-store', Pragma: 'no-cache' }).json({ error, error_description: description });
}

export function oauthServer(deps: OAuthServerDeps): OAuthRoutes {
  const { config, db, clients, limiters } = deps;
  const log = deps.logger.child({ module: 'oauth' });
  const issuer = issuerOf(config);
  const resource = mcpResource(config);

  const protectedResource = {
    resource,
    authorization_servers: [issuer],
    scopes_supported: [MCP_SCOPE],
    bearer_methods_supported: ['header'],
    resource_name: 'sandgate',
    resource_documentation: `${issuer}/tokens`,
  };
  const serverMetadata = {
    issuer,
    authorization_endpoint: endpoint(config, '/oauth/authorize'),
    token_endpoint: endpoint(config, '/oauth/token'),
    registration_endpoint: endpoint(config, '/oauth/register'),
    revocation_endpoint: endpoint(config, '/oauth/revoke'),
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code', 'refresh_token'],
    code_challenge_methods_supported: ['S256'],
    token_endpoint_auth_methods_supported: ['none'],
    revocation_endpoint_auth_methods_supported: ['none'],
    scopes_supported: [MCP_SCOPE],
    authorization_response_iss_parameter_supported: true,
    client_id_metadata_document_supported: true,
  };
  const json =
    (doc: object): RequestHandler =>
    (req, res, next) =>
      cors(req, res, () => {
        if (req.method !== 'GET' && req.method !== 'HEAD') return next();
        res.set('Cache-Control', 'public, max-age=300').json(doc);
      });
  const metadata: Record<string, RequestHandler> = {
    [resourceMetadataPath(config)]: json(protectedResource),
    '/.well-known/oauth-protected-resource': json(protectedResource),
    [serverMetadataPath(config)]: json(serverMetadata),
  };

  const audit = (e: GrantEvent) => {
    recordAudit(db, { userId: e.userId, via: 'token', tokenId: e.grantId, tokenName: e.grantName, kind: 'web', method: e.method, durationMs: 0, outcome: e.outcome }).catch((err: unknown) =>
      log.error({ err }, 'could not write an audit entry'),
    );
  };

  /** The page shown for a request that cannot (or may not yet) go back to the app. */
  const refusePage = (req: Request, res: Response, status: number, message: string) => {
    res.status(status);
    renderPage(res, 'error', { user: req.user as never, csrf: deps.auth.csrfToken(req) }, { title: 'This app cannot connect', message });
  };

  /** Back to the app: its redirect URI with `params`, `state` and `iss`. */
  const back = (res: Response, redirectUri: string, params: Record<string, string>, state: string | undefined) => {
    const u = new URL(redirectUri);
    for (const [k, v] of Object.entries(params)) u.searchParams.set(k, v);
    if (state !== undefined) u.searchParams.set('state', state);
    u.searchParams.set('iss', issuer);
    res.set('Cache-Control', 'no-store').redirect(303, u.href);
  };

  /** The consent page's CSP: the form may go on to the app's redirect URI (a browser checks form-action on the redirect too). */
  const consentCsp = (redirectUri: string) => {
    const u = new URL(redirectUri);
    const target = u.protocol === 'http:' || u.protocol === 'https:' ? u.origin : u.protocol;
    return PAGE_CSP.replace("form-action 'self'", `form-action 'self' ${target}`);
  };

  /** A code for `pending` under the user's grant, and the redirect with it. */
  const issueAndReturn = async (res: Response, grantId: number, p: PendingRequest) => {
    const code = await issueCode(db, { grantId, clientId: p.clientId, redirectUri: p.given ? p.redirectUri : '', codeChallenge: p.codeChallenge, resource: p.resource, scope: p.scope });
    back(res, p.redirectUri, { code }, p.state);
  };

  const authorize: RequestHandler = async (req, res) => {
    const q = req.query as Record<string, unknown>;
    const str = (k: string) => (typeof q[k] === 'string' ? (q[k] as string) : undefined);
    // 1. Who asks, and where the answer goes: until both are known to match, errors are shown here.
    const clientId = str('client_id');
    if (!clientId) return refusePage(req, res, 400, 'The app sent no client_id. Start connecting again from the app.');
    let client: OAuthClient | undefined;
    try {
      client = await clients.get(clientId);
    } catch (e) {
      if (!(e instanceof ClientMetadataError)) throw e;
      log.info({ client: clientId.slice(0, 200), err: e.message, detail: e.detail }, 'an authorization request named a client that could not be taken');
      return refusePage(req, res, e.error === 'temporarily_unavailable' ? 503 : 400, e.message);
    }
    if (!client) return refusePage(req, res, 400, 'This app is not known to the gateway (its registration may have expired after a day unused). Start connecting again from the app.');
    const asked = str('redirect_uri');
    let redirectUri: string;
    if (asked !== undefined) {
      if (!redirectUriMatches(asked, client.redirectUris)) return refusePage(req, res, 400, 'The app asked to be answered at an address it did not register. Nothing was sent to it.');
      redirectUri = asked;
    } else if (client.redirectUris.length === 1) {
      redirectUri = client.redirectUris[0]!;
    } else {
      return refusePage(req, res, 400, 'The app registered several redirect URIs and named none. Start connecting again from the app.');
    }
    const state = str('state');
    // Who asks: a session that may come in now, or nobody.
    const who = req.user ? await deps.auth.stillAllowed(req) : undefined;
    const user = who?.ok ? who.user : undefined;
    // 2. The rest. An error goes back to the app only for a user who allowed it before:
    // anyone can publish a client whose redirect URI is their own site, and the gateway's
    // address must not become a redirector to it (RFC 9700 §4.11.2). Else it is a page.
    const fail = async (error: string, description: string) => {
      if (user && (await liveGrant(db, user.id, client.clientId))) return back(res, redirectUri, { error, error_description: description }, state);
      refusePage(req, res, 400, `The app's request cannot be answered (${error}: ${description}). Start connecting again from the app.`);
    };
    if (str('response_type') !== 'code') return fail('unsupported_response_type', 'only response_type=code is supported');
    const challenge = str('code_challenge');
    if (!challenge || !/^[A-Za-z0-9_-]{43}$/.test(challenge) || str('code_challenge_method') !== 'S256') return fail('invalid_request', 'PKCE is required: code_challenge (S256 of the verifier, base64url) with code_challenge_method=S256');
    const wanted = str('resource');
    if (wanted !== undefined && wanted.replace(/\/+$/, '') !== resource) return fail('invalid_target', `this server issues tokens for ${resource} only`);
    const scopes = (str('scope') ?? '').split(' ').filter((s) => s && s !== 'offline_access');
    if (scopes.some((s) => s !== MCP_SCOPE)) return fail('invalid_scope', `the only scope is "${MCP_SCOPE}"`);
    const pending: PendingRequest = { clientId: client.clientId, redirectUri, given: asked !== undefined, state, codeChallenge: challenge, resource, scope: MCP_SCOPE, at: Date.now() };

    // 3. Signed in? Else to the sign-in page, and back here after (if within ten minutes: src/web/sign-in/page.ts).
    if (!user) {
      req.session.returnTo = { path: req.originalUrl.slice(0, 8192), at: Date.now() };
      return res.redirect(303, '/login');
    }
    // 4. Allowed before: straight back with a code. Else the consent page.
    const grant = await liveGrant(db, user.id, client.clientId);
    if (grant) {
      log.info({ user: user.name, client: client.clientId }, 'authorization for an app already allowed');
      return issueAndReturn(res, grant.id, pending);
    }
    const id = crypto.randomBytes(16).toString('base64url');
    const waiting = Object.entries(req.session.oauthPending ?? {}).filter(([, p]) => p.at > Date.now() - PENDING_MS);
    req.session.oauthPending = Object.fromEntries([...waiting.slice(-(MAX_PENDING - 1)), [id, pending]]);
    const redirectHost = (() => {
      const u = new URL(redirectUri);
      return u.protocol === 'http:' || u.protocol === 'https:' ? u.host : `${u.protocol}//${u.host}`;
    })();
    res.set('Content-Security-Policy', consentCsp(redirectUri));
    renderPage(res, 'oauth/consent', { user, csrf: deps.auth.csrfToken(req) }, { client, redirectHost, requestId: id });
  };

  const decide: RequestHandler = async (req, res) => {
    const user = req.user as { id: number; name: string };
    const body = req.body as { request?: unknown; decision?: unknown };
    const id = typeof body.request === 'string' ? body.request : '';
    const all = req.session.oauthPending ?? {};
    const pending = Object.hasOwn(all, id) ? all[id] : undefined;
    if (pending) {
      delete all[id];
      req.session.oauthPending = all;
    }
    if (!pending || pending.at <= Date.now() - PENDING_MS) return refusePage(req, res, 400, 'This request to connect an app has expired or was answered already. Start connecting again from the app.');
    if (body.decision !== 'allow') {
      log.info({ user: user.name, client: pending.clientId }, 'an app was denied access');
      return back(res, pending.redirectUri, { error: 'access_denied', error_description: 'the user denied access' }, pending.state);
    }
    const client = await clients.get(pending.clientId).catch(() => undefined);
    // Its registration may have changed while the page was open (a document refetched): the redirect must still be one of its own.
    if (!client || !redirectUriMatches(pending.redirectUri, client.redirectUris)) return refusePage(req, res, 400, 'This app is no longer known to the gateway as it was. Start connecting again from the app.');
    let grant;
    try {
      grant = await grantFor(db, { userId: user.id, clientId: client.clientId, clientName: client.name });
    } catch (e) {
      if (e instanceof GrantError) return back(res, pending.redirectUri, { error: e.error, error_description: e.message }, pending.state);
      throw e;
    }
    await clients.markUsed(client.clientId);
    if (grant.created) {
      log.info({ user: user.name, client: client.clientId, name: grant.grant.name }, 'an app was connected');
      await recordAudit(db, { userId: user.id, via: 'token', tokenId: grant.grant.id, tokenName: grant.grant.name, kind: 'web', method: 'oauth/grant', durationMs: 0, outcome: 'ok' });
    }
    await issueAndReturn(res, grant.grant.id, pending);
  };

  /** The client a token or revocation request names: in the body, or as HTTP Basic's user (no secret: every client is public). */
  const clientIdOf = (req: Request): string | undefined => {
    const basic = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(req.headers.authorization ?? '')?.[1];
    if (basic) {
      const [id] = Buffer.from(basic, 'base64').toString('utf8').split(':');
      try {
        return id ? decodeURIComponent(id) : undefined;
      } catch {
        return undefined;
      }
    }
    // A request without a body has none (Express 5 leaves req.body undefined).
    const id = (req.body as Record<string, unknown> | undefined)?.client_id;
    return typeof id === 'string' ? id : undefined;
  };
  const form = express.urlencoded({ extended: false, limit: '16kb', type: () => true });
  const budget =
    (limiter: RateLimiter, key: (req: Request) => string): RequestHandler =>
    async (req, res, next) => {
      const d = await limiter.take(key(req));
      if (d.ok) return next();
      res.set('Retry-After', String(d.retryAfterSec));
      oauthError(res, 429, 'temporarily_unavailable', `too many requests; try again in ${d.retryAfterSec} s`);
    };
  const bodyErrors = (err: { type?: string; status?: number }, _req: Request, res: Response, next: (e?: unknown) => void) => {
    if (err.type === 'entity.parse.failed') return oauthError(res, 400, 'invalid_request', 'the body could not be parsed');
    if (err.type === 'entity.too.large') return oauthError(res, 413, 'invalid_request', 'the body is too large');
    next(err);
  };

  const token: RequestHandler = async (req, res) => {
    const b = (req.body ?? {}) as Record<string, unknown>;
    const s = (k: string) => (typeof b[k] === 'string' ? (b[k] as string) : undefined);
    const clientId = clientIdOf(req);
    res.set({ 'Cache-Control': 'no-store', Pragma: 'no-cache' });
    /** A refusal, taken from the client's budget of failures: past it, 429 (and a success is never held back). */
    const failed = async (status: number, error: string, description: string) => {
      const d = await limiters.tokenFailures.take(`oauth-token-failures:${(clientId ?? '').slice(0, 200)}`);
      if (!d.ok) {
        res.set('Retry-After', String(d.retryAfterSec));
        return oauthError(res, 429, 'temporarily_unavailable', `too many failed requests for this app; try again in ${d.retryAfterSec} s`);
      }
      // RFC 6749 §5.2: a client that tried HTTP Basic is told which scheme, with its 401.
      if (status === 401 && /^Basic\s/i.test(req.headers.authorization ?? '')) res.set('WWW-Authenticate', 'Basic realm="sandgate"');
      oauthError(res, status, error, description);
    };
    if (!clientId) return failed(401, 'invalid_client', 'client_id is required');
    // A document kept from before serves however old: a vendor's site down must not end its users' sessions.
    const client = await clients.get(clientId, { stale: true }).catch(() => undefined);
    if (!client) return failed(401, 'invalid_client', 'this client is not known to the gateway');
    try {
      if (s('grant_type') === 'authorization_code') {
        const code = s('code');
        const verifier = s('code_verifier');
        if (!code || !verifier) return failed(400, 'invalid_request', 'code and code_verifier are required');
        return void res.json(await exchangeCode(db, { clientId, code, verifier, redirectUri: s('redirect_uri'), resource: s('resource')?.replace(/\/+$/, ''), refresh: client.refreshes }, audit));
      }
      if (s('grant_type') === 'refresh_token') {
        const refreshToken = s('refresh_token');
        if (!refreshToken) return failed(400, 'invalid_request', 'refresh_token is required');
        return void res.json(await refreshTokens(db, { clientId, refreshToken, resource: s('resource')?.replace(/\/+$/, ''), scope: s('scope') }, audit));
      }
      return failed(400, 'unsupported_grant_type', 'grant_type must be authorization_code or refresh_token');
    } catch (e) {
      if (e instanceof GrantError) return failed(400, e.error, e.message);
      throw e;
    }
  };

  const register: RequestHandler = async (req, res) => {
    try {
      const r = await clients.register(req.body);
      log.info({ client: r.clientId, name: r.metadata.client_name, ip: req.ip }, 'an OAuth client registered');
      res.status(201).set({ 'Cache-Control': 'no-store' }).json({ client_id: r.clientId, client_id_issued_at: r.issuedAt, ...r.metadata });
    } catch (e) {
      if (e instanceof ClientMetadataError) return oauthError(res, e.error === 'temporarily_unavailable' ? 503 : 400, e.error, e.message);
      throw e;
    }
  };

  const revoke: RequestHandler = async (req, res) => {
    const clientId = clientIdOf(req);
    const tokenValue = (req.body as Record<string, unknown> | undefined)?.token;
    if (!clientId || typeof tokenValue !== 'string') return oauthError(res, 400, 'invalid_request', 'token and client_id are required');
    await revokeBySecret(db, { clientId, token: tokenValue }, audit);
    res.status(200).set('Cache-Control', 'no-store').end();
  };

  return {
    metadata,
    authorize,
    decide,
    token: [cors, form, bodyErrors as never, token],
    register: [cors, budget(limiters.register, () => 'oauth-register'), express.json({ limit: REGISTRATION_MAX_BYTES, type: () => true }), bodyErrors as never, register],
    revoke: [cors, form, bodyErrors as never, revoke],
  };
}
