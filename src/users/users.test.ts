import fs from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ensureUser, getUser, suspendUser, type User } from '../accounts/accounts.js';
import { deleteUserSessions, loadSession, saveSession } from '../auth/sessions.js';
import type { Store } from '../store/store.js';
import { openTestStore } from '../../test/support/store.js';
import { createToken, verifyToken } from '../tokens/tokens.js';
import { cutOff, deleteUser, disableUser, enableUser, stillRefused, type UserParts } from './users.js';

describe('what is done to a user as a whole', () => {
  let store: Store & { dataDir: string };
  let alice: User;
  let bob: User;
  let token: string;
  /** What the parts were asked, in order. */
  let calls: string[];
  const later = () => Date.now() + 3_600_000;

  /** Everything of the gateway process: live pages and running turns too. */
  const gatewayParts = (): UserParts => ({
    db: store.db,
    sessions: { endSessionsOf: (id) => (calls.push(`sessions ${id}`), deleteUserSessions(store.db, id)) },
    live: { signedOut: (id, everywhere) => calls.push(`live ${id} ${everywhere}`) },
    turns: { cancelUser: (id) => (calls.push(`turns ${id}`), 1) },
    sandboxes: { stopUser: async (id, opts) => calls.push(`sandbox ${id} kill=${opts.kill} by=${opts.by}`) },
  });
  /** What the command line reaches: the store and the containers. */
  const cliParts = (): UserParts => ({
    db: store.db,
    sessions: { endSessionsOf: (id) => deleteUserSessions(store.db, id) },
    sandboxes: { stopUser: async (id) => calls.push(`sandbox ${id}`) },
  });
  const workspaces = {
    destroyWorkspaceOf: async (u: User) => void calls.push(`workspace ${u.id}`),
    removeDeletedElsewhere: async () => {
      calls.push('elsewhere');
      return { storesLeft: 0 };
    },
  };
  /** A manager that still holds the user's sandbox: it refuses to remove the workspace. */
  const busyWorkspaces = {
    destroyWorkspaceOf: async () => {
      throw new Error('the user still has a sandbox running');
    },
    removeDeletedElsewhere: async () => {
      calls.push('elsewhere');
      return { storesLeft: 0 };
    },
  };
  const sessionsOf = async (u: User) =>
    (await store.db.selectFrom('sessions').select((eb) => eb.fn.countAll<number>().as('n')).where('user_id', '=', u.id).executeTakeFirstOrThrow()).n;

  beforeEach(async () => {
    store = await openTestStore();
    alice = await ensureUser(store.db, 'alice');
    bob = await ensureUser(store.db, 'bob');
    await saveSession(store.db, 'alice-laptop', '{}', alice.id, later());
    await saveSession(store.db, 'alice-phone', '{}', alice.id, later());
    await saveSession(store.db, 'bob-laptop', '{}', bob.id, later());
    token = (await createToken(store.db, { userId: alice.id, name: 'laptop' })).token;
    calls = [];
  });
  afterEach(async () => {
    await store.close();
    fs.rmSync(store.dataDir, { recursive: true, force: true });
  });

  it('enabling says when GitHub membership still keeps the user out', async () => {
    await disableUser(cliParts(), alice, 'root');
    await suspendUser(store.db, alice.id, 'not on the allow-list');
    await enableUser(cliParts(), (await getUser(store.db, alice.id))!);
    expect((await getUser(store.db, alice.id))?.disabledAt).toBeNull();
    expect(stillRefused((await getUser(store.db, alice.id))!)).toMatch(/GitHub membership still refuses them/);
    expect(stillRefused((await getUser(store.db, bob.id))!)).toBeUndefined();
  });

  it('cutting off ends the turns, then the sessions, the live pages and the sandbox (killed, naming the admin)', async () => {
    await cutOff(gatewayParts(), alice, 'root');
    expect(calls).toEqual([`turns ${alice.id}`, `sessions ${alice.id}`, `live ${alice.id} true`, `sandbox ${alice.id} kill=true by=root`]);
    expect(await sessionsOf(alice)).toBe(0);
    expect(await loadSession(store.db, 'bob-laptop')).toBeDefined();
    // Cutting off alone disables nothing.
    expect((await getUser(store.db, alice.id))?.disabledAt).toBeNull();
  });

  it('disabling ends everything that works now and keeps everything stored; the token is refused, not revoked', async () => {
    await disableUser(gatewayParts(), alice, 'root');
    expect((await getUser(store.db, alice.id))?.disabledAt).toEqual(expect.any(Number));
    expect(await sessionsOf(alice)).toBe(0);
    expect(await sessionsOf(bob)).toBe(1);
    expect(calls).toContain(`sandbox ${alice.id} kill=true by=root`);
    const refused = await verifyToken(store.db, token);
    expect(refused).toMatchObject({ ok: false, reason: 'disabled' });

    await enableUser({ db: store.db }, alice);
    expect((await getUser(store.db, alice.id))?.disabledAt).toBeNull();
    expect(await verifyToken(store.db, token)).toMatchObject({ ok: true });
    // Sessions ended stay ended: they sign in afresh.
    expect(await sessionsOf(alice)).toBe(0);
  });

  it('from the command line (no live pages, no turns) the stored state comes out the same', async () => {
    await disableUser(cliParts(), alice);
    expect(calls).toEqual([`sandbox ${alice.id}`]);
    expect((await getUser(store.db, alice.id))?.disabledAt).toEqual(expect.any(Number));
    expect(await sessionsOf(alice)).toBe(0);
    expect(await verifyToken(store.db, token)).toMatchObject({ ok: false, reason: 'disabled' });
  });

  it('deleting cuts off, removes the workspace, then every row of the user', async () => {
    await deleteUser({ ...gatewayParts(), workspaces }, alice, 'root');
    // The other stores are asked only once the account is gone (a user whose delete failed keeps their files everywhere).
    expect(calls.slice(-3)).toEqual([`sandbox ${alice.id} kill=true by=root`, `workspace ${alice.id}`, 'elsewhere']);
    expect(await getUser(store.db, alice.id)).toBeUndefined();
    expect(await sessionsOf(alice)).toBe(0);
    const tokens = await store.db.selectFrom('api_tokens').select((eb) => eb.fn.countAll<number>().as('n')).where('user_id', '=', alice.id).executeTakeFirstOrThrow();
    expect(tokens.n).toBe(0);
    expect(await verifyToken(store.db, token)).toMatchObject({ ok: false });
    expect(await getUser(store.db, bob.id)).toBeDefined();
    expect(await sessionsOf(bob)).toBe(1);
  });

  it('a workspace that cannot be removed leaves the account in place (disabled, cut off), says so, and the delete can be tried again', async () => {
    await expect(deleteUser({ ...gatewayParts(), workspaces: busyWorkspaces }, alice, 'root')).rejects.toThrow(
      /^alice is disabled and signed out everywhere, but the removal of their files did not complete \(the user still has a sandbox running\), so nothing else of theirs was deleted\. Delete them again/,
    );
    expect(calls).not.toContain('elsewhere');
    expect((await getUser(store.db, alice.id))?.disabledAt).not.toBeNull();
    expect(await sessionsOf(alice)).toBe(0);
    await deleteUser({ ...gatewayParts(), workspaces }, (await getUser(store.db, alice.id))!, 'root');
    expect(await getUser(store.db, alice.id)).toBeUndefined();
  });
});
