import { beforeEach, describe, expect, it } from 'vitest';
import { storePerTest, type TestStore } from '../../test/support/store.js';
import { ensureUser } from '../accounts/accounts.js';
import { consumeLoginLink, createLoginLink, LINK_TTL_MS, loginLinkUsable } from './login-links.js';

describe('one-time sign-in links', () => {
  let store: TestStore;
  let alice: number;
  storePerTest((s) => (store = s));
  beforeEach(async () => {
    alice = (await ensureUser(store.db, 'alice')).id;
  });

  it('signs its user in once; a second use, a late one and a made-up one are refused with why', async () => {
    const { secret, expiresAt } = await createLoginLink(store.db, alice);
    expect(expiresAt).toBeGreaterThan(Date.now());
    expect(await loginLinkUsable(store.db, secret)).toBe(true);
    expect(await consumeLoginLink(store.db, secret)).toEqual({ ok: true, userId: alice });
    expect(await loginLinkUsable(store.db, secret)).toBe(false);
    expect(await consumeLoginLink(store.db, secret)).toEqual({ ok: false, reason: 'used' });

    const late = await createLoginLink(store.db, alice);
    const after = late.expiresAt + 1;
    expect(await loginLinkUsable(store.db, late.secret, after)).toBe(false);
    expect(await consumeLoginLink(store.db, late.secret, after)).toEqual({ ok: false, reason: 'expired' });
    // Refused late, it is still unused: in time, it works.
    expect(await consumeLoginLink(store.db, late.secret)).toEqual({ ok: true, userId: alice });

    expect(await consumeLoginLink(store.db, 'made-up')).toEqual({ ok: false, reason: 'unknown' });
    expect(await consumeLoginLink(store.db, 'x'.repeat(101))).toEqual({ ok: false, reason: 'unknown' });
    expect(await loginLinkUsable(store.db, 'x'.repeat(101))).toBe(false);
  });

  it('of two uses at once, exactly one signs in', async () => {
    for (let round = 0; round < 20; round++) {
      const { secret } = await createLoginLink(store.db, alice);
      const outcomes = await Promise.all([consumeLoginLink(store.db, secret), consumeLoginLink(store.db, secret), consumeLoginLink(store.db, secret)]);
      expect(outcomes.filter((o) => o.ok)).toEqual([{ ok: true, userId: alice }]);
      expect(outcomes.filter((o) => !o.ok)).toEqual([
        { ok: false, reason: 'used' },
        { ok: false, reason: 'used' },
      ]);
    }
  });

  it('a new link clears out links used, and links expired for a while', async () => {
    const now = Date.now();
    const used = await createLoginLink(store.db, alice, now - 2 * LINK_TTL_MS - 1);
    const stale = await createLoginLink(store.db, alice, now - 2 * LINK_TTL_MS - 1);
    const expiredJustNow = await createLoginLink(store.db, alice, now - LINK_TTL_MS - 1);
    expect(await consumeLoginLink(store.db, used.secret, now - 2 * LINK_TTL_MS)).toMatchObject({ ok: true });
    await createLoginLink(store.db, alice, now);
    expect(await consumeLoginLink(store.db, used.secret, now)).toEqual({ ok: false, reason: 'unknown' });
    expect(await consumeLoginLink(store.db, stale.secret, now)).toEqual({ ok: false, reason: 'unknown' });
    // Expired less than a link's lifetime ago: kept a while, so a late click is told it expired.
    expect(await consumeLoginLink(store.db, expiredJustNow.secret, now)).toEqual({ ok: false, reason: 'expired' });
  });

  it('go with their user', async () => {
    const bob = (await ensureUser(store.db, 'bob')).id;
    const { secret } = await createLoginLink(store.db, bob);
    await store.db.deleteFrom('users').where('id', '=', bob).execute();
    expect(await consumeLoginLink(store.db, secret)).toEqual({ ok: false, reason: 'unknown' });
  });
});
