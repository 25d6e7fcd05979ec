/**
 * Users in the store: made on first sight, found by exact name or by GitHub login in any
 * case, renamed after their GitHub account (the login they leave stays theirs), and the
 * admin flag the settings give, on both databases.
 */
import { describe, expect, it } from 'vitest';
import { storePerTest, type TestStore } from '../../test/support/store.js';
import {
  bindGithubId,
  claimWorkspace,
  ensureUser,
  findUser,
  findUsersByLogin,
  formerHolderOf,
  getUser,
  githubCheckState,
  listUsers,
  recordGithubYes,
  renameGithubUser,
  setUserPermissions,
  suspendUser,
  syncGithubAdmins,
  workspaceInUse,
} from './accounts.js';

let store: TestStore;
storePerTest((s) => (store = s));

describe('users', () => {
  it('are made on first sight; the admin flag changes only when given', async () => {
    const made = await ensureUser(store.db, 'ana', { isAdmin: true });
    expect(made).toMatchObject({ name: 'ana', isAdmin: true, permissions: null, workspaceId: null, githubTeams: [], disabledAt: null });
    expect(await ensureUser(store.db, 'ana')).toEqual(made);
    expect((await ensureUser(store.db, 'ana', { isAdmin: false })).isAdmin).toBe(false);
    expect((await ensureUser(store.db, 'ana')).isAdmin).toBe(false);
    await expect(ensureUser(store.db, 'not valid')).rejects.toThrow(/not a valid user name/);
    // Names are exact: another case is another user (GitHub sign-in finds them all: findUsersByLogin).
    const upper = await ensureUser(store.db, 'Ana');
    expect(upper.id).not.toBe(made.id);
    expect((await findUser(store.db, 'ANA'))).toBeUndefined();
    expect((await listUsers(store.db)).map((u) => u.name)).toEqual(['Ana', 'ana']);
  });

  it('hold a permission ceiling, a workspace claimed once, and say whether a workspace is in use', async () => {
    const ana = await ensureUser(store.db, 'ana');
    await setUserPermissions(store.db, 'ana', '{"network":false}');
    expect((await getUser(store.db, ana.id))?.permissions).toBe('{"network":false}');
    await expect(setUserPermissions(store.db, 'nobody', null)).rejects.toThrow(/no user named "nobody"/);
    expect(await claimWorkspace(store.db, ana.id, 'ws-1')).toBe('ws-1');
    expect(await claimWorkspace(store.db, ana.id, 'ws-2')).toBe('ws-1');
    expect(await workspaceInUse(store.db, 'ws-1')).toBe(true);
    expect(await workspaceInUse(store.db, 'ws-2')).toBe(false);
    await expect(claimWorkspace(store.db, 999_999, 'ws-3')).rejects.toThrow(/no user with id 999999/);
  });
});

describe('GitHub identity', () => {
  it('finds users by login in any case, the exact spelling first', async () => {
    const lower = await ensureUser(store.db, 'octo-cat');
    const mixed = await ensureUser(store.db, 'Octo-Cat');
    await ensureUser(store.db, 'octo-dog');
    expect((await findUsersByLogin(store.db, 'Octo-Cat')).map((u) => u.id)).toEqual([mixed.id, lower.id]);
    expect((await findUsersByLogin(store.db, 'octo-cat')).map((u) => u.id)).toEqual([lower.id, mixed.id]);
    expect((await findUsersByLogin(store.db, 'OCTO-CAT')).map((u) => u.id)).toEqual([lower.id, mixed.id]);
    expect(await findUsersByLogin(store.db, 'octo')).toEqual([]);
  });

  it('renames a bound user and remembers the login left, in any case, for that account alone', async () => {
    const ana = await ensureUser(store.db, 'ana');
    await expect(renameGithubUser(store.db, ana.id, 'ana-new')).rejects.toThrow(/not bound to a GitHub account/);
    await bindGithubId(store.db, ana.id, 42);
    await renameGithubUser(store.db, ana.id, 'ana-new', 1000);
    expect((await getUser(store.db, ana.id))?.name).toBe('ana-new');
    expect(await formerHolderOf(store.db, 'ANA')).toEqual({ userId: ana.id, githubId: 42 });
    // A change of case only is no rename to remember.
    await renameGithubUser(store.db, ana.id, 'Ana-New');
    expect(await formerHolderOf(store.db, 'ana-new')).toBeUndefined();
    // Taking a former login back forgets it, in whatever case it was kept.
    await renameGithubUser(store.db, ana.id, 'ANA');
    expect(await formerHolderOf(store.db, 'ana')).toBeUndefined();
    expect(await formerHolderOf(store.db, 'ana-new')).toEqual({ userId: ana.id, githubId: 42 });

    // A login another account left before is this one's once it leaves it: one row per login.
    const ben = await ensureUser(store.db, 'ben');
    await bindGithubId(store.db, ben.id, 43);
    await renameGithubUser(store.db, ana.id, 'ana-third');
    await renameGithubUser(store.db, ben.id, 'Ana');
    await renameGithubUser(store.db, ben.id, 'ben-2');
    expect(await formerHolderOf(store.db, 'ana')).toEqual({ userId: ben.id, githubId: 43 });
    const rows = await store.db.selectFrom('github_former_logins').select(['login', 'user_id']).execute();
    expect(rows.map((r) => `${r.login} ${r.user_id === ana.id ? 'ana' : 'ben'}`).sort()).toEqual(['Ana ben', 'Ana-New ana', 'ben ben']);
  });

  it('renames inside a caller’s transaction too, and nothing of it stays when that one fails', async () => {
    const ana = await ensureUser(store.db, 'ana');
    await bindGithubId(store.db, ana.id, 42);
    await store.db.transaction().execute((tx) => renameGithubUser(tx, ana.id, 'ana-2'));
    expect((await getUser(store.db, ana.id))?.name).toBe('ana-2');
    await expect(
      store.db.transaction().execute(async (tx) => {
        await renameGithubUser(tx, ana.id, 'ana-3');
        throw new Error('later step failed');
      }),
    ).rejects.toThrow(/later step failed/);
    expect((await getUser(store.db, ana.id))?.name).toBe('ana-2');
    expect(await formerHolderOf(store.db, 'ana-2')).toBeUndefined();
  });

  it('records what GitHub said: a yes lifts a suspension and keeps the token unless a new one comes', async () => {
    const ana = await ensureUser(store.db, 'ana');
    await recordGithubYes(store.db, ana.id, { checkedAt: 10, teams: ['org/a'], isAdmin: true, sealedToken: 'sealed-1' });
    expect(await githubCheckState(store.db, ana.id)).toEqual({ sealedToken: 'sealed-1', checkedAt: 10 });
    await suspendUser(store.db, ana.id, 'gone from the org', 20);
    await suspendUser(store.db, ana.id, 'still gone', 30);
    expect(await getUser(store.db, ana.id)).toMatchObject({ suspendedAt: 20, suspendedReason: 'still gone', isAdmin: false });
    await recordGithubYes(store.db, ana.id, { checkedAt: 40, teams: ['org/b'], isAdmin: false });
    expect(await githubCheckState(store.db, ana.id)).toEqual({ sealedToken: 'sealed-1', checkedAt: 40 });
    expect(await getUser(store.db, ana.id)).toMatchObject({ suspendedAt: null, suspendedReason: null, githubTeams: ['org/b'] });
    expect(await githubCheckState(store.db, 999_999)).toBeUndefined();
  });

  it('makes the stored admin flags say what the settings say, an empty list included', async () => {
    const ids: Record<string, number> = {};
    for (const [i, name] of ['root', 'Boss', 'member', 'unbound', 'gone'].entries()) {
      const u = await ensureUser(store.db, name, { isAdmin: name === 'member' });
      ids[name] = u.id;
      if (name !== 'unbound') await bindGithubId(store.db, u.id, 100 + i);
    }
    await suspendUser(store.db, ids.gone!, 'no longer a member');
    const admins = async () => (await listUsers(store.db)).filter((u) => u.isAdmin).map((u) => u.name);
    // The column itself, as both databases hold it: 1 or 0, numbers.
    const flags = async () => Object.fromEntries((await store.db.selectFrom('users').select(['name', 'is_admin']).execute()).map((r) => [r.name, r.is_admin]));
    await syncGithubAdmins(store.db, ['ROOT', 'boss', 'unbound', 'gone', 'nobody']);
    expect(await admins()).toEqual(['Boss', 'root']);
    expect(await flags()).toEqual({ root: 1, Boss: 1, member: 0, unbound: 0, gone: 0 });
    await syncGithubAdmins(store.db, []);
    expect(await admins()).toEqual([]);
    expect(await flags()).toEqual({ root: 0, Boss: 0, member: 0, unbound: 0, gone: 0 });
  });
});
