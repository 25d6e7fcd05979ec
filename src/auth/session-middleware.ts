/**
 * Browser sessions of the web app, and the signed-in user of a page request.
 *
 * - Sessions (express-session) live in the store (./sessions.ts, ids hashed); the cookie
 *   is HttpOnly, SameSite=Lax, Secure whenever the public URL is https. Signing in gives
 *   a new session id (passport regenerates the session); the session holds the user's id.
 * - Every request of a signed-in user asks the membership check (./membership.ts), which
 *   asks GitHub again every SANDGATE_AUTH_RECHECK_SEC and ends every session of a member
 *   GitHub no longer lists; a disabled user's sessions open nothing.
 * - Every state-changing request carries the session's CSRF token (csrf-sync): the
 *   x-csrf-token header (htmx sends it on every request) or a `_csrf` form field.
 *
 * Who signs in is an authenticator's to say (./authenticator.ts); this module only starts
 * and ends the session.
 */
import { csrfSync } from 'csrf-sync';
import type { Request, RequestHandler, Response } from 'express';
import session from 'express-session';
import { Passport } from 'passport';
import { getUser, type User } from '../accounts/accounts.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { Db } from '../store/store.js';
import { membershipFor, webSecrets, type Membership } from './membership.js';
import { ANONYMOUS_CHECK_EVERY, deleteSession, deleteUserSessions, loadSession, MAX_ANONYMOUS_SESSIONS, purgeExpiredSessions, saveSession, touchSession } from './sessions.js';

declare module 'express-session' {
  interface SessionData {
    passport?: { user?: number };
    /** A refusal to show once on the sign-in page. */
    flash?: string;
  }
}

export const SESSION_COOKIE = 'sandgate.sid';
/** A session that never signed in (a visit to the sign-in page) lasts this long. */
const ANONYMOUS_SESSION_MS = 60 * 60 * 1000;

/**
 * Hands what `work` comes to to a callback (express-session's, passport's), as its error
 * or its value, exactly once. An exception thrown by the callback (by the middleware it
 * goes on to run) goes to `onCallbackError`: never back into the callback, never a
 * rejection nobody handles.
 */
function settle<T>(work: () => Promise<T>, cb: (err: unknown, value?: T) => void, onCallbackError: (e: unknown) => void): void {
  const call = (f: () => void) => {
    try {
      f();
    } catch (e) {
      onCallbackError(e);
    }
  };
  let p: Promise<T>;
  try {
    p = work();
  } catch (e) {
    p = Promise.reject(e);
  }
  void p.then(
    (v) => call(() => cb(null, v)),
    (e: unknown) => call(() => cb(e)),
  );
}

/** The session store over the sessions table. */
export class StoreSessions extends session.Store {
  constructor(
    private readonly db: Db,
    /** Sessions of sign-ins under way were dropped, the oldest, to keep within their bound (sessions.ts). */
    private readonly onDropped?: (count: number) => void,
    private readonly bound = { max: MAX_ANONYMOUS_SESSIONS, checkEvery: ANONYMOUS_CHECK_EVERY },
    /** express-session's callback threw (a fault in what it went on to run): told here, or thrown again apart from the store's promise. */
    private readonly onCallbackError: (e: unknown) => void = (e) =>
      setImmediate(() => {
        throw e;
      }),
  ) {
    super();
  }

  override get(sid: string, cb: (err: unknown, s?: session.SessionData | null) => void): void {
    settle(
      async () => {
        const row = await loadSession(this.db, sid);
        return row ? (JSON.parse(row.data) as session.SessionData) : null;
      },
      cb,
      this.onCallbackError,
    );
  }

  override set(sid: string, s: session.SessionData, cb?: (err?: unknown) => void): void {
    settle(
      async () => {
        const userId = typeof s.passport?.user === 'number' ? s.passport.user : null;
        const expires = s.cookie.expires ? new Date(s.cookie.expires).getTime() : Date.now() + ANONYMOUS_SESSION_MS;
        const dropped = await saveSession(this.db, sid, JSON.stringify(s), userId, userId === null ? Math.min(expires, Date.now() + ANONYMOUS_SESSION_MS) : expires, this.bound);
        if (dropped) this.onDropped?.(dropped);
      },
      (err) => cb?.(err ?? undefined),
      this.onCallbackError,
    );
  }

  override touch(sid: string, s: session.SessionData, cb?: (err?: unknown) => void): void {
    settle(
      async () => {
        // Only a signed-in session's expiry moves: one of a sign-in under way keeps its short life.
        if (s.cookie.expires && typeof s.passport?.user === 'number') await touchSession(this.db, sid, new Date(s.cookie.expires).getTime());
      },
      (err) => cb?.(err ?? undefined),
      this.onCallbackError,
    );
  }

  override destroy(sid: string, cb?: (err?: unknown) => void): void {
    settle(
      () => deleteSession(this.db, sid),
      (err) => cb?.(err ?? undefined),
      this.onCallbackError,
    );
  }
}

export interface WebSessions {
  /** Sessions, passport: mount before any web route (and on the socket.io engine). */
  session: RequestHandler[];
  /** The signed-in user or a redirect to /login (a 401 for htmx and the socket). */
  requireUser: RequestHandler;
  /** The membership check (again with GitHub if it is due); a refusal (and this session ended) when the user lost access. */
  stillAllowed(req: Request): Promise<{ ok: true; user: User } | { ok: false; status: number; message: string }>;
  csrf: RequestHandler;
  csrfToken(req: Request): string;
  /** Starts the signed-in session of `user` on this request, under a new session id. */
  signIn(req: Request, user: User): Promise<void>;
  /** Ends this request's session (and, `everywhere`, every session of its user) and clears the cookie. */
  signOut(req: Request, res: Response, everywhere: boolean): Promise<void>;
  /** Ends every session of a user (signing out everywhere); the live channel is told by the caller. */
  endSessionsOf(userId: number): Promise<void>;
  /** Who may use the gateway now: shared with the bearer check of /mcp and /v1 (./membership.ts). */
  membership: Membership;
  close(): void;
}

export function webSessions(deps: { config: Config; db: Db; logger: Logger; onSignOut?: (userId: number, everywhere: boolean, req: Request) => void }): WebSessions {
  const { config, db } = deps;
  const log = deps.logger.child({ module: 'web-auth' });
  const secrets = webSecrets(config.dataDir);
  const secure = config.publicUrl.startsWith('https://');
  let droppedSince = 0;
  let lastDropWarning = 0;
  const store = new StoreSessions(
    db,
    (count) => {
      droppedSince += count;
      if (Date.now() - lastDropWarning < 60_000) return;
      log.warn({ dropped: droppedSince, bound: MAX_ANONYMOUS_SESSIONS }, 'more sign-ins under way than the bound: the oldest were dropped (a flood of visits to the sign-in pages?)');
      lastDropWarning = Date.now();
      droppedSince = 0;
    },
    undefined,
    (e) => log.error({ err: e }, 'a request failed after its session was read or saved'),
  );
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
  const purgeExpired = () => void purgeExpiredSessions(db).catch((e: unknown) => log.warn({ err: e }, 'could not delete expired sessions'));
  // At start too: a store that grew while the gateway was down is trimmed now, not by a visitor's request.
  purgeExpired();
  const purge = setInterval(purgeExpired, 10 * 60 * 1000);
  purge.unref();

  // Passport here only keeps the user's id in the session and reads it back; the ways of signing in are authenticators.
  const passport = new Passport();
  passport.serializeUser<number>((user, done) => done(null, (user as User).id));
  // A disabled user's sessions open nothing (they are also deleted when an admin disables them).
  passport.deserializeUser<number>((id, done) => {
    settle(
      async () => getUser(db, id),
      (err, user) => (err ? done(err) : done(null, user && user.disabledAt === null ? user : false)),
      (e) => log.error({ err: e }, 'a request failed after its user was read'),
    );
  });

  const membership = membershipFor(deps);

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

  async function endSessionsOf(userId: number): Promise<void> {
    await deleteUserSessions(db, userId);
  }

  return {
    session: [sessionMiddleware, passport.initialize(), passport.session()],
    requireUser,
    stillAllowed,
    csrf: csrfSynchronisedProtection,
    csrfToken: (req) => generateToken(req),
    // req.login regenerates the session: the id a visitor had before is not the one they get.
    signIn: (req, user) => new Promise<void>((resolve, reject) => req.login(user, (e) => (e ? reject(e as Error) : resolve()))),
    async signOut(req, res, everywhere) {
      const user = req.user as User | undefined;
      if (user && everywhere) await endSessionsOf(user.id);
      if (user) deps.onSignOut?.(user.id, everywhere, req);
      await new Promise<void>((resolve, reject) => req.logout((e) => (e ? reject(e as Error) : resolve())));
      await new Promise<void>((resolve) => req.session.destroy(() => resolve()));
      res.clearCookie(SESSION_COOKIE, { path: '/', httpOnly: true, sameSite: 'lax', secure });
    },
    endSessionsOf,
    membership,
    close: () => clearInterval(purge),
  };
}

/** For pages: the request's user (set by requireUser). */
export const userOf = (req: Request): User => req.user as User;
