/**
 * The tokens page: a user's personal API tokens (create, list with last use and expiry,
 * revoke) and ready-to-paste MCP client configurations with the new token filled in.
 * The secret is shown once, in the answer to the create request, and never stored. It
 * also shows what the gateway stores for the user against their quota, and deletes their
 * /v1 conversations, which no other page lists. Creating and revoking a token each take
 * one request from the user's budget (the route table, src/routes.ts, places the guards),
 * so a loop of them is paced like any other. The template data comes from ./view.ts.
 */
import type { RequestHandler } from 'express';
import type { Config } from '../../config.js';
import { deleteUserApiConversations } from '../../agent/api-history.js';
import { recordAudit } from '../../audit/audit.js';
import { GatewayError } from '../../errors.js';
import { dropPiiScope, tokenScopeRef } from '../../pii/scopes.js';
import type { Db } from '../../store/store.js';
import { createToken, getToken, parseExpiry, revokeToken } from '../../tokens/tokens.js';
import { userOf, type WebSessions } from '../../auth/session-middleware.js';
import { renderPage, renderPartial } from '../render.js';
import { clientConfigs, storageView, tokenList } from './view.js';

export interface TokensPage {
  /** GET /tokens */
  index: RequestHandler;
  /** POST /tokens: a new token, its secret shown once. */
  create: RequestHandler;
  /** POST /tokens/:id/revoke */
  revoke: RequestHandler;
  /** POST /tokens/api-conversations/delete */
  deleteApiConversations: RequestHandler;
}

export function tokensPage(deps: { config: Config; db: Db; auth: WebSessions }): TokensPage {
  const { db, auth, config } = deps;
  const base = config.publicUrl.replace(/\/$/, '');

  return {
    index: async (req, res) => {
      const user = userOf(req);
      renderPage(res, 'tokens/page', { user, csrf: auth.csrfToken(req) }, { ...(await tokenList(db, user.id)), storage: await storageView(db, config, user.id), maxTokens: config.maxTokensPerUser });
    },

    create: async (req, res) => {
      const user = userOf(req);
      const name = String((req.body as { name?: unknown }).name ?? '').trim();
      if (!/^[A-Za-z0-9._-]{1,64}$/.test(name)) throw new GatewayError('A token name is 1 to 64 letters, digits, dots, dashes or underscores.', { reason: 'invalid_request', status: 400 });
      const expiresAt = parseExpiry(String((req.body as { expires?: unknown }).expires ?? '90d'));
      const { token } = await createToken(db, { userId: user.id, name, expiresAt, maxActive: config.maxTokensPerUser });
      res.type('html').send(renderPartial('tokens/created', { name, token, ...clientConfigs(`${base}/mcp`, token), apiUrl: `${base}/v1`, ...(await tokenList(db, user.id)) }));
    },

    revoke: async (req, res) => {
      const user = userOf(req);
      const id = Number(req.params.id);
      const t = Number.isSafeInteger(id) ? await getToken(db, id) : undefined;
      // Another user's token is answered like a missing one.
      if (!t || t.userId !== user.id) throw new GatewayError('No such token.', { reason: 'not_found', status: 404 });
      await revokeToken(db, id, { userId: user.id });
      await dropPiiScope(db, tokenScopeRef(user.id, id));
      // A connected app disconnected: its grant's end is in the audit log, as its start is.
      if (t.kind === 'app') await recordAudit(db, { userId: user.id, via: 'token', tokenId: id, tokenName: t.name, kind: 'web', method: 'oauth/revoke', durationMs: 0, outcome: 'ok' });
      res.type('html').send(renderPartial('tokens/list', await tokenList(db, user.id)));
    },

    deleteApiConversations: async (req, res) => {
      const user = userOf(req);
      const n = await deleteUserApiConversations(db, user.id);
      res.type('html').send(renderPartial('tokens/storage', { storage: await storageView(db, config, user.id, `Deleted ${n} API conversation${n === 1 ? '' : 's'}.`) }));
    },
  };
}
