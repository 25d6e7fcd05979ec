import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { prepared } from './prepared.js';
import { openStore, serializable, type Store } from './store.js';
import { MIGRATIONS } from '../migrations.js';
import { ensureUser } from '../accounts/accounts.js';
import { storePerTest, type TestStore } from '../../test/support/store.js';

const userNamed = prepared((db, p: { name: string }) => db.selectFrom('users').select(['id', 'name']).where('name', '=', p.name));
const renameUser = prepared((db, p: { id: number; name: string }) => db.updateTable('users').set({ name: p.name }).where('id', '=', p.id).where('name', '!=', p.name));

describe('prepared queries', () => {
  let store: TestStore;
  storePerTest((s) => (store = s));

  it('run with the values of each call, never those it was compiled with', async () => {
    const ann = await ensureUser(store.db, 'ann');
    const bob = await ensureUser(store.db, 'bob');
    expect(await userNamed(store.db, { name: 'ann' })).toEqual([{ id: ann.id, name: 'ann' }]);
    expect(await userNamed(store.db, { name: 'bob' })).toEqual([{ id: bob.id, name: 'bob' }]);
    expect(await userNamed(store.db, { name: 'nobody' })).toEqual([]);
  });

  it('place a value used twice in both places, and write', async () => {
    const ann = await ensureUser(store.db, 'ann');
    await renameUser(store.db, { id: ann.id, name: 'anne' });
    expect(await userNamed(store.db, { name: 'anne' })).toEqual([{ id: ann.id, name: 'anne' }]);
    expect(await userNamed(store.db, { name: 'ann' })).toEqual([]);
  });

  it('run inside a transaction, which sees its own writes and loses them on rollback', async () => {
    const ann = await ensureUser(store.db, 'ann');
    await expect(
      serializable(store.db, async (tx) => {
        await renameUser(tx, { id: ann.id, name: 'anne' });
        expect(await userNamed(tx, { name: 'anne' })).toHaveLength(1);
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect(await userNamed(store.db, { name: 'ann' })).toHaveLength(1);
  });

  it('compile once per database: the same query serves a SQLite and a Postgres store side by side', async () => {
    // In the sqlite project both stores are SQLite; in the postgres project one of each.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-prepared-'));
    const other: Store = await openStore({ dataDir: dir }, MIGRATIONS);
    try {
      const here = await ensureUser(store.db, 'here');
      const there = await ensureUser(other.db, 'there');
      for (let i = 0; i < 2; i++) {
        expect(await userNamed(store.db, { name: 'here' })).toEqual([{ id: here.id, name: 'here' }]);
        expect(await userNamed(other.db, { name: 'there' })).toEqual([{ id: there.id, name: 'there' }]);
        expect(await userNamed(other.db, { name: 'here' })).toEqual([]);
      }
    } finally {
      await other.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuse a builder that looks at a value instead of placing it', async () => {
    await ensureUser(store.db, 'ann');
    const branching = prepared((db, p: { name: string | null }) => {
      const q = db.selectFrom('users').select('id');
      // A placeholder is never null: the branch would be fixed at compile time for every call.
      return p.name === null ? q.where('name', 'is', null) : q;
    });
    await expect(branching(store.db, { name: 'ann' })).rejects.toThrow(/read name without placing it as a value/);
  });
});
