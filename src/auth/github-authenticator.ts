/**
 * Signing in with GitHub (github.com or an Enterprise Server): the OAuth web flow of
 * passport-github2, run on its own (no passport middleware), then the allow-list and the
 * binding to GitHub's account id.
 *
 * - The OAuth `state` is single-use: kept in the session at start, deleted when the
 *   callback checks it. A callback with another state is refused. Two callbacks at once
 *   on one session each check their own copy of it (a request reads the session once);
 *   of those, one signs in, because GitHub exchanges a code for a token only once.
 * - Who signed in is what GitHub's /user says for the new token (AllowList.decide, with
 *   the member's own token, scope read:org), never the profile's fields; Membership.admit
 *   finds or makes the user bound to that GitHub account and keeps the token sealed for
 *   the re-checks (src/auth/membership.ts).
 * - GitHub not answering is a refusal that says so, not an error page.
 * - The sign-in page says only words of ours: the refusals the membership check gives,
 *   or a fixed sentence for GitHub's error code. The callback's `error_description` is
 *   whatever its address says, and anyone can write an address.
 */
import type { NextFunction, Request, Response } from 'express';
import type { StrategyCreatedStatic } from 'passport';
import { Strategy as GitHubStrategy, type Profile } from 'passport-github2';
import type { User } from '../accounts/accounts.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { TRY_AGAIN, type Authenticator, type SignInResult } from './authenticator.js';
import { githubEndpoints } from './github.js';
import type { Admission, Membership } from './membership.js';

/** What the verify callback comes to: the membership's admission, or the allow-list's refusal (its reason, if it gave one). */
type Verdict = Admission | { ok: false; message: string | undefined };

/**
 * A refusal of the verify callback below (the allow-list's, the membership's): the only
 * `fail` whose words the sign-in page shows. passport-oauth2 fails with words of its own
 * too, among them a callback's `error_description`, which is the visitor's to choose.
 */
class Refusal {
  constructor(readonly message: string | undefined) {}
}

/** GitHub's error codes for an authorize request it ended (?error=…), in our words; any other code gets TRY_AGAIN. */
const GITHUB_ERRORS = new Map([['access_denied', 'GitHub did not let you sign in (access denied).']]);

/** What one run of the OAuth strategy on a request came to (the calls passport-strategy defines). */
type StrategyOutcome =
  | { kind: 'success'; user: User }
  | { kind: 'fail'; refusal?: Refusal; said?: string }
  | { kind: 'error'; err: unknown }
  | { kind: 'redirect'; url: string; status: number };

export class GitHubAuthenticator implements Authenticator {
  readonly name = 'github';
  readonly label = 'Sign in with GitHub';
  readonly intro = "Sign in with your GitHub account. Members of this team's allowed users, organisations and teams get in.";
  private readonly strategy: GitHubStrategy;
  private readonly log: Logger;

  constructor(deps: { config: Config; membership: Membership; logger: Logger }) {
    const { config, membership } = deps;
    const log = (this.log = deps.logger.child({ module: 'web-auth' }));
    const ep = githubEndpoints(config);
    this.strategy = new GitHubStrategy(
      {
        clientID: config.githubClientId,
        clientSecret: config.githubClientSecret,
        callbackURL: `${config.publicUrl.replace(/\/$/, '')}/auth/github/callback`,
        authorizationURL: ep.authorizationURL,
        tokenURL: ep.tokenURL,
        userProfileURL: ep.userProfileURL,
        userEmailURL: ep.userEmailURL,
        scope: ['read:org'],
        // passport-oauth2 takes `state: true` (a single-use state in the session); the types say string.
        state: true as unknown as string,
      },
      // Who signed in is what GitHub's /user says for this token (decide reads it), not the profile's fields.
      (accessToken: string, _refresh: string, _profile: Profile, done: (err: unknown, user?: unknown, info?: unknown) => void) => {
        membership.allow
          .decide(accessToken)
          .then(
            async (d): Promise<Verdict> => (d.allowed ? membership.admit(accessToken, d) : { ok: false, message: d.reason }),
            (e: unknown): Verdict => {
              log.warn({ err: e }, 'GitHub could not be asked about a sign-in');
              return { ok: false, message: 'GitHub could not be reached to check your membership: try again in a moment.' };
            },
          )
          .then(
            (admitted) => (admitted.ok ? done(null, admitted.user) : done(null, false, new Refusal(admitted.message))),
            (e: unknown) => done(e),
          )
          // done() ends the sign-in (the strategy's outcome): a throw from it is a fault of ours, logged.
          .catch((e: unknown) => log.error({ err: e }, 'the GitHub sign-in could not be completed'));
      },
    );
  }

  /**
   * GET /auth/github: to GitHub's authorize page, with a fresh state kept in the session.
   * passport-oauth2 takes any request with a `code` or an `error` for a callback, here too;
   * such a request is no start of a sign-in (GitHub answers at the callback), so it goes to
   * the sign-in page as a sign-in that did not work, and nothing runs.
   */
  start(req: Request, res: Response, next: NextFunction): void {
    if (req.query.code !== undefined || req.query.error !== undefined) return res.redirect(303, '/login?why=error');
    this.run(req).then((o) => {
      if (o.kind === 'redirect') return void res.status(o.status).set('Location', o.url).set('Content-Length', '0').end();
      next(o.kind === 'error' ? o.err : new Error(`the GitHub sign-in could not start (${o.kind})`));
    }, next);
  }

  async complete(req: Request): Promise<SignInResult | 'restart'> {
    // GitHub answers with a code or an error; a callback with neither begins again (as passport-oauth2 would).
    if (!req.query.code && !req.query.error) return 'restart';
    const o = await this.run(req);
    if (o.kind === 'success') return { ok: true, user: o.user };
    if (o.kind === 'fail') {
      // Words of ours only: the verify callback's refusal, else GitHub's code named (not its description), else TRY_AGAIN.
      const code = typeof req.query.error === 'string' ? req.query.error : undefined;
      const message = o.refusal?.message ?? (code === undefined ? undefined : GITHUB_ERRORS.get(code)) ?? TRY_AGAIN;
      const reason = o.refusal?.message ?? (code === undefined ? (o.said ?? 'refused') : `GitHub: ${GITHUB_ERRORS.has(code) ? code : 'an unknown error'}`);
      // What passport-oauth2 said goes to the log only (cut short: it may be the visitor's text).
      this.log.info({ reason, ...(o.said === undefined ? {} : { said: o.said.slice(0, 200) }) }, 'GitHub sign-in refused');
      return { ok: false, message, reason };
    }
    this.log.warn({ err: o.kind === 'error' ? o.err : `an unexpected ${o.kind}` }, 'GitHub sign-in failed');
    return { ok: false, message: TRY_AGAIN, reason: 'error', why: 'error' };
  }

  /** One run of the strategy on this request, as passport runs one: a copy of it with the outcomes bound. */
  private run(req: Request): Promise<StrategyOutcome> {
    return new Promise((resolve) => {
      const outcome: StrategyCreatedStatic = {
        success: (user) => resolve({ kind: 'success', user: user as User }),
        fail: (challenge?: unknown) => {
          if (challenge instanceof Refusal) return resolve({ kind: 'fail', refusal: challenge });
          const said = (challenge as { message?: unknown } | undefined)?.message;
          resolve({ kind: 'fail', ...(typeof said === 'string' ? { said } : {}) });
        },
        redirect: (url, status) => resolve({ kind: 'redirect', url, status: status ?? 302 }),
        pass: () => resolve({ kind: 'error', err: new Error('the GitHub strategy passed') }),
        error: (err) => resolve({ kind: 'error', err }),
      };
      const run = Object.assign(Object.create(this.strategy) as GitHubStrategy, outcome);
      try {
        run.authenticate(req, {});
      } catch (e) {
        resolve({ kind: 'error', err: e });
      }
    });
  }
}
