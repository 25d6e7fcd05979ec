/**
 * Browser sessions in the store. The cookie carries a random session id; the table keys
 * sessions by its SHA-256, so the database alone signs nobody in. A session belongs to a
 * user once they signed in (`user_id`), which is what signing out everywhere and the
 * admin's views use. Every statement on the table is here.
 *
 * Anyone can start a sign-in (the GitHub sign-in keeps its state in a session, a
 * sign-in link's page its form's token), so sessions nobody has signed in to are
 * bounded: past MAX_ANONYMOUS_SESSIONS (about 40 MB) the oldest are dropped, looked at
 * every ANONYMOUS_CHECK_EVERY of them. A flood of them can then at worst make a sign-in
 * under way start over (at 2,000 a second, one that takes longer than 50 s); it never
 * fills the disk or touches the sessions of signed-in users.
 */
import crypto from 'node:crypto';
import { statement, type Db } from '../store/store.js';

const hash = (sid: string) => crypto.createHash('sha256').update(sid).digest('hex');

export interface SessionRow {
  data: string;
  userId: number | null;
  expiresAt: number;
}

export function loadSession(db: Db, sid: string, now = Date.now()): SessionRow | undefined {
  const r = statement(db, 'SELECT data, user_id, expires_at FROM sessions WHERE sid_hash = ?').get(hash(sid)) as { data: string; user_id: number | null; expires_at: number } | undefined;
  if (!r) return undefined;
  if (r.expires_at <= now) {
    deleteSession(db, sid);
    return undefined;
  }
  return { data: r.data, userId: r.user_id, expiresAt: r.expires_at };
}

export const MAX_ANONYMOUS_SESSIONS = 100_000;
export const ANONYMOUS_CHECK_EVERY = 100;
/** Anonymous saves since the count was last looked at, per store (the first save looks). */
const sinceCheck = new WeakMap<Db, number>();

/**
 * Stores a session. Returns how many sessions of sign-ins under way were dropped to stay
 * within `bound.max` (0 almost always).
 */
export function saveSession(
  db: Db,
  sid: string,
  data: string,
  userId: number | null,
  expiresAt: number,
  bound: { max: number; checkEvery: number } = { max: MAX_ANONYMOUS_SESSIONS, checkEvery: ANONYMOUS_CHECK_EVERY },
): number {
  statement(
    db,
    `INSERT INTO sessions (sid_hash, user_id, data, expires_at, created_at) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT(sid_hash) DO UPDATE SET user_id = excluded.user_id, data = excluded.data, expires_at = excluded.expires_at`,
  ).run(hash(sid), userId, data, expiresAt, Date.now());
  if (userId !== null) return 0;
  const since = sinceCheck.get(db);
  if (since !== undefined && since + 1 < bound.checkEvery) {
    sinceCheck.set(db, since + 1);
    return 0;
  }
  sinceCheck.set(db, 0);
  // INDEXED BY: SQLite refuses the statement rather than read every session.
  const { n } = statement(db, 'SELECT COUNT(*) AS n FROM sessions INDEXED BY sessions_anonymous WHERE user_id IS NULL').get() as { n: number };
  if (n <= bound.max) return 0;
  // The newest (this one among them) stay; rowid breaks ties within a millisecond.
  return statement(
    db,
    `DELETE FROM sessions WHERE rowid IN (
       SELECT rowid FROM sessions INDEXED BY sessions_anonymous WHERE user_id IS NULL ORDER BY created_at, rowid LIMIT ?)`,
  ).run(n - bound.max).changes;
}

export function touchSession(db: Db, sid: string, expiresAt: number): void {
  statement(db, 'UPDATE sessions SET expires_at = ? WHERE sid_hash = ?').run(expiresAt, hash(sid));
}

export function deleteSession(db: Db, sid: string): void {
  statement(db, 'DELETE FROM sessions WHERE sid_hash = ?').run(hash(sid));
}

/** Signs a user out everywhere; returns how many sessions ended. */
export function deleteUserSessions(db: Db, userId: number): number {
  return statement(db, 'DELETE FROM sessions WHERE user_id = ?').run(userId).changes;
}

export function purgeExpiredSessions(db: Db, now = Date.now()): number {
  return statement(db, 'DELETE FROM sessions WHERE expires_at <= ?').run(now).changes;
}

/** The key a live connection of this session is grouped under (never the session id itself). */
export function sessionKey(sid: string): string {
  return hash(sid).slice(0, 32);
}
