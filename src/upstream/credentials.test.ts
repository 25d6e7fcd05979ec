import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Store } from '../store/store.js';
import { ensureUser } from '../accounts/accounts.js';
import { createCredentialStore, loadOrCreateCredentialsKey } from './credentials.js';
import { openTestStore } from '../../test/support/store.js';

const stores: (Store & { dataDir: string })[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) {
    await s.close();
    fs.rmSync(s.dataDir, { recursive: true, force: true });
  }
});

async function setup() {
  const store = await openTestStore();
  stores.push(store);
  return { dataDir: store.dataDir, store };
}

describe('credential store', () => {
  it('keeps values encrypted at rest: the raw value is nowhere in the stored row', async () => {
    const { dataDir, store } = await setup();
    const alice = await ensureUser(store.db, 'alice');
    const creds = createCredentialStore(store.db, loadOrCreateCredentialsKey(dataDir));
    const secret = 'ghp_SuperSecretValue_1234567890';
    await creds.set(alice.id, 'github', 'GITHUB_TOKEN', secret);
    expect(await creds.get(alice.id, 'github')).toEqual({ GITHUB_TOKEN: secret });
    expect(await creds.names(alice.id, 'github')).toEqual(['GITHUB_TOKEN']);
    const rows = await store.db.selectFrom('upstream_credentials').selectAll().execute();
    expect(rows).toHaveLength(1);
    expect(Buffer.isBuffer(rows[0]!.sealed)).toBe(true);
    for (const value of Object.values(rows[0]!)) {
      const bytes = Buffer.isBuffer(value) ? value : Buffer.from(String(value));
      expect(bytes.includes(Buffer.from('SuperSecret'))).toBe(false);
    }
    if (store.dialect === 'sqlite') {
      // Nor in the database's files, its write-ahead log included.
      for (const f of fs.readdirSync(dataDir).filter((f) => f.startsWith('sandgate.db'))) {
        const bytes = fs.readFileSync(path.join(dataDir, f));
        expect(bytes.includes(Buffer.from(secret))).toBe(false);
        expect(bytes.includes(Buffer.from('SuperSecret'))).toBe(false);
      }
    }
  });

  it('binds each value to its row: a sealed value moved to another user does not decrypt', async () => {
    const { dataDir, store } = await setup();
    const alice = await ensureUser(store.db, 'alice');
    const bob = await ensureUser(store.db, 'bob');
    const creds = createCredentialStore(store.db, loadOrCreateCredentialsKey(dataDir));
    await creds.set(alice.id, 'github', 'GITHUB_TOKEN', 'alice-token');
    await store.db.updateTable('upstream_credentials').set({ user_id: bob.id }).execute();
    await expect(creds.get(bob.id, 'github')).rejects.toThrow(/cannot be decrypted/);
  });

  it('replaces and deletes', async () => {
    const { dataDir, store } = await setup();
    const alice = await ensureUser(store.db, 'alice');
    const creds = createCredentialStore(store.db, loadOrCreateCredentialsKey(dataDir));
    await creds.set(alice.id, 's', 'A', '1');
    await creds.set(alice.id, 's', 'A', '2');
    await creds.set(alice.id, 's', 'B', '3');
    expect(await creds.get(alice.id, 's')).toEqual({ A: '2', B: '3' });
    expect(await creds.names(alice.id, 's')).toEqual(['A', 'B']);
    expect(await creds.delete(alice.id, 's', 'A')).toBe(1);
    expect(await creds.get(alice.id, 's')).toEqual({ B: '3' });
    expect(await creds.delete(alice.id, 's')).toBe(1);
    expect(await creds.get(alice.id, 's')).toEqual({});
    expect(await creds.delete(alice.id, 's')).toBe(0);
  });
});
