/**
 * The workspaces of deleted users (`workspace_deletions`, schema.ts). Deleting a user
 * removes their files from the store they are in; when gateways keep workspaces on their
 * own hosts' disks, a copy can also be on a store that is away or lost at that moment, or
 * on one the user's files moved from. Each gateway removes its store's copies of the
 * workspaces listed here (src/sandboxes/stops.ts), so the rest go when their host does
 * come back.
 */
import type { Db } from '../store/store.js';

/** Lists workspace `id` as a deleted user's, for every store to remove (again: nothing happens). */
export async function markWorkspaceDeleted(db: Db, id: string, now = Date.now()): Promise<void> {
  await db.insertInto('workspace_deletions').values({ workspace_id: id, deleted_at: now }).onConflict((oc) => oc.column('workspace_id').doNothing()).execute();
}

/** Which of `ids` (the workspaces a store has) are deleted users', and named by no user now. */
export async function deletedAmong(db: Db, ids: readonly string[]): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < ids.length; i += 500) {
    const rows = await db
      .selectFrom('workspace_deletions as d')
      .leftJoin('users as u', 'u.workspace_id', 'd.workspace_id')
      .select('d.workspace_id')
      .where('d.workspace_id', 'in', ids.slice(i, i + 500))
      .where('u.id', 'is', null)
      .execute();
    out.push(...rows.map((r) => r.workspace_id));
  }
  return out;
}
