import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../store/store.js';
import { MIGRATIONS } from '../migrations.js';
import { ensureUser } from '../accounts/accounts.js';
import { createCredentialStore, loadOrCreateCredentialsKey } from './credentials.js';

const dirs: string[] = [];
const stores: Store[] = [];
afterEach(() => {
  for (const s of stores.splice(0)) s.close();
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function setup() {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-cred-'));
  dirs.push(dataDir);
  const store = openStore(dataDir, MIGRATIONS);
  stores.push(store);
  return { dataDir, store };
}

describe('credential store', () => {
  it('keeps values encrypted at rest: the raw value is nowhere in the database files', () => {
    const { dataDir, store } = setup();
    const alice = ensureUser(store.db, 'alice');
    const creds = createCredentialStore(store.db, loadOrCreateCredentialsKey(dataDir));
    const secret = 'ghp_SuperSecretValue_1234567890';
    creds.set(alice.id, 'github', 'GITHUB_TOKEN', secret);
    expect(creds.get(alice.id, 'github')).toEqual({ GITHUB_TOKEN: secret });
    expect(creds.names(alice.id, 'github')).toEqual(['GITHUB_TOKEN']);
    store.db.pragma('wal_checkpoint(TRUNCATE)');
    for (const f of fs.readdirSync(dataDir).filter((f) => f.startsWith('sandgate.db'))) {
      const bytes = fs.readFileSync(path.join(dataDir, f));
      expect(bytes.includes(Buffer.from(secret))).toBe(false);
      expect(bytes.includes(Buffer.from('SuperSecret'))).toBe(false);
    }
  });

  it('binds each value to its row: a sealed value moved to another user does not decrypt', () => {
    const { dataDir, store } = setup();
    const alice = ensureUser(store.db, 'alice');
    const bob = ensureUser(store.db, 'bob');
    const creds = createCredentialStore(store.db, loadOrCreateCredentialsKey(dataDir));
    creds.set(alice.id, 'github', 'GITHUB_TOKEN', 'alice-token');
    store.db.prepare('UPDATE upstream_credentials SET user_id = ?').run(bob.id);
    expect(() => creds.get(bob.id, 'github')).toThrow(/cannot be decrypted/);
  });

  it('replaces and deletes', () => {
    const { dataDir, store } = setup();
    const alice = ensureUser(store.db, 'alice');
    const creds = createCredentialStore(store.db, loadOrCreateCredentialsKey(dataDir));
    creds.set(alice.id, 's', 'A', '1');
    creds.set(alice.id, 's', 'A', '2');
    creds.set(alice.id, 's', 'B', '3');
    expect(creds.get(alice.id, 's')).toEqual({ A: '2', B: '3' });
    expect(creds.delete(alice.id, 's', 'A')).toBe(1);
    expect(creds.get(alice.id, 's')).toEqual({ B: '3' });
    expect(creds.delete(alice.id, 's')).toBe(1);
    expect(creds.get(alice.id, 's')).toEqual({});
  });
});
