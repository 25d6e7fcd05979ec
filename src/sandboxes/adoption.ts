/**
 * After a gateway restart: the containers an earlier run left are found by label and
 * adopted when the store maps them to a user whose workspace they mount and their runner
 * answers; every other one is removed (with its workspace, if it was a pooled sandbox no
 * user took). No orphans either way.
 *
 * With other gateway replicas on the same sandbox host, a container is adopted only
 * under its user's lease (src/replicas/leases.ts), and what a live replica holds is left
 * alone: its users' sandboxes (by the owner label, which is there before the store
 * records the container) and its warm pool (by the replica label).
 */
import type { Logger } from '../logger.js';
import { sandboxOwnerId } from './records.js';
import type { Db } from '../store/store.js';
import { getUser, workspaceInUse, type User } from '../accounts/accounts.js';
import type { SandboxDriver, SandboxHandle, SandboxInfo } from './types.js';
import type { WorkspaceStore } from './types.js';
import type { Replica } from '../replicas/leases.js';

export const LABEL_WORKSPACE = 'org.sandgate.workspace';
export const LABEL_ROLE = 'org.sandgate.role';
/** How long a preflight container may be another gateway's check under way (one takes seconds). */
const PREFLIGHT_GRACE_MS = 120_000;
/** The replica whose warm pool a pooled container is in. */
export const LABEL_REPLICA = 'org.sandgate.replica';

/** What a serving replica's sweep adds: what it holds or makes itself, and how it takes a user's sandbox. */
export interface Sweep {
  ownsNow(c: SandboxInfo): boolean;
  take(user: User): Promise<unknown>;
}

export interface Leftovers {
  driver: SandboxDriver;
  db: Db;
  volumes: WorkspaceStore;
  log: Logger;
  replica?: Replica;
}

/**
 * Calls `adopt` for each container kept (its user, its reconnected handle); removes the
 * rest, but what live replicas hold. At start, that is everything an earlier run left.
 * A replica that is serving sweeps the same way from time to time (`ownsNow` names what
 * it holds or is starting, stopping or pooling itself): then what a user's lease in its
 * own name covers is left alone too, and what no live replica holds (a sandbox handed
 * over and never asked for again, a dead replica's pool or sandboxes) is adopted or removed.
 */
export async function adoptOrRemove(deps: Leftovers, adopt: (user: User, handle: SandboxHandle, info: SandboxInfo) => void, sweep?: Sweep): Promise<void> {
  const ownsNow = sweep?.ownsNow;
  const { driver, db, log, replica } = deps;
  const containers = await driver.list();
  // Read after the listing: a replica whose pool container is listed registered before it was made, so it is in this list.
  const others = replica ? new Set((await replica.live()).map((r) => r.id).filter((id) => id !== replica.id)) : new Set<string>();
  for (const c of containers) {
    // Another gateway's preflight check on this host, under way: it removes its own.
    if (c.labels[LABEL_ROLE] === 'preflight' && Date.now() - c.createdAt < PREFLIGHT_GRACE_MS) continue;
    if (ownsNow?.(c)) continue;
    // The user's files went to another host's store (this one was taken for lost while it
    // was away): a container here works on a workspace that is no longer theirs.
    if (replica && c.ownerId !== undefined && (await replica.filesElsewhere(c.ownerId))) {
      await removeLeftover(deps, c);
      log.info({ container: c.id.slice(0, 12), user: c.owner }, 'removed a sandbox whose user\'s files are on another host now');
      continue;
    }
    const pooledByOther = c.labels[LABEL_ROLE] === 'pool' && others.has(c.labels[LABEL_REPLICA] ?? '');
    const holder = replica && c.ownerId !== undefined ? await replica.holderOf(c.ownerId) : undefined;
    if (pooledByOther || (holder && (holder.id !== replica!.id || ownsNow))) continue;
    const userId = await sandboxOwnerId(db, c.id);
    const user = userId === undefined ? undefined : await getUser(db, userId);
    const candidate = user && c.running && user.workspaceId === c.labels[LABEL_WORKSPACE];
    // A serving replica takes a user's sandbox the way a run does (one start per user at a
    // time), so a run arriving meanwhile never adopts the same container a second time.
    if (sweep && candidate) {
      await sweep.take(user).catch((e: unknown) => log.warn({ err: (e as Error).message, user: user.name }, 'could not take a sandbox no replica holds'));
      continue;
    }
    // A pool whose replica was dead when this sweep began may be live again (its database was away for a moment): asked once more.
    if (sweep && replica && c.labels[LABEL_ROLE] === 'pool' && c.labels[LABEL_REPLICA] && (await replica.live()).some((r) => r.id === c.labels[LABEL_REPLICA])) continue;
    // Taken by another replica since it was looked at: theirs.
    const lease = candidate && replica ? await replica.acquire(user.id) : undefined;
    if (lease && !lease.ok) continue;
    const handle = candidate ? await driver.attach(c.id) : undefined;
    if (user && handle) {
      adopt(user, handle, c);
      log.info({ user: user.name, container: c.id.slice(0, 12) }, 'adopted sandbox');
      continue;
    }
    if (lease?.ok) await replica!.release(user!.id);
    await removeLeftover(deps, c);
    log.info({ container: c.id.slice(0, 12) }, 'removed a sandbox left by an earlier run');
  }
}

/**
 * The running container a gateway that held `user`'s sandbox left on this host (it
 * stopped, or died and its lease ran out), reattached; undefined when there is none.
 * Called under the user's lease, before starting them a new one.
 */
export async function findLeftFor(
  deps: Pick<Leftovers, 'driver' | 'db'>,
  user: User,
  /** Containers this gateway is removing now: never adopted back. */
  removing: ReadonlySet<string> = new Set(),
): Promise<{ handle: SandboxHandle; info: SandboxInfo } | undefined> {
  if (!user.workspaceId) return undefined;
  for (const c of await deps.driver.list()) {
    // A sandbox taken from a warm pool keeps its pool label: the store says whose it is.
    if (!c.running || removing.has(c.id) || c.labels[LABEL_WORKSPACE] !== user.workspaceId) continue;
    if (c.labels[LABEL_ROLE] !== 'user' && c.labels[LABEL_ROLE] !== 'pool') continue;
    if ((await sandboxOwnerId(deps.db, c.id)) !== user.id) continue;
    const handle = await deps.driver.attach(c.id);
    if (handle) return { handle, info: c };
  }
  return undefined;
}

/** Removes a container no one holds, and its workspace if it was a pooled sandbox's that no user took. */
export async function removeLeftover(deps: Pick<Leftovers, 'driver' | 'db' | 'volumes'>, c: SandboxInfo): Promise<void> {
  await deps.driver.stop(c.id);
  const ws = c.labels[LABEL_WORKSPACE];
  if (c.labels[LABEL_ROLE] === 'pool' && ws && !(await workspaceInUse(deps.db, ws))) await deps.volumes.destroy(ws).catch(() => {});
}
