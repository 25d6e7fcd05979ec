/**
 * Grants, authorization codes and tokens of the gateway's authorization server.
 *
 * A grant is a user's consent to one client, kept as an `api_tokens` row of kind `app`
 * (src/oauth/schema.ts says why). A code is single use and lives a minute; a second use
 * revokes what the first one got (a replay without the PKCE verifier spends nothing). An access token lives an hour and is bound to the
 * resource it was asked for (RFC 8707: this gateway's /mcp). A refresh token is used once:
 * its exchange gives a new pair, and a second exchange of the same one means it was
 * copied, so the whole grant is revoked (the app must ask the user again).
 *
 * Every token is random (the personal tokens' shape, another prefix: `sga_` access,
 * `sgr_` refresh, `sgo_` code) and stored only as its SHA-256. Checking an access token
 * is one query, as a personal token's is, and ends in the same checks of the grant and
 * its user (admitTokenRow): a revoked grant or a disabled user stops at once.
 */
import crypto from 'node:crypto';
import { serializable, type Db } from '../store/store.js';
import { prepared } from '../store/prepared.js';
import { generateToken, hashToken, isWellFormedToken } from '../tokens/format.js';
import { admitTokenRow, MAX_TOKENS_CREATED_PER_DAY, TOKEN_USER_COLUMNS, type VerifyResult } from '../tokens/tokens.js';

export const ACCESS_PREFIX = 'sga_';
export const REFRESH_PREFIX = 'sgr_';
export const CODE_PREFIX = 'sgo_';

/** The one scope: use this gateway's MCP tools as the user. */
export const MCP_SCOPE = 'mcp';
export const ACCESS_TOKEN_TTL_MS = 3_600_000;
export const REFRESH_TOKEN_TTL_MS = 30 * 86_400_000;
export const CODE_TTL_MS = 60_000;
/** Apps one user may have connected at once. */
export const MAX_APPS_PER_USER = 20;

/** A refusal at the token endpoint: RFC 6749's error code and a sentence for the app's user. */
export class GrantError extends Error {
  override name = 'GrantError';
  constructor(
    readonly error: 'invalid_grant' | 'invalid_request' | 'invalid_target' | 'invalid_scope' | 'access_denied',
    message: string,
  ) {
    super(message);
  }
}

export interface IssuedTokens {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  /** Absent for a client that did not register the refresh_token grant. */
  refresh_token?: string;
  scope: string;
}

/** What happened that the audit log records, for the caller to write (src/http/oauth.ts). */
export interface GrantEvent {
  userId: number;
  grantId: number;
  grantName: string;
  method: 'oauth/token' | 'oauth/refresh' | 'oauth/refresh_reused' | 'oauth/code_reused' | 'oauth/revoke';
  outcome: 'ok' | 'denied';
}

export interface GrantRecord {
  id: number;
  userId: number;
  clientId: string;
  name: string;
  createdAt: number;
  lastUsedAt: number | null;
}

/** The user's live grant to this client, if any (their consent, remembered). */
export async function liveGrant(db: Db, userId: number, clientId: string): Promise<GrantRecord | undefined> {
  const r = await db
    .selectFrom('api_tokens')
    .select(['id', 'user_id', 'client_id', 'name', 'created_at', 'last_used_at'])
    .where('user_id', '=', userId)
    .where('client_id', '=', clientId)
    .where('kind', '=', 'app')
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return r && { id: r.id, userId: r.user_id, clientId: r.client_id!, name: r.name, createdAt: r.created_at, lastUsedAt: r.last_used_at };
}

/** A user's live grants, newest first, with their clients' ids (the tokens page's connected apps). */
export async function listGrants(db: Db, userId: number): Promise<GrantRecord[]> {
  const rows = await db
    .selectFrom('api_tokens')
    .select(['id', 'user_id', 'client_id', 'name', 'created_at', 'last_used_at'])
    .where('user_id', '=', userId)
    .where('kind', '=', 'app')
    .where('revoked_at', 'is', null)
    .orderBy('created_at', 'desc')
    .execute();
  return rows.map((r) => ({ id: r.id, userId: r.user_id, clientId: r.client_id!, name: r.name, createdAt: r.created_at, lastUsedAt: r.last_used_at }));
}

/**
 * The user's grant to a client: the live one, or a new one named after the client
 * (`<name> (app)`, numbered when the user already has one so named). GrantError when
 * the user has MAX_APPS_PER_USER connected already.
 */
export async function grantFor(db: Db, opts: { userId: number; clientId: string; clientName: string; now?: number }): Promise<{ grant: GrantRecord; created: boolean }> {
  const now = opts.now ?? Date.now();
  return serializable(db, async (tx) => {
    const live = await liveGrant(tx, opts.userId, opts.clientId);
    if (live) return { grant: live, created: false };
    const names = await tx.selectFrom('api_tokens').select(['name', 'kind']).where('user_id', '=', opts.userId).where('revoked_at', 'is', null).execute();
    const apps = names.filter((n) => n.kind === 'app').length;
    if (apps >= MAX_APPS_PER_USER) {
      throw new GrantError('access_denied', `you have ${apps} apps connected, the most one user may: disconnect one you no longer use on the tokens page, then connect this one`);
    }
    // As for personal tokens, a day's creations are bounded: connect and disconnect in a loop does not grow the table.
    const recent = await tx
      .selectFrom('api_tokens')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('user_id', '=', opts.userId)
      .where('kind', '=', 'app')
      .where('created_at', '>', now - 86_400_000)
      .executeTakeFirstOrThrow();
    if (Number(recent.n) >= MAX_TOKENS_CREATED_PER_DAY) {
      throw new GrantError('access_denied', `you connected ${recent.n} apps in the last 24 hours, the most one user may in a day: try again tomorrow`);
    }
    const base = opts.clientName.slice(0, 50);
    const taken = new Set(names.map((n) => n.name));
    let name = `${base} (app)`;
    for (let i = 2; taken.has(name); i++) name = `${base} (app ${i})`;
    const { id } = await tx
      .insertInto('api_tokens')
      .values({ user_id: opts.userId, name, hash: crypto.randomBytes(32), created_at: now, expires_at: null, kind: 'app', client_id: opts.clientId })
      .returning('id')
      .executeTakeFirstOrThrow();
    return { grant: { id, userId: opts.userId, clientId: opts.clientId, name, createdAt: now, lastUsedAt: null }, created: true };
  });
}

/** A new authorization code for a grant: the code in clear, the only time it exists here. */
export async function issueCode(
  db: Db,
  opts: { grantId: number; clientId: string; redirectUri: string; codeChallenge: string; resource: string; scope: string; now?: number },
): Promise<string> {
  const now = opts.now ?? Date.now();
  const code = generateToken(CODE_PREFIX);
  await db
    .insertInto('oauth_codes')
    .values({
      hash: hashToken(code),
      grant_id: opts.grantId,
      client_id: opts.clientId,
      redirect_uri: opts.redirectUri,
      code_challenge: opts.codeChallenge,
      resource: opts.resource,
      scope: opts.scope,
      created_at: now,
      expires_at: now + CODE_TTL_MS,
      used_at: null,
    })
    .execute();
  return code;
}

/** PKCE S256 (RFC 7636 §4.6): the verifier's SHA-256, base64url, is the challenge. */
export function pkceMatches(verifier: string, challenge: string): boolean {
  if (!/^[A-Za-z0-9._~-]{43,128}$/.test(verifier)) return false;
  const computed = Buffer.from(crypto.createHash('sha256').update(verifier).digest('base64url'));
  const given = Buffer.from(challenge);
  return computed.length === given.length && crypto.timingSafeEqual(computed, given);
}

/** A new access token, and a refresh token unless the client did not register for them; `origin` names the chain (the code it began with). */
async function issueTokens(db: Db, t: { grantId: number; resource: string; scope: string; origin: Buffer; refresh: boolean; now: number }): Promise<IssuedTokens> {
  const access = generateToken(ACCESS_PREFIX);
  const refresh = t.refresh ? generateToken(REFRESH_PREFIX) : undefined;
  const row = (hash: Buffer, kind: 'access' | 'refresh', ttl: number) => ({ hash, kind, grant_id: t.grantId, resource: t.resource, scope: t.scope, created_at: t.now, expires_at: t.now + ttl, used_at: null, revoked_at: null, origin: t.origin });
  await db
    .insertInto('oauth_tokens')
    .values([row(hashToken(access), 'access', ACCESS_TOKEN_TTL_MS), ...(refresh ? [row(hashToken(refresh), 'refresh', REFRESH_TOKEN_TTL_MS)] : [])])
    .execute();
  return { access_token: access, token_type: 'Bearer', expires_in: ACCESS_TOKEN_TTL_MS / 1000, ...(refresh && { refresh_token: refresh }), scope: t.scope };
}

/** Revokes every token of a grant (and, with `grant`, the grant itself). */
export async function revokeGrantTokens(db: Db, grantId: number, opts: { grant?: boolean; now?: number } = {}): Promise<void> {
  const now = opts.now ?? Date.now();
  await db.updateTable('oauth_tokens').set({ revoked_at: now }).where('grant_id', '=', grantId).where('revoked_at', 'is', null).execute();
  if (opts.grant) await db.updateTable('api_tokens').set({ revoked_at: now }).where('id', '=', grantId).where('revoked_at', 'is', null).execute();
}

const grantRow = (db: Db, grantId: number) =>
  db.selectFrom('api_tokens').select(['id', 'user_id', 'name', 'client_id', 'revoked_at']).where('id', '=', grantId).where('kind', '=', 'app').executeTakeFirst();

const userState = (db: Db, userId: number) => db.selectFrom('users').select(['disabled_at', 'suspended_at']).where('id', '=', userId).executeTakeFirst();

/** Whether a grant may still be used: not revoked, its user neither disabled nor suspended. */
async function grantUsable(db: Db, grant: { revoked_at: number | null; user_id: number }): Promise<boolean> {
  if (grant.revoked_at !== null) return false;
  const u = await userState(db, grant.user_id);
  return !!u && u.disabled_at === null && u.suspended_at === null;
}

/**
 * Exchanges a code for tokens (RFC 6749 §4.1.3 with PKCE): the code must be this
 * client's, unexpired, for the same redirect URI and resource, and the verifier must
 * match its challenge; all that is checked before the code is spent, so a replay
 * without the verifier (a code seen in a log or a browser history) spends and revokes
 * nothing. A code presented with its verifier a second time, within its minute, was
 * copied along with it: the tokens its first use got (and their refreshes) are revoked.
 */
export async function exchangeCode(
  db: Db,
  opts: { clientId: string; code: string; verifier: string; redirectUri?: string; resource?: string; refresh: boolean; now?: number },
  events: (e: GrantEvent) => void,
): Promise<IssuedTokens> {
  const now = opts.now ?? Date.now();
  const bad = new GrantError('invalid_grant', 'the authorization code is not valid: it may have expired (codes last a minute), been used already, or belong to another app');
  if (!isWellFormedToken(opts.code, CODE_PREFIX)) throw bad;
  const row = await db.selectFrom('oauth_codes').selectAll().where('hash', '=', hashToken(opts.code)).executeTakeFirst();
  if (!row || row.client_id !== opts.clientId || row.expires_at <= now) throw bad;
  if (!pkceMatches(opts.verifier, row.code_challenge)) throw new GrantError('invalid_grant', 'the code_verifier does not match the code_challenge of the authorization request (PKCE S256)');
  if (row.redirect_uri !== '' && opts.redirectUri !== row.redirect_uri) throw new GrantError('invalid_grant', 'redirect_uri must be the one given in the authorization request');
  if (row.redirect_uri === '' && opts.redirectUri !== undefined) throw new GrantError('invalid_grant', 'redirect_uri was not given in the authorization request, so it may not be given here');
  if (opts.resource !== undefined && opts.resource !== row.resource) throw new GrantError('invalid_target', `this code is for the resource ${row.resource}, not ${opts.resource}`);
  const grant = await grantRow(db, row.grant_id);
  if (!grant) throw bad;
  // Spent atomically: of two exchanges at once, one gets the tokens and the other is a reuse.
  const taken = await db.updateTable('oauth_codes').set({ used_at: now }).where('hash', '=', row.hash).where('used_at', 'is', null).executeTakeFirst();
  if (Number(taken.numUpdatedRows) === 0) {
    // RFC 6749 §4.1.2: what was issued on a code used twice is revoked (its chain only: the grant's other devices go on).
    await db.updateTable('oauth_tokens').set({ revoked_at: now }).where('origin', '=', row.hash).where('revoked_at', 'is', null).execute();
    events({ userId: grant.user_id, grantId: grant.id, grantName: grant.name, method: 'oauth/code_reused', outcome: 'denied' });
    throw bad;
  }
  if (!(await grantUsable(db, grant))) throw new GrantError('invalid_grant', 'the access this code was for has been revoked, or the account may not sign in now');
  const tokens = await issueTokens(db, { grantId: grant.id, resource: row.resource, scope: row.scope, origin: row.hash, refresh: opts.refresh, now });
  events({ userId: grant.user_id, grantId: grant.id, grantName: grant.name, method: 'oauth/token', outcome: 'ok' });
  return tokens;
}

/**
 * Exchanges a refresh token for a new pair. The old one is spent; presenting a spent
 * one again revokes the whole grant (the token was copied: whoever holds it, the app
 * must ask its user again).
 */
export async function refreshTokens(
  db: Db,
  opts: { clientId: string; refreshToken: string; resource?: string; scope?: string; now?: number },
  events: (e: GrantEvent) => void,
): Promise<IssuedTokens> {
  const now = opts.now ?? Date.now();
  const bad = new GrantError('invalid_grant', 'the refresh token is not valid (expired, revoked, or used already): sign in again from the app');
  if (!isWellFormedToken(opts.refreshToken, REFRESH_PREFIX)) throw bad;
  const row = await db.selectFrom('oauth_tokens').selectAll().where('hash', '=', hashToken(opts.refreshToken)).where('kind', '=', 'refresh').executeTakeFirst();
  if (!row) throw bad;
  const grant = await grantRow(db, row.grant_id);
  if (!grant || grant.client_id !== opts.clientId) throw bad;
  const spent = await db.updateTable('oauth_tokens').set({ used_at: now }).where('id', '=', row.id).where('used_at', 'is', null).executeTakeFirst();
  if (Number(spent.numUpdatedRows) === 0) {
    if (grant.revoked_at === null) {
      await revokeGrantTokens(db, grant.id, { grant: true, now });
      events({ userId: grant.user_id, grantId: grant.id, grantName: grant.name, method: 'oauth/refresh_reused', outcome: 'denied' });
    }
    throw new GrantError('invalid_grant', 'this refresh token was used before, so it may have been copied: the app\'s access was revoked, and it must be connected again');
  }
  if (row.revoked_at !== null || row.expires_at <= now) throw bad;
  if (opts.resource !== undefined && opts.resource !== row.resource) throw new GrantError('invalid_target', `this refresh token is for the resource ${row.resource}, not ${opts.resource}`);
  if (opts.scope !== undefined && opts.scope.split(' ').some((s) => s && !row.scope.split(' ').includes(s))) throw new GrantError('invalid_scope', `a refresh may ask for at most the scope granted (${row.scope})`);
  if (!(await grantUsable(db, grant))) throw bad;
  const tokens = await issueTokens(db, { grantId: grant.id, resource: row.resource, scope: row.scope, origin: row.origin, refresh: true, now });
  events({ userId: grant.user_id, grantId: grant.id, grantName: grant.name, method: 'oauth/refresh', outcome: 'ok' });
  return tokens;
}

/**
 * RFC 7009 revocation by a client of its own token: an access token ends; a refresh
 * token ends the grant (the app disconnects). A token that is not the client's, or not
 * known, is ignored, as the RFC asks.
 */
export async function revokeBySecret(db: Db, opts: { clientId: string; token: string; now?: number }, events: (e: GrantEvent) => void): Promise<void> {
  const now = opts.now ?? Date.now();
  const refresh = isWellFormedToken(opts.token, REFRESH_PREFIX);
  if (!refresh && !isWellFormedToken(opts.token, ACCESS_PREFIX)) return;
  const row = await db.selectFrom('oauth_tokens').select(['id', 'grant_id']).where('hash', '=', hashToken(opts.token)).executeTakeFirst();
  if (!row) return;
  const grant = await grantRow(db, row.grant_id);
  if (!grant || grant.client_id !== opts.clientId) return;
  if (refresh) await revokeGrantTokens(db, grant.id, { grant: true, now });
  else await db.updateTable('oauth_tokens').set({ revoked_at: now }).where('id', '=', row.id).execute();
  events({ userId: grant.user_id, grantId: grant.id, grantName: grant.name, method: 'oauth/revoke', outcome: 'ok' });
}

/** An access token and its grant and user, whole: one query, as a personal token's check is. */
const accessByHash = prepared((db, p: { hash: Buffer }) =>
  db
    .selectFrom('oauth_tokens as o')
    .innerJoin('api_tokens as t', 't.id', 'o.grant_id')
    .innerJoin('users as u', 'u.id', 't.user_id')
    .select([...TOKEN_USER_COLUMNS, 'o.hash as access_hash', 'o.kind as access_kind', 'o.expires_at as access_expires_at', 'o.revoked_at as access_revoked_at', 'o.resource as access_resource'])
    .where('o.hash', '=', p.hash),
);

const HOW_TO_CONNECT = 'Connect the app again (it opens the sign-in page of this gateway), or use a personal API token from the tokens page.';

/** Whether a bearer token is an OAuth access token of this gateway by its shape (then verifyAccessToken checks it). */
export const isAccessToken = (presented: string) => presented.startsWith(ACCESS_PREFIX);

/**
 * Checks an OAuth access token for `resource` (this gateway's /mcp): its own state
 * (expiry, revocation, audience), then its grant's and its user's as a personal token's.
 */
export async function verifyAccessToken(db: Db, presented: string, resource: string, now = Date.now()): Promise<VerifyResult> {
  if (!isWellFormedToken(presented, ACCESS_PREFIX)) {
    return { ok: false, reason: 'malformed', message: `The bearer token is not a well-formed access token of this gateway: check that the app sends it whole. ${HOW_TO_CONNECT}` };
  }
  const hash = hashToken(presented);
  const [row] = await accessByHash(db, { hash });
  if (!row || row.access_kind !== 'access' || !crypto.timingSafeEqual(row.access_hash, hash)) {
    return { ok: false, reason: 'unknown', message: `The access token is not known to this gateway. ${HOW_TO_CONNECT}` };
  }
  if (row.access_revoked_at !== null) return { ok: false, reason: 'revoked', message: `The access token was revoked. ${HOW_TO_CONNECT}` };
  if (row.access_expires_at <= now) return { ok: false, reason: 'expired', message: `The access token expired; the app should use its refresh token. ${HOW_TO_CONNECT}` };
  if (row.access_resource !== resource) {
    return { ok: false, reason: 'unknown', message: `The access token is for ${row.access_resource}, not this resource (${resource}). ${HOW_TO_CONNECT}` };
  }
  return admitTokenRow(db, row, now, HOW_TO_CONNECT);
}

/** Deletes codes and tokens that ended more than a day ago. */
export async function purgeOAuth(db: Db, now = Date.now()): Promise<number> {
  const before = now - 86_400_000;
  const codes = await db.deleteFrom('oauth_codes').where('expires_at', '<', before).executeTakeFirst();
  const tokens = await db.deleteFrom('oauth_tokens').where('expires_at', '<', before).executeTakeFirst();
  return Number(codes.numDeletedRows) + Number(tokens.numDeletedRows);
}
