import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type session from 'express-session';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StoreSessions } from '../http/web/auth.js';
import { openStore, type Store } from '../store/store.js';
import { ensureUser } from '../store/users.js';
import { loadSession, saveSession } from './sessions.js';

describe('sessions of sign-ins under way', () => {
  let dir: string;
  let store: Store;
  let alice: number;
  const later = () => Date.now() + 3_600_000;
  const anonymous = () => (store.db.prepare('SELECT COUNT(*) AS n FROM sessions WHERE user_id IS NULL').get() as { n: number }).n;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-sessions-'));
    store = openStore(dir);
    alice = ensureUser(store.db, 'alice').id;
  });
  afterEach(() => {
    store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('keeps at most the bound, dropping the oldest, and never a signed-in session', () => {
    saveSession(store.db, 'alice-browser', '{"passport":{"user":1}}', alice, later(), 5);
    let dropped = 0;
    for (let i = 0; i < 12; i++) dropped += saveSession(store.db, `visit-${i}`, '{"csrf":"x"}', null, later(), 5);
    expect(dropped).toBe(7);
    expect(anonymous()).toBe(5);
    for (let i = 0; i < 7; i++) expect(loadSession(store.db, `visit-${i}`)).toBeUndefined();
    for (let i = 7; i < 12; i++) expect(loadSession(store.db, `visit-${i}`)?.data).toBe('{"csrf":"x"}');
    expect(loadSession(store.db, 'alice-browser')?.userId).toBe(alice);
    // Saving one of them again (a sign-in that goes on) drops nothing.
    expect(saveSession(store.db, 'visit-11', '{"csrf":"y"}', null, later(), 5)).toBe(0);
    expect(anonymous()).toBe(5);
    // A sign-in turns a session into a user's: it no longer counts.
    saveSession(store.db, 'visit-10', '{"passport":{"user":1}}', alice, later(), 5);
    expect(anonymous()).toBe(4);
  });

  it('the web store drops the oldest past its bound and says so', async () => {
    const said: number[] = [];
    const sessions = new StoreSessions(store.db, (n) => said.push(n), 3);
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
