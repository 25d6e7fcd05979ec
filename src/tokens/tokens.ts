/**
 * Personal API tokens: created (shown once), listed, named, given an optional expiry,
 * revoked. `verifyToken` is what every authenticated request calls: it reads the row
 * afresh each time, so a revocation takes effect on the very next request, and it
 * records the last-used time.
 */
import crypto from 'node:crypto';
import type { Statement } from 'better-sqlite3';
import type { Db } from '../store/store.js';
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
  hash: Buffer;
  created_at: number;
  expires_at: number | null;
  last_used_at: number | null;
  revoked_at: number | null;
}

const SELECT = 'SELECT t.*, u.name AS user_name FROM api_tokens t JOIN users u ON u.id = t.user_id';

/** Statements of the per-request path, prepared once per database. */
const prepared = new WeakMap<Db, Map<string, Statement>>();
function stmt(db: Db, sql: string): Statement {
  let m = prepared.get(db);
  if (!m) prepared.set(db, (m = new Map()));
  let s = m.get(sql);
  if (!s) m.set(sql, (s = db.prepare(sql)));
  return s;
}

const VERIFY_SQL = `SELECT t.id, t.user_id, t.name, t.hash, t.expires_at, t.revoked_at, t.created_at, t.last_used_at,
  u.name AS user_name, u.is_admin AS user_is_admin, u.permissions AS user_permissions, u.workspace_id AS user_workspace_id, u.created_at AS user_created_at,
  u.default_model AS user_default_model, u.github_teams AS user_github_teams,
  u.disabled_at AS user_disabled_at, u.last_sign_in_at AS user_last_sign_in_at, u.sign_in_method AS user_sign_in_method,
  u.github_id AS user_github_id, u.suspended_at AS user_suspended_at, u.suspended_reason AS user_suspended_reason
  FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?`;

const toRecord = (r: TokenRow): TokenRecord => ({
  id: r.id,
  userId: r.user_id,
  userName: r.user_name,
  name: r.name,
  createdAt: r.created_at,
  expiresAt: r.expires_at,
  lastUsedAt: r.last_used_at,
  revokedAt: r.revoked_at,
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
export function countActiveTokens(db: Db, userId: number, now = Date.now()): number {
  // A stored expiry that is no number (an old install's) counts as active, as tokenState says.
  return stmt(db, 'SELECT COUNT(*) FROM api_tokens WHERE user_id = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)').pluck().get(userId, now) as number;
}

/**
 * Creates a token and returns it in clear, the only time it exists outside the caller.
 * A name may be reused once the earlier token with it is revoked or expired (an expired
 * one is revoked here so the name is free). Refused (TokenError) when the expiry is not
 * a whole epoch ms within MAX_TOKEN_LIFETIME_MS from now, when the user already holds
 * `maxActive` active tokens (default DEFAULT_MAX_ACTIVE_TOKENS), or when they created
 * `maxPerDay` tokens in the last 24 hours (default MAX_TOKENS_CREATED_PER_DAY).
 */
export function createToken(
  db: Db,
  opts: { userId: number; name: string; expiresAt?: number | null; now?: number; maxActive?: number; maxPerDay?: number },
): { token: string; record: TokenRecord } {
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
  if (!getUser(db, opts.userId)) throw new TokenError(`no user with id ${opts.userId}`);
  const token = generateToken();
  const id = db.transaction(() => {
    db.prepare('UPDATE api_tokens SET revoked_at = ? WHERE user_id = ? AND name = ? AND revoked_at IS NULL AND expires_at IS NOT NULL AND expires_at <= ?').run(
      now,
      opts.userId,
      opts.name,
      now,
    );
    const live = db.prepare('SELECT 1 FROM api_tokens WHERE user_id = ? AND name = ? AND revoked_at IS NULL').get(opts.userId, opts.name);
    if (live) throw new TokenError(`this user already has an active token named "${opts.name}": choose another name or revoke that one first`);
    const active = countActiveTokens(db, opts.userId, now);
    if (active >= maxActive) {
      throw new TokenError(
        `this user already has ${active} active tokens, the most one user may hold (SANDGATE_MAX_TOKENS_PER_USER=${maxActive}): revoke a token that is no longer used, then create this one`,
      );
    }
    const recent = db
      .prepare('SELECT created_at FROM api_tokens WHERE user_id = ? AND created_at > ? ORDER BY created_at DESC LIMIT ?')
      .pluck()
      .all(opts.userId, now - DAY_MS, maxPerDay) as number[];
    if (recent.length >= maxPerDay) {
      throw new TokenError(
        `this user created ${recent.length} tokens in the last 24 hours, the most one user may create in a day (revoked ones count too): use a token already made, or try again after ${fmtDate(recent[recent.length - 1]! + DAY_MS)}`,
      );
    }
    const r = db
      .prepare('INSERT INTO api_tokens (user_id, name, hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?)')
      .run(opts.userId, opts.name, hashToken(token), now, opts.expiresAt ?? null);
    return Number(r.lastInsertRowid);
  })();
  return { token, record: getToken(db, id)! };
}

export function getToken(db: Db, id: number): TokenRecord | undefined {
  const r = db.prepare(`${SELECT} WHERE t.id = ?`).get(id) as TokenRow | undefined;
  return r && toRecord(r);
}

/**
 * Tokens, newest first; all users' unless `userId` is given. Revoked ones only with
 * `includeRevoked`. `activeFirst` puts the active ones (tokenState at `now`) before the
 * rest; `limit` and `offset` take one page of that order.
 */
export function listTokens(
  db: Db,
  opts: { userId?: number; includeRevoked?: boolean; activeFirst?: boolean; limit?: number; offset?: number; now?: number } = {},
): TokenRecord[] {
  const where: string[] = [];
  const args: unknown[] = [];
  if (opts.userId !== undefined) {
    where.push('t.user_id = ?');
    args.push(opts.userId);
  }
  if (!opts.includeRevoked) where.push('t.revoked_at IS NULL');
  let order = 't.created_at DESC, t.id DESC';
  if (opts.activeFirst) {
    order = `(t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > ?)) DESC, ${order}`;
    args.push(opts.now ?? Date.now());
  }
  let sql = `${SELECT}${where.length ? ` WHERE ${where.join(' AND ')}` : ''} ORDER BY ${order}`;
  if (opts.limit !== undefined) {
    sql += ' LIMIT ? OFFSET ?';
    args.push(opts.limit, opts.offset ?? 0);
  }
  return (db.prepare(sql).all(...args) as TokenRow[]).map(toRecord);
}

/** How many tokens listTokens would list with the same `userId` and `includeRevoked`. */
export function countTokens(db: Db, opts: { userId?: number; includeRevoked?: boolean } = {}): number {
  const where: string[] = [];
  const args: unknown[] = [];
  if (opts.userId !== undefined) {
    where.push('user_id = ?');
    args.push(opts.userId);
  }
  if (!opts.includeRevoked) where.push('revoked_at IS NULL');
  return db.prepare(`SELECT COUNT(*) FROM api_tokens${where.length ? ` WHERE ${where.join(' AND ')}` : ''}`).pluck().get(...args) as number;
}

/** Revokes by id. Returns false when there is no such live token. */
export function revokeToken(db: Db, id: number, opts: { userId?: number; now?: number } = {}): boolean {
  const sql = `UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL${opts.userId !== undefined ? ' AND user_id = ?' : ''}`;
  const args: unknown[] = [opts.now ?? Date.now(), id];
  if (opts.userId !== undefined) args.push(opts.userId);
  return db.prepare(sql).run(...args).changes > 0;
}

/**
 * Deletes the rows of tokens revoked, or expired, more than `retentionMs` ago (default
 * TOKEN_RETENTION_MS), `batch` rows per statement, all but the newest row of the table
 * (so that no token id is ever given twice). Returns how many went. The audit log
 * keeps each call's token id and name in its own columns (no foreign key), so its
 * entries stay whole; a token's PII scope, if one is left, goes with the next
 * dropInactiveTokenScopes (a scope whose token row is gone counts as inactive).
 */
export function purgeOldTokens(db: Db, opts: { now?: number; retentionMs?: number; batch?: number } = {}): number {
  const before = (opts.now ?? Date.now()) - (opts.retentionMs ?? TOKEN_RETENTION_MS);
  const batch = opts.batch ?? 500;
  // Two statements, each on its own partial index (api_tokens_revoked, api_tokens_expiry).
  // The newest row always stays: SQLite gives a new row the highest id plus one, so
  // deleting the highest would hand its id, which audit entries and PII scopes name, to
  // the next token.
  const keepNewest = 'AND id < (SELECT MAX(id) FROM api_tokens)';
  const revoked = db.prepare(`DELETE FROM api_tokens WHERE id IN (SELECT id FROM api_tokens WHERE revoked_at IS NOT NULL AND revoked_at < ? ${keepNewest} LIMIT ?)`);
  const expired = db.prepare(
    `DELETE FROM api_tokens WHERE id IN (SELECT id FROM api_tokens WHERE revoked_at IS NULL AND expires_at IS NOT NULL AND expires_at < ? ${keepNewest} LIMIT ?)`,
  );
  let total = 0;
  for (const s of [revoked, expired]) {
    for (;;) {
      const n = s.run(before, batch).changes;
      total += n;
      if (n < batch) break;
    }
  }
  return total;
}

/** Revokes a user's active token by name; returns its id, or undefined when there is none. */
export function revokeTokenByName(db: Db, userId: number, name: string, now = Date.now()): number | undefined {
  return db
    .prepare('UPDATE api_tokens SET revoked_at = ? WHERE user_id = ? AND name = ? AND revoked_at IS NULL RETURNING id')
    .pluck()
    .get(now, userId, name) as number | undefined;
}

/** Finds the record of a token given in clear (e.g. one found leaked), whatever its state. */
export function findTokenBySecret(db: Db, token: string): TokenRecord | undefined {
  if (!isWellFormedToken(token)) return undefined;
  const r = db.prepare(`${SELECT} WHERE t.hash = ?`).get(hashToken(token)) as TokenRow | undefined;
  return r && toRecord(r);
}

const HOW_TO_GET_ONE = 'Ask your sandgate admin for a personal token (`sandgate tokens create --user <you> --name <device>`) and send it as the header `Authorization: Bearer sgp_…`.';

function fmtDate(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');
}

/**
 * Checks a presented token. Reads the row on every call, so revocation and expiry take
 * effect at once; records last use on success (to the second). The lookup is by hash (the table holds
 * nothing else to compare), and the hash comparison is constant-time on top. The user is
 * as stored: whether they are still a member (and an admin) now is the membership
 * check's to say (src/auth/membership.ts, run by src/auth/bearer.ts after this).
 */
export function verifyToken(db: Db, presented: string | undefined, now = Date.now()): VerifyResult {
  if (!presented) return { ok: false, reason: 'missing', message: `This endpoint needs a personal API token. ${HOW_TO_GET_ONE}` };
  if (!isWellFormedToken(presented)) {
    return {
      ok: false,
      reason: 'malformed',
      message: `The bearer token is not a well-formed sandgate token (sgp_ followed by 38 letters and digits, the last 6 a checksum): check that it was copied whole. ${HOW_TO_GET_ONE}`,
    };
  }
  const hash = hashToken(presented);
  const row = stmt(db, VERIFY_SQL).get(hash) as
    | (TokenRow & {
        user_is_admin: number;
        user_permissions: string | null;
        user_workspace_id: string | null;
        user_created_at: number;
        user_default_model: string | null;
        user_github_teams: string | null;
        user_disabled_at: number | null;
        user_last_sign_in_at: number | null;
        user_sign_in_method: 'github' | 'link' | null;
        user_github_id: number | null;
        user_suspended_at: number | null;
        user_suspended_reason: string | null;
      })
    | undefined;
  if (!row || !crypto.timingSafeEqual(row.hash, hash)) {
    return { ok: false, reason: 'unknown', message: `The token is not known to this gateway (it may belong to another installation, or have been deleted). ${HOW_TO_GET_ONE}` };
  }
  const record = toRecord(row);
  if (record.revokedAt !== null) {
    return { ok: false, reason: 'revoked', token: record, message: `The token "${record.name}" was revoked at ${fmtDate(record.revokedAt)}. ${HOW_TO_GET_ONE}` };
  }
  if (record.expiresAt !== null && record.expiresAt <= now) {
    return { ok: false, reason: 'expired', token: record, message: `The token "${record.name}" expired at ${fmtDate(record.expiresAt)}. ${HOW_TO_GET_ONE}` };
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
    stmt(db, 'UPDATE api_tokens SET last_used_at = ? WHERE id = ?').run(now, row.id);
  }
  return { ok: true, principal: { user, tokenId: row.id, tokenName: row.name } };
}
