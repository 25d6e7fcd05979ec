import { describe, expect, it } from 'vitest';
import { LeaseLost, Replica } from './leases.js';
import { ensureUser } from '../accounts/accounts.js';
import { storePerTest, type TestStore } from '../../test/support/store.js';

const LEASE_MS = 9_000; // its thirds and fifths are whole milliseconds, as a clock gives them

describe('sandbox leases across replicas', () => {
  let store: TestStore;
  storePerTest((s) => (store = s));

  /** Replicas sharing one store and one clock the test moves (wall and monotonic alike, as on hosts whose clocks agree). */
  function cluster() {
    let t = 1_700_000_000_000;
    const clock = { now: () => t, monotonic: () => t, advance: (ms: number) => (t += ms) };
    const replicas: Replica[] = [];
    const replica = async (id: string) => {
      const r = new Replica(store.db, { id, internalUrl: `http://${id}.internal:8081`, sandboxHost: 'host-1', leaseMs: LEASE_MS, now: clock.now, monotonic: clock.monotonic });
      await r.start();
      replicas.push(r);
      return r;
    };
    return { clock, replica, replicas };
  }

  it('gives a sandbox to one replica at a time and tells the others who holds it', async () => {
    const { replica } = cluster();
    const a = await replica('a');
    const b = await replica('b');
    const u = await ensureUser(store.db, 'ann');
    expect(await a.acquire(u.id)).toEqual({ ok: true, epoch: 1 });
    const refused = await b.acquire(u.id);
    expect(refused).toMatchObject({ ok: false, holder: { id: 'a', internalUrl: 'http://a.internal:8081', sandboxHost: 'host-1', draining: false } });
    expect(a.holds(u.id)).toBe(true);
    expect(b.holds(u.id)).toBe(false);
    expect((await b.holderOf(u.id))?.id).toBe('a');
    // Asking again for its own lease keeps it, at the same epoch.
    expect(await a.acquire(u.id)).toEqual({ ok: true, epoch: 1 });
  });

  it('lets a silent holder stop acting before anyone may take its lease, then hands it on with a new epoch', async () => {
    const { clock, replica } = cluster();
    const a = await replica('a');
    const b = await replica('b');
    const u = await ensureUser(store.db, 'ann');
    await a.acquire(u.id);
    // a stops beating (paused, or cut off from the store); b keeps beating.
    clock.advance(LEASE_MS - LEASE_MS / 5);
    await b.beat();
    // a gives up first (its clock margin)...
    expect(a.holds(u.id)).toBe(false);
    expect(() => a.epochOf(u.id)).toThrow(LeaseLost);
    // ...while for everyone else it still holds the lease.
    expect((await b.acquire(u.id)).ok).toBe(false);
    clock.advance(LEASE_MS / 5 + 1);
    await b.beat();
    expect(await b.holderOf(u.id)).toBeUndefined();
    expect(await b.acquire(u.id)).toEqual({ ok: true, epoch: 2 });
    // a comes back: its next beat finds the lease in b's hands, and a does not act on it.
    await a.beat();
    expect(a.holds(u.id)).toBe(false);
    expect(a.heldUsers()).toEqual([]);
    expect(b.epochOf(u.id)).toBe(2);
    // Nor can it take it back while b is alive.
    expect(await a.acquire(u.id)).toMatchObject({ ok: false, holder: { id: 'b' } });
  });

  it('keeps leases while the holder beats, however long', async () => {
    const { clock, replica } = cluster();
    const a = await replica('a');
    const b = await replica('b');
    const u = await ensureUser(store.db, 'ann');
    await a.acquire(u.id);
    for (let i = 0; i < 10; i++) {
      clock.advance(LEASE_MS / 3);
      await a.beat();
      await b.beat();
    }
    expect(a.holds(u.id)).toBe(true);
    expect((await b.acquire(u.id)).ok).toBe(false);
  });

  it('hands a released lease on at once, and a stopped replica’s leases too', async () => {
    const { replica } = cluster();
    const a = await replica('a');
    const b = await replica('b');
    const [ann, bob] = [await ensureUser(store.db, 'ann'), await ensureUser(store.db, 'bob')];
    await a.acquire(ann.id);
    await a.acquire(bob.id);
    await a.release(ann.id);
    expect(a.holds(ann.id)).toBe(false);
    expect(await b.acquire(ann.id)).toEqual({ ok: true, epoch: 2 });
    await a.drain();
    expect((await b.live()).find((r) => r.id === 'a')?.draining).toBe(true);
    await expect(a.acquire(await ensureUser(store.db, 'cy').then((u) => u.id))).rejects.toThrow(LeaseLost);
    await a.stop();
    expect(await b.acquire(bob.id)).toEqual({ ok: true, epoch: 2 });
    expect((await b.live()).map((r) => r.id)).toEqual(['b']);
  });

  it('never gives one lease to two replicas asking at once', async () => {
    const { replica } = cluster();
    const rs = await Promise.all(['a', 'b', 'c', 'd', 'e', 'f'].map(replica));
    const u = await ensureUser(store.db, 'ann');
    const results = await Promise.all(rs.map((r) => r.acquire(u.id)));
    const winners = rs.filter((_, i) => results[i]!.ok);
    expect(winners).toHaveLength(1);
    for (const r of results) if (!r.ok) expect(r.holder?.id).toBe(winners[0]!.id);
    expect(rs.filter((r) => r.holds(u.id))).toEqual(winners);
  });

  it('gives up every lease when another replica took it for dead and removed it', async () => {
    const { clock, replica } = cluster();
    const a = await replica('a');
    const u = await ensureUser(store.db, 'ann');
    await a.acquire(u.id);
    clock.advance(11 * LEASE_MS);
    const b = await replica('b');
    await b.acquire(u.id);
    await b.stop(); // removes replicas silent for ten lease times: a
    expect((await store.db.selectFrom('gateway_replicas').select('id').execute()).map((r) => r.id)).toEqual([]);
    await a.beat();
    expect(a.holds(u.id)).toBe(false);
    // It is registered again, and may take leases anew.
    expect(await a.acquire(u.id)).toEqual({ ok: true, epoch: 3 });
    // As the process it is, started when it did: not newer than replicas that started after it.
    const row = await store.db.selectFrom('gateway_replicas').select('started_at').where('id', '=', 'a').executeTakeFirstOrThrow();
    expect(row.started_at).toBe(1_700_000_000_000);
  });

  it('never registers again once stopped, whatever beat comes late', async () => {
    const { replica } = cluster();
    const a = await replica('a');
    const u = await ensureUser(store.db, 'ann');
    await a.acquire(u.id);
    const under = a.beat();
    await a.stop();
    await under;
    await a.beat();
    expect(await store.db.selectFrom('gateway_replicas').select('id').execute()).toEqual([]);
    await expect(a.acquire(u.id)).rejects.toThrow(/stopping/);
  });

  it('lets leases run out when the heartbeat cannot reach the store', async () => {
    const { clock, replica } = cluster();
    const a = await replica('a');
    const u = await ensureUser(store.db, 'ann');
    await a.acquire(u.id);
    await store.db.schema.dropTable('sandbox_leases').execute(); // every heartbeat now fails
    clock.advance(LEASE_MS / 3);
    await a.beat();
    expect(a.holds(u.id)).toBe(true);
    clock.advance(LEASE_MS / 2);
    await a.beat();
    expect(a.holds(u.id)).toBe(false);
    await expect(a.acquire(u.id)).rejects.toThrow(/cannot reach the store/);
  });

  it('gives every lease up at a beat that follows a lapse, telling the manager, and takes it back under a new epoch', async () => {
    const { clock, replica } = cluster();
    const a = await replica('a');
    const lost: number[] = [];
    a.onLost((userId) => lost.push(userId));
    const u = await ensureUser(store.db, 'ann');
    await a.acquire(u.id);
    clock.advance(LEASE_MS); // a stall: no beat for a whole lease time
    await a.beat();
    expect(lost).toEqual([u.id]);
    expect(a.holds(u.id)).toBe(false);
    expect(await a.acquire(u.id)).toEqual({ ok: true, epoch: 2 });
  });

  it('beats first when a lease is asked for after its heartbeat fell behind (a loaded host), instead of refusing', async () => {
    const { clock, replica } = cluster();
    const a = await replica('a');
    const lost: number[] = [];
    a.onLost((userId) => lost.push(userId));
    const u = await ensureUser(store.db, 'ann');
    await a.acquire(u.id);
    clock.advance(LEASE_MS); // no beat for a whole lease time, and none due before the next ask
    expect(await a.acquire(u.id)).toEqual({ ok: true, epoch: 2 });
    // The late beat gave the old lease up first: never renewed blindly.
    expect(lost).toEqual([u.id]);
    expect(a.holds(u.id)).toBe(true);
  });

  it('says it is back after a beat that ends a silence (a lapse, or being taken for dead), and only then', async () => {
    const { clock, replica } = cluster();
    const a = await replica('a');
    let back = 0;
    a.onBack(() => back++);
    clock.advance(LEASE_MS / 3);
    await a.beat();
    expect(back).toBe(0);
    clock.advance(LEASE_MS); // a stall
    await a.beat();
    expect(back).toBe(1);
    clock.advance(LEASE_MS / 3);
    await a.beat();
    expect(back).toBe(1);
    await store.db.deleteFrom('gateway_replicas').where('id', '=', 'a').execute(); // as another replica removes a dead one
    await a.beat();
    expect(back).toBe(2);
    // A beat that fails says nothing: the next one that works after the lapse does.
    clock.advance(LEASE_MS);
    await store.db.schema.alterTable('gateway_replicas').renameTo('gateway_replicas_away').execute();
    await a.beat();
    expect(back).toBe(2);
    await store.db.schema.alterTable('gateway_replicas_away').renameTo('gateway_replicas').execute();
    await a.beat();
    expect(back).toBe(3);
  });

  it('tells the manager when a lease is seen in other hands', async () => {
    const { clock, replica } = cluster();
    const a = await replica('a');
    const b = await replica('b');
    const lost: number[] = [];
    a.onLost((userId) => lost.push(userId));
    const u = await ensureUser(store.db, 'ann');
    await a.acquire(u.id);
    // b takes it over by hand while a still beats (as a replica would whose clock ran ahead).
    await store.db.updateTable('sandbox_leases').set({ replica_id: 'b', epoch: 2 }).where('user_id', '=', u.id).execute();
    clock.advance(LEASE_MS / 3);
    await a.beat();
    await b.beat();
    expect(lost).toEqual([u.id]);
    expect(a.holds(u.id)).toBe(false);
  });

  describe('where users\' files are, with replicas on several workspace stores', () => {
    const STORE_LOST_MS = 60_000;
    function hosts() {
      const c = cluster();
      const on = async (id: string, workspaceStore: string) => {
        const r = new Replica(store.db, { id, internalUrl: `http://${id}.internal:8081`, sandboxHost: `host-of-${id}`, leaseMs: LEASE_MS, workspaceStore, storeLostMs: STORE_LOST_MS, now: c.clock.now, monotonic: c.clock.monotonic });
        await r.start();
        c.replicas.push(r);
        return r;
      };
      /** Replicas a (store-a) and b (store-b); ann's sandbox was on store-a, whose only replica then stopped. */
      const annLeftOnStoreA = async () => {
        const a = await on('a', 'store-a');
        const b = await on('b', 'store-b');
        const u = await ensureUser(store.db, 'ann');
        await a.acquire(u.id);
        await a.stop();
        return { a, b, u };
      };
      return { ...c, on, annLeftOnStoreA };
    }

    it('sends a user whose files are in another store to a replica on it, and takes the lease there', async () => {
      const { on } = hosts();
      const a = await on('a', 'store-a');
      const b = await on('b', 'store-b');
      const u = await ensureUser(store.db, 'ann');
      expect(await a.acquire(u.id)).toEqual({ ok: true, epoch: 1 });
      await a.release(u.id);
      // Free, but ann's files are on store-a: b is told to go to a.
      expect(await b.acquire(u.id)).toMatchObject({ ok: false, home: 'store-a', holder: { id: 'a', workspaceStore: 'store-a' } });
      expect(b.holds(u.id)).toBe(false);
      expect(await a.acquire(u.id)).toEqual({ ok: true, epoch: 2 });
      expect(await b.homeOf(u.id)).toMatchObject({ where: 'elsewhere', store: 'store-a', via: { id: 'a' } });
      expect(await a.homeOf(u.id)).toEqual({ where: 'here' });
    });

    it('never sends one to a replica of that store that is stopping', async () => {
      const { on } = hosts();
      const a = await on('a', 'store-a');
      const a2 = await on('a2', 'store-a');
      const b = await on('b', 'store-b');
      const u = await ensureUser(store.db, 'ann');
      await a.acquire(u.id);
      await a.release(u.id);
      await a.drain();
      expect(await b.acquire(u.id)).toMatchObject({ ok: false, holder: { id: 'a2' } });
      await a2.drain();
      expect(await b.acquire(u.id)).toMatchObject({ ok: false, away: 'store-a' });
    });

    it('keeps a user\'s sandbox off other stores while theirs has no replica (restarting), then moves it once the store is lost', async () => {
      const { clock, annLeftOnStoreA } = hosts();
      const { b, u } = await annLeftOnStoreA();
      expect(await b.acquire(u.id)).toEqual({ ok: false, away: 'store-a', epoch: 1 });
      expect(await b.homeOf(u.id)).toEqual({ where: 'away', store: 'store-a' });
      // store-a seen last just under SANDGATE_HOST_LOST_SEC ago: still away.
      for (let t = 0; t < STORE_LOST_MS - LEASE_MS / 3; t += LEASE_MS / 3) {
        clock.advance(LEASE_MS / 3);
        await b.beat();
      }
      expect((await b.acquire(u.id)).ok).toBe(false);
      clock.advance(LEASE_MS / 3);
      await b.beat();
      expect(await b.acquire(u.id)).toEqual({ ok: true, epoch: 2, movedFrom: 'store-a' });
      const row = await store.db.selectFrom('sandbox_leases').select('workspace_store').where('user_id', '=', u.id).executeTakeFirstOrThrow();
      expect(row.workspace_store).toBe('store-b');
      expect(await b.homeOf(u.id)).toEqual({ where: 'here' });
    });

    it('claims the store a user\'s files are first made in, for file operations before any run', async () => {
      const { on } = hosts();
      const a = await on('a', 'store-a');
      const b = await on('b', 'store-b');
      const u = await ensureUser(store.db, 'ann');
      expect(await b.homeOf(u.id)).toEqual({ where: 'here' });
      // Their first run reaches a: it goes to b, where the files are.
      expect(await a.acquire(u.id)).toMatchObject({ ok: false, home: 'store-b', holder: { id: 'b' } });
      expect(await b.acquire(u.id)).toEqual({ ok: true, epoch: 1 });
    });

    it('names its own store for users whose files it has and whose store no one named (rows of an earlier release), and keeps the rest', async () => {
      const { on } = hosts();
      const a = await on('a', 'store-a');
      const b = await on('b', 'store-b');
      const [old, fresh, onB] = [await ensureUser(store.db, 'old'), await ensureUser(store.db, 'fresh'), await ensureUser(store.db, 'onb')];
      // A row as the release before wrote it: no store.
      await store.db.insertInto('sandbox_leases').values({ user_id: old.id, replica_id: null, epoch: 3, acquired_at: 1, workspace_store: null }).execute();
      await b.acquire(onB.id);
      expect(await a.claimFiles([old.id, fresh.id, onB.id])).toBe(2);
      const rows = await store.db.selectFrom('sandbox_leases').select(['user_id', 'workspace_store', 'epoch']).orderBy('user_id').execute();
      expect(rows).toEqual([
        { user_id: old.id, workspace_store: 'store-a', epoch: 3 },
        { user_id: fresh.id, workspace_store: 'store-a', epoch: 0 },
        { user_id: onB.id, workspace_store: 'store-b', epoch: 1 },
      ]);
      expect(await a.filesElsewhere(onB.id)).toBe(true);
      expect(await a.filesElsewhere(old.id)).toBe(false);
      expect(await b.filesElsewhere(old.id)).toBe(true);
    });

    it('never moves a user\'s files on a file operation, even when their store is lost', async () => {
      const { clock, annLeftOnStoreA } = hosts();
      const { b, u } = await annLeftOnStoreA();
      clock.advance(STORE_LOST_MS + 1);
      await b.beat();
      expect(await b.homeOf(u.id)).toEqual({ where: 'lost', store: 'store-a' });
      expect(await b.filesElsewhere(u.id)).toBe(true);
    });

    it('a lease held by a live replica is its holder\'s, wherever the files are', async () => {
      const { on } = hosts();
      const a = await on('a', 'store-a');
      const b = await on('b', 'store-b');
      const u = await ensureUser(store.db, 'ann');
      await a.acquire(u.id);
      const refused = await b.acquire(u.id);
      expect(refused).toMatchObject({ ok: false, holder: { id: 'a' } });
      expect(refused).not.toHaveProperty('home');
    });
  });
});
