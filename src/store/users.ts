/**
 * Users: a stable numeric id per login name. Sign-in (GitHub or the local link) and
 * operator commands create them; everything per-user is keyed by the id.
 */
import { statement, type Db } from './store.js';

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

/** The GitHub teams (org/team) a user was in at their last check, for upstream servers open to teams. */
export function setGithubTeams(db: Db, userId: number, teams: string[]): void {
  statement(db, 'UPDATE users SET github_teams = ? WHERE id = ?').run(JSON.stringify(teams), userId);
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
