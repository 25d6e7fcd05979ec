/**
 * The tokens page: a user's personal API tokens (create, list with last use and expiry,
 * revoke) and ready-to-paste MCP client configurations with the new token filled in.
 * The secret is shown once, in the answer to the create request, and never stored. The
 * list is the active tokens and the RECENT_INACTIVE_SHOWN newest revoked or expired ones.
 * It also shows what the gateway stores for the user against their quota, and deletes
 * their /v1 conversations, which no other page lists.
 */
import express, { type Router } from 'express';
import type { Config } from '../../config.js';
import { deleteUserApiConversations } from '../../agent/api-history.js';
import { utcText } from '../../dates.js';
import { GatewayError } from '../../errors.js';
import type { RateLimiter } from '../../limits/rate-limit.js';
import { storeUsage } from '../../limits/store-quota.js';
import { formatBytes } from '../../text.js';
import { dropPiiScope, tokenScopeRef } from '../../pii/scopes.js';
import type { Db } from '../../store/store.js';
import { countActiveTokens, createToken, getToken, listTokens, parseExpiry, revokeToken, tokenState } from '../../tokens/tokens.js';
import { userOf, type WebAuth } from '../sign-in/routes.js';
import { webRateLimit } from '../limits.js';
import { renderPage, renderPartial } from '../render.js';

/** A stored time as text: '–' for none, "unknown" for a value no date can hold (an old install may have stored one). */
const day = (ms: number | null) => (ms === null ? '–' : utcText(ms, 'minute'));

/** The client configurations docs/mcp-clients.md describes, for this gateway and token. */
export function clientConfigs(mcpUrl: string, token: string): { claudeCode: string; claudeDesktop: string; cursor: string } {
  return {
    claudeCode: `claude mcp add --transport http --scope user sandgate ${mcpUrl} --header "Authorization: Bearer ${token}"`,
    claudeDesktop: JSON.stringify({ mcpServers: { sandgate: { command: 'npx', args: ['-y', 'mcp-remote', mcpUrl, '--header', 'Authorization:${SANDGATE_AUTH}'], env: { SANDGATE_AUTH: `Bearer ${token}` } } } }, null, 2),
    cursor: JSON.stringify({ mcpServers: { sandgate: { url: mcpUrl, headers: { Authorization: `Bearer ${token}` } } } }, null, 2),
  };
}

/** Revoked and expired tokens the page lists after the active ones (the newest); `sandgate tokens list --all` lists every one kept. */
export const RECENT_INACTIVE_SHOWN = 10;

/**
 * Creating and revoking a token each take one request from the user's budget (the same
 * as /mcp and /v1), so a loop of them is paced like any other.
 */
export function tokensRoutes(deps: { config: Config; db: Db; auth: WebAuth; limiter: RateLimiter }): Router {
  const { db, auth } = deps;
  const router = express.Router();
  const limited = webRateLimit(deps.limiter);
  const body = express.urlencoded({ extended: false, limit: '16kb' });
  const base = deps.config.publicUrl.replace(/\/$/, '');
  const listFor = (userId: number, now = Date.now()) =>
    listTokens(db, { userId, includeRevoked: true, activeFirst: true, now, limit: countActiveTokens(db, userId, now) + RECENT_INACTIVE_SHOWN }).map((t) => ({ id: t.id, name: t.name, created: day(t.createdAt), lastUsed: day(t.lastUsedAt), expires: t.expiresAt === null ? 'never' : day(t.expiresAt), state: tokenState(t) }));
  const storageFor = (userId: number, message?: string) => {
    const u = storeUsage(db, deps.config, userId);
    return {
      used: formatBytes(u.total),
      quota: formatBytes(u.quota),
      web: formatBytes(u.web),
      api: formatBytes(u.api),
      personalData: formatBytes(u.personalData),
      tokenPersonalData: u.tokenPersonalData ? formatBytes(u.tokenPersonalData) : undefined,
      ttlHours: deps.config.piiTtlHours,
      full: u.total >= u.quota,
      hasApi: u.api > 0,
      days: deps.config.apiConversationDays,
      message,
    };
  };

  router.get('/tokens', auth.requireUser, (req, res) => {
    const user = userOf(req);
    renderPage(res, 'tokens', { user, csrf: auth.csrfToken(req) }, { tokens: listFor(user.id), recentInactive: RECENT_INACTIVE_SHOWN, storage: storageFor(user.id), maxTokens: deps.config.maxTokensPerUser });
  });

  router.post('/tokens', auth.requireUser, body, auth.csrf, limited, (req, res) => {
    const user = userOf(req);
    const name = String((req.body as { name?: unknown }).name ?? '').trim();
    if (!/^[A-Za-z0-9._-]{1,64}$/.test(name)) throw new GatewayError('A token name is 1 to 64 letters, digits, dots, dashes or underscores.', { reason: 'invalid_request', status: 400 });
    const expiresAt = parseExpiry(String((req.body as { expires?: unknown }).expires ?? '90d'));
    const { token } = createToken(db, { userId: user.id, name, expiresAt, maxActive: deps.config.maxTokensPerUser });
    res.type('html').send(renderPartial('token-created', { name, token, ...clientConfigs(`${base}/mcp`, token), apiUrl: `${base}/v1`, tokens: listFor(user.id), recentInactive: RECENT_INACTIVE_SHOWN }));
  });

  router.post('/tokens/:id/revoke', auth.requireUser, body, auth.csrf, limited, (req, res) => {
    const user = userOf(req);
    const id = Number(req.params.id);
    const t = Number.isSafeInteger(id) ? getToken(db, id) : undefined;
    // Another user's token is answered like a missing one.
    if (!t || t.userId !== user.id) throw new GatewayError('No such token.', { reason: 'not_found', status: 404 });
    revokeToken(db, id, { userId: user.id });
    dropPiiScope(db, tokenScopeRef(user.id, id));
    res.type('html').send(renderPartial('token-list', { tokens: listFor(user.id), recentInactive: RECENT_INACTIVE_SHOWN }));
  });

  router.post('/tokens/api-conversations/delete', auth.requireUser, body, auth.csrf, (req, res) => {
    const user = userOf(req);
    const n = deleteUserApiConversations(db, user.id);
    res.type('html').send(renderPartial('token-storage', { storage: storageFor(user.id, `Deleted ${n} API conversation${n === 1 ? '' : 's'}.`) }));
  });

  return router;
}
