/**
 * Sandboxes as an operator sees them from outside the gateway process: the containers
 * carrying this gateway's label, matched to users through the store. The CLI does not
 * build a second SandboxManager: one would adopt (and so disturb) the running gateway's
 * containers. Stopping a container is safe: the gateway notices and starts a fresh one
 * at the user's next run; the workspace stays.
 */
import type { SandboxDriver } from '../sandboxes/types.js';
import { forgetSandboxContainer, sandboxOwnerId } from '../sandboxes/records.js';
import type { Db } from '../store/store.js';
import { getUser, type User } from '../accounts/accounts.js';

export interface SandboxRow {
  /** Undefined for a warm-pool container not yet handed to a user. */
  user?: string;
  userId?: number;
  container: string;
  running: boolean;
  createdAt: number;
}

/** The user a container belongs to: the store's mapping first (pooled containers keep no owner label), then the label. */
async function ownerOf(db: Db, c: { id: string; ownerId?: number }): Promise<User | undefined> {
  const id = (await sandboxOwnerId(db, c.id)) ?? c.ownerId;
  return id === undefined ? undefined : getUser(db, id);
}

export async function listSandboxes(driver: SandboxDriver, db: Db): Promise<SandboxRow[]> {
  const rows: SandboxRow[] = [];
  for (const c of await driver.list()) {
    const u = await ownerOf(db, c);
    rows.push({ user: u?.name, userId: u?.id, container: c.id, running: c.running, createdAt: c.createdAt });
  }
  return rows.sort((a, b) => (a.user ?? '\uffff').localeCompare(b.user ?? '\uffff') || a.createdAt - b.createdAt);
}

/** Stops every container of `user`; returns how many. */
export async function stopUserSandbox(driver: SandboxDriver, db: Db, user: User): Promise<number> {
  const mine = (await listSandboxes(driver, db)).filter((s) => s.userId === user.id);
  for (const s of mine) await driver.stop(s.container);
  await forgetSandboxContainer(db, user.id);
  return mine.length;
}
