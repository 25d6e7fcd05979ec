import { describe, expect, it } from 'vitest';
import { claimWorkspace, ensureUser, getUser } from '../accounts/accounts.js';
import { copiesOf, deleteAccountListingWorkspace, deletedAmong, forgetCopy, noteCopies } from './deletions.js';
import { storePerTest, type TestStore } from '../../test/support/store.js';

describe('deleted users’ workspaces, for every store to remove', () => {
  let store: TestStore;
  storePerTest((s) => (store = s));

  it('lists a deleted user’s workspace with the account’s deletion, in one transaction, and never one a user still has', async () => {
    const ann = await ensureUser(store.db, 'ann');
    const bob = await ensureUser(store.db, 'bob');
    const cleo = await ensureUser(store.db, 'cleo');
    await claimWorkspace(store.db, ann.id, 'ws-ann-000001');
    await claimWorkspace(store.db, bob.id, 'ws-bob-000001');
    const local = ['ws-ann-000001', 'ws-bob-000001', 'ws-pool-00001'];
    expect(await deletedAmong(store.db, local)).toEqual([]);
    expect(await deleteAccountListingWorkspace(store.db, ann.id)).toBe(true);
    expect(await getUser(store.db, ann.id)).toBeUndefined();
    expect(await deletedAmong(store.db, local)).toEqual(['ws-ann-000001']);
    // A user with no workspace yet lists none; one already gone changes nothing.
    expect(await deleteAccountListingWorkspace(store.db, cleo.id)).toBe(true);
    expect(await deleteAccountListingWorkspace(store.db, ann.id)).toBe(false);
    expect(await store.db.selectFrom('workspace_deletions').select('workspace_id').execute()).toEqual([{ workspace_id: 'ws-ann-000001' }]);
    expect(await deletedAmong(store.db, ['ws-bob-000001'])).toEqual([]);
    expect(await deletedAmong(store.db, [])).toEqual([]);
  });

  it('looks through a store of many workspaces in batches', async () => {
    const ids = Array.from({ length: 1200 }, (_, i) => `ws-${String(i).padStart(8, '0')}`);
    const gone = ids.filter((_, i) => i % 100 === 7);
    for (const [k, id] of gone.entries()) {
      const u = await ensureUser(store.db, `gone-${k}`);
      await claimWorkspace(store.db, u.id, id);
      await deleteAccountListingWorkspace(store.db, u.id);
    }
    expect((await deletedAmong(store.db, ids)).sort()).toEqual(gone);
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
