/**
 * Whether a user may use the gateway now, asked the same way by every door: a page, the
 * live channel's handshake, an API token on /mcp or /v1, the admin API.
 *
 * On a GitHub install membership is GitHub's to say, per user (not per session):
 *
 * - A user is bound to GitHub's numeric account id at their first GitHub sign-in and
 *   afterwards only that account signs in as them. A renamed account is followed (the
 *   user takes the new login); a login this gateway has seen on another account (held
 *   now, or before a rename) is refused, and the refusal is audited.
 * - The member's latest OAuth token is kept sealed on the user, with the time GitHub
 *   last said yes. A request of theirs that finds that older than
 *   SANDGATE_AUTH_RECHECK_SEC waits for one re-check, shared by all their requests.
 * - A "no" suspends the user: every session is deleted, every listener of
 *   `onAccessLost` cuts what is running (live pages, agent turns, sandbox runs), tokens
 *   are refused with the reason (kept, not revoked), and no admin right is left. Only a
 *   GitHub sign-in that GitHub allows lifts it, and then the tokens work again.
 * - GitHub unreachable (no answer, 5xx, rate-limited): the last yes holds for one more
 *   interval; after that, requests get 503 until GitHub answers again (nothing is
 *   suspended for GitHub's outage).
 * - A user never bound to GitHub (made with the CLI, or not signed in since this binding
 *   began) has nothing to check against: refused, until they sign in with GitHub once.
 * - Admin rights are settings, asked at each check: SANDGATE_ADMINS names the logins;
 *   the stored flag is only what views show. Without GitHub (a single-user install)
 *   there is nothing to ask: the stored flag is the operator's (the CLI's `--admin`, the
 *   local user at start), and only a disabled account is refused.
 */
import crypto from 'node:crypto';
import { recordAudit } from '../audit/audit.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { open, seal } from '../secrets/aead.js';
import { loadOrCreateKey } from '../secrets/key-file.js';
import { serializable, type Db, type Tx } from '../store/store.js';
import {
  bindGithubId,
  ensureUser,
  findUserByGithubId,
  findUsersByLogin,
  formerHolderOf,
  getUser,
  githubCheckState,
  listUsers,
  recordGithubYes,
  renameGithubUser,
  suspendUser,
  syncGithubAdmins,
  type User,
} from '../accounts/accounts.js';
import { AllowList, type AccessDecision } from './github.js';
import { deleteUserSessions } from './sessions.js';

export const WEB_KEY_FILE = 'web.key';

/** The web app's secrets, derived from `<dataDir>/web.key`: the cookie signature and the seal on GitHub tokens. */
export function webSecrets(dataDir: string): { cookie: string; seal: Buffer } {
  const key = loadOrCreateKey(dataDir, WEB_KEY_FILE);
  const derive = (info: string) => Buffer.from(crypto.hkdfSync('sha256', key, Buffer.alloc(0), info, 32));
  return { cookie: derive('session-cookie').toString('base64'), seal: derive('github-token-seal') };
}

export const DISABLED_MESSAGE = 'This account is disabled on this gateway: ask one of its admins.';

/** Why a user may not come in now; `status` is what HTTP answers (401: sign in, 503: try again soon). */
export type Denied =
  | { ok: false; status: 401; reason: 'unknown' | 'disabled' | 'suspended' | 'unverified'; message: string }
  | { ok: false; status: 503; reason: 'unconfirmed'; message: string };

/** The user as of now (admin flag from the settings), or why not. */
export type Confirmation = { ok: true; user: User } | Denied;

/** What a GitHub sign-in that GitHub allowed comes to: the user it signs in, or why not (for the person signing in). */
export type Admission = { ok: true; user: User } | { ok: false; message: string };

/** Reasons a user is suspended, as they complete "lost access: …". */
const REMOVED = 'removed from the allow-list (GitHub no longer lists the account in an allowed team, organisation or user list)';
const TOKEN_REFUSED = 'GitHub no longer accepts the gateway’s sign-in for the account (revoked or expired)';
const OTHER_ACCOUNT = 'its GitHub sign-in now answers for another GitHub account';
const loginTaken = (login: string) => `its GitHub account was renamed to ${login}, a login another account on this gateway holds or held`;

/** How long a failed attempt to reach GitHub stands for a user before another is made. */
const MAX_RETRY_MS = 30_000;

const tokenAad = (userId: number) => Buffer.from(`github-token\0${userId}`);
const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');

/** An audit row a decision calls for, written once the decision is committed. */
interface AuditNote {
  userId: number;
  method: string;
  outcome: 'ok' | 'denied';
  target?: number | null;
  errorClass?: string | null;
}

/**
 * What a decision taken in a transaction comes to, with what it should say once committed:
 * the transaction may run again (Postgres, on a conflict), so it only runs queries, and
 * the audit rows, log lines and listeners come after it.
 */
interface Decided<T> {
  result: T;
  audits: AuditNote[];
  logs: (() => void)[];
  /** The user was suspended: cut off what of theirs runs. */
  removed?: User;
}

export class Membership {
  /** Whether members sign in with GitHub (SANDGATE_GITHUB_CLIENT_ID is set). */
  readonly github: boolean;
  readonly allow: AllowList;
  private readonly recheckMs: number;
  private readonly retryMs: number;
  private readonly sealKey: Buffer;
  private readonly log: Logger;
  /** One re-check at a time per user; every request that finds it due waits for the same one. */
  private readonly checking = new Map<number, Promise<Confirmation>>();
  /** When GitHub last failed to answer for a user (so a flood of requests does not wait on it one by one). */
  private readonly failedAt = new Map<number, number>();
  private readonly lost = new Set<(userId: number) => void>();
  /** The stored admin flags brought in line with the settings (at start); checks wait for it. Never rejects. */
  private readonly ready: Promise<void>;

  constructor(private readonly deps: { config: Config; db: Db; logger: Logger; allow?: AllowList }) {
    this.github = !!deps.config.githubClientId;
    this.allow = deps.allow ?? new AllowList(deps.config);
    this.recheckMs = deps.config.authRecheckSec * 1000;
    this.retryMs = Math.min(this.recheckMs, MAX_RETRY_MS);
    this.sealKey = webSecrets(deps.config.dataDir).seal;
    this.log = deps.logger.child({ module: 'membership' });
    this.ready = this.github ? this.startUp() : Promise.resolve();
  }

  /** The stored flag follows the settings as they are now (SANDGATE_ADMINS may have changed while the gateway was down). */
  private async startUp(): Promise<void> {
    try {
      await syncGithubAdmins(this.deps.db, this.allow.admins);
      await this.warnUnbound();
    } catch (e) {
      this.log.error({ err: e }, 'could not bring the stored admin flags in line with SANDGATE_ADMINS');
    }
  }

  /**
   * Accounts made before GitHub account ids were recorded (or by the CLI) are bound by
   * the next GitHub sign-in with their login: if such a login changed hands on GitHub
   * meanwhile, the newcomer would get the account. Said once at start, so an operator can
   * look before anyone signs in.
   */
  private async warnUnbound(): Promise<void> {
    const unbound = (await listUsers(this.deps.db)).filter((u) => u.githubId === null);
    if (!unbound.length) return;
    const names = unbound.slice(0, 20).map((u) => u.name);
    this.log.warn(
      { count: unbound.length, users: names },
      `${unbound.length} account(s) here are not yet bound to a GitHub account id (${names.join(', ')}${unbound.length > names.length ? ', …' : ''}): each is bound to the GitHub account that next signs in with its login. If one of those logins may have changed hands on GitHub, delete that account first (Admin → Users).`,
    );
  }

  /** Called with the user's id when they lose access (suspended): cut off what of theirs runs now. Returns the unsubscribe. */
  onAccessLost(fn: (userId: number) => void): () => void {
    this.lost.add(fn);
    return () => this.lost.delete(fn);
  }

  /** Whether the user is an admin now, by the settings (see the file's comment). */
  isAdmin(user: User): boolean {
    if (!this.github) return user.isAdmin;
    return user.githubId !== null && user.suspendedAt === null && user.disabledAt === null && this.allow.admins.includes(user.name.toLowerCase());
  }

  /**
   * The user if they may use the gateway now, re-checked with GitHub first when the last
   * yes is older than SANDGATE_AUTH_RECHECK_SEC (awaiting the one check under way, if
   * any); a refusal otherwise. A "no" suspends them (see the file's comment).
   */
  async confirm(userId: number): Promise<Confirmation> {
    await this.ready;
    const user = await getUser(this.deps.db, userId);
    if (!user) return { ok: false, status: 401, reason: 'unknown', message: 'Sign in first.' };
    if (user.disabledAt !== null) return { ok: false, status: 401, reason: 'disabled', message: DISABLED_MESSAGE };
    if (!this.github) return { ok: true, user };
    if (user.suspendedAt !== null) return this.suspended(user);
    const state = await githubCheckState(this.deps.db, userId);
    if (user.githubId === null || !state?.sealedToken || state.checkedAt === null) return this.unverified();
    if (Date.now() - state.checkedAt < this.recheckMs) return { ok: true, user: this.asOfNow(user) };
    let p = this.checking.get(userId);
    if (!p) {
      // Every caller awaits this one promise (it is returned below), so its rejection is never unhandled.
      p = this.recheck(user, state.sealedToken, state.checkedAt).finally(() => this.checking.delete(userId));
      this.checking.set(userId, p);
    }
    return p;
  }

  /**
   * A GitHub sign-in GitHub answered for (`decision` from AllowList.decide with
   * `accessToken`): finds or makes the user bound to that GitHub account (following a
   * rename, refusing a login another account holds or held), keeps the token sealed on
   * them, and lifts a suspension. The caller has already refused a sign-in not allowed.
   */
  async admit(accessToken: string, decision: AccessDecision): Promise<Admission> {
    await this.ready;
    const { db } = this.deps;
    const account = decision.account;
    if (!decision.allowed || !account) return { ok: false, message: decision.reason ?? 'That GitHub account is not allowed here.' };
    // Find, then bind or rename: one serializable transaction, so two sign-ins at once
    // (two gateways, two tabs) cannot both bind or both take a login.
    const found = await serializable(db, async (tx): Promise<Decided<Admission>> => {
      const audits: AuditNote[] = [];
      const logs: (() => void)[] = [];
      const done = (result: Admission): Decided<Admission> => ({ result, audits, logs });
      const bound = await findUserByGithubId(tx, account.id);
      if (bound) {
        if (bound.name === account.login) return done({ ok: true, user: bound });
        if (bound.disabledAt !== null) return done({ ok: true, user: bound });
        const holder = await this.holderOf(tx, account.login, bound.id);
        if (holder !== undefined) {
          audits.push({ userId: bound.id, method: 'sign_in/login_taken', outcome: 'denied', target: holder });
          logs.push(() => this.log.warn({ user: bound.name, login: account.login }, 'a GitHub account renamed to a login another account here holds or held: sign-in refused'));
          return done({ ok: false, message: `Your GitHub account is now called ${account.login}, but on this gateway that name belongs to another account. Ask an admin of this gateway.` });
        }
        await renameGithubUser(tx, bound.id, account.login);
        audits.push({ userId: bound.id, method: 'sign_in/renamed', outcome: 'ok' });
        logs.push(() => this.log.info({ from: bound.name, to: account.login }, 'followed a GitHub account rename'));
        return done({ ok: true, user: (await getUser(tx, bound.id))! });
      }
      const named = await findUsersByLogin(tx, account.login);
      const owner = named.find((u) => u.githubId !== null)?.id ?? (await formerHolderOf(tx, account.login))?.userId;
      if (owner !== undefined) {
        audits.push({ userId: owner, method: 'sign_in/login_recycled', outcome: 'denied' });
        logs.push(() => this.log.warn({ login: account.login }, 'a GitHub login seen here on another GitHub account: sign-in refused'));
        return done({
          ok: false,
          message: `The GitHub login ${account.login} belongs to another GitHub account on this gateway (a login that was renamed and registered again), so this account cannot sign in as it. Ask an admin of this gateway.`,
        });
      }
      // A user made before accounts were bound (or by the CLI) is bound by their first GitHub sign-in.
      const existing = named[0];
      const user = existing ?? (await ensureUser(tx, account.login));
      await bindGithubId(tx, user.id, account.id);
      // Binding an account that already held data is the one step that trusts a login: on the record.
      if (existing) audits.push({ userId: user.id, method: 'sign_in/bound', outcome: 'ok' });
      // The name as GitHub spells it (a user made by hand may differ in case).
      if (user.name !== account.login) await renameGithubUser(tx, user.id, account.login);
      return done({ ok: true, user: (await getUser(tx, user.id))! });
    });
    await this.said(found);
    if (!found.result.ok) return found.result;
    const user = found.result.user;
    if (user.disabledAt !== null) return { ok: false, message: DISABLED_MESSAGE };
    await recordGithubYes(db, user.id, {
      checkedAt: Date.now(),
      teams: decision.teams,
      isAdmin: decision.isAdmin,
      sealedToken: seal(this.sealKey, accessToken, tokenAad(user.id)).toString('base64'),
    });
    this.failedAt.delete(user.id);
    if (user.suspendedAt !== null) {
      await this.audit({ userId: user.id, method: 'membership/restored', outcome: 'ok' });
      this.log.info({ user: user.name }, 'a suspended member is allowed again: access restored');
    }
    return { ok: true, user: this.asOfNow((await getUser(db, user.id))!) };
  }

  private async recheck(user: User, sealedToken: string, checkedAt: number): Promise<Confirmation> {
    let d: AccessDecision;
    try {
      const failed = this.failedAt.get(user.id);
      if (failed !== undefined && Date.now() - failed < this.retryMs) throw new Error('GitHub did not answer a moment ago');
      let token: string;
      try {
        token = open(this.sealKey, Buffer.from(sealedToken, 'base64'), tokenAad(user.id)).toString('utf8');
      } catch {
        // web.key was replaced: the token cannot be read, so the member signs in again.
        return this.unverified();
      }
      try {
        d = await this.allow.decide(token);
      } catch (e) {
        this.failedAt.set(user.id, Date.now());
        throw e;
      }
      this.failedAt.delete(user.id);
    } catch (e) {
      // GitHub unreachable: the last yes holds for one more interval, then access waits for an answer.
      this.log.warn({ err: e, user: user.name }, 'could not check GitHub membership again');
      if (Date.now() - checkedAt < 2 * this.recheckMs) return { ok: true, user: this.asOfNow(user) };
      return { ok: false, status: 503, reason: 'unconfirmed', message: 'GitHub could not confirm this account’s membership just now (it did not answer): try again in a moment.' };
    }
    // Written meanwhile by an admin or another request (or gateway): the newest state
    // decides, read and written in one serializable transaction.
    const decided = await serializable(this.deps.db, async (tx): Promise<Decided<Confirmation>> => {
      const audits: AuditNote[] = [];
      const logs: (() => void)[] = [];
      const now = await getUser(tx, user.id);
      if (!now || now.disabledAt !== null) {
        return { result: { ok: false, status: 401, reason: now ? 'disabled' : 'unknown', message: now ? DISABLED_MESSAGE : 'Sign in first.' }, audits, logs };
      }
      if (now.suspendedAt !== null) return { result: this.suspended(now), audits, logs };
      if (!d.account) return this.suspendIn(tx, now, TOKEN_REFUSED, audits);
      if (d.account.id !== now.githubId) return this.suspendIn(tx, now, OTHER_ACCOUNT, audits);
      if (!d.allowed) return this.suspendIn(tx, now, REMOVED, audits);
      const login = d.account.login;
      if (login !== now.name) {
        const holder = await this.holderOf(tx, login, now.id);
        if (holder !== undefined) {
          audits.push({ userId: now.id, method: 'sign_in/login_taken', outcome: 'denied', target: holder });
          return this.suspendIn(tx, now, loginTaken(login), audits);
        }
        await renameGithubUser(tx, now.id, login);
        audits.push({ userId: now.id, method: 'sign_in/renamed', outcome: 'ok' });
        logs.push(() => this.log.info({ from: now.name, to: login }, 'followed a GitHub account rename'));
      }
      await recordGithubYes(tx, now.id, { checkedAt: Date.now(), teams: d.teams, isAdmin: d.isAdmin });
      return { result: { ok: true, user: this.asOfNow((await getUser(tx, now.id))!) }, audits, logs };
    });
    await this.said(decided);
    return decided.result;
  }

  /**
   * Suspends the user and ends every session of theirs, in the transaction `tx`; what
   * follows once it is committed (the audit row, cutting off what runs) is `said`'s.
   */
  private async suspendIn(tx: Tx, user: User, reason: string, audits: AuditNote[]): Promise<Decided<Denied>> {
    await suspendUser(tx, user.id, reason);
    await deleteUserSessions(tx, user.id);
    audits.push({ userId: user.id, method: 'membership/removed', outcome: 'denied', errorClass: 'suspended' });
    const after = (await getUser(tx, user.id)) ?? user;
    return {
      result: this.suspended(after),
      audits,
      logs: [() => this.log.info({ user: user.name, reason }, 'a member lost access at a GitHub membership check: suspended, sessions ended')],
      removed: after,
    };
  }

  /** What a committed decision calls for: its audit rows, its log lines, and a suspended user cut off everywhere. Never rejects. */
  private async said(d: Decided<unknown>): Promise<void> {
    for (const a of d.audits) await this.audit(a);
    for (const line of d.logs) line();
    if (!d.removed) return;
    for (const fn of this.lost) {
      try {
        fn(d.removed.id);
      } catch (e) {
        this.log.error({ err: e, user: d.removed.name }, 'could not cut off a suspended member everywhere');
      }
    }
  }

  private suspended(user: User): Denied {
    const when = user.suspendedAt === null ? '' : ` at ${iso(user.suspendedAt)}`;
    return {
      ok: false,
      status: 401,
      reason: 'suspended',
      message: `The account "${user.name}" lost access to this gateway${when}: ${user.suspendedReason ?? REMOVED}. Signing in with GitHub again restores it (and its tokens) once it is allowed.`,
    };
  }

  private unverified(): Denied {
    return {
      ok: false,
      status: 401,
      reason: 'unverified',
      message: `This gateway confirms every member with GitHub, and holds no GitHub sign-in of this account it can check: sign in with GitHub once (${this.deps.config.publicUrl.replace(/\/$/, '')}/login); its tokens work from then on.`,
    };
  }

  /** Another user that holds `login` (any case) or held it before a rename, if any. */
  private async holderOf(db: Db, login: string, except: number): Promise<number | undefined> {
    const named = (await findUsersByLogin(db, login)).find((u) => u.id !== except);
    if (named) return named.id;
    const former = await formerHolderOf(db, login);
    return former && former.userId !== except ? former.userId : undefined;
  }

  private asOfNow(user: User): User {
    return { ...user, isAdmin: this.isAdmin(user) };
  }

  /** Writes one audit row; a failure is logged, never thrown (the decision it records stands). */
  private async audit(a: AuditNote): Promise<void> {
    try {
      await recordAudit(this.deps.db, { userId: a.userId, kind: 'web', method: a.method, outcome: a.outcome, targetUserId: a.target ?? null, errorClass: a.errorClass ?? null, durationMs: 0 });
    } catch (e) {
      this.log.error({ err: e }, 'could not write an audit entry');
    }
  }
}

const instances = new WeakMap<Db, Membership>();

/**
 * The one Membership of a store: the web app, the bearer check of /mcp and /v1 and the
 * admin API share its re-checks under way and its listeners.
 */
export function membershipFor(deps: { config: Config; db: Db; logger: Logger }): Membership {
  let m = instances.get(deps.db);
  if (!m) instances.set(deps.db, (m = new Membership(deps)));
  return m;
}
