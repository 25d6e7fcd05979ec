/**
 * Personal API tokens: created (shown once), listed, named, given an optional expiry,
 * revoked. `verifyToken` is what every authenticated request calls: it reads the row
 * afresh each time, so a revocation takes effect on the very next request, and it
 * records the last-used time.
 */
import crypto from 'node:crypto';
import type { Expression, ExpressionBuilder, SqlBool } from 'kysely';
import { serializable, type Db } from '../store/store.js';
import { prepared } from '../store/prepared.js';
import type { Tables } from '../store/tables.js';
import { getUser, type User } from '../accounts/accounts.js';
import { generateToken, hashToken, isWellFormedToken } from './format.js';
import { GatewayError } from '../errors.js';

export interface TokenRecord {
  id: number;
  userId: number;
  userName: string;
  name: string;
  createdAt: number;
  expiresAt: number | null;
  lastUsedAt: number | null;
  revokedAt: number | null;
  /** `personal`, or `app`: a grant to an OAuth client (src/oauth/), revoked the same way. */
  kind: 'personal' | 'app';
}

/** Who a valid token speaks for. */
export interface Principal {
  user: User;
  tokenId: number;
  tokenName: string;
}

/** `suspended`: a GitHub membership check said no; `unverified`: a GitHub install has not bound the account to GitHub yet (src/auth/membership.ts). */
import type { TokenFailure } from '../reasons.js';
export { TOKEN_FAILURES, type TokenFailure } from '../reasons.js';

export type VerifyResult =
  | { ok: true; principal: Principal }
  | { ok: false; reason: TokenFailure; message: string; /** Set when the token is known (expired or revoked). */ token?: TokenRecord };

/** A token request that cannot be done (a bad name or expiry): the message says what to give instead. */
export class TokenError extends GatewayError {
  override name = 'TokenError';
  constructor(message: string) {
    super(message, { reason: 'token_request_invalid', status: 400 });
  }
}

/** How precisely last use is recorded. */
export const LAST_USED_RESOLUTION_MS = 1000;

/** Token names as a person would label a device: short, printable, no surprises. */
export const TOKEN_NAME = /^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$/;

interface TokenRow {
  id: number;
  user_id: number;
  user_name: string;
  name: string;
  created_at: number;
  expires_at: number | null;
  last_used_at: number | null;
  revoked_at: number | null;
  kind: 'personal' | 'app';
}

/** A token's columns and its user's name, the shape of TokenRow. */
const TOKEN_COLUMNS = ['t.id', 't.user_id', 'u.name as user_name', 't.name', 't.created_at', 't.expires_at', 't.last_used_at', 't.revoked_at', 't.kind'] as const;

/** Tokens with their users' names. */
const tokensWithUsers = (db: Db) => db.selectFrom('api_tokens as t').innerJoin('users as u', 'u.id', 't.user_id');

const toRecord = (r: TokenRow): TokenRecord => ({
  id: r.id,
  userId: r.user_id,
  userName: r.user_name,
  name: r.name,
  createdAt: r.created_at,
  expiresAt: r.expires_at,
  lastUsedAt: r.last_used_at,
  revokedAt: r.revoked_at,
  kind: r.kind,
});

export function tokenState(t: TokenRecord, now = Date.now()): 'active' | 'expired' | 'revoked' {
  if (t.revokedAt !== null) return 'revoked';
  if (t.expiresAt !== null && t.expiresAt <= now) return 'expired';
  return 'active';
}

const DURATION = /^(\d+)\s*(h|d|w|y)$/;
const UNIT_MS = { h: 3_600_000, d: 86_400_000, w: 7 * 86_400_000, y: 365 * 86_400_000 } as const;

/**
 * The furthest a token's expiry may lie: 5 years (of 366 days, so that `5y` and a date
 * five calendar years ahead both pass). Beyond it there is "never", which says what it
 * means; an expiry of centuries only looks bounded, and one past what a date can hold
 * cannot even be shown.
 */
export const MAX_TOKEN_LIFETIME_MS = 5 * 366 * 86_400_000;
const TOO_FAR = 'a token may expire at most 5 years ahead; for a token that never expires, choose "never"';

/** Active tokens one user may hold unless a caller says otherwise (SANDGATE_MAX_TOKENS_PER_USER's default). */
export const DEFAULT_MAX_ACTIVE_TOKENS = 20;

/**
 * Tokens one user may create in any 24 hours, revoked ones included. The active cap
 * alone does not bound the table: create and revoke in a loop never meets it. With this
 * and TOKEN_RETENTION_MS, a user's rows stay below 50 × 90 plus their active ones.
 */
export const MAX_TOKENS_CREATED_PER_DAY = 50;
const DAY_MS = 86_400_000;

/** How long a revoked or expired token's row is kept (for the pages and `sandgate tokens list --all`) before purgeOldTokens deletes it. */
export const TOKEN_RETENTION_MS = 90 * DAY_MS;

/**
 * Parses an expiry given on the command line or a form: `30d`, `12h`, `8w`, `1y`,
 * an ISO date, or `never`. Returns an epoch ms at most MAX_TOKEN_LIFETIME_MS ahead, or
 * null for never; throws TokenError for anything else.
 */
export function parseExpiry(input: string, now = Date.now()): number | null {
  const s = input.trim().toLowerCase();
  if (s === 'never' || s === '') return null;
  const m = DURATION.exec(s);
  if (m) {
    const n = Number(m[1]);
    if (n <= 0) throw new TokenError(`expiry "${input}" must be in the future`);
    const ms = n * UNIT_MS[m[2] as keyof typeof UNIT_MS];
    if (!(ms <= MAX_TOKEN_LIFETIME_MS)) throw new TokenError(`expiry "${input}" is too far ahead: ${TOO_FAR}`);
    return now + ms;
  }
  const t = Date.parse(input);
  if (Number.isNaN(t)) throw new TokenError(`expiry "${input}" is not understood: use e.g. 30d, 12h, 8w, 1y, an ISO date (2026-01-31) or "never"`);
  if (t <= now) throw new TokenError(`expiry "${input}" is in the past`);
  if (t - now > MAX_TOKEN_LIFETIME_MS) throw new TokenError(`expiry "${input}" is too far ahead: ${TOO_FAR}`);
  return t;
}

/**
 * A user's active tokens. Reads only their unrevoked rows (the covering index
 * api_tokens_user_active, on user_id, revoked_at, expires_at), however many they ever revoked.
 */
export async function countActiveTokens(db: Db, userId: number, now = Date.now()): Promise<number> {
  // A stored expiry that is no number (an old install's SQLite file) counts as active, as tokenState says.
  const r = await db
    .selectFrom('api_tokens')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .where((eb) => eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', now)]))
    .where('kind', '=', 'personal')
    .executeTakeFirstOrThrow();
  return r.n;
}

/**
 * Creates a token and returns it in clear, the only time it exists outside the caller.
 * A name may be reused once the earlier token with it is revoked or expired (an expired
 * one is revoked here so the name is free). Refused (TokenError) when the expiry is not
 * a whole epoch ms within MAX_TOKEN_LIFETIME_MS from now, when the user already holds
 * `maxActive` active tokens (default DEFAULT_MAX_ACTIVE_TOKENS), or when they created
 * `maxPerDay` tokens in the last 24 hours (default MAX_TOKENS_CREATED_PER_DAY).
 */
export async function createToken(
  db: Db,
  opts: { userId: number; name: string; expiresAt?: number | null; now?: number; maxActive?: number; maxPerDay?: number },
): Promise<{ token: string; record: TokenRecord }> {
  const now = opts.now ?? Date.now();
  const maxActive = opts.maxActive ?? DEFAULT_MAX_ACTIVE_TOKENS;
  const maxPerDay = opts.maxPerDay ?? MAX_TOKENS_CREATED_PER_DAY;
  if (!TOKEN_NAME.test(opts.name)) {
    throw new TokenError(`token name "${opts.name}" is not allowed: use 1-64 letters, digits, spaces, '.', '_' or '-', starting with a letter or digit (e.g. "laptop")`);
  }
  if (opts.expiresAt != null) {
    if (!Number.isSafeInteger(opts.expiresAt)) throw new TokenError(`a token's expiry must be a time in epoch milliseconds, not ${String(opts.expiresAt)}`);
    if (opts.expiresAt <= now) throw new TokenError('a token cannot expire in the past');
    if (opts.expiresAt - now > MAX_TOKEN_LIFETIME_MS) throw new TokenError(`the expiry is too far ahead: ${TOO_FAR}`);
  }
  if (!(await getUser(db, opts.userId))) throw new TokenError(`no user with id ${opts.userId}`);
  const token = generateToken();
  // The counts and the insert they allow in one serializable transaction: two creations at
  // once cannot both pass a limit that has room for one more.
  const record = await serializable(db, async (tx) => {
    await tx
      .updateTable('api_tokens')
      .set({ revoked_at: now })
      .where('user_id', '=', opts.userId)
      .where('name', '=', opts.name)
      .where('revoked_at', 'is', null)
      .where('expires_at', 'is not', null)
      .where('expires_at', '<=', now)
      .execute();
    const live = await tx
      .selectFrom('api_tokens')
      .select('id')
      .where('user_id', '=', opts.userId)
      .where('name', '=', opts.name)
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    if (live) throw new TokenError(`this user already has an active token named "${opts.name}": choose another name or revoke that one first`);
    const active = await countActiveTokens(tx, opts.userId, now);
    if (active >= maxActive) {
      throw new TokenError(
        `this user already has ${active} active tokens, the most one user may hold (SANDGATE_MAX_TOKENS_PER_USER=${maxActive}): revoke a token that is no longer used, then create this one`,
      );
    }
    const recent = await tx
      .selectFrom('api_tokens')
      .select('created_at')
      .where('user_id', '=', opts.userId)
      .where('created_at', '>', now - DAY_MS)
      .where('kind', '=', 'personal')
      .orderBy('created_at', 'desc')
      .limit(maxPerDay)
      .execute();
    if (recent.length >= maxPerDay) {
      throw new TokenError(
        `this user created ${recent.length} tokens in the last 24 hours, the most one user may create in a day (revoked ones count too): use a token already made, or try again after ${fmtDate(recent[recent.length - 1]!.created_at + DAY_MS)}`,
      );
    }
    const { id } = await tx
      .insertInto('api_tokens')
      .values({ user_id: opts.userId, name: opts.name, hash: hashToken(token), created_at: now, expires_at: opts.expiresAt ?? null })
      .returning('id')
      .executeTakeFirstOrThrow();
    return (await getToken(tx, id))!;
  });
  return { token, record };
}

export async function getToken(db: Db, id: number): Promise<TokenRecord | undefined> {
  const r = await tokensWithUsers(db).select(TOKEN_COLUMNS).where('t.id', '=', id).executeTakeFirst();
  return r && toRecord(r);
}

/**
 * Tokens, newest first; all users' unless `userId` is given. Revoked ones only with
 * `includeRevoked`. `activeFirst` puts the active ones (tokenState at `now`) before the
 * rest; `limit` and `offset` take one page of that order.
 */
export async function listTokens(
  db: Db,
  opts: { userId?: number; includeRevoked?: boolean; activeFirst?: boolean; limit?: number; offset?: number; now?: number; kind?: 'personal' | 'app' } = {},
): Promise<TokenRecord[]> {
  let q = tokensWithUsers(db).select(TOKEN_COLUMNS);
  if (opts.userId !== undefined) q = q.where('t.user_id', '=', opts.userId);
  if (opts.kind !== undefined) q = q.where('t.kind', '=', opts.kind);
  if (!opts.includeRevoked) q = q.where('t.revoked_at', 'is', null);
  if (opts.activeFirst) {
    const now = opts.now ?? Date.now();
    q = q.orderBy((eb) =>
      eb
        .case()
        .when(eb.and([eb('t.revoked_at', 'is', null), eb.or([eb('t.expires_at', 'is', null), eb('t.expires_at', '>', now)])]))
        .then(0)
        .else(1)
        .end(),
    );
  }
  q = q.orderBy('t.created_at', 'desc').orderBy('t.id', 'desc');
  if (opts.limit !== undefined) q = q.limit(opts.limit).offset(opts.offset ?? 0);
  return (await q.execute()).map(toRecord);
}

/** How many tokens listTokens would list with the same `userId` and `includeRevoked`. */
export async function countTokens(db: Db, opts: { userId?: number; includeRevoked?: boolean; kind?: 'personal' | 'app' } = {}): Promise<number> {
  let q = db.selectFrom('api_tokens').select((eb) => eb.fn.countAll<number>().as('n'));
  if (opts.userId !== undefined) q = q.where('user_id', '=', opts.userId);
  if (opts.kind !== undefined) q = q.where('kind', '=', opts.kind);
  if (!opts.includeRevoked) q = q.where('revoked_at', 'is', null);
  return (await q.executeTakeFirstOrThrow()).n;
}

/** Revokes by id. Returns false when there is no such live token. */
export async function revokeToken(db: Db, id: number, opts: { userId?: number; now?: number } = {}): Promise<boolean> {
  let q = db
    .updateTable('api_tokens')
    .set({ revoked_at: opts.now ?? Date.now() })
    .where('id', '=', id)
    .where('revoked_at', 'is', null);
  if (opts.userId !== undefined) q = q.where('user_id', '=', opts.userId);
  return Number((await q.executeTakeFirst()).numUpdatedRows) > 0;
}

/**
 * Deletes the rows of tokens revoked, or expired, more than `retentionMs` ago (default
 * TOKEN_RETENTION_MS), `batch` rows per statement, all but the newest row of the table
 * (so that no token id is ever given twice). Returns how many went. The audit log
 * keeps each call's token id and name in its own columns (no foreign key), so its
 * entries stay whole; a token's PII scope, if one is left, goes with the next
 * dropInactiveTokenScopes (a scope whose token row is gone counts as inactive).
 */
export async function purgeOldTokens(db: Db, opts: { now?: number; retentionMs?: number; batch?: number } = {}): Promise<number> {
  const before = (opts.now ?? Date.now()) - (opts.retentionMs ?? TOKEN_RETENTION_MS);
  const batch = opts.batch ?? 500;
  // Two statements, each on its own partial index (api_tokens_revoked, api_tokens_expiry).
  // The newest row always stays: SQLite gives a new row the highest id plus one, so
  // deleting the highest would hand its id, which audit entries and PII scopes name, to
  // the next token. A batch is the ids a limited SELECT finds: Postgres's DELETE has no LIMIT.
  const old: Array<(eb: ExpressionBuilder<Tables, 'api_tokens'>) => Expression<SqlBool>> = [
    (eb) => eb.and([eb('revoked_at', 'is not', null), eb('revoked_at', '<', before)]),
    (eb) => eb.and([eb('revoked_at', 'is', null), eb('expires_at', 'is not', null), eb('expires_at', '<', before)]),
  ];
  let total = 0;
  for (const which of old) {
    for (;;) {
      const r = await db
        .deleteFrom('api_tokens')
        .where('id', 'in', (eb) =>
          eb
            .selectFrom('api_tokens')
            .select('id')
            .where(which)
            .where('id', '<', (eb) => eb.selectFrom('api_tokens').select((eb) => eb.fn.max('id').as('newest')))
            .limit(batch),
        )
        .executeTakeFirst();
      const n = Number(r.numDeletedRows);
      total += n;
      if (n < batch) break;
    }
  }
  return total;
}

/** Revokes a user's active token by name; returns its id, or undefined when there is none. */
export async function revokeTokenByName(db: Db, userId: number, name: string, now = Date.now()): Promise<number | undefined> {
  const r = await db
    .updateTable('api_tokens')
    .set({ revoked_at: now })
    .where('user_id', '=', userId)
    .where('name', '=', name)
    .where('revoked_at', 'is', null)
    .returning('id')
    .executeTakeFirst();
  return r?.id;
}

/** Finds the record of a token given in clear (e.g. one found leaked), whatever its state. */
export async function findTokenBySecret(db: Db, token: string): Promise<TokenRecord | undefined> {
  if (!isWellFormedToken(token)) return undefined;
  const r = await tokensWithUsers(db).select(TOKEN_COLUMNS).where('t.hash', '=', hashToken(token)).executeTakeFirst();
  return r && toRecord(r);
}

const HOW_TO_GET_ONE = 'Ask your sandgate admin for a personal token (`sandgate tokens create --user <you> --name <device>`) and send it as the header `Authorization: Bearer sgp_…`.';

function fmtDate(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');
}

/** A token's columns, its hash and its user's, whole: what checking a token reads (src/oauth/ reads a grant's the same way). */
export const TOKEN_USER_COLUMNS = [
  ...TOKEN_COLUMNS,
  't.hash',
  'u.is_admin as user_is_admin',
  'u.permissions as user_permissions',
  'u.workspace_id as user_workspace_id',
  'u.created_at as user_created_at',
  'u.default_model as user_default_model',
  'u.github_teams as user_github_teams',
  'u.disabled_at as user_disabled_at',
  'u.last_sign_in_at as user_last_sign_in_at',
  'u.sign_in_method as user_sign_in_method',
  'u.github_id as user_github_id',
  'u.suspended_at as user_suspended_at',
  'u.suspended_reason as user_suspended_reason',
] as const;

/** The token with this hash and its user, whole: every request's first query, compiled once. */
const tokenByHash = prepared((db, p: { hash: Buffer }) => tokensWithUsers(db).select(TOKEN_USER_COLUMNS).where('t.hash', '=', p.hash));

/** Bumps a token's last use, never back in time (a request checked earlier may write after a later one). */
const touchToken = prepared((db, p: { id: number; now: number }) =>
  db
    .updateTable('api_tokens')
    .set({ last_used_at: p.now })
    .where('id', '=', p.id)
    .where((eb) => eb.or([eb('last_used_at', 'is', null), eb('last_used_at', '<', p.now)])),
);

/**
 * Checks a presented token. Reads the row on every call, so revocation and expiry take
 * effect at once; records last use on success (to the second). The lookup is by hash (the table holds
 * nothing else to compare), and the hash comparison is constant-time on top. The user is
 * as stored: whether they are still a member (and an admin) now is the membership
 * check's to say (src/auth/membership.ts, run by src/auth/bearer.ts after this).
 */
export async function verifyToken(db: Db, presented: string | undefined, now = Date.now()): Promise<VerifyResult> {
  if (!presented) return { ok: false, reason: 'missing', message: `This endpoint needs a personal API token, or an app connected with OAuth. ${HOW_TO_GET_ONE}` };
  if (!isWellFormedToken(presented)) {
    return {
      ok: false,
      reason: 'malformed',
      message: `The bearer token is not a well-formed sandgate token (sgp_ followed by 38 letters and digits, the last 6 a checksum): check that it was copied whole. ${HOW_TO_GET_ONE}`,
    };
  }
  const hash = hashToken(presented);
  const [row] = await tokenByHash(db, { hash });
  // A grant's row (kind app) has a hash nobody holds; it is never a bearer token itself.
  if (!row || row.kind !== 'personal' || !crypto.timingSafeEqual(row.hash, hash)) {
    return { ok: false, reason: 'unknown', message: `The token is not known to this gateway (it may belong to another installation, or have been deleted). ${HOW_TO_GET_ONE}` };
  }
  return admitTokenRow(db, row, now, HOW_TO_GET_ONE);
}

/** A row of TOKEN_USER_COLUMNS. */
export type TokenUserRow = TokenRow & {
  user_is_admin: number;
  user_permissions: string | null;
  user_workspace_id: string | null;
  user_created_at: number;
  user_default_model: string | null;
  user_github_teams: string | null;
  user_disabled_at: number | null;
  user_last_sign_in_at: number | null;
  user_sign_in_method: User['signInMethod'];
  user_github_id: number | null;
  user_suspended_at: number | null;
  user_suspended_reason: string | null;
};

/**
 * The second half of a token check, once the row is found: the token's own state, then
 * its user's. Shared by personal tokens and OAuth grants (whose access token found the
 * grant's row); `howTo` ends a refusal with what to do.
 */
export async function admitTokenRow(db: Db, row: TokenUserRow, now: number, howTo: string): Promise<VerifyResult> {
  const record = toRecord(row);
  if (record.revokedAt !== null) {
    return { ok: false, reason: 'revoked', token: record, message: `The token "${record.name}" was revoked at ${fmtDate(record.revokedAt)}. ${howTo}` };
  }
  if (record.expiresAt !== null && record.expiresAt <= now) {
    return { ok: false, reason: 'expired', token: record, message: `The token "${record.name}" expired at ${fmtDate(record.expiresAt)}. ${howTo}` };
  }
  if (row.user_disabled_at !== null) {
    return { ok: false, reason: 'disabled', token: record, message: `The account "${row.user_name}" was disabled by an admin of this gateway at ${fmtDate(row.user_disabled_at)}: its tokens do not work until it is enabled again.` };
  }
  if (row.user_suspended_at !== null) {
    return {
      ok: false,
      reason: 'suspended',
      token: record,
      message: `The account "${row.user_name}" lost access to this gateway at ${fmtDate(row.user_suspended_at)}: ${row.user_suspended_reason ?? 'a GitHub membership check said no'}. Its tokens work again once it is allowed and signs in with GitHub.`,
    };
  }
  // The user comes from the same row (the join), so one lookup authenticates.
  const user: User = {
    id: row.user_id,
    name: row.user_name,
    isAdmin: row.user_is_admin === 1,
    permissions: row.user_permissions,
    workspaceId: row.user_workspace_id,
    createdAt: row.user_created_at,
    defaultModel: row.user_default_model,
    githubTeams: row.user_github_teams ? (JSON.parse(row.user_github_teams) as string[]) : [],
    disabledAt: null,
    lastSignInAt: row.user_last_sign_in_at,
    signInMethod: row.user_sign_in_method,
    githubId: row.user_github_id,
    suspendedAt: null,
    suspendedReason: null,
  };
  // Last use is kept to the second: a burst of requests writes it once.
  if (row.last_used_at === null || now - row.last_used_at >= LAST_USED_RESOLUTION_MS) {
    await touchToken(db, { id: row.id, now });
  }
  return { ok: true, principal: { user, tokenId: row.id, tokenName: row.name } };
}
