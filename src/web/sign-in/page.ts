/**
 * The sign-in pages, as handlers: the sign-in page, the start of a sign-in at a provider
 * (GET /auth/<name>) and its callback, the one-time link's page and its form, signing
 * out. Who signs in is an authenticator's to say (src/auth/authenticator.ts, the ones on:
 * src/auth/index.ts); the session is src/auth/session-middleware.ts. What these handlers
 * add is the same for every way of signing in: a refusal is shown on the sign-in page, a
 * sign-in gets a new session, is recorded on the user and lands on the chat.
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { recordSignIn } from '../../accounts/accounts.js';
import { TRY_AGAIN, type Authenticator, type SignInResult } from '../../auth/authenticator.js';
import type { Authenticators } from '../../auth/index.js';
import { LINK_REFUSED } from '../../auth/link-authenticator.js';
import type { WebSessions } from '../../auth/session-middleware.js';
import type { Config } from '../../config.js';
import type { Logger } from '../../logger.js';
import type { Db } from '../../store/store.js';
import { renderPage } from '../render.js';

/** How long an authorization request that sent someone to sign in may be gone back to (src/http/oauth.ts keeps it in the session). */
const RETURN_MS = 10 * 60_000;

// The pages take their user and the session pieces under these names.

/** The sign-in page's messages by /login?why=… */
const MESSAGES = new Map([
  ['refused', 'That GitHub account is not allowed here.'],
  ['link', LINK_REFUSED],
  ['signedout', 'You are signed out.'],
  ['error', TRY_AGAIN],
]);

export interface SignInHandlers {
  /** GET /login */
  login: RequestHandler;
  /** GET /auth/:name: to the provider of that authenticator. */
  start: RequestHandler;
  /** GET /auth/:name/callback: back from the provider. */
  callback: RequestHandler;
  /** GET /login/link/:secret: the link's page, with the button that posts it. */
  linkPage: RequestHandler;
  /** POST /login/link, after the form is parsed and the CSRF check. */
  link: RequestHandler;
  /** POST /logout and /logout/all, after the form is parsed and the CSRF check. */
  logout: RequestHandler;
  logoutAll: RequestHandler;
}

export function signInPage(deps: { config: Config; db: Db; logger: Logger; sessions: WebSessions; authenticators: Authenticators }): SignInHandlers {
  const { config, db, sessions } = deps;
  const log = deps.logger.child({ module: 'web-auth' });
  const links = deps.authenticators.link;
  /** The ways of signing in that start at a provider: a button each on the sign-in page. */
  const providers = deps.authenticators.all.filter((a) => a.start);
  const provider = (req: Request) => providers.find((a) => a.name === req.params.name);

  async function finish(a: Authenticator, r: SignInResult, req: Request, res: Response, next: NextFunction): Promise<void> {
    if (!r.ok) {
      if (r.why) return res.redirect(303, `/login?why=${r.why}`);
      req.session.flash = r.message;
      return res.redirect(303, '/login');
    }
    // An app's authorization request that sent the user here goes on once they are in (src/http/oauth.ts).
    const asked = req.session.returnTo;
    const returnTo = asked && asked.at > Date.now() - RETURN_MS ? asked.path : undefined;
    try {
      await sessions.signIn(req, r.user);
    } catch (e) {
      return next(e);
    }
    await recordSignIn(db, r.user.id, a.name);
    log.info({ user: r.user.name, method: a.name }, 'signed in');
    res.redirect(303, returnTo?.startsWith('/oauth/authorize?') ? returnTo : '/chat');
  }

  const signOut =
    (everywhere: boolean): RequestHandler =>
    async (req, res, next) => {
      try {
        await sessions.signOut(req, res, everywhere);
      } catch (e) {
        return next(e);
      }
      res.redirect(303, '/login?why=signedout');
    };

  return {
    login(req, res) {
      if (req.user) return res.redirect(303, '/chat');
      const why = typeof req.query.why === 'string' ? req.query.why : undefined;
      const flash = req.session.flash;
      if (flash) delete req.session.flash;
      // No form on this page, so no CSRF token: a visit stores no session (every visitor
      // who is not signed in lands here).
      renderPage(res, 'sign-in/page', { csrf: '' }, {
        title: 'Sign in',
        providers: providers.map((a) => ({ name: a.name, label: a.label, intro: a.intro ?? '' })),
        localUser: config.localUser,
        message: flash ?? (why ? MESSAGES.get(why) : undefined),
      });
    },
    start(req, res, next) {
      const a = provider(req);
      if (!a?.start) return next();
      a.start(req, res, next);
    },
    async callback(req, res, next) {
      const a = provider(req);
      if (!a?.start) return next();
      const r = await a.complete(req, res);
      if (r === 'restart') return a.start(req, res, next);
      await finish(a, r, req, res, next);
    },
    async linkPage(req, res) {
      // Only a link that can still sign in gets the form (and a session to hold its token).
      if (!(await links.usable(req.params.secret as string))) return res.redirect(303, '/login?why=link');
      renderPage(res, 'link', { csrf: sessions.csrfToken(req) }, { title: 'Sign in', secret: req.params.secret });
    },
    async link(req, res, next) {
      await finish(links, await links.complete(req), req, res, next);
    },
    logout: signOut(false),
    logoutAll: signOut(true),
  };
}

