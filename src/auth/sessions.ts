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
import { sql } from 'kysely';
import type { Db } from '../store/store.js';

const hash = (sid: string) => crypto.createHash('sha256').update(sid).digest('hex');

export interface SessionRow {
  data: string;
  userId: number | null;
  expiresAt: number;
}

/** The session, if it is there and has not expired (an expired one is deleted on the way). */
export async function loadSession(db: Db, sid: string, now = Date.now()): Promise<SessionRow | undefined> {
  const h = hash(sid);
  const r = await db.selectFrom('sessions').select(['data', 'user_id', 'expires_at']).where('sid_hash', '=', h).executeTakeFirst();
  if (!r) return undefined;
  if (r.expires_at <= now) {
    // Only while still expired: a save of the same session meanwhile keeps it.
    await db.deleteFrom('sessions').where('sid_hash', '=', h).where('expires_at', '<=', now).execute();
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
export async function saveSession(
  db: Db,
  sid: string,
  data: string,
  userId: number | null,
  expiresAt: number,
  bound: { max: number; checkEvery: number } = { max: MAX_ANONYMOUS_SESSIONS, checkEvery: ANONYMOUS_CHECK_EVERY },
): Promise<number> {
  await db
    .insertInto('sessions')
    .values({ sid_hash: hash(sid), user_id: userId, data, expires_at: expiresAt, created_at: Date.now() })
    .onConflict((oc) =>
      oc.column('sid_hash').doUpdateSet((eb) => ({ user_id: eb.ref('excluded.user_id'), data: eb.ref('excluded.data'), expires_at: eb.ref('excluded.expires_at') })),
    )
    .execute();
  if (userId !== null) return 0;
  const since = sinceCheck.get(db);
  if (since !== undefined && since + 1 < bound.checkEvery) {
    sinceCheck.set(db, since + 1);
    return 0;
  }
  sinceCheck.set(db, 0);
  return dropOldestAnonymous(db, bound.max);
}

/**
 * Deletes the oldest sessions nobody signed in to beyond the newest `max` (this one among
 * those kept); created_at, then sid_hash, orders those of one millisecond. One statement,
 * counting and deleting from one snapshot: two checks at once (two gateways on one
 * database) drop the same sessions, never twice as many.
 */
async function dropOldestAnonymous(db: Db, max: number): Promise<number> {
  const anonymous = db.selectFrom('sessions').where('user_id', 'is', null);
  const excess = anonymous.select(sql<number>`CASE WHEN COUNT(*) > ${max} THEN COUNT(*) - ${max} ELSE 0 END`.as('n'));
  const r = await db
    .deleteFrom('sessions')
    .where('sid_hash', 'in', anonymous.select('sid_hash').orderBy('created_at').orderBy('sid_hash').limit(excess))
    .executeTakeFirst();
  return Number(r.numDeletedRows);
}

export async function touchSession(db: Db, sid: string, expiresAt: number): Promise<void> {
  await db.updateTable('sessions').set({ expires_at: expiresAt }).where('sid_hash', '=', hash(sid)).execute();
}

export async function deleteSession(db: Db, sid: string): Promise<void> {
  await db.deleteFrom('sessions').where('sid_hash', '=', hash(sid)).execute();
}

/** Signs a user out everywhere; returns how many sessions ended. */
export async function deleteUserSessions(db: Db, userId: number): Promise<number> {
  const r = await db.deleteFrom('sessions').where('user_id', '=', userId).executeTakeFirst();
  return Number(r.numDeletedRows);
}

export async function purgeExpiredSessions(db: Db, now = Date.now()): Promise<number> {
  const r = await db.deleteFrom('sessions').where('expires_at', '<=', now).executeTakeFirst();
  return Number(r.numDeletedRows);
}

/** The key a live connection of this session is grouped under (never the session id itself). */
export function sessionKey(sid: string): string {
  return hash(sid).slice(0, 32);
}
