import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type session from 'express-session';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StoreSessions } from './session-middleware.js';
import { openStore, type Store } from '../store/store.js';
import { MIGRATIONS } from '../migrations.js';
import { ensureUser } from '../accounts/accounts.js';
import { loadSession, saveSession } from './sessions.js';

describe('sessions of sign-ins under way', () => {
  let dir: string;
  let store: Store;
  let alice: number;
  const later = () => Date.now() + 3_600_000;
  const every1 = { max: 5, checkEvery: 1 };
  const anonymous = () => (store.db.prepare('SELECT COUNT(*) AS n FROM sessions WHERE user_id IS NULL').get() as { n: number }).n;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-sessions-'));
    store = openStore(dir, MIGRATIONS);
    alice = ensureUser(store.db, 'alice').id;
  });
  afterEach(() => {
    store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('keeps at most the bound, dropping the oldest, and never a signed-in session', () => {
    saveSession(store.db, 'alice-browser', '{"passport":{"user":1}}', alice, later(), every1);
    let dropped = 0;
    for (let i = 0; i < 12; i++) dropped += saveSession(store.db, `visit-${i}`, '{"csrf":"x"}', null, later(), every1);
    expect(dropped).toBe(7);
    expect(anonymous()).toBe(5);
    for (let i = 0; i < 7; i++) expect(loadSession(store.db, `visit-${i}`)).toBeUndefined();
    for (let i = 7; i < 12; i++) expect(loadSession(store.db, `visit-${i}`)?.data).toBe('{"csrf":"x"}');
    expect(loadSession(store.db, 'alice-browser')?.userId).toBe(alice);
    // Saving one of them again (a sign-in that goes on) drops nothing.
    expect(saveSession(store.db, 'visit-11', '{"csrf":"y"}', null, later(), every1)).toBe(0);
    expect(anonymous()).toBe(5);
    // A sign-in turns a session into a user's: it no longer counts.
    saveSession(store.db, 'visit-10', '{"passport":{"user":1}}', alice, later(), every1);
    expect(anonymous()).toBe(4);
  });

  it('looks at the count once every so many saves, so a flood pays little and overshoots little', () => {
    const bound = { max: 10, checkEvery: 4 };
    let dropped = 0;
    for (let i = 0; i < 40; i++) {
      dropped += saveSession(store.db, `visit-${i}`, '{}', null, later(), bound);
      expect(anonymous()).toBeLessThanOrEqual(bound.max + bound.checkEvery - 1);
    }
    // The first save looks, then every fourth: the ones at i = 0, 4, ..., 36.
    expect(dropped).toBe(40 - 3 - 10);
    expect(anonymous()).toBe(13);
    expect(loadSession(store.db, 'visit-39')).toBeDefined();
    expect(loadSession(store.db, 'visit-26')).toBeUndefined();
  });

  it('counts them from the index alone', () => {
    const plan = store.db.prepare('EXPLAIN QUERY PLAN SELECT COUNT(*) FROM sessions INDEXED BY sessions_anonymous WHERE user_id IS NULL').all() as { detail: string }[];
    expect(plan.map((p) => p.detail).join('; ')).toMatch(/COVERING INDEX sessions_anonymous/);
  });

  it('the web store drops the oldest past its bound and says so', async () => {
    const said: number[] = [];
    const sessions = new StoreSessions(store.db, (n) => said.push(n), { max: 3, checkEvery: 1 });
    const set = (sid: string, data: session.SessionData) => new Promise<void>((resolve, reject) => sessions.set(sid, data, (e) => (e ? reject(e as Error) : resolve())));
    const cookie = { originalMaxAge: 86_400_000, expires: new Date(Date.now() + 86_400_000) } as session.Cookie;
    await set('signed-in', { cookie, passport: { user: alice } } as session.SessionData);
    for (let i = 0; i < 5; i++) await set(`visit-${i}`, { cookie } as session.SessionData);
    expect(said).toEqual([1, 1]);
    expect(anonymous()).toBe(3);
    expect(loadSession(store.db, 'visit-0')).toBeUndefined();
    expect(loadSession(store.db, 'signed-in')?.userId).toBe(alice);
  });
});
