/**
 * One-time sign-in links, for an install without a GitHub app (like Jupyter's token
 * URL): printed at start for the local user, or by `sandgate users login-link NAME`.
 * Each is random, stored as a hash, valid for LINK_TTL_MS and good for one sign-in.
 */
import crypto from 'node:crypto';
import { statement, type Db } from '../store/store.js';

export const LINK_TTL_MS = 15 * 60 * 1000;
const hash = (t: string) => crypto.createHash('sha256').update(t).digest('hex');

/** A new link's secret for `userId` (goes in /login/link/<secret>). */
export function createLoginLink(db: Db, userId: number, now = Date.now()): { secret: string; expiresAt: number } {
  const secret = crypto.randomBytes(24).toString('base64url');
  const expiresAt = now + LINK_TTL_MS;
  statement(db, 'INSERT INTO login_links (token_hash, user_id, expires_at) VALUES (?, ?, ?)').run(hash(secret), userId, expiresAt);
  statement(db, 'DELETE FROM login_links WHERE expires_at <= ? OR used_at IS NOT NULL').run(now - LINK_TTL_MS);
  return { secret, expiresAt };
}

/** Whether a link would sign in now (unused, unexpired), without using it. */
export function loginLinkUsable(db: Db, secret: string, now = Date.now()): boolean {
  if (typeof secret !== 'string' || secret.length > 100) return false;
  return statement(db, 'SELECT 1 FROM login_links WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?').get(hash(secret), now) !== undefined;
}

export type LinkOutcome = { ok: true; userId: number } | { ok: false; reason: 'unknown' | 'used' | 'expired' };

/** Uses a link: the user it signs in, once; a second use, or a late one, is refused. */
export function consumeLoginLink(db: Db, secret: string, now = Date.now()): LinkOutcome {
  if (typeof secret !== 'string' || secret.length > 100) return { ok: false, reason: 'unknown' };
  const h = hash(secret);
  // The update is the check: of two uses at once, one changes the row.
  const used = statement(db, 'UPDATE login_links SET used_at = ? WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?').run(now, h, now);
  const row = statement(db, 'SELECT user_id, expires_at, used_at FROM login_links WHERE token_hash = ?').get(h) as { user_id: number; expires_at: number; used_at: number | null } | undefined;
  if (used.changes === 1 && row) return { ok: true, userId: row.user_id };
  if (!row) return { ok: false, reason: 'unknown' };
  return { ok: false, reason: row.used_at !== null ? 'used' : 'expired' };
}
