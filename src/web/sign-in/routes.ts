/**
 * Who is signed in to the web app, and how they got there.
 *
 * - Sessions (express-session) live in the store (src/auth/sessions.ts, ids hashed); the
 *   cookie is HttpOnly, SameSite=Lax, Secure whenever the public URL is https; the id is
 *   renewed at sign-in (passport regenerates the session).
 * - GitHub through passport-github2, at github.com or an Enterprise Server: the OAuth
 *   `state` is single-use (kept in the session, deleted when checked); the allow-list is
 *   checked at sign-in with the member's own token, and the sign-in is bound to GitHub's
 *   account id. Every request of a signed-in user asks the membership check
 *   (src/auth/membership.ts), which asks GitHub again every SANDGATE_AUTH_RECHECK_SEC
 *   and ends every session of a member GitHub no longer lists.
 * - Without a GitHub app, a one-time link (src/auth/login-links.ts) signs in the local
 *   user; opening the link shows a button, so a link preview cannot use it up.
 * - Every state-changing request carries the session's CSRF token (csrf-sync): the
 *   x-csrf-token header (htmx sends it on every request) or a `_csrf` form field.
 */
import { csrfSync } from 'csrf-sync';
import express, { type Request, type RequestHandler, type Response, type Router } from 'express';
import session from 'express-session';
import { Passport } from 'passport';
import { Strategy as GitHubStrategy, type Profile } from 'passport-github2';
import type { Config } from '../../config.js';
import type { Logger } from '../../logger.js';
import { membershipFor, webSecrets, type Membership } from '../../auth/membership.js';
import type { Db } from '../../store/store.js';
import { getUser, recordSignIn, type User } from '../../accounts/accounts.js';
import { githubEndpoints } from '../../auth/github.js';
import { consumeLoginLink, loginLinkUsable } from '../../auth/login-links.js';
import { ANONYMOUS_CHECK_EVERY, deleteSession, deleteUserSessions, loadSession, MAX_ANONYMOUS_SESSIONS, purgeExpiredSessions, saveSession, touchSession } from '../../auth/sessions.js';
import { renderPage } from '../render.js';

declare module 'express-session' {
  interface SessionData {
    passport?: { user?: number };
  }
}

export const SESSION_COOKIE = 'sandgate.sid';
/** A session that never signed in (a visit to the sign-in page) lasts this long. */
const ANONYMOUS_SESSION_MS = 60 * 60 * 1000;

/** The session store over the sessions table. */
export class StoreSessions extends session.Store {
  constructor(
    private readonly db: Db,
    /** Sessions of sign-ins under way were dropped, the oldest, to keep within their bound (sessions.ts). */
    private readonly onDropped?: (count: number) => void,
    private readonly bound = { max: MAX_ANONYMOUS_SESSIONS, checkEvery: ANONYMOUS_CHECK_EVERY },
  ) {
    super();
  }

  override get(sid: string, cb: (err: unknown, s?: session.SessionData | null) => void): void {
    try {
      const row = loadSession(this.db, sid);
      cb(null, row ? (JSON.parse(row.data) as session.SessionData) : null);
    } catch (e) {
      cb(e);
    }
  }

  override set(sid: string, s: session.SessionData, cb?: (err?: unknown) => void): void {
    try {
      const userId = typeof s.passport?.user === 'number' ? s.passport.user : null;
      const expires = s.cookie.expires ? new Date(s.cookie.expires).getTime() : Date.now() + ANONYMOUS_SESSION_MS;
      const dropped = saveSession(this.db, sid, JSON.stringify(s), userId, userId === null ? Math.min(expires, Date.now() + ANONYMOUS_SESSION_MS) : expires, this.bound);
      if (dropped) this.onDropped?.(dropped);
      cb?.();
    } catch (e) {
      cb?.(e);
    }
  }

  override touch(sid: string, s: session.SessionData, cb?: () => void): void {
    try {
      if (s.cookie.expires && typeof s.passport?.user === 'number') touchSession(this.db, sid, new Date(s.cookie.expires).getTime());
    } finally {
      cb?.();
    }
  }

  override destroy(sid: string, cb?: (err?: unknown) => void): void {
    try {
      deleteSession(this.db, sid);
      cb?.();
    } catch (e) {
      cb?.(e);
    }
  }
}

export interface WebAuth {
  /** Sessions, passport: mount before any web route (and on the socket.io engine). */
  session: RequestHandler[];
  /** The signed-in user or a redirect to /login (a 401 for htmx and the socket). */
  requireUser: RequestHandler;
  /** The membership check (again with GitHub if it is due); a refusal (and this session ended) when the user lost access. */
  stillAllowed(req: Request): Promise<{ ok: true; user: User } | { ok: false; status: number; message: string }>;
  csrf: RequestHandler;
  csrfToken(req: Request): string;
  routes: Router;
  github: boolean;
  /** Ends every session of a user (signing out everywhere); the live channel is told by the caller. */
  endSessionsOf(userId: number): void;
  /** Who may use the gateway now: shared with the bearer check of /mcp and /v1 (src/auth/membership.ts). */
  membership: Membership;
  close(): void;
}

export function webAuth(deps: { config: Config; db: Db; logger: Logger; onSignOut?: (userId: number, everywhere: boolean, req: Request) => void }): WebAuth {
  const { config, db } = deps;
  const log = deps.logger.child({ module: 'web-auth' });
  const secrets = webSecrets(config.dataDir);
  const secure = config.publicUrl.startsWith('https://');
  let droppedSince = 0;
  let lastDropWarning = 0;
  const store = new StoreSessions(db, (count) => {
    droppedSince += count;
    if (Date.now() - lastDropWarning < 60_000) return;
    log.warn({ dropped: droppedSince, bound: MAX_ANONYMOUS_SESSIONS }, 'more sign-ins under way than the bound: the oldest were dropped (a flood of visits to the sign-in pages?)');
    lastDropWarning = Date.now();
    droppedSince = 0;
  });
  const sessionMiddleware = session({
    name: SESSION_COOKIE,
    secret: secrets.cookie,
    store,
    resave: false,
    saveUninitialized: false,
    rolling: true,
    proxy: false,
    cookie: { httpOnly: true, sameSite: 'lax', secure, maxAge: config.sessionDays * 86_400_000, path: '/' },
  });
  // At start too: a store that grew while the gateway was down is trimmed now, not by a visitor's request.
  purgeExpiredSessions(db);
  const purge = setInterval(() => purgeExpiredSessions(db), 10 * 60 * 1000);
  purge.unref();

  const passport = new Passport();
  passport.serializeUser<number>((user, done) => done(null, (user as User).id));
  // A disabled user's sessions open nothing (they are also deleted when an admin disables them).
  passport.deserializeUser<number>((id, done) => {
    const user = getUser(db, id);
    done(null, user && user.disabledAt === null ? user : false);
  });

  const membership = membershipFor(deps);
  const github = membership.github;
  if (github) {
    const ep = githubEndpoints(config);
    passport.use(
      new GitHubStrategy(
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
          membership.allow.decide(accessToken).then(
            (d) => {
              if (!d.allowed) return done(null, false, { message: d.reason });
              let admitted;
              try {
                admitted = membership.admit(accessToken, d);
              } catch (e) {
                return done(e);
              }
              if (!admitted.ok) return done(null, false, { message: admitted.message });
              done(null, admitted.user);
            },
            (e: unknown) => {
              log.warn({ err: e }, 'GitHub could not be asked about a sign-in');
              done(null, false, { message: 'GitHub could not be reached to check your membership: try again in a moment.' });
            },
          );
        },
      ),
    );
  }

  const { csrfSynchronisedProtection, generateToken } = csrfSync({
    getTokenFromRequest: (req) => (req.headers['x-csrf-token'] as string | undefined) ?? (req.body as { _csrf?: string } | undefined)?._csrf,
    errorConfig: { statusCode: 403, message: 'This request did not carry the page’s security token (it may come from another site, or the page is old): reload the page and try again.', code: 'EBADCSRFTOKEN' },
  });

  async function stillAllowed(req: Request): Promise<{ ok: true; user: User } | { ok: false; status: number; message: string }> {
    const user = req.user as User | undefined;
    if (!user) return { ok: false, status: 401, message: 'Sign in first.' };
    const r = await membership.confirm(user.id);
    if (r.ok) return r;
    if (r.status === 401) {
      log.info({ user: user.name, reason: r.reason }, 'a session of a user who may not come in: ended');
      await new Promise<void>((resolve) => req.session.destroy(() => resolve()));
      deps.onSignOut?.(user.id, false, req);
    }
    return { ok: false, status: r.status, message: r.message };
  }

  const requireUser: RequestHandler = async function requireUser(req, res, next) {
    const r = await stillAllowed(req);
    if (r.ok) {
      req.user = r.user;
      return next();
    }
    if (req.get('HX-Request')) return void res.status(r.status).set('HX-Redirect', '/login').send('');
    if (req.method === 'GET' && r.status === 401) return res.redirect(303, '/login');
    res.status(r.status).type('text').send(r.message);
  };

  const routes = express.Router();
  const body = express.urlencoded({ extended: false, limit: '16kb' });

  routes.get('/login', (req, res) => {
    if (req.user) return res.redirect(303, '/chat');
    const why = typeof req.query.why === 'string' ? req.query.why : undefined;
    const messages: Record<string, string> = {
      refused: 'That GitHub account is not allowed here.',
      link: 'That sign-in link is not valid: it was used already, has expired, or is mistyped. Ask for a fresh one.',
      signedout: 'You are signed out.',
      error: 'Sign-in did not work: try again.',
    };
    const flash = (req.session as { flash?: string }).flash;
    if (flash) delete (req.session as { flash?: string }).flash;
    // No form on this page, so no CSRF token: a visit stores no session (every visitor
    // who is not signed in lands here).
    renderPage(res, 'login', { csrf: '' }, { title: 'Sign in', github, localUser: config.localUser, message: flash ?? (why ? messages[why] : undefined) });
  });

  if (github) {
    routes.get('/auth/github', passport.authenticate('github', { session: true }) as RequestHandler);
    routes.get('/auth/github/callback', (req, res, next) => {
      (passport.authenticate('github', (err: unknown, user: User | false, info?: { message?: string }) => {
        if (err) {
          log.warn({ err }, 'GitHub sign-in failed');
          return res.redirect(303, '/login?why=error');
        }
        if (!user) {
          (req.session as { flash?: string }).flash = info?.message ?? 'Sign-in did not work: try again.';
          log.info({ reason: info?.message }, 'GitHub sign-in refused');
          return res.redirect(303, '/login');
        }
        // req.login regenerates the session: the id a visitor had before is not the one they get.
        req.login(user, (e) => {
          if (e) return next(e);
          recordSignIn(db, user.id, 'github');
          log.info({ user: user.name }, 'signed in with GitHub');
          res.redirect(303, '/chat');
        });
      }) as RequestHandler)(req, res, next);
    });
  }

  routes.get('/login/link/:secret', (req, res) => {
    // Only a link that can still sign in gets the form (and a session to hold its token).
    if (!loginLinkUsable(db, req.params.secret as string)) return res.redirect(303, '/login?why=link');
    renderPage(res, 'link', { csrf: generateToken(req) }, { title: 'Sign in', secret: req.params.secret });
  });
  routes.post('/login/link', body, csrfSynchronisedProtection, async (req, res, next) => {
    const r = consumeLoginLink(db, String((req.body as { secret?: unknown }).secret ?? ''));
    const user = r.ok ? getUser(db, r.userId) : undefined;
    if (!user) {
      log.warn({ reason: r.ok ? 'no user' : r.reason }, 'sign-in link refused');
      return res.redirect(303, '/login?why=link');
    }
    // A link signs in only a user who may come in now: not disabled and, with GitHub, a member GitHub confirms.
    const allowed = await membership.confirm(user.id);
    if (!allowed.ok) {
      (req.session as { flash?: string }).flash = allowed.message;
      return res.redirect(303, '/login');
    }
    req.login(user, (e) => {
      if (e) return next(e);
      recordSignIn(db, user.id, 'link');
      log.info({ user: user.name }, 'signed in with a one-time link');
      res.redirect(303, '/chat');
    });
  });

  const signOut = (everywhere: boolean): RequestHandler => (req, res, next) => {
    const user = req.user as User | undefined;
    if (user && everywhere) endSessionsOf(user.id);
    if (user) deps.onSignOut?.(user.id, everywhere, req);
    req.logout((e) => {
      if (e) return next(e);
      req.session.destroy(() => {
        res.clearCookie(SESSION_COOKIE, { path: '/', httpOnly: true, sameSite: 'lax', secure });
        res.redirect(303, '/login?why=signedout');
      });
    });
  };
  routes.post('/logout', body, csrfSynchronisedProtection, signOut(false));
  routes.post('/logout/all', body, csrfSynchronisedProtection, signOut(true));

  function endSessionsOf(userId: number): void {
    deleteUserSessions(db, userId);
  }

  return {
    session: [sessionMiddleware, passport.initialize(), passport.session()],
    requireUser,
    stillAllowed,
    csrf: csrfSynchronisedProtection,
    csrfToken: (req) => generateToken(req),
    routes,
    github,
    endSessionsOf,
    membership,
    close: () => clearInterval(purge),
  };
}

/** For pages: the request's user (set by requireUser). */
export const userOf = (req: Request): User => req.user as User;
export const sendStatus = (res: Response, status: number, message: string) => res.status(status).type('text').send(message);
