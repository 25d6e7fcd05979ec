import { describe, expect, it } from 'vitest';
import { claimWorkspace, deleteUser, ensureUser } from '../accounts/accounts.js';
import { copiesOf, deletedAmong, forgetCopy, markWorkspaceDeleted, noteCopies } from './deletions.js';
import { storePerTest, type TestStore } from '../../test/support/store.js';

describe('deleted users’ workspaces, for every store to remove', () => {
  let store: TestStore;
  storePerTest((s) => (store = s));

  it('names a deleted user’s workspace once the account is gone, never one a user still has, and never one it was not told of', async () => {
    const ann = await ensureUser(store.db, 'ann');
    const bob = await ensureUser(store.db, 'bob');
    await claimWorkspace(store.db, ann.id, 'ws-ann-000001');
    await claimWorkspace(store.db, bob.id, 'ws-bob-000001');
    await markWorkspaceDeleted(store.db, 'ws-ann-000001');
    // Listed, but the account is still there (a delete that failed halfway): nobody removes it.
    expect(await deletedAmong(store.db, ['ws-ann-000001', 'ws-bob-000001', 'ws-pool-00001'])).toEqual([]);
    await deleteUser(store.db, ann.id);
    expect(await deletedAmong(store.db, ['ws-ann-000001', 'ws-bob-000001', 'ws-pool-00001'])).toEqual(['ws-ann-000001']);
    // Listing it again changes nothing; a store without it is told nothing.
    await markWorkspaceDeleted(store.db, 'ws-ann-000001');
    expect(await deletedAmong(store.db, ['ws-bob-000001'])).toEqual([]);
    expect(await deletedAmong(store.db, [])).toEqual([]);
  });

  it('looks through a store of many workspaces in batches', async () => {
    const ids = Array.from({ length: 1200 }, (_, i) => `ws-${String(i).padStart(8, '0')}`);
    for (const id of ids.filter((_, i) => i % 100 === 7)) await markWorkspaceDeleted(store.db, id);
    expect((await deletedAmong(store.db, ids)).sort()).toEqual(ids.filter((_, i) => i % 100 === 7));
  });

  it('knows which stores hold a copy of a workspace, noted any number of times, until each forgets its own', async () => {
    await noteCopies(store.db, ['ws-ann-000001', 'ws-bob-000001'], 'store-a');
    await noteCopies(store.db, ['ws-ann-000001'], 'store-b');
    await noteCopies(store.db, ['ws-ann-000001'], 'store-a');
    expect(await copiesOf(store.db, 'ws-ann-000001')).toEqual(['store-a', 'store-b']);
    await forgetCopy(store.db, 'ws-ann-000001', 'store-a');
    expect(await copiesOf(store.db, 'ws-ann-000001')).toEqual(['store-b']);
    expect(await copiesOf(store.db, 'ws-bob-000001')).toEqual(['store-a']);
    await noteCopies(store.db, [], 'store-a');
    expect(await copiesOf(store.db, 'ws-nobody-0001')).toEqual([]);
  });
});
