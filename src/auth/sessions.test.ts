import fs from 'node:fs';
import type session from 'express-session';
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { StoreSessions } from './session-middleware.js';
import type { Store } from '../store/store.js';
import { openTestStore, storePerTest, type TestStore } from '../../test/support/store.js';
import { ensureUser } from '../accounts/accounts.js';
import { deleteUserSessions, loadSession, purgeExpiredSessions, saveSession, touchSession } from './sessions.js';

describe('sessions of sign-ins under way', () => {
  let store: Store & { dataDir: string };
  let alice: number;
  const later = () => Date.now() + 3_600_000;
  const every1 = { max: 5, checkEvery: 1 };
  const anonymous = async () => (await store.db.selectFrom('sessions').select((eb) => eb.fn.countAll<number>().as('n')).where('user_id', 'is', null).executeTakeFirstOrThrow()).n;

  beforeEach(async () => {
    store = await openTestStore();
    alice = (await ensureUser(store.db, 'alice')).id;
    // A clock that moves only when told: each save below is a millisecond after the one before, so "oldest" is their order.
    vi.useFakeTimers({ toFake: ['Date'] });
  });
  afterEach(async () => {
    vi.useRealTimers();
    await store.close();
    fs.rmSync(store.dataDir, { recursive: true, force: true });
  });
  const save = (sid: string, data: string, userId: number | null, bound: { max: number; checkEvery: number }) => {
    vi.setSystemTime(Date.now() + 1);
    return saveSession(store.db, sid, data, userId, later(), bound);
  };

  it('keeps at most the bound, dropping the oldest, and never a signed-in session', async () => {
    await save('alice-browser', '{"passport":{"user":1}}', alice, every1);
    let dropped = 0;
    for (let i = 0; i < 12; i++) dropped += await save(`visit-${i}`, '{"csrf":"x"}', null, every1);
    expect(dropped).toBe(7);
    expect(await anonymous()).toBe(5);
    for (let i = 0; i < 7; i++) expect(await loadSession(store.db, `visit-${i}`)).toBeUndefined();
    for (let i = 7; i < 12; i++) expect((await loadSession(store.db, `visit-${i}`))?.data).toBe('{"csrf":"x"}');
    expect((await loadSession(store.db, 'alice-browser'))?.userId).toBe(alice);
    // Saving one of them again (a sign-in that goes on) drops nothing.
    expect(await save('visit-11', '{"csrf":"y"}', null, every1)).toBe(0);
    expect(await anonymous()).toBe(5);
    // A sign-in turns a session into a user's: it no longer counts.
    await save('visit-10', '{"passport":{"user":1}}', alice, every1);
    expect(await anonymous()).toBe(4);
  });

  it('looks at the count once every so many saves, so a flood pays little and overshoots little', async () => {
    const bound = { max: 10, checkEvery: 4 };
    let dropped = 0;
    for (let i = 0; i < 40; i++) {
      dropped += await save(`visit-${i}`, '{}', null, bound);
      expect(await anonymous()).toBeLessThanOrEqual(bound.max + bound.checkEvery - 1);
    }
    // The first save looks, then every fourth: the ones at i = 0, 4, ..., 36.
    expect(dropped).toBe(40 - 3 - 10);
    expect(await anonymous()).toBe(13);
    expect(await loadSession(store.db, 'visit-39')).toBeDefined();
    expect(await loadSession(store.db, 'visit-26')).toBeUndefined();
  });

  it('orders those of one millisecond by their hashed id, the same on every database', async () => {
    // Sessions saved in one millisecond: which of them go is decided by sid_hash, not by the order they came in.
    const now = Date.now();
    const rows = Array.from({ length: 6 }, (_, i) => ({ sid_hash: `h${5 - i}`, user_id: null, data: '{}', expires_at: later(), created_at: now - 1000 }));
    await store.db.insertInto('sessions').values(rows).execute();
    // The bound counts the session this save makes (newest) too: 7 sessions, 3 kept.
    expect(await saveSession(store.db, 'newest', '{}', null, later(), { max: 3, checkEvery: 1 })).toBe(4);
    const left = await store.db.selectFrom('sessions').select('sid_hash').where('user_id', 'is', null).orderBy('sid_hash').execute();
    expect(left.map((r) => r.sid_hash).filter((h) => h.startsWith('h'))).toEqual(['h4', 'h5']);
  });

  it('drops each session once when two gateways look at the count at once', async () => {
    for (let i = 0; i < 12; i++) await saveSession(store.db, `visit-${i}`, '{}', null, later(), { max: 1000, checkEvery: 1000 });
    const bound = { max: 5, checkEvery: 1 };
    const dropped = await Promise.all([saveSession(store.db, 'visit-a', '{}', null, later(), bound), saveSession(store.db, 'visit-b', '{}', null, later(), bound)]);
    // 14 sessions, 5 kept: 9 dropped between the two, never more.
    expect(dropped[0]! + dropped[1]!).toBe(9);
    expect(await anonymous()).toBe(5);
  });

  it('counts them from the index of sessions of sign-ins under way (SQLite says how it reads them)', async () => {
    if (store.dialect !== 'sqlite') return;
    const plan = await sql<{ detail: string }>`EXPLAIN QUERY PLAN SELECT COUNT(*) FROM sessions WHERE user_id IS NULL`.execute(store.db);
    expect(plan.rows.map((p) => p.detail).join('; ')).toMatch(/COVERING INDEX sessions_(anonymous|user)/);
  });

  it('the web store drops the oldest past its bound and says so', async () => {
    const said: number[] = [];
    const sessions = new StoreSessions(store.db, (n) => said.push(n), { max: 3, checkEvery: 1 });
    const set = (sid: string, data: session.SessionData) => new Promise<void>((resolve, reject) => sessions.set(sid, data, (e) => (e ? reject(e as Error) : resolve())));
    const cookie = { originalMaxAge: 86_400_000, expires: new Date(Date.now() + 86_400_000) } as session.Cookie;
    await set('signed-in', { cookie, passport: { user: alice } } as session.SessionData);
    for (let i = 0; i < 5; i++) await set(`visit-${i}`, { cookie } as session.SessionData);
    expect(said).toEqual([1, 1]);
    expect(await anonymous()).toBe(3);
    expect(await loadSession(store.db, 'visit-0')).toBeUndefined();
    expect((await loadSession(store.db, 'signed-in'))?.userId).toBe(alice);
  });
});

describe('sessions in the store', () => {
  let store: TestStore;
  let alice: number;
  const later = () => Date.now() + 3_600_000;
  storePerTest((s) => (store = s));
  beforeEach(async () => {
    alice = (await ensureUser(store.db, 'alice')).id;
  });

  it('an expired session loads as none and is gone; touching moves the expiry; purging takes the expired only', async () => {
    await saveSession(store.db, 'old', '{}', alice, Date.now() - 1);
    await saveSession(store.db, 'fresh', '{}', alice, later());
    expect(await loadSession(store.db, 'old')).toBeUndefined();
    expect(await store.db.selectFrom('sessions').select('sid_hash').execute()).toHaveLength(1);
    const until = later() + 60_000;
    await touchSession(store.db, 'fresh', until);
    expect((await loadSession(store.db, 'fresh'))?.expiresAt).toBe(until);
    await saveSession(store.db, 'stale', '{}', null, Date.now() - 1);
    expect(await purgeExpiredSessions(store.db)).toBe(1);
    expect(await deleteUserSessions(store.db, alice)).toBe(1);
    expect(await loadSession(store.db, 'fresh')).toBeUndefined();
  });

  it('the web store hands each outcome to express-session’s callback, a failure as its error', async () => {
    const sessions = new StoreSessions(store.db);
    const call = <T>(f: (cb: (err: unknown, v?: T) => void) => void) =>
      new Promise<{ err: unknown; v?: T }>((resolve) => f((err, v) => resolve({ err, v })));
    const cookie = { originalMaxAge: 86_400_000, expires: new Date(Date.now() + 86_400_000) } as session.Cookie;
    const data = { cookie, passport: { user: alice } } as session.SessionData;
    expect(await call((cb) => sessions.set('s1', data, cb))).toEqual({ err: undefined, v: undefined });
    const got = await call<session.SessionData | null>((cb) => sessions.get('s1', cb));
    expect(got.err).toBeNull();
    expect(got.v?.passport).toEqual({ user: alice });
    expect((await call((cb) => sessions.touch('s1', data, cb))).err).toBeUndefined();
    expect((await call((cb) => sessions.destroy('s1', cb))).err).toBeUndefined();
    expect(await call((cb) => sessions.get('s1', cb))).toEqual({ err: null, v: null });
    // A session of a user who is not there: the write fails, and says so through the callback.
    const orphan = { cookie, passport: { user: 999_999 } } as session.SessionData;
    expect((await call((cb) => sessions.set('s2', orphan, cb))).err).toBeInstanceOf(Error);
    // A closed store: every call fails through its callback, none throws.
    await store.close();
    expect((await call((cb) => sessions.get('s1', cb))).err).toBeInstanceOf(Error);
    store = await openTestStore(store.dataDir);
  });
});
