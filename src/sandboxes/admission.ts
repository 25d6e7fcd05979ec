/**
 * Whose code may run: no sandbox starts, no run begins and no workspace opens for an
 * account an admin disabled or the GitHub membership check suspended.
 *
 * Sign-ins and tokens are refused for such an account already. This check is for work
 * let in before: a chat turn or an API completion still running in the gateway when the
 * account was disabled. The command line disables from a second process and cannot
 * cancel that turn; without this check, the turn's next run would start a fresh sandbox.
 * A run that was queued on a sandbox that was then stopped comes back through
 * `execute`, so this check refuses it too.
 */
import { getUser, type User } from '../accounts/accounts.js';
import type { Db } from '../store/store.js';
import { SandboxError } from './errors.js';
import type { SandboxOwner } from './types.js';

/**
 * The owner's row, read once for the caller to use (its ceiling, its workspace).
 * Undefined for an unknown user, whom the caller refuses in its own way. Throws
 * `account_disabled` for an account that is disabled or suspended.
 */
export async function admittedAccount(db: Db, owner: SandboxOwner): Promise<User | undefined> {
  const user = await getUser(db, owner.userId);
  if (!user) return undefined;
  if (user.disabledAt !== null) throw new SandboxError('this account is disabled on this gateway: no code runs for it', 'account_disabled');
  if (user.suspendedAt !== null) throw new SandboxError('this account has lost access to this gateway (GitHub membership): no code runs for it', 'account_disabled');
  return user;
}
