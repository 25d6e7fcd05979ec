import { describe, expect, it } from 'vitest';
import { claimWorkspace, ensureUser } from '../accounts/accounts.js';
import { copiesOf, deleteAccountListingWorkspace, noteCopies } from './deletions.js';
import { Replica } from './leases.js';
import { forgetWorkspaceStore, listWorkspaceStores, StoreNotForgotten } from './stores.js';
import { storePerTest, type TestStore } from '../../test/support/store.js';

const LEASE_MS = 4000;
const LOST_MS = 300_000;

describe('workspace stores, as an operator sees and forgets them', () => {
  let store: TestStore;
  storePerTest((s) => (store = s));

  /** Three stores: `live` with a running gateway, `away` seen a minute ago, `retired` seen an hour ago. */
  async function threeStores(now: number) {
    const replica = new Replica(store.db, { internalUrl: 'http://10.0.0.1:8081', sandboxHost: 'host-a', leaseMs: LEASE_MS, workspaceStore: 'live', now: () => now });
    await replica.start();
    await store.db
      .insertInto('workspace_stores')
      .values([
        { id: 'away', seen_at: now - 60_000 },
        { id: 'retired', seen_at: now - 3_600_000 },
      ])
      .execute();
    // A gateway of the retired store that died long ago: its row is no sign of life.
    await store.db.insertInto('gateway_replicas').values({ id: 'dead-1', internal_url: null, sandbox_host: 'host-c', started_at: now - 4e6, heartbeat_at: now - 3.6e6, draining_at: null, workspace_store: 'retired' }).execute();
    const [ann, bob, cleo] = await Promise.all(['ann', 'bob', 'cleo'].map((n) => ensureUser(store.db, n)));
    for (const [u, ws] of [
      [ann!, 'ws-ann-000001'],
      [bob!, 'ws-bob-000001'],
      [cleo!, 'ws-cleo-00001'],
    ] as const) {
      await claimWorkspace(store.db, u.id, ws);
    }
    await store.db
      .insertInto('sandbox_leases')
      .values([
        { user_id: ann!.id, replica_id: null, epoch: 1, acquired_at: now, workspace_store: 'retired' },
        { user_id: bob!.id, replica_id: null, epoch: 1, acquired_at: now, workspace_store: 'retired' },
        { user_id: cleo!.id, replica_id: null, epoch: 1, acquired_at: now, workspace_store: 'live' },
      ])
      .execute();
    await noteCopies(store.db, ['ws-ann-000001', 'ws-bob-000001', 'ws-cleo-00001'], 'retired');
    await noteCopies(store.db, ['ws-cleo-00001'], 'live');
    await noteCopies(store.db, ['ws-bob-000001'], 'away');
    // Cleo is deleted: her copy on the retired store is one it never removed.
    await deleteAccountListingWorkspace(store.db, cleo!.id);
    return { replica, ann: ann!, bob: bob! };
  }

  it('lists every store the database knows of, with its state, gateways and what it holds', async () => {
    const now = Date.now();
    const { replica } = await threeStores(now);
    const list = await listWorkspaceStores(store.db, { leaseMs: LEASE_MS, lostMs: LOST_MS, now });
    expect(list.map((r) => [r.id, r.state, r.users, r.copies, r.deletedCopies])).toEqual([
      ['away', 'away', 0, 1, 0],
      ['live', 'live', 0, 1, 1],
      ['retired', 'lost', 2, 3, 1],
    ]);
    expect(list.find((r) => r.id === 'live')!.gateways).toEqual([{ id: replica.id, sandboxHost: 'host-a', draining: false }]);
    expect(list.find((r) => r.id === 'retired')!.gateways).toEqual([]);
    expect(list.find((r) => r.id === 'retired')!.seenAt).toBe(now - 3_600_000);
    await replica.stop();
  });

  it('forgets a lost store, and refuses one in use, one that may be restarting, and one it does not know', async () => {
    const now = Date.now();
    const { replica, ann } = await threeStores(now);
    const t = { leaseMs: LEASE_MS, lostMs: LOST_MS, now };
    await expect(forgetWorkspaceStore(store.db, 'live', t)).rejects.toThrow(/is running on workspace store live/);
    await expect(forgetWorkspaceStore(store.db, 'away', t)).rejects.toThrow(/was running 60 s ago: it may be restarting/);
    await expect(forgetWorkspaceStore(store.db, 'nowhere', t)).rejects.toBeInstanceOf(StoreNotForgotten);
    // Nothing of the refused ones changed.
    expect(await copiesOf(store.db, 'ws-bob-000001')).toEqual(['away', 'retired']);

    expect(await forgetWorkspaceStore(store.db, 'retired', t)).toEqual({ copies: 3, deletedCopies: 1, users: 2 });
    expect(await copiesOf(store.db, 'ws-ann-000001')).toEqual([]);
    expect(await copiesOf(store.db, 'ws-bob-000001')).toEqual(['away']);
    expect(await copiesOf(store.db, 'ws-cleo-00001')).toEqual(['live']);
    const lease = await store.db.selectFrom('sandbox_leases').select('workspace_store').where('user_id', '=', ann.id).executeTakeFirstOrThrow();
    expect(lease.workspace_store).toBeNull();
    expect((await listWorkspaceStores(store.db, t)).map((r) => r.id)).toEqual(['away', 'live']);
    // The deleted user's workspace stays listed: a host that comes back after all still removes it.
    expect(await store.db.selectFrom('workspace_deletions').select('workspace_id').execute()).toEqual([{ workspace_id: 'ws-cleo-00001' }]);
    // Forgotten once: a second time it is unknown.
    await expect(forgetWorkspaceStore(store.db, 'retired', t)).rejects.toThrow(/no workspace store retired is known/);

    // Once the live store's gateway has stopped and the lost time has passed, it too may be forgotten.
    await replica.stop();
    await expect(forgetWorkspaceStore(store.db, 'live', { ...t, now: now + LOST_MS + 1000 })).resolves.toEqual({ copies: 1, deletedCopies: 1, users: 0 });
  });
});
