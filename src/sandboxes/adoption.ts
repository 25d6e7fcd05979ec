/**
 * After a gateway restart: the containers an earlier run left are found by label and
 * adopted when the store maps them to a user whose workspace they mount and their runner
 * answers; every other one is removed (with its workspace, if it was a pooled sandbox no
 * user took). No orphans either way.
 */
import type { Logger } from '../logger.js';
import { sandboxOwnerId } from './records.js';
import type { Db } from '../store/store.js';
import { getUser, workspaceInUse, type User } from '../accounts/accounts.js';
import type { SandboxDriver, SandboxHandle, SandboxInfo } from './types.js';
import type { WorkspaceVolumes } from './volumes.js';

export const LABEL_WORKSPACE = 'org.sandgate.workspace';
export const LABEL_ROLE = 'org.sandgate.role';

export interface Leftovers {
  driver: SandboxDriver;
  db: Db;
  volumes: WorkspaceVolumes;
  log: Logger;
}

/** Calls `adopt` for each container kept (its user, its reconnected handle); removes the rest. */
export async function adoptOrRemove(deps: Leftovers, adopt: (user: User, handle: SandboxHandle, info: SandboxInfo) => void): Promise<void> {
  const { driver, db, log } = deps;
  for (const c of await driver.list()) {
    const userId = await sandboxOwnerId(db, c.id);
    const user = userId === undefined ? undefined : await getUser(db, userId);
    const mine = user && c.running && user.workspaceId === c.labels[LABEL_WORKSPACE];
    const handle = mine ? await driver.attach(c.id) : undefined;
    if (user && handle) {
      adopt(user, handle, c);
      log.info({ user: user.name, container: c.id.slice(0, 12) }, 'adopted sandbox');
      continue;
    }
    await removeLeftover(deps, c);
    log.info({ container: c.id.slice(0, 12) }, 'removed a sandbox left by an earlier run');
  }
}

/** Removes a container no one holds, and its workspace if it was a pooled sandbox's that no user took. */
export async function removeLeftover(deps: Pick<Leftovers, 'driver' | 'db' | 'volumes'>, c: SandboxInfo): Promise<void> {
  await deps.driver.stop(c.id);
  const ws = c.labels[LABEL_WORKSPACE];
  if (c.labels[LABEL_ROLE] === 'pool' && ws && !(await workspaceInUse(deps.db, ws))) await deps.volumes.destroy(ws).catch(() => {});
}
