import { describe, expect, it } from 'vitest';
import { uidBlockOf, upstreamIdentity, UPSTREAM_UID_BASE } from './identities.js';
import { storePerTest, type TestStore } from '../../test/support/store.js';

describe('upstream identities', () => {
  let store: TestStore;
  storePerTest((s) => (store = s));

  it("gives each connection a uid of its own in the gateway's block, and the same one every time", async () => {
    const block = uidBlockOf('abc123');
    expect(block).toBe(UPSTREAM_UID_BASE + 0xabc * 65_536);
    const shared = await upstreamIdentity(store.db, 'memory/shared', block);
    expect(shared).toEqual({ uid: block + 1, gid: block + 1 });
    expect(await upstreamIdentity(store.db, 'memory/shared', block)).toEqual(shared);
    // Asking again used no number up: the next connection gets the next uid.
    expect((await upstreamIdentity(store.db, 'memory/user-2', block)).uid).toBe(block + 2);
  });

  it('never hands one uid to two connections, nor two uids to one, when asked at once', async () => {
    const block = uidBlockOf('000');
    const names = Array.from({ length: 8 }, (_, i) => `srv/user-${i}`);
    const asked = await Promise.all([...names, ...names, ...names].map((n) => upstreamIdentity(store.db, n, block).then((id) => [n, id.uid] as const)));
    const byName = new Map<string, Set<number>>();
    for (const [n, uid] of asked) byName.set(n, (byName.get(n) ?? new Set()).add(uid));
    for (const uids of byName.values()) expect(uids.size).toBe(1);
    const uids = [...byName.values()].map((s) => [...s][0]!);
    expect(new Set(uids).size).toBe(names.length);
    expect(await store.db.selectFrom('upstream_identities').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).toEqual({ n: names.length });
  });
});
