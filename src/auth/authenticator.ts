/**
 * One way of signing in to the web app. Each way is one class that says who is signing
 * in, or why not: GitHub's OAuth web flow (github-authenticator.ts) and the one-time link
 * of an install without a GitHub app (link-authenticator.ts). Which are on is decided in
 * one place (authenticatorsFor, ./index.ts), so another way (an OpenID Connect provider,
 * say) is one more class and one more line there.
 *
 * An authenticator never starts a session: the sign-in page's handlers
 * (src/web/sign-in/page.ts) do that the same way for all of them (a new session id, the
 * sign-in recorded on the user, the browser sent to the chat), and show a refusal.
 */
import type { NextFunction, Request, Response } from 'express';
import type { recordSignIn, User } from '../accounts/accounts.js';

/** How a user signed in, as the users table records it (users.sign_in_method). */
export type SignInMethod = Parameters<typeof recordSignIn>[2];

/** The sign-in page's words for a sign-in that failed without a reason to give. */
export const TRY_AGAIN = 'Sign-in did not work: try again.';

/** A refusal the sign-in page shows from its address (/login?why=…), so it needs no session to carry it. */
export type NamedRefusal = 'link' | 'error';

export type SignInResult =
  | { ok: true; user: User }
  | {
      ok: false;
      /** For the person signing in, in their words: shown on the sign-in page. */
      message: string;
      /** For the log. */
      reason: string;
      /** Shown as /login?why=<why> rather than carried in the session. */
      why?: NamedRefusal;
    };

export interface Authenticator {
  /** Its name in addresses (/auth/<name>) and in the users table's sign-in method. */
  readonly name: SignInMethod;
  /** What the sign-in page's button says (for one that starts at a provider), or what it is called. */
  readonly label: string;
  /** The sign-in page's words above that button. */
  readonly intro?: string;
  /**
   * For a provider the browser is sent to (OAuth, OpenID Connect): GET /auth/<name> sends
   * it there. The provider sends it back to /auth/<name>/callback, which calls complete.
   */
  start?(req: Request, res: Response, next: NextFunction): void;
  /**
   * Who this request signs in (a provider's callback, a form posted), or a refusal that
   * says why. 'restart' when a provider sent the browser back without an answer: the
   * sign-in begins again (start).
   */
  complete(req: Request, res: Response): Promise<SignInResult | 'restart'>;
}
