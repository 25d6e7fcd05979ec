/**
 * What is done to a user as a whole: disable them (every way in closes and everything of
 * theirs that runs now ends; nothing is deleted), enable them again, delete them with
 * their data, and the cut-off that disabling and deleting share.
 *
 * The admin page and the command line call these same functions, each with the parts it
 * can reach. The gateway process reaches the live pages, the chat turns running now and
 * its own sandboxes. The command line runs beside it and reaches the store and the
 * sandbox containers only. It leaves `live` and `turns` out and says what it could not
 * end. The stored state comes out the same either way: a disabled user's sessions are
 * gone, and their tokens and sign-ins are refused (the membership check reads
 * `disabled_at`).
 *
 * Nothing here writes the audit log: the admin page wraps each call in its audit entry,
 * so the entry's outcome and duration cover the whole use-case.
 */
import { GatewayError } from '../errors.js';
import { getUser, setUserDisabled, type User } from '../accounts/accounts.js';
import { deleteAccountListingWorkspace } from '../replicas/deletions.js';
import type { Db } from '../store/store.js';

/** The web app's sessions: every one of a user's ends (WebSessions, or the sessions table itself). */
export interface UserSessions {
  endSessionsOf(userId: number): Promise<unknown>;
}

/** Pages connected to the live channel (the LiveHub): a user's are disconnected. */
export interface LivePages {
  signedOut(userId: number, everywhere: boolean): void;
}

/** Chat turns running now (the Agent): a user's are cancelled. */
export interface RunningTurns {
  cancelUser(userId: number): number;
}

/** A user's sandbox (the SandboxManager; the command line stops containers through the driver). */
export interface UserSandboxes {
  /** `by` names the admin who asked, to the user whose run it ends. */
  stopUser(userId: number, opts: { kill: true; by?: string }): Promise<unknown>;
}

/** Workspaces removed for good (the SandboxManager, which refuses while the user's sandbox runs). */
export interface Workspaces {
  destroyWorkspaceOf(user: User): Promise<void>;
  /** Other workspace stores' copies, once the account is gone: how many stores out of reach now remove theirs later (src/sandboxes/stops.ts). */
  removeDeletedElsewhere(user: User): Promise<{ storesLeft: number | undefined }>;
}

export interface UserParts {
  db: Db;
  sessions: UserSessions;
  sandboxes: UserSandboxes;
  /** Left out where no live channel runs: the gateway's membership sweep closes those pages instead. */
  live?: LivePages;
  /** Left out outside the gateway process: a turn running there then goes on to its end (nothing new starts: sign-ins and tokens are refused). */
  turns?: RunningTurns;
}

/** Ends everything of a user that works now: their turns, sessions, live pages and sandbox. `by`: the admin who asked. */
export async function cutOff(parts: UserParts, user: User, by?: string): Promise<void> {
  parts.turns?.cancelUser(user.id);
  await parts.sessions.endSessionsOf(user.id);
  parts.live?.signedOut(user.id, true);
  await parts.sandboxes.stopUser(user.id, { kill: true, by });
}

/** Disables a user: their sessions, tokens and sandbox stop working; nothing of theirs is deleted. */
export async function disableUser(parts: UserParts, user: User, by?: string): Promise<void> {
  await setUserDisabled(parts.db, user.id, true);
  await cutOff(parts, user, by);
}

/**
 * What still keeps an enabled user out, in words for whoever enabled them: enabling lifts
 * an admin's disable only, and a GitHub membership check that said no still refuses them.
 */
export function stillRefused(user: Pick<User, 'suspendedAt'>): string | undefined {
  return user.suspendedAt !== null ? 'GitHub membership still refuses them: they get in again once GitHub lists them' : undefined;
}

/** Lets a disabled user in again (their tokens work again; sessions ended stay ended). */
export async function enableUser(parts: Pick<UserParts, 'db'>, user: User): Promise<void> {
  await setUserDisabled(parts.db, user.id, false);
}

/**
 * Deletes a user and their data: disabled and cut off first, then their workspace, then
 * every row of theirs (the store cascades from users), their workspace listed for every
 * store to remove. How many workspace stores, out of reach now, still hold a copy of the
 * user's files (undefined: it could not be told), each removing it when one of its
 * gateways is back.
 */
export async function deleteUser(parts: UserParts & { workspaces: Workspaces }, user: User, by?: string): Promise<{ storesLeft: number | undefined }> {
  // Disabled first: no request of theirs gets in meanwhile (to make them a workspace elsewhere).
  await setUserDisabled(parts.db, user.id, true);
  await cutOff(parts, user, by);
  // The workspace they have now (the row read before may be older).
  const last = (await getUser(parts.db, user.id)) ?? user;
  try {
    await parts.workspaces.destroyWorkspaceOf(last);
  } catch (e) {
    // Left disabled: the admin meant them gone. Saying so, and what to do, is the admin's answer.
    const why = e instanceof Error ? e.message : String(e);
    throw new GatewayError(
      `${user.name} is disabled and signed out everywhere, but the removal of their files did not complete (${why}), so nothing else of theirs was deleted. Delete them again to try once more, or enable them to let them back in.`,
      { reason: 'workspace_unavailable', status: 503, cause: e },
    );
  }
  await deleteAccountListingWorkspace(parts.db, user.id);
  return parts.workspaces.removeDeletedElsewhere(last);
}
