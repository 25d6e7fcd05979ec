/**
 * Workspace stores as an operator sees them (`sandgate stores`): each store the database
 * knows of, whether a gateway on it is running, what it holds, and forgetting one whose
 * host is retired for good.
 *
 * A store is known from `workspace_stores` (a gateway on it beat), the leases (users whose
 * files it has), `workspace_copies` (workspaces it holds a copy of) and the live replicas.
 * Forgetting a lost store takes it out of all of them but `workspace_deletions`: that list
 * stays, so a host that comes back after all still removes the deleted users' files when
 * its gateway starts, and records again what it holds.
 */
import { sql } from 'kysely';
import { GatewayError } from '../errors.js';
import { serializable, type Db } from '../store/store.js';
import { STORE_LOST_MS } from './leases.js';

/** One workspace store. */
export interface WorkspaceStoreRow {
  id: string;
  /** `live`: a gateway on it is running; `away`: none now, one seen within the lost time; `lost`: none for longer. */
  state: 'live' | 'away' | 'lost';
  /** When a gateway on it last beat (epoch ms); null when none ever did in this release. */
  seenAt: number | null;
  /** Its running gateways. */
  gateways: { id: string; sandboxHost: string; draining: boolean }[];
  /** Users whose files are on it (their last sandbox was). */
  users: number;
  /** Workspaces it holds a copy of. */
  copies: number;
  /** Of those, deleted users' workspaces it has not removed yet (it does when one of its gateways runs). */
  deletedCopies: number;
}

export interface StoreTimes {
  /** A replica whose heartbeat is older than this is not running (SANDGATE_REPLICA_LEASE_MS). */
  leaseMs: number;
  /** A store with no running gateway for this long is lost (SANDGATE_HOST_LOST_SEC); default STORE_LOST_MS. */
  lostMs?: number;
  now?: number;
}

/** Why a store was not forgotten: it is in use, away for a restart, or unknown. */
export class StoreNotForgotten extends GatewayError {
  override name = 'StoreNotForgotten';
  constructor(message: string) {
    super(message, { reason: 'invalid_request', status: 409 });
  }
}

const countBy = (rows: { store: string | null; n: number | string | bigint }[]) => new Map(rows.filter((r) => r.store !== null).map((r) => [r.store!, Number(r.n)]));

/** How many copies of deleted users' workspaces each store holds (to remove when one of its gateways runs). */
const deletedCopiesByStore = (db: Db) =>
  db
    .selectFrom('workspace_copies as c')
    .innerJoin('workspace_deletions as d', 'd.workspace_id', 'c.workspace_id')
    .select(['c.store as store', sql<number>`COUNT(*)`.as('n')])
    .groupBy('c.store');

/** Every workspace store the database knows of, by id. */
export async function listWorkspaceStores(db: Db, t: StoreTimes): Promise<WorkspaceStoreRow[]> {
  const now = t.now ?? Date.now();
  const lostMs = t.lostMs ?? STORE_LOST_MS;
  const seen = new Map((await db.selectFrom('workspace_stores').select(['id', 'seen_at']).execute()).map((r) => [r.id, Number(r.seen_at)]));
  const live = await db
    .selectFrom('gateway_replicas')
    .select(['id', 'sandbox_host', 'draining_at', 'workspace_store'])
    .where('heartbeat_at', '>', now - t.leaseMs)
    .where('workspace_store', 'is not', null)
    .orderBy('started_at')
    .execute();
  const users = countBy(await db.selectFrom('sandbox_leases').select(['workspace_store as store', sql<number>`COUNT(*)`.as('n')]).groupBy('workspace_store').execute());
  const copies = countBy(await db.selectFrom('workspace_copies').select(['store', sql<number>`COUNT(*)`.as('n')]).groupBy('store').execute());
  const deleted = countBy(await deletedCopiesByStore(db).execute());
  const ids = new Set([...seen.keys(), ...live.map((r) => r.workspace_store!), ...users.keys(), ...copies.keys()]);
  return [...ids].sort().map((id) => {
    const gateways = live.filter((r) => r.workspace_store === id).map((r) => ({ id: r.id, sandboxHost: r.sandbox_host, draining: r.draining_at !== null }));
    const seenAt = seen.get(id) ?? null;
    const state = gateways.length ? 'live' : seenAt !== null && seenAt > now - lostMs ? 'away' : 'lost';
    return { id, state, seenAt, gateways, users: users.get(id) ?? 0, copies: copies.get(id) ?? 0, deletedCopies: deleted.get(id) ?? 0 };
  });
}

/** What forgetting a store took out. */
export interface ForgottenStore {
  copies: number;
  deletedCopies: number;
  users: number;
}

/**
 * Forgets workspace store `id`, whose host is retired: its copies of workspaces (deleted
 * users' among them, which no longer count as still on a host), the users' record that
 * their files are on it (their next run starts a fresh workspace, as it would anyway on
 * a lost store), and its heartbeat. Refused while a gateway on it runs, or one was seen
 * within the lost time (it may be restarting), in the same serializable transaction as
 * the forgetting: a gateway starting on it meanwhile is never half forgotten.
 */
export async function forgetWorkspaceStore(db: Db, id: string, t: StoreTimes): Promise<ForgottenStore> {
  const lostMs = t.lostMs ?? STORE_LOST_MS;
  return serializable(db, async (tx) => {
    // Read again by each attempt: one retried after a conflict judges by its own time.
    const now = t.now ?? Date.now();
    const running = await tx.selectFrom('gateway_replicas').select(['id', 'sandbox_host']).where('workspace_store', '=', id).where('heartbeat_at', '>', now - t.leaseMs).executeTakeFirst();
    if (running) throw new StoreNotForgotten(`gateway ${running.id} on ${running.sandbox_host} is running on workspace store ${id}: a store is forgotten only when its host is retired and none of its gateways runs`);
    const seen = await tx.selectFrom('workspace_stores').select('seen_at').where('id', '=', id).executeTakeFirst();
    if (seen && Number(seen.seen_at) > now - lostMs) {
      const ago = Math.round((now - Number(seen.seen_at)) / 1000);
      throw new StoreNotForgotten(
        `a gateway on workspace store ${id} was running ${ago} s ago: it may be restarting. A store is forgotten only once it is lost, ${Math.round(lostMs / 1000)} s (SANDGATE_HOST_LOST_SEC) after its last gateway stopped`,
      );
    }
    const deletedCopies = countBy(await deletedCopiesByStore(tx).where('c.store', '=', id).execute()).get(id) ?? 0;
    const copies = Number((await tx.deleteFrom('workspace_copies').where('store', '=', id).executeTakeFirst()).numDeletedRows);
    const users = Number((await tx.updateTable('sandbox_leases').set({ workspace_store: null }).where('workspace_store', '=', id).executeTakeFirst()).numUpdatedRows);
    const stores = Number((await tx.deleteFrom('workspace_stores').where('id', '=', id).executeTakeFirst()).numDeletedRows);
    if (!copies && !users && !stores) throw new StoreNotForgotten(`no workspace store ${id} is known (sandgate stores list shows them)`);
    return { copies, deletedCopies, users };
  });
}
