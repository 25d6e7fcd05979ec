/**
 * Users: a stable numeric id per login name. Sign-in (GitHub or the local link) and
 * operator commands create them; everything per-user is keyed by the id. On a GitHub
 * install a user is also bound to GitHub's numeric account id (a login can be renamed
 * and registered again by someone else; the id cannot), and carries the state of its
 * membership check (src/auth/membership.ts).
 */
import { statement, type Db } from '../store/store.js';

export interface User {
  id: number;
  name: string;
  isAdmin: boolean;
  /** JSON permission ceiling, or null for the configured default. */
  permissions: string | null;
  workspaceId: string | null;
  createdAt: number;
  /** The model their new conversations start with (provider:model), or null for the gateway's default. */
  defaultModel: string | null;
  /** GitHub teams (org/team) they were in at their last sign-in check. */
  githubTeams: string[];
  /** When an admin disabled them (nothing of theirs works until enabled), or null. */
  disabledAt: number | null;
  lastSignInAt: number | null;
  signInMethod: 'github' | 'link' | null;
  /** GitHub's numeric account id, bound at their first GitHub sign-in; null before (or on an install without GitHub). */
  githubId: number | null;
  /** When a GitHub membership check said no (nothing of theirs works until a GitHub sign-in is allowed again), or null. */
  suspendedAt: number | null;
  /** Why, in words that complete "lost access: …". */
  suspendedReason: string | null;
}

interface UserRow {
  id: number;
  name: string;
  is_admin: number;
  permissions: string | null;
  workspace_id: string | null;
  created_at: number;
  default_model: string | null;
  github_teams: string | null;
  disabled_at: number | null;
  last_sign_in_at: number | null;
  sign_in_method: 'github' | 'link' | null;
  github_id: number | null;
  suspended_at: number | null;
  suspended_reason: string | null;
}

const toUser = (r: UserRow): User => ({
  id: r.id,
  name: r.name,
  isAdmin: r.is_admin === 1,
  permissions: r.permissions,
  workspaceId: r.workspace_id,
  createdAt: r.created_at,
  defaultModel: r.default_model,
  githubTeams: r.github_teams ? (JSON.parse(r.github_teams) as string[]) : [],
  disabledAt: r.disabled_at ?? null,
  lastSignInAt: r.last_sign_in_at ?? null,
  signInMethod: r.sign_in_method ?? null,
  githubId: r.github_id ?? null,
  suspendedAt: r.suspended_at ?? null,
  suspendedReason: r.suspended_reason ?? null,
});

/** Login names as GitHub allows them (plus the local install's single user). */
export const USER_NAME = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$/;

export function findUser(db: Db, name: string): User | undefined {
  const r = statement(db, 'SELECT * FROM users WHERE name = ?').get(name) as UserRow | undefined;
  return r && toUser(r);
}

export function getUser(db: Db, id: number): User | undefined {
  const r = statement(db, 'SELECT * FROM users WHERE id = ?').get(id) as UserRow | undefined;
  return r && toUser(r);
}

/** Returns the user, creating it on first sight. `isAdmin` is updated when given. */
export function ensureUser(db: Db, name: string, opts: { isAdmin?: boolean } = {}): User {
  if (!USER_NAME.test(name)) throw new Error(`"${name}" is not a valid user name (letters, digits and '-', at most 39)`);
  db.prepare('INSERT INTO users (name, is_admin, created_at) VALUES (?, ?, ?) ON CONFLICT(name) DO NOTHING').run(
    name,
    opts.isAdmin ? 1 : 0,
    Date.now(),
  );
  if (opts.isAdmin !== undefined) db.prepare('UPDATE users SET is_admin = ? WHERE name = ?').run(opts.isAdmin ? 1 : 0, name);
  return findUser(db, name)!;
}

export function listUsers(db: Db): User[] {
  return (db.prepare('SELECT * FROM users ORDER BY name').all() as UserRow[]).map(toUser);
}

/** Sets a user's permission ceiling (JSON), or null to fall back to the default. */
export function setUserPermissions(db: Db, name: string, permissions: string | null): void {
  const r = db.prepare('UPDATE users SET permissions = ? WHERE name = ?').run(permissions, name);
  if (r.changes === 0) throw new Error(`no user named "${name}"`);
}

/** Gives the user workspace `id` unless they have one already; returns the one they have. */
export function claimWorkspace(db: Db, userId: number, id: string): string {
  statement(db, 'UPDATE users SET workspace_id = ? WHERE id = ? AND workspace_id IS NULL').run(id, userId);
  const user = getUser(db, userId);
  if (!user?.workspaceId) throw new Error(`no user with id ${userId}`);
  return user.workspaceId;
}

/** Whether some user's workspace is `id` (a pooled container's workspace may be removed only if not). */
export function workspaceInUse(db: Db, id: string): boolean {
  return !!statement(db, 'SELECT 1 FROM users WHERE workspace_id = ?').get(id);
}

export function setDefaultModel(db: Db, userId: number, model: string | null): void {
  statement(db, 'UPDATE users SET default_model = ? WHERE id = ?').run(model, userId);
}

/** Disables (nothing of theirs works: sessions, tokens, sandbox) or enables a user; nothing is deleted. */
export function setUserDisabled(db: Db, userId: number, disabled: boolean): void {
  statement(db, 'UPDATE users SET disabled_at = ? WHERE id = ?').run(disabled ? Date.now() : null, userId);
}

export function recordSignIn(db: Db, userId: number, method: 'github' | 'link'): void {
  statement(db, 'UPDATE users SET last_sign_in_at = ?, sign_in_method = ? WHERE id = ?').run(Date.now(), method, userId);
}

/** Deletes a user and everything of theirs in the store (every table cascades from users). */
export function deleteUser(db: Db, userId: number): boolean {
  return statement(db, 'DELETE FROM users WHERE id = ?').run(userId).changes > 0;
}

/** The user bound to a GitHub account id. */
export function findUserByGithubId(db: Db, githubId: number): User | undefined {
  const r = statement(db, 'SELECT * FROM users WHERE github_id = ?').get(githubId) as UserRow | undefined;
  return r && toUser(r);
}

/** Users whose name is `login` in any case (GitHub logins are case-insensitive), the exact spelling first. */
export function findUsersByLogin(db: Db, login: string): User[] {
  return (statement(db, 'SELECT * FROM users WHERE name = ? COLLATE NOCASE ORDER BY name = ? DESC, id').all(login, login) as UserRow[]).map(toUser);
}

/** The account that held `login` before it was renamed, if one did here. */
export function formerHolderOf(db: Db, login: string): { userId: number; githubId: number } | undefined {
  return statement(db, 'SELECT user_id AS userId, github_id AS githubId FROM github_former_logins WHERE login = ?').get(login) as { userId: number; githubId: number } | undefined;
}

/** Binds a user to a GitHub account id (at their first GitHub sign-in). */
export function bindGithubId(db: Db, userId: number, githubId: number): void {
  statement(db, 'UPDATE users SET github_id = ? WHERE id = ?').run(githubId, userId);
}

/**
 * Renames a GitHub-bound user (their account was renamed on GitHub) and remembers the
 * login they leave, so that no other GitHub account can take it over here.
 */
export function renameGithubUser(db: Db, userId: number, name: string, now = Date.now()): void {
  if (!USER_NAME.test(name)) throw new Error(`"${name}" is not a valid user name (letters, digits and '-', at most 39)`);
  db.transaction(() => {
    const before = getUser(db, userId);
    if (!before || before.githubId === null) throw new Error(`user ${userId} is not bound to a GitHub account`);
    statement(db, 'DELETE FROM github_former_logins WHERE login = ? AND user_id = ?').run(name, userId);
    statement(db, 'UPDATE users SET name = ? WHERE id = ?').run(name, userId);
    if (before.name.toLowerCase() !== name.toLowerCase()) {
      statement(
        db,
        `INSERT INTO github_former_logins (login, user_id, github_id, renamed_at) VALUES (?, ?, ?, ?)
         ON CONFLICT(login) DO UPDATE SET user_id = excluded.user_id, github_id = excluded.github_id, renamed_at = excluded.renamed_at`,
      ).run(before.name, userId, before.githubId, now);
    }
  })();
}

/** The sealed GitHub token of a user and when GitHub last confirmed their membership. */
export function githubCheckState(db: Db, userId: number): { sealedToken: string | null; checkedAt: number | null } | undefined {
  return statement(db, 'SELECT github_token AS sealedToken, github_checked_at AS checkedAt FROM users WHERE id = ?').get(userId) as
    | { sealedToken: string | null; checkedAt: number | null }
    | undefined;
}

/**
 * GitHub said yes: records when, the teams and the admin flag that follow from it, and
 * (at a sign-in) the member's new token. Lifts a suspension.
 */
export function recordGithubYes(db: Db, userId: number, yes: { checkedAt: number; teams: string[]; isAdmin: boolean; sealedToken?: string }): void {
  statement(
    db,
    'UPDATE users SET github_checked_at = ?, github_teams = ?, is_admin = ?, github_token = coalesce(?, github_token), suspended_at = NULL, suspended_reason = NULL WHERE id = ?',
  ).run(yes.checkedAt, JSON.stringify(yes.teams), yes.isAdmin ? 1 : 0, yes.sealedToken ?? null, userId);
}

/** A membership check said no: the user is suspended (and no admin) until a GitHub sign-in is allowed again; nothing is deleted. */
export function suspendUser(db: Db, userId: number, reason: string, now = Date.now()): void {
  statement(db, 'UPDATE users SET suspended_at = coalesce(suspended_at, ?), suspended_reason = ?, is_admin = 0 WHERE id = ?').run(now, reason, userId);
}

/**
 * Makes the stored admin flag of every user say what the settings say (on a GitHub
 * install: listed in SANDGATE_ADMINS, bound to GitHub and not suspended), for the views
 * and the CLI that read it; the checks themselves never trust the stored flag there.
 */
export function syncGithubAdmins(db: Db, admins: readonly string[]): void {
  db.prepare(
    `UPDATE users SET is_admin = (github_id IS NOT NULL AND suspended_at IS NULL AND lower(name) IN (SELECT value FROM json_each(?)))`,
  ).run(JSON.stringify(admins.map((a) => a.toLowerCase())));
}
