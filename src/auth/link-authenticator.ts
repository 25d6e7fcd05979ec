/**
 * Signing in with a one-time link (src/auth/login-links.ts), for an install without a
 * GitHub app: printed at start for the local user, or made by `sandgate users login-link`.
 * Opening the link shows a page with a button that posts it (the sign-in routes), so a
 * link preview cannot use it up; the post is what completes. A link signs in only a user
 * who may come in now: not disabled and, on a GitHub install, a member GitHub confirms.
 */
import type { Request } from 'express';
import { getUser } from '../accounts/accounts.js';
import type { Logger } from '../logger.js';
import type { Db } from '../store/store.js';
import type { Authenticator, SignInResult } from './authenticator.js';
import { consumeLoginLink, loginLinkUsable } from './login-links.js';
import type { Membership } from './membership.js';

export const LINK_REFUSED = 'That sign-in link is not valid: it was used already, has expired, or is mistyped. Ask for a fresh one.';

export class LinkAuthenticator implements Authenticator {
  readonly name = 'link';
  readonly label = 'Sign in with a one-time link';
  private readonly log: Logger;

  constructor(private readonly deps: { db: Db; membership: Membership; logger: Logger }) {
    this.log = deps.logger.child({ module: 'web-auth' });
  }

  /** Whether the link with this secret would sign in now, without using it up. */
  usable(secret: string): Promise<boolean> {
    return loginLinkUsable(this.deps.db, secret);
  }

  /** The form posted from the link's page (its `secret` field): uses the link up. */
  async complete(req: Request): Promise<SignInResult> {
    const { db, membership } = this.deps;
    const r = await consumeLoginLink(db, String((req.body as { secret?: unknown } | undefined)?.secret ?? ''));
    const user = r.ok ? await getUser(db, r.userId) : undefined;
    if (!user) {
      const reason = r.ok ? 'no user' : r.reason;
      this.log.warn({ reason }, 'sign-in link refused');
      return { ok: false, message: LINK_REFUSED, reason, why: 'link' };
    }
    const allowed = await membership.confirm(user.id);
    if (!allowed.ok) return { ok: false, message: allowed.message, reason: allowed.reason };
    return { ok: true, user };
  }
}
