/**
 * Browser sessions in the store. The cookie carries a random session id; the table keys
 * sessions by its SHA-256, so the database alone signs nobody in. A session belongs to a
 * user once they signed in (`user_id`), which is what signing out everywhere and the
 * admin's views use. Every statement on the table is here.
 *
 * Anyone can make a session without signing in (the sign-in page keeps its form's token
 * in one, the GitHub sign-in its state), so those are bounded: past
 * MAX_ANONYMOUS_SESSIONS the oldest are dropped. A flood of visits can then at worst
 * make a sign-in under way start over; it never fills the disk or touches the sessions
 * of signed-in users.
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

export const MAX_ANONYMOUS_SESSIONS = 10_000;

/**
 * Stores a session. Returns how many sessions of sign-ins under way were dropped to stay
 * within `maxAnonymous` (0 almost always).
 */
export function saveSession(db: Db, sid: string, data: string, userId: number | null, expiresAt: number, maxAnonymous = MAX_ANONYMOUS_SESSIONS): number {
  statement(
    db,
    `INSERT INTO sessions (sid_hash, user_id, data, expires_at, created_at) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT(sid_hash) DO UPDATE SET user_id = excluded.user_id, data = excluded.data, expires_at = excluded.expires_at`,
  ).run(hash(sid), userId, data, expiresAt, Date.now());
  if (userId !== null) return 0;
  // INDEXED BY: SQLite refuses the statement rather than read every session.
  const { n } = statement(db, 'SELECT COUNT(*) AS n FROM sessions INDEXED BY sessions_anonymous WHERE user_id IS NULL').get() as { n: number };
  if (n <= maxAnonymous) return 0;
  // The newest (this one among them) stay; rowid breaks ties within a millisecond.
  return statement(
    db,
    `DELETE FROM sessions WHERE rowid IN (
       SELECT rowid FROM sessions INDEXED BY sessions_anonymous WHERE user_id IS NULL ORDER BY created_at, rowid LIMIT ?)`,
  ).run(n - maxAnonymous).changes;
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
