/**
 * One-time sign-in links, for an install without a GitHub app (like Jupyter's token
 * URL): printed at start for the local user, or by `sandgate users login-link NAME`.
 * Each is random, stored as a hash, valid for LINK_TTL_MS and good for one sign-in.
 */
import crypto from 'node:crypto';
import type { Db } from '../store/store.js';

export const LINK_TTL_MS = 15 * 60 * 1000;
const hash = (t: string) => crypto.createHash('sha256').update(t).digest('hex');

/** A new link's secret for `userId` (goes in /login/link/<secret>). */
export async function createLoginLink(db: Db, userId: number, now = Date.now()): Promise<{ secret: string; expiresAt: number }> {
  const secret = crypto.randomBytes(24).toString('base64url');
  const expiresAt = now + LINK_TTL_MS;
  await db.insertInto('login_links').values({ token_hash: hash(secret), user_id: userId, expires_at: expiresAt }).execute();
  await db
    .deleteFrom('login_links')
    .where((eb) => eb.or([eb('expires_at', '<=', now - LINK_TTL_MS), eb('used_at', 'is not', null)]))
    .execute();
  return { secret, expiresAt };
}

/** Whether a link would sign in now (unused, unexpired), without using it. */
export async function loginLinkUsable(db: Db, secret: string, now = Date.now()): Promise<boolean> {
  if (typeof secret !== 'string' || secret.length > 100) return false;
  const r = await db
    .selectFrom('login_links')
    .select('token_hash')
    .where('token_hash', '=', hash(secret))
    .where('used_at', 'is', null)
    .where('expires_at', '>', now)
    .executeTakeFirst();
  return r !== undefined;
}

export type LinkOutcome = { ok: true; userId: number } | { ok: false; reason: 'unknown' | 'used' | 'expired' };

/** Uses a link: the user it signs in, once; a second use, or a late one, is refused. */
export async function consumeLoginLink(db: Db, secret: string, now = Date.now()): Promise<LinkOutcome> {
  if (typeof secret !== 'string' || secret.length > 100) return { ok: false, reason: 'unknown' };
  const h = hash(secret);
  // The update is the check: of two uses at once, one changes the row (on Postgres the
  // second waits for the first's row lock, then finds used_at set and changes nothing).
  const used = await db
    .updateTable('login_links')
    .set({ used_at: now })
    .where('token_hash', '=', h)
    .where('used_at', 'is', null)
    .where('expires_at', '>', now)
    .returning('user_id')
    .executeTakeFirst();
  if (used) return { ok: true, userId: used.user_id };
  // Refused: only why is left to say.
  const row = await db.selectFrom('login_links').select('used_at').where('token_hash', '=', h).executeTakeFirst();
  if (!row) return { ok: false, reason: 'unknown' };
  return { ok: false, reason: row.used_at !== null ? 'used' : 'expired' };
}
