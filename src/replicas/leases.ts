/**
 * One owner per sandbox across gateway replicas: each replica registers itself and
 * writes a heartbeat; a user's sandbox is held under a lease in the store that lasts as
 * long as its holder's heartbeat.
 *
 * - Taking a lease is one serializable transaction: free, held by a replica whose
 *   heartbeat is older than `leaseMs`, or already ours. A change of holder adds one to
 *   the lease's epoch.
 * - Holding one is local: a replica acts on a user's sandbox only while `holds(user)`,
 *   which is true while its last successful heartbeat began less than
 *   `leaseMs - clockMarginMs` ago by its own monotonic clock, and the lease has not been
 *   seen in another's hands. Every heartbeat also reads the replica's leases back, so one
 *   taken while it was paused is dropped at the next beat.
 * - Others see a lease free once `heartbeat_at + leaseMs` has passed by their wall clock.
 *   A holder stops acting `clockMarginMs` before that by its own: hosts' clocks must
 *   agree within that margin (NTP keeps them within milliseconds).
 *
 * So a replica that is paused (SIGSTOP, a long GC, a VM migration) or cut off from the
 * store stops acting on its sandboxes before any other replica may take them, and one
 * that comes back finds out at its next check. Epochs let a lease's later holder tell
 * its own acts from a stale one's (`epochOf`).
 */
import crypto from 'node:crypto';
import os from 'node:os';
import { serializable, type Db } from '../store/store.js';
import type { Logger } from '../logger.js';
import { copiesOf, forgetCopy, noteCopies } from './deletions.js';

export interface ReplicaOptions {
  /** New at every start unless given (tests name theirs). */
  id?: string;
  /** Where other replicas reach this one's internal endpoint. */
  internalUrl: string | null;
  /** The sandbox host (a dockerd) this replica's sandboxes run on. */
  sandboxHost: string;
  /** How long a replica that stopped beating keeps its leases. */
  leaseMs: number;
  /**
   * The workspace store this replica's sandboxes use (WorkspaceStore.storeId). With it, a
   * user whose files are in another store is sent to a replica on that store, and their
   * lease remembers the store of their sandbox. Without it (tests of leases alone), no
   * lease is refused for where files are.
   */
  workspaceStore?: string;
  /**
   * How long a workspace store may have no live replica before its users' sandboxes start
   * on another store, with the files that store has (SANDGATE_HOST_LOST_SEC). Until then a
   * lease for them is refused: their store's gateways may be restarting.
   */
  storeLostMs?: number;
  /** How much earlier than others a holder considers its own leases gone. Default: a fifth of leaseMs. */
  clockMarginMs?: number;
  /** Wall clock, written to and compared with the store (epoch ms). */
  now?: () => number;
  /** Monotonic clock for the holder's own deadline (ms). */
  monotonic?: () => number;
}

export interface ReplicaInfo {
  id: string;
  internalUrl: string | null;
  sandboxHost: string;
  startedAt: number;
  heartbeatAt: number;
  draining: boolean;
  /** The workspace store its sandboxes use; null for a replica of an earlier release. */
  workspaceStore: string | null;
}

/**
 * What `acquire` found. Refused: another live replica holds the lease (`holder`); or the
 * lease is free but the user's files are in another workspace store, where `holder` is a
 * live replica to send the run to (`home`), or none is live and the store was seen lately
 * (`away`: its gateways may be restarting). Taken: `movedFrom` names the store the user's
 * files were in when it was lost (no replica on it for `storeLostMs`).
 */
export type LeaseResult =
  | { ok: true; epoch: number; movedFrom?: string }
  | { ok: false; holder: ReplicaInfo; epoch: number; home?: string; away?: undefined }
  | { ok: false; away: string; epoch: number; holder?: undefined; home?: undefined };

/** A lease could not be used: this replica no longer holds it, or cannot say that it does. */
export class LeaseLost extends Error {
  override name = 'LeaseLost';
}

/** A fresh replica id: the host's name (for people reading the admin page) and random bytes. */
export function newReplicaId(): string {
  const host = os.hostname().replace(/[^A-Za-z0-9-]/g, '').slice(0, 24) || 'gateway';
  return `${host}-${crypto.randomBytes(6).toString('hex')}`;
}

const toInfo = (r: { id: string; internal_url: string | null; sandbox_host: string; started_at: number; heartbeat_at: number; draining_at: number | null; workspace_store?: string | null }): ReplicaInfo => ({
  id: r.id,
  internalUrl: r.internal_url,
  sandboxHost: r.sandbox_host,
  startedAt: r.started_at,
  heartbeatAt: r.heartbeat_at,
  draining: r.draining_at !== null,
  workspaceStore: r.workspace_store ?? null,
});

/** Default SANDGATE_HOST_LOST_SEC, in ms. */
export const STORE_LOST_MS = 300_000;

/**
 * Where a user's files are, as `homeOf` sees it: in this replica's store (or nowhere yet:
 * this store claims them), in another reached through a live replica on it (`via`), or
 * in one with no live replica now (`away`, seen within `storeLostMs`).
 */
export type WorkspaceHome = { where: 'here' } | { where: 'elsewhere'; store: string; via: ReplicaInfo } | { where: 'away' | 'lost'; store: string };

export class Replica {
  readonly id: string;
  readonly leaseMs: number;
  private readonly marginMs: number;
  private readonly now: () => number;
  private readonly monotonic: () => number;
  /** Monotonic time at which the last successful heartbeat began; -Infinity before the first. */
  private beatStartedAt = -Infinity;
  /** The epoch of each lease this replica holds, by user id. */
  private readonly held = new Map<number, number>();
  /** Workspaces recorded as having a copy in this replica's store (`noteCopies`). */
  private readonly copies = new Set<string>();
  /** Releases under way, by user id: a take of the same lease waits for them. */
  private readonly releasing = new Map<number, Promise<void>>();
  /** Releases that failed, by user id, with their epoch: tried again at each beat. */
  private readonly unreleased = new Map<number, number>();
  private readonly lostListeners: ((userId: number) => void)[] = [];
  private readonly backListeners: (() => void)[] = [];
  private timer?: NodeJS.Timeout;
  private beating?: Promise<void>;
  private draining = false;
  /** `stop` was called: no beat writes this replica's row again. */
  private stopped = false;
  /** When this replica started (epoch ms): kept when it registers again, as it is the same process. */
  private startedAt = 0;
  /** Where other replicas reach this one: known once the gateway listens (`setInternalUrl`). */
  private internalUrl: string | null;

  constructor(
    private readonly db: Db,
    private readonly opts: ReplicaOptions,
    private readonly log?: Logger,
  ) {
    if (!(opts.leaseMs > 0)) throw new Error('Replica: leaseMs must be positive');
    this.id = opts.id ?? newReplicaId();
    this.internalUrl = opts.internalUrl;
    this.leaseMs = opts.leaseMs;
    this.marginMs = opts.clockMarginMs ?? opts.leaseMs / 5;
    if (!(this.marginMs >= 0 && this.marginMs < this.leaseMs)) throw new Error('Replica: clockMarginMs must be less than leaseMs');
    this.now = opts.now ?? Date.now;
    this.monotonic = opts.monotonic ?? (() => performance.now());
  }

  /** Registers this replica and beats every third of the lease time until `stop`. */
  async start(): Promise<void> {
    const now = this.now();
    const started = this.monotonic();
    this.startedAt = now;
    await this.db
      .insertInto('gateway_replicas')
      .values({ id: this.id, internal_url: this.internalUrl, sandbox_host: this.opts.sandboxHost, started_at: now, heartbeat_at: now, draining_at: null, workspace_store: this.opts.workspaceStore ?? null })
      .execute();
    await this.storeSeen(now);
    this.beatStartedAt = started;
    this.timer = setInterval(() => void this.beat(), this.leaseMs / 3);
    this.timer.unref();
  }

  /** Says where other replicas reach this one (once it listens): until then, none forwards to it. */
  async setInternalUrl(url: string): Promise<void> {
    this.internalUrl = url;
    await this.db.updateTable('gateway_replicas').set({ internal_url: url }).where('id', '=', this.id).execute();
  }

  /**
   * One heartbeat: renews every lease of this replica at once, then reads them back and
   * forgets those another replica took. A failed beat changes nothing here: the leases
   * run out by themselves (`holds`).
   */
  beat(): Promise<void> {
    this.beating ??= this.beatOnce().finally(() => (this.beating = undefined));
    return this.beating;
  }

  private async beatOnce(): Promise<void> {
    // Gone from the table by its own hand: a late beat must not bring the row back.
    if (this.stopped) return;
    const started = this.monotonic();
    // The last beat is too old: another replica may be taking a lease right now, and a
    // renewal could land between its read and its write. Every lease is given up here (and
    // freed in the store below) and taken again through acquire, never renewed blindly.
    const lapsed = !this.fresh();
    if (lapsed) {
      this.lose([...this.held.keys()]);
      // Its store may have been forgotten meanwhile (`sandgate stores forget`): its copies are recorded again (`onBack`).
      this.copies.clear();
    }
    try {
      await this.retryReleases();
      // Where it is reached goes with every beat: a write of it that failed once is made good.
      const r = await this.db.updateTable('gateway_replicas').set({ heartbeat_at: this.now(), internal_url: this.internalUrl }).where('id', '=', this.id).executeTakeFirst();
      if (Number(r.numUpdatedRows) === 0) {
        if (this.stopped) return;
        // Another replica removed this one as dead: every lease it had may be taken.
        this.log?.warn({ replica: this.id }, 'this replica was taken for dead: its sandboxes are given up');
        this.lose([...this.held.keys()]);
        this.beatStartedAt = -Infinity;
        // Leases still in its name would live again with the row added below.
        await this.db.updateTable('sandbox_leases').set({ replica_id: null }).where('replica_id', '=', this.id).execute();
        await this.db
          .insertInto('gateway_replicas')
          .values({ id: this.id, internal_url: this.internalUrl, sandbox_host: this.opts.sandboxHost, started_at: this.startedAt, heartbeat_at: this.now(), draining_at: this.draining ? this.now() : null, workspace_store: this.opts.workspaceStore ?? null })
          .execute();
        this.beatStartedAt = started;
        this.back();
        return;
      }
      await this.storeSeen(this.now());
      const rows = await this.db.selectFrom('sandbox_leases').select(['user_id', 'epoch']).where('replica_id', '=', this.id).execute();
      const current = new Map(rows.map((r) => [r.user_id, r.epoch]));
      this.lose([...this.held].filter(([userId, epoch]) => current.get(userId) !== epoch).map(([userId]) => userId));
      // Leases in the store in this replica's name that it does not hold (a release that
      // failed) would keep the user from every other replica: freed.
      const stray = rows.filter((r) => !this.held.has(r.user_id) && !this.releasing.has(r.user_id)).map((r) => r.user_id);
      if (stray.length) await this.db.updateTable('sandbox_leases').set({ replica_id: null }).where('replica_id', '=', this.id).where('user_id', 'in', stray).execute();
      this.beatStartedAt = started;
      if (lapsed) this.back();
    } catch (e) {
      this.log?.warn({ err: (e as Error).message, replica: this.id }, 'heartbeat failed: leases run out unless the next one succeeds');
    }
  }

  /**
   * Users whose sandbox lease is in another replica's name now, live or not yet taken
   * over: that replica may be starting their sandbox on a workspace it just mounted.
   */
  async leasedElsewhere(): Promise<number[]> {
    const rows = await this.db.selectFrom('sandbox_leases').select('user_id').where('replica_id', 'is not', null).where('replica_id', '!=', this.id).execute();
    return rows.map((r) => r.user_id);
  }

  /** Called with each user whose lease this replica finds it no longer holds (taken, or lapsed): their sandbox must be let go. */
  onLost(listener: (userId: number) => void): void {
    this.lostListeners.push(listener);
  }

  /**
   * Called after a beat that ended a silence (a lapse, or a row removed by another replica
   * that took this one for dead): meanwhile this replica's store may have been forgotten,
   * so what it records of its store at start (the copies it has, the users whose files are
   * on it) must be recorded again.
   */
  onBack(listener: () => void): void {
    this.backListeners.push(listener);
  }

  private back(): void {
    for (const l of this.backListeners) {
      try {
        l();
      } catch (e) {
        this.log?.warn({ err: (e as Error).message }, 'recording this replica\'s store again failed');
      }
    }
  }

  private lose(userIds: number[]): void {
    for (const userId of userIds) {
      this.held.delete(userId);
      for (const l of this.lostListeners) {
        try {
          l(userId);
        } catch (e) {
          this.log?.warn({ err: (e as Error).message, user: userId }, 'letting a lost sandbox go failed');
        }
      }
    }
  }

  /** The workspace store of this replica has a live replica now (one row per store: replicas on it write the same one). */
  private async storeSeen(now: number): Promise<void> {
    const id = this.opts.workspaceStore;
    if (!id) return;
    await this.db
      .insertInto('workspace_stores')
      .values({ id, seen_at: now })
      .onConflict((oc) => oc.column('id').doUpdateSet({ seen_at: now }))
      .execute();
  }

  /** Releases that failed (the store away for a moment) are tried again at each beat. */
  private async retryReleases(): Promise<void> {
    for (const [userId, epoch] of this.unreleased) {
      await this.db.updateTable('sandbox_leases').set({ replica_id: null }).where('user_id', '=', userId).where('replica_id', '=', this.id).where('epoch', '=', epoch).execute();
      this.unreleased.delete(userId);
    }
  }

  /** Whether this replica may act on `userId`'s sandbox now. */
  holds(userId: number): boolean {
    return this.held.has(userId) && this.fresh();
  }

  /** The epoch of the lease on `userId`'s sandbox; throws LeaseLost unless this replica `holds` it. */
  epochOf(userId: number): number {
    const epoch = this.held.get(userId);
    if (epoch === undefined || !this.fresh()) throw new LeaseLost(`this gateway no longer holds the sandbox of user ${userId}`);
    return epoch;
  }

  /** The users whose sandbox leases this replica holds. */
  heldUsers(): number[] {
    return this.fresh() ? [...this.held.keys()] : [];
  }

  private fresh(): boolean {
    return this.monotonic() - this.beatStartedAt < this.leaseMs - this.marginMs;
  }

  /**
   * Takes the lease on `userId`'s sandbox: when no live replica holds it (free, its
   * holder's heartbeat too old, or this replica already). Otherwise says who holds it.
   * A draining replica, or one whose own heartbeat is stale, takes none.
   */
  async acquire(userId: number): Promise<LeaseResult> {
    if (this.draining) throw new LeaseLost('this gateway is stopping: it takes no new sandbox');
    // Its last heartbeat is late (a loaded host, a slow store): one now (or the one under
    // way), and the lease is taken if it lands, rather than the run turned away.
    if (!this.fresh()) await this.beat();
    if (this.draining) throw new LeaseLost('this gateway is stopping: it takes no new sandbox');
    if (!this.fresh()) throw new LeaseLost('this gateway cannot reach the store: it takes no sandbox until it can');
    // A release begun earlier lands first, so it cannot undo this take.
    await this.releasing.get(userId);
    const result = await serializable(this.db, async (tx): Promise<LeaseResult> => {
      const now = this.now();
      const row = await tx
        .selectFrom('sandbox_leases as l')
        .leftJoin('gateway_replicas as r', 'r.id', 'l.replica_id')
        .select(['l.replica_id', 'l.epoch', 'l.workspace_store as home_store', 'r.id', 'r.internal_url', 'r.sandbox_host', 'r.started_at', 'r.heartbeat_at', 'r.draining_at', 'r.workspace_store'])
        .where('l.user_id', '=', userId)
        .executeTakeFirst();
      if (row?.replica_id === this.id) return { ok: true, epoch: row.epoch };
      if (row?.id != null && row.heartbeat_at !== null && row.heartbeat_at + this.leaseMs > now) {
        return { ok: false, epoch: row.epoch, holder: toInfo({ ...row, id: row.id, sandbox_host: row.sandbox_host!, started_at: row.started_at!, heartbeat_at: row.heartbeat_at }) };
      }
      // Free: taken here unless the user's files are in another store that is still there.
      const mine = this.opts.workspaceStore;
      const home = row?.home_store;
      let movedFrom: string | undefined;
      if (mine && home && home !== mine) {
        const found = await this.storeState(tx, userId, home, now);
        if (found.where === 'elsewhere') return { ok: false, epoch: row!.epoch, holder: found.via, home };
        if (found.where === 'away') return { ok: false, epoch: row!.epoch, away: home };
        movedFrom = home;
      }
      const epoch = (row?.epoch ?? 0) + 1;
      const store = mine ? { workspace_store: mine } : {};
      await tx
        .insertInto('sandbox_leases')
        .values({ user_id: userId, replica_id: this.id, epoch, acquired_at: now, ...store })
        .onConflict((oc) => oc.column('user_id').doUpdateSet({ replica_id: this.id, epoch, acquired_at: now, ...store }))
        .execute();
      return movedFrom ? { ok: true, epoch, movedFrom } : { ok: true, epoch };
    });
    if (result.ok && result.movedFrom) {
      this.log?.warn({ user: userId, from: result.movedFrom, to: this.opts.workspaceStore }, 'no gateway served the workspace store of this user\'s files for SANDGATE_HOST_LOST_SEC: their sandbox starts on this one, with the files it has');
    }
    if (result.ok) {
      this.held.set(userId, result.epoch);
      this.unreleased.delete(userId);
    }
    return result;
  }

  /** Gives up the lease on `userId`'s sandbox (the sandbox was stopped, or handed over): the next replica to ask takes it at once. */
  release(userId: number): Promise<void> {
    const epoch = this.held.get(userId);
    this.held.delete(userId);
    if (epoch === undefined) return this.releasing.get(userId) ?? Promise.resolve();
    const done = this.db
      .updateTable('sandbox_leases')
      .set({ replica_id: null })
      .where('user_id', '=', userId)
      .where('replica_id', '=', this.id)
      .where('epoch', '=', epoch)
      .execute()
      .then(
        () => undefined,
        (e: unknown) => {
          this.unreleased.set(userId, epoch);
          this.log?.warn({ err: (e as Error).message, user: userId }, 'could not release a lease: tried again at the next heartbeat');
        },
      )
      .finally(() => {
        if (this.releasing.get(userId) === done) this.releasing.delete(userId);
      });
    this.releasing.set(userId, done);
    return done;
  }

  /**
   * Where `userId`'s files are, for a file operation: here when in this replica's store;
   * when they are in none yet, this store is claimed for them (a sandbox started on another
   * store later goes to this one). A store with no live replica for `storeLostMs` is
   * `lost`, and stays their store: only a run moves it (`acquire`), never a file operation.
   * Without a store of its own, always here.
   */
  async homeOf(userId: number): Promise<WorkspaceHome> {
    const mine = this.opts.workspaceStore;
    if (!mine) return { where: 'here' };
    // Nearly always: the files are where they were, one read says so.
    const kept = await this.db.selectFrom('sandbox_leases').select('workspace_store').where('user_id', '=', userId).executeTakeFirst();
    if (kept?.workspace_store === mine) return { where: 'here' };
    // In another store: where to reach it, read as it is now (the receiving end checks again).
    if (kept?.workspace_store) {
      const found = await this.storeState(this.db, userId, kept.workspace_store, this.now());
      return found.where === 'here' ? { where: 'lost', store: kept.workspace_store } : found;
    }
    // In none yet: claimed for this store, unless another replica claimed it meanwhile.
    return serializable(this.db, async (tx): Promise<WorkspaceHome> => {
      const now = this.now();
      const row = await tx.selectFrom('sandbox_leases').select(['workspace_store', 'epoch']).where('user_id', '=', userId).executeTakeFirst();
      const home = row?.workspace_store;
      if (home === mine) return { where: 'here' };
      if (home) {
        const found = await this.storeState(tx, userId, home, now);
        return found.where === 'here' ? { where: 'lost', store: home } : found;
      }
      await tx
        .insertInto('sandbox_leases')
        .values({ user_id: userId, replica_id: null, epoch: row?.epoch ?? 0, acquired_at: now, workspace_store: mine })
        .onConflict((oc) => oc.column('user_id').doUpdateSet({ workspace_store: mine }))
        .execute();
      return { where: 'here' };
    });
  }

  /**
   * Says that these users' files are in this replica's store, for each whose store is not
   * known yet (rows an earlier release wrote, users who never ran code): at start, with
   * the users whose workspaces are on this store's disk. A store already named is kept.
   */
  async claimFiles(userIds: readonly number[]): Promise<number> {
    const mine = this.opts.workspaceStore;
    if (!mine || !userIds.length) return 0;
    let claimed = 0;
    for (let i = 0; i < userIds.length; i += 500) {
      const ids = userIds.slice(i, i + 500);
      const r = await this.db.updateTable('sandbox_leases').set({ workspace_store: mine }).where('workspace_store', 'is', null).where('user_id', 'in', ids).executeTakeFirst();
      const added = await this.db
        .insertInto('sandbox_leases')
        .values(ids.map((user_id) => ({ user_id, replica_id: null, epoch: 0, acquired_at: this.now(), workspace_store: mine })))
        .onConflict((oc) => oc.column('user_id').doNothing())
        .executeTakeFirst();
      claimed += Number(r.numUpdatedRows) + Number(added.numInsertedOrUpdatedRows ?? 0);
    }
    return claimed;
  }

  /** Records that this replica's store holds the workspaces `ids` (each written once per process). */
  async noteCopies(ids: readonly string[]): Promise<void> {
    const mine = this.opts.workspaceStore;
    const fresh = ids.filter((id) => !this.copies.has(id));
    if (!mine || !fresh.length) return;
    await noteCopies(this.db, fresh, mine);
    for (const id of fresh) this.copies.add(id);
  }

  /** This replica's store no longer holds workspace `id`. */
  async forgetCopy(id: string): Promise<void> {
    this.copies.delete(id);
    if (this.opts.workspaceStore) await forgetCopy(this.db, id, this.opts.workspaceStore);
  }

  /** The stores holding a copy of workspace `id`. */
  copiesOf(id: string): Promise<string[]> {
    return copiesOf(this.db, id);
  }

  /** Whether `userId`'s files are in another workspace store than this replica's (read only: nothing is claimed). */
  async filesElsewhere(userId: number): Promise<boolean> {
    const mine = this.opts.workspaceStore;
    if (!mine) return false;
    const row = await this.db.selectFrom('sandbox_leases').select('workspace_store').where('user_id', '=', userId).executeTakeFirst();
    return !!row?.workspace_store && row.workspace_store !== mine;
  }

  /** A store other than this one's: a live replica on it to reach it through, or away (seen lately), or lost ('here': it may be taken). */
  private async storeState(tx: Db, userId: number, store: string, now: number): Promise<WorkspaceHome> {
    const there = await tx
      .selectFrom('gateway_replicas')
      .selectAll()
      .where('workspace_store', '=', store)
      .where('heartbeat_at', '>', now - this.leaseMs)
      .where('draining_at', 'is', null)
      .where('internal_url', 'is not', null)
      .orderBy('started_at')
      .execute();
    // The same user goes to the same replica while the set does not change.
    const via = there[userId % Math.max(1, there.length)];
    if (via) return { where: 'elsewhere', store, via: toInfo(via) };
    const seen = await tx.selectFrom('workspace_stores').select('seen_at').where('id', '=', store).executeTakeFirst();
    if (seen && seen.seen_at > now - (this.opts.storeLostMs ?? STORE_LOST_MS)) return { where: 'away', store };
    return { where: 'here' };
  }

  /** The live replica holding `userId`'s sandbox, if one does. */
  async holderOf(userId: number): Promise<ReplicaInfo | undefined> {
    const row = await this.db
      .selectFrom('sandbox_leases as l')
      .innerJoin('gateway_replicas as r', 'r.id', 'l.replica_id')
      .select(['r.id', 'r.internal_url', 'r.sandbox_host', 'r.started_at', 'r.heartbeat_at', 'r.draining_at', 'r.workspace_store'])
      .where('l.user_id', '=', userId)
      .where('r.heartbeat_at', '>', this.now() - this.leaseMs)
      .executeTakeFirst();
    return row && toInfo(row);
  }

  /** Every replica whose heartbeat is fresh, this one included. */
  async live(): Promise<ReplicaInfo[]> {
    const rows = await this.db.selectFrom('gateway_replicas').selectAll().where('heartbeat_at', '>', this.now() - this.leaseMs).orderBy('started_at').execute();
    return rows.map(toInfo);
  }

  /** The workspace store this replica's sandboxes use (null without one). */
  get workspaceStore(): string | null {
    return this.opts.workspaceStore ?? null;
  }

  /** Whether this replica may take a lease now: not draining, and its last heartbeat fresh. */
  get takesLeases(): boolean {
    return !this.draining && this.fresh();
  }

  get isDraining(): boolean {
    return this.draining;
  }

  /** Marks this replica as stopping: it takes no new sandbox, and the others see it. */
  async drain(): Promise<void> {
    this.draining = true;
    await this.db.updateTable('gateway_replicas').set({ draining_at: this.now() }).where('id', '=', this.id).execute();
  }

  /**
   * Stops beating and leaves: releases every lease still held and removes this
   * replica's row, so the others take its users' sandboxes at once instead of after
   * `leaseMs`. Rows of replicas dead for ten lease times are removed on the way.
   */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    // Before the beat under way ends: a lease asked for meanwhile is refused, and no beat registers this replica again.
    this.draining = true;
    this.stopped = true;
    await this.beating;
    this.held.clear();
    await this.db.updateTable('sandbox_leases').set({ replica_id: null }).where('replica_id', '=', this.id).execute();
    await this.db.deleteFrom('gateway_replicas').where('id', '=', this.id).execute();
    await this.db.deleteFrom('gateway_replicas').where('heartbeat_at', '<', this.now() - 10 * this.leaseMs).execute();
  }
}
