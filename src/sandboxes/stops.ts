/**
 * How a user's sandbox stops. Asked: an admin stops (cancels the run, then removes the
 * container) or kills it, or the gateway does when a user loses access. Not asked: idle
 * past `idleTimeoutSec`, or older than `maxLifetimeSec` (replaced at its next idle
 * moment), never while a run is in it or waiting for it. Either way the workspace is
 * kept and the next run starts a fresh sandbox.
 */
import type { Config } from '../config.js';
import { forgetSandboxContainer } from './records.js';
import { forgetCgroup } from './cgroup.js';
import { SandboxError } from './errors.js';
import type { Held, PartDeps } from './held.js';
import { askReplica, HOP_DELETIONS_PATH, HOP_STOP_PATH } from './remote.js';
import { deletedAmong } from '../replicas/deletions.js';
import { findLeftFor } from './adoption.js';
import { getUser } from '../accounts/accounts.js';
import type { Idle } from './idle.js';
import type { UserSandbox } from './live.js';
import { recordUse } from './usage.js';

/** How long a graceful stop waits for the cancelled run to end before the container goes. */
const STOP_GRACE_MS = 3_000;

/** Why `sb` should stop now, or undefined to keep it. */
export function stopReason(sb: UserSandbox, config: Config, now = Date.now()): string | undefined {
  if (sb.running > 0 || sb.queue.waiting > 0) return undefined;
  if (now - sb.lastActivity > config.idleTimeoutSec * 1000) return 'idle';
  if (now - sb.startedAt > config.maxLifetimeSec * 1000) return 'maximum lifetime reached';
  return undefined;
}

/** How often the reaper looks: often enough to stop an idle sandbox within a quarter of the timeout. */
export function reapIntervalMs(config: Config): number {
  return Math.min(30_000, (config.idleTimeoutSec * 1000) / 4);
}

/** How a user's sandbox is stopped (`stopUser`). */
export interface StopOptions {
  /** Remove the container at once instead of cancelling the run first. */
  kill?: boolean;
  /** The admin who asked, named to the user. */
  by?: string;
  /** Why, for a stop no admin asked for: the words after "Your sandbox was stopped". */
  cause?: string;
}

/** The stops an admin (or the gateway, for a user who lost access) asks for. */
export interface SandboxStops {
  /**
   * Stops (cancels the run, then removes the container) or kills a user's sandbox. `by`
   * names the admin who asked; `cause` replaces "by an admin" in what the user is told,
   * for a stop nobody asked for (e.g. "when your access to this gateway ended"). Either
   * way, the runs it ends say who stopped it. False if there was none, or it is being
   * stopped already. A sandbox still starting is not there to stop yet: for a user who
   * was disabled or suspended, the start checks the account once its container is up and
   * stops it itself (lifecycle.ts).
   */
  stopUser(userId: number, opts?: StopOptions): Promise<boolean>;
  /**
   * As `stopUser`, for a sandbox this gateway holds only: one another replica holds is
   * not asked of it (the internal hop's end, src/http/internal.ts).
   */
  stopUserHere(userId: number, opts?: StopOptions): Promise<boolean>;
  /** Stops every user sandbox with nothing running or queued; how many. */
  stopIdle(by?: string): Promise<number>;
  /**
   * Removes this store's copy of a user's workspace for good (their sandbox must be
   * stopped first; the account is deleted next, with the workspace listed as a deleted
   * user's for the other stores: src/users/users.ts, `removeDeletedElsewhere`).
   */
  destroyWorkspaceOf(user: { id: number; workspaceId: string | null }): Promise<void>;
  /**
   * Once a deleted user's account is gone: asks a gateway of each other workspace store
   * holding a copy of their workspace to remove it now. How many such stores still hold
   * one (no gateway of theirs answered, or it could not yet: each removes it when one
   * starts or next looks); undefined when the store could not be asked.
   */
  removeDeletedElsewhere(user: { workspaceId: string | null }): Promise<{ storesLeft: number | undefined }>;
  /** Removes this store's copies of deleted users' workspaces (`workspace_deletions`); how many. */
  removeDeletedWorkspaces(): Promise<number>;
}

export class Stops implements SandboxStops {
  constructor(private readonly deps: Pick<PartDeps, 'db' | 'driver' | 'volumes' | 'log' | 'replica' | 'hop'> & { held: Held; idle: Idle }) {}

  async stopUser(userId: number, opts: StopOptions = {}): Promise<boolean> {
    if (this.deps.held.users.has(userId)) return this.stopUserHere(userId, opts);
    // Not here: the replica holding it, if another does, is asked to stop it.
    const { replica, hop } = this.deps;
    if (!replica || !hop) return false;
    const holder = await replica.holderOf(userId);
    if (!holder) return this.stopLeft(userId, opts);
    if (holder.id === replica.id) return this.stopUserHere(userId, opts);
    if (!holder.internalUrl) throw new SandboxError(`the sandbox is held by the gateway ${holder.id}, which takes no requests from the others: stop it there`, 'held_elsewhere');
    const answer = await askReplica({ id: holder.id, internalUrl: holder.internalUrl }, HOP_STOP_PATH, { userId, ...opts }, { signer: hop, selfId: replica.id, timeoutMs: 30_000 });
    return typeof answer === 'object' && answer !== null && (answer as { stopped?: unknown }).stopped === true;
  }

  /**
   * No live replica holds the user's sandbox, but one may still run on this host: handed
   * over by a replica that stopped, or left by one that died, and not yet adopted. Under
   * the user's lease (so that no replica adopts it meanwhile), it is found and removed.
   */
  private async stopLeft(userId: number, opts: StopOptions): Promise<boolean> {
    const { replica, db, log } = this.deps;
    if (!replica) return false;
    const lease = await replica.acquire(userId).catch(() => undefined);
    if (!lease?.ok) return false;
    try {
      const user = await getUser(db, userId);
      const left = user && (await findLeftFor(this.deps, user, this.deps.held.removing));
      if (!left) return false;
      left.handle.detach();
      log.info({ user: user.name, container: left.info.id.slice(0, 12), by: opts.by }, 'stopping a sandbox no gateway held');
      this.deps.held.removing.add(left.info.id);
      try {
        await this.deps.driver.stop(left.info.id);
      } finally {
        this.deps.held.removing.delete(left.info.id);
      }
      await forgetSandboxContainer(db, userId, left.info.id).catch(() => {});
      return true;
    } finally {
      await replica.release(userId);
    }
  }

  async stopUserHere(userId: number, opts: StopOptions = {}): Promise<boolean> {
    const { stopping, users } = this.deps.held;
    const sb = users.get(userId);
    if (!sb) return false;
    if (stopping.has(userId)) return false;
    stopping.add(userId);
    try {
      return await this.stopUserNow(sb, opts);
    } finally {
      stopping.delete(userId);
    }
  }

  async stopIdle(by?: string): Promise<number> {
    let n = 0;
    for (const sb of [...this.deps.held.users.values()]) {
      if (sb.running === 0 && sb.queue.waiting === 0 && (await this.stopUser(sb.owner.userId, { by }))) n++;
    }
    return n;
  }

  async destroyWorkspaceOf(user: { id: number; workspaceId: string | null }): Promise<void> {
    if (this.deps.held.users.has(user.id)) throw new SandboxError('the user still has a sandbox running', 'busy');
    const id = user.workspaceId;
    if (!id) return;
    await this.deps.volumes.destroy(id);
    await this.deps.replica?.forgetCopy(id);
  }

  async removeDeletedElsewhere(user: { workspaceId: string | null }): Promise<{ storesLeft: number | undefined }> {
    const { replica, hop, volumes, log } = this.deps;
    const id = user.workspaceId;
    if (!replica || !hop || !id) return { storesLeft: 0 };
    try {
      const stores = (await replica.copiesOf(id)).filter((s) => s !== volumes.storeId);
      if (!stores.length) return { storesLeft: 0 };
      // A gateway of each store holding a copy, all asked at once to remove their copies now.
      const live = await replica.live();
      await Promise.allSettled(
        stores.map(async (store) => {
          const r = live.find((x) => x.id !== replica.id && x.internalUrl && x.workspaceStore === store);
          if (!r) return;
          await askReplica({ id: r.id, internalUrl: r.internalUrl! }, HOP_DELETIONS_PATH, {}, { signer: hop, selfId: replica.id, timeoutMs: 10_000 }).catch((e: unknown) =>
            log.warn({ err: e, store, replica: r.id }, 'could not ask a gateway on another workspace store to remove a deleted user’s files: it does when it next looks'),
          );
        }),
      );
      const storesLeft = (await replica.copiesOf(id)).filter((s) => s !== volumes.storeId).length;
      if (storesLeft) log.warn({ workspace: id, stores: storesLeft }, 'a deleted user’s files are still on other workspace stores: each removes them when one of its gateways starts or next looks');
      return { storesLeft };
    } catch (e) {
      log.warn({ err: e, workspace: id }, 'could not ask the other workspace stores to remove a deleted user’s files: each does when it next looks');
      return { storesLeft: undefined };
    }
  }

  /** The removal under way: a start, the timer and a hop asking at once share it. */
  private removing?: Promise<number>;

  removeDeletedWorkspaces(): Promise<number> {
    this.removing ??= this.removeDeletedNow().finally(() => (this.removing = undefined));
    return this.removing;
  }

  private async removeDeletedNow(): Promise<number> {
    const { replica, volumes, db, held, log } = this.deps;
    if (!replica || !volumes.localIds) return 0;
    const gone = await deletedAmong(db, await volumes.localIds());
    let n = 0;
    for (const id of gone) {
      // Never one a sandbox here has mounted (ids are never given twice: this is a guard).
      if ([...held.users.values()].some((sb) => sb.workspaceId === id)) continue;
      try {
        await volumes.destroy(id);
        await replica.forgetCopy(id);
        n++;
      } catch (e) {
        log.warn({ err: e, workspace: id }, 'could not remove a deleted user’s workspace from this store: tried again later');
      }
    }
    if (n) log.info({ workspaces: n, store: volumes.storeId }, 'removed this store’s copies of deleted users’ workspaces');
    return n;
  }

  /** Stops the user's sandbox now, whatever it is doing (its use recorded, its container removed). */
  async stopSandbox(userId: number, reason: string): Promise<void> {
    const { held, idle, driver, db, log } = this.deps;
    const sb = held.users.get(userId);
    if (!sb) return;
    // Its count is taken now (the write goes on while the container stops), and it is no
    // longer the user's before anything is awaited: a second stop finds nothing to do.
    const used = recordUse(this.deps, sb, true);
    held.users.delete(userId);
    log.info({ user: sb.owner.name, reason }, 'stopping sandbox');
    idle.wake(sb);
    held.removing.add(sb.handle.id);
    try {
      await driver.stop(sb.handle.id);
    } finally {
      held.removing.delete(sb.handle.id);
    }
    forgetCgroup(sb.handle.id);
    await used;
    await forgetSandboxContainer(db, userId, sb.handle.id);
    // Only now: until the container is gone, no other replica may start one for the user.
    // Not when a run started them a new one meanwhile (its start holds the lease again).
    if (!held.users.has(userId) && !held.starting.has(userId)) await this.deps.replica?.release(userId);
  }

  private async stopUserNow(sb: UserSandbox, opts: StopOptions): Promise<boolean> {
    const userId = sb.owner.userId;
    const who = opts.cause ?? `by ${opts.by ? `an admin (${opts.by})` : 'an admin'}`;
    sb.stopNotice = opts.kill
      ? `Your sandbox was killed ${who}, so this run ended. Files in /workspace are kept; the next run starts a fresh sandbox (Python variables are lost).`
      : `Your sandbox was stopped ${who}, so this run was cancelled. Files in /workspace are kept; the next run starts a fresh sandbox (Python variables are lost).`;
    this.deps.idle.wake(sb);
    if (!opts.kill && sb.inFlight) {
      try {
        sb.handle.send({ op: 'cancel', id: `c${sb.inFlight}`, target: sb.inFlight });
      } catch {
        /* runner gone: stopping settles the run */
      }
      const deadline = Date.now() + STOP_GRACE_MS;
      while (sb.run && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
    }
    await this.stopSandbox(userId, opts.kill ? `killed ${who}` : `stopped ${who}`);
    return true;
  }
}
