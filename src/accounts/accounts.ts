/**
 * Users: a stable numeric id per login name. Sign-in (GitHub or the local link) and
 * operator commands create them; everything per-user is keyed by the id. On a GitHub
 * install a user is also bound to GitHub's numeric account id (a login can be renamed
 * and registered again by someone else; the id cannot), and carries the state of its
 * membership check (src/auth/membership.ts).
 */
import { sql, type Selectable, type SqlBool } from 'kysely';
import type { Db, Tx } from '../store/store.js';
import { prepared } from '../store/prepared.js';
import type { UsersTable } from './schema.js';

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

type UserRow = Selectable<UsersTable>;

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

/** `column` holds `login` in any case (as GitHub compares logins): lower() on both sides, which both databases have. */
const sameLogin = (column: 'name' | 'login', login: string) => sql<SqlBool>`lower(${sql.ref(column)}) = lower(${login})`;

/** Login names as GitHub allows them (plus the local install's single user). */
export const USER_NAME = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$/;

/** The user named `name`, exactly (names differing only in case are different users: findUsersByLogin finds those). */
export async function findUser(db: Db, name: string): Promise<User | undefined> {
  const r = await db.selectFrom('users').selectAll().where('name', '=', name).executeTakeFirst();
  return r && toUser(r);
}

/** Every execution reads its user (limits, permissions): compiled once. */
const userById = prepared((db, p: { id: number }) => db.selectFrom('users').selectAll().where('id', '=', p.id));

export async function getUser(db: Db, id: number): Promise<User | undefined> {
  const [r] = await userById(db, { id });
  return r && toUser(r);
}

/** Returns the user, creating it on first sight. `isAdmin` is updated when given. */
export async function ensureUser(db: Db, name: string, opts: { isAdmin?: boolean } = {}): Promise<User> {
  if (!USER_NAME.test(name)) throw new Error(`"${name}" is not a valid user name (letters, digits and '-', at most 39)`);
  // One statement, so the row it returns is the one it made or found (a delete in between cannot leave nothing).
  const r = await db
    .insertInto('users')
    .values({ name, is_admin: opts.isAdmin ? 1 : 0, created_at: Date.now() })
    .onConflict((oc) => oc.column('name').doUpdateSet((eb) => ({ is_admin: opts.isAdmin === undefined ? eb.ref('users.is_admin') : eb.ref('excluded.is_admin') })))
    .returningAll()
    .executeTakeFirstOrThrow();
  return toUser(r);
}

export async function listUsers(db: Db): Promise<User[]> {
  return (await db.selectFrom('users').selectAll().orderBy('name').execute()).map(toUser);
}

/** Sets a user's permission ceiling (JSON), or null to fall back to the default. */
export async function setUserPermissions(db: Db, name: string, permissions: string | null): Promise<void> {
  const r = await db.updateTable('users').set({ permissions }).where('name', '=', name).executeTakeFirst();
  if (Number(r.numUpdatedRows) === 0) throw new Error(`no user named "${name}"`);
}

/** Gives the user workspace `id` unless they have one already; returns the one they have. */
export async function claimWorkspace(db: Db, userId: number, id: string): Promise<string> {
  await db.updateTable('users').set({ workspace_id: id }).where('id', '=', userId).where('workspace_id', 'is', null).execute();
  const user = await getUser(db, userId);
  if (!user?.workspaceId) throw new Error(`no user with id ${userId}`);
  return user.workspaceId;
}

/** Whether some user's workspace is `id` (a pooled container's workspace may be removed only if not). */
/** The workspaces of these users (those who have one). */
export async function workspacesOf(db: Db, userIds: readonly number[]): Promise<string[]> {
  if (!userIds.length) return [];
  const rows = await db.selectFrom('users').select('workspace_id').where('id', 'in', [...userIds]).where('workspace_id', 'is not', null).execute();
  return rows.map((r) => r.workspace_id!);
}

/** The users whose workspace is one of `ids`, each with that workspace. */
export async function ownersOfWorkspaces(db: Db, ids: readonly string[]): Promise<{ userId: number; workspaceId: string }[]> {
  const out: { userId: number; workspaceId: string }[] = [];
  for (let i = 0; i < ids.length; i += 500) {
    const rows = await db.selectFrom('users').select(['id', 'workspace_id']).where('workspace_id', 'in', ids.slice(i, i + 500)).execute();
    out.push(...rows.map((r) => ({ userId: r.id, workspaceId: r.workspace_id! })));
  }
  return out;
}

export async function workspaceInUse(db: Db, id: string): Promise<boolean> {
  return !!(await db.selectFrom('users').select('id').where('workspace_id', '=', id).executeTakeFirst());
}

export async function setDefaultModel(db: Db, userId: number, model: string | null): Promise<void> {
  await db.updateTable('users').set({ default_model: model }).where('id', '=', userId).execute();
}

/** Disables (nothing of theirs works: sessions, tokens, sandbox) or enables a user; nothing is deleted. */
export async function setUserDisabled(db: Db, userId: number, disabled: boolean): Promise<void> {
  await db
    .updateTable('users')
    .set({ disabled_at: disabled ? Date.now() : null })
    .where('id', '=', userId)
    .execute();
}

export async function recordSignIn(db: Db, userId: number, method: 'github' | 'link'): Promise<void> {
  await db.updateTable('users').set({ last_sign_in_at: Date.now(), sign_in_method: method }).where('id', '=', userId).execute();
}

/** Deletes a user and everything of theirs in the store (every table cascades from users). */
export async function deleteUser(db: Db, userId: number): Promise<boolean> {
  const r = await db.deleteFrom('users').where('id', '=', userId).executeTakeFirst();
  return Number(r.numDeletedRows) > 0;
}

/** The user bound to a GitHub account id. */
export async function findUserByGithubId(db: Db, githubId: number): Promise<User | undefined> {
  const r = await db.selectFrom('users').selectAll().where('github_id', '=', githubId).executeTakeFirst();
  return r && toUser(r);
}

/** Users whose name is `login` in any case (GitHub logins are case-insensitive), the exact spelling first. */
export async function findUsersByLogin(db: Db, login: string): Promise<User[]> {
  const rows = await db
    .selectFrom('users')
    .selectAll()
    .where(sameLogin('name', login))
    .orderBy((eb) => eb.case().when('name', '=', login).then(0).else(1).end())
    .orderBy('id')
    .execute();
  return rows.map(toUser);
}

/** The account that held `login` (in any case) before it was renamed, if one did here. */
export async function formerHolderOf(db: Db, login: string): Promise<{ userId: number; githubId: number } | undefined> {
  return db
    .selectFrom('github_former_logins')
    .select(['user_id as userId', 'github_id as githubId'])
    .where(sameLogin('login', login))
    .executeTakeFirst();
}

/** Binds a user to a GitHub account id (at their first GitHub sign-in). */
export async function bindGithubId(db: Db, userId: number, githubId: number): Promise<void> {
  await db.updateTable('users').set({ github_id: githubId }).where('id', '=', userId).execute();
}

/** Runs `fn` in a transaction, or in the caller's when `db` is one already. */
function inTransaction<T>(db: Db, fn: (tx: Tx) => Promise<T>): Promise<T> {
  return db.isTransaction ? fn(db as Tx) : db.transaction().execute(fn);
}

/**
 * Renames a GitHub-bound user (their account was renamed on GitHub) and remembers the
 * login they leave, so that no other GitHub account can take it over here.
 */
export async function renameGithubUser(db: Db, userId: number, name: string, now = Date.now()): Promise<void> {
  if (!USER_NAME.test(name)) throw new Error(`"${name}" is not a valid user name (letters, digits and '-', at most 39)`);
  await inTransaction(db, async (tx) => {
    const before = await getUser(tx, userId);
    if (!before || before.githubId === null) throw new Error(`user ${userId} is not bound to a GitHub account`);
    await tx.deleteFrom('github_former_logins').where(sameLogin('login', name)).where('user_id', '=', userId).execute();
    await tx.updateTable('users').set({ name }).where('id', '=', userId).execute();
    if (before.name.toLowerCase() !== name.toLowerCase()) {
      // Whoever held the login before in any case, it is this account's now: one row per login.
      await tx.deleteFrom('github_former_logins').where(sameLogin('login', before.name)).execute();
      await tx.insertInto('github_former_logins').values({ login: before.name, user_id: userId, github_id: before.githubId, renamed_at: now }).execute();
    }
  });
}

/** The sealed GitHub token of a user and when GitHub last confirmed their membership. */
export async function githubCheckState(db: Db, userId: number): Promise<{ sealedToken: string | null; checkedAt: number | null } | undefined> {
  return db.selectFrom('users').select(['github_token as sealedToken', 'github_checked_at as checkedAt']).where('id', '=', userId).executeTakeFirst();
}

/**
 * GitHub said yes: records when, the teams and the admin flag that follow from it, and
 * (at a sign-in) the member's new token. Lifts a suspension.
 */
export async function recordGithubYes(db: Db, userId: number, yes: { checkedAt: number; teams: string[]; isAdmin: boolean; sealedToken?: string }): Promise<void> {
  await db
    .updateTable('users')
    .set({
      github_checked_at: yes.checkedAt,
      github_teams: JSON.stringify(yes.teams),
      is_admin: yes.isAdmin ? 1 : 0,
      ...(yes.sealedToken !== undefined && { github_token: yes.sealedToken }),
      suspended_at: null,
      suspended_reason: null,
    })
    .where('id', '=', userId)
    .execute();
}

/** A membership check said no: the user is suspended (and no admin) until a GitHub sign-in is allowed again; nothing is deleted. */
export async function suspendUser(db: Db, userId: number, reason: string, now = Date.now()): Promise<void> {
  await db
    .updateTable('users')
    .set((eb) => ({ suspended_at: eb.fn.coalesce('suspended_at', eb.val(now)), suspended_reason: reason, is_admin: 0 }))
    .where('id', '=', userId)
    .execute();
}

/**
 * Makes the stored admin flag of every user say what the settings say (on a GitHub
 * install: listed in SANDGATE_ADMINS, bound to GitHub and not suspended), for the views
 * and the CLI that read it; the checks themselves never trust the stored flag there.
 */
export async function syncGithubAdmins(db: Db, admins: readonly string[]): Promise<void> {
  const names = [...new Set(admins.map((a) => a.toLowerCase()))];
  await db
    .updateTable('users')
    .set((eb) => ({
      // No admins listed: nobody is one (an empty IN () is no SQL). The flags are literals
      // in the SQL, never bound: Postgres types a CASE of bare parameters as text, which a
      // BIGINT column refuses.
      is_admin: names.length
        ? eb
            .case()
            .when(eb.and([eb('github_id', 'is not', null), eb('suspended_at', 'is', null), eb(eb.fn('lower', ['name']), 'in', names)]))
            .then(eb.lit(1))
            .else(eb.lit(0))
            .end()
        : eb.lit(0),
    }))
    .execute();
}
