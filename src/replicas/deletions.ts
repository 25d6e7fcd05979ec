/**
 * Which workspace stores hold a copy of each workspace (`workspace_copies`), and the
 * workspaces of deleted users (`workspace_deletions`; schema.ts). When gateways keep
 * workspaces on their own hosts' disks, a user's files can be on a store that is away or
 * lost when they are deleted, or on one they moved from. Each gateway removes its store's
 * copies of the workspaces listed as deleted (src/sandboxes/stops.ts), so the rest go
 * when their host does come back.
 */
import { deleteUser } from '../accounts/accounts.js';
import { sql } from 'kysely';
import type { Db } from '../store/store.js';

/**
 * Deletes the account of `userId` and, in the same transaction, lists the workspace its
 * row names as a deleted user's, for every store to remove: a workspace is on the list
 * only once no user has it, and whatever workspace the user had at the end is on it.
 */
export async function deleteAccountListingWorkspace(db: Db, userId: number, now = Date.now()): Promise<boolean> {
  return db.transaction().execute(async (tx) => {
    await tx
      .insertInto('workspace_deletions')
      .columns(['workspace_id', 'deleted_at'])
      .expression((eb) => eb.selectFrom('users').select(['workspace_id', sql<number>`CAST(${now} AS BIGINT)`.as('deleted_at')]).where('id', '=', userId).where('workspace_id', 'is not', null))
      .onConflict((oc) => oc.column('workspace_id').doNothing())
      .execute();
    return deleteUser(tx, userId);
  });
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

/** Records that workspace store `store` holds a copy of workspace `id` (again: nothing happens). */
export async function noteCopies(db: Db, ids: readonly string[], store: string): Promise<void> {
  for (let i = 0; i < ids.length; i += 500) {
    const rows = ids.slice(i, i + 500).map((workspace_id) => ({ workspace_id, store }));
    if (rows.length) await db.insertInto('workspace_copies').values(rows).onConflict((oc) => oc.columns(['workspace_id', 'store']).doNothing()).execute();
  }
}

/** The workspace stores holding a copy of workspace `id`. */
export async function copiesOf(db: Db, id: string): Promise<string[]> {
  const rows = await db.selectFrom('workspace_copies').select('store').where('workspace_id', '=', id).orderBy('store').execute();
  return rows.map((r) => r.store);
}

/** Store `store` no longer holds workspace `id`. */
export async function forgetCopy(db: Db, id: string, store: string): Promise<void> {
  await db.deleteFrom('workspace_copies').where('workspace_id', '=', id).where('store', '=', store).execute();
}
