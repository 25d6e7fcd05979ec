import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Migration } from './migrations.js';
import { MIGRATIONS } from '../migrations.js';
import { openStore, openStoreFile, StoreError } from './store.js';
import { ensureUser, findUser } from '../accounts/accounts.js';

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-store-'));

describe('store', () => {
  it('creates the database in WAL mode with every migration applied', () => {
    const dir = tmp();
    const store = openStore(dir, MIGRATIONS);
    expect(store.version).toBe(MIGRATIONS.length);
    expect(store.db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(fs.existsSync(path.join(dir, 'sandgate.db'))).toBe(true);
    store.close();
  });

  it('keeps the data directory and the database private, whatever mode they had', () => {
    const dir = tmp();
    fs.chmodSync(dir, 0o755);
    fs.writeFileSync(path.join(dir, 'sandgate.db'), '', { mode: 0o644 });
    fs.chmodSync(path.join(dir, 'sandgate.db'), 0o644);
    const store = openStore(dir, MIGRATIONS);
    store.db.exec('CREATE TABLE t (x)');
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    for (const f of ['sandgate.db', 'sandgate.db-wal', 'sandgate.db-shm']) expect(fs.statSync(path.join(dir, f)).mode & 0o777, f).toBe(0o600);
    store.close();
  });

  it('keeps data across restarts and applies only new migrations', () => {
    const dir = tmp();
    const file = path.join(dir, 'sandgate.db');
    const first = openStoreFile(file, MIGRATIONS);
    ensureUser(first.db, 'alice', { isAdmin: true });
    first.close();
    const extra: Migration = {
      description: 'test column',
      up: (db) => db.exec('ALTER TABLE users ADD COLUMN note TEXT'),
    };
    const second = openStoreFile(file, [...MIGRATIONS, extra]);
    expect(second.version).toBe(MIGRATIONS.length + 1);
    expect(findUser(second.db, 'alice')?.isAdmin).toBe(true);
    second.close();
    const third = openStoreFile(file, [...MIGRATIONS, extra]);
    expect(findUser(third.db, 'alice')).toBeDefined();
    third.close();
  });

  it('refuses a database from a newer version and changes nothing', () => {
    const dir = tmp();
    const file = path.join(dir, 'sandgate.db');
    const s = openStoreFile(file, MIGRATIONS);
    ensureUser(s.db, 'bob');
    s.db.pragma(`user_version = ${MIGRATIONS.length + 5}`);
    s.close();
    const before = fs.readFileSync(file);
    expect(() => openStoreFile(file, MIGRATIONS)).toThrow(StoreError);
    expect(() => openStoreFile(file, MIGRATIONS)).toThrow(/newer sandgate .* Upgrade sandgate/);
    expect(fs.readFileSync(file).equals(before)).toBe(true);
  });

  it('rolls back a failing migration as a whole', () => {
    const dir = tmp();
    const file = path.join(dir, 'sandgate.db');
    const bad: Migration = {
      description: 'half-done',
      up: (db) => {
        db.exec('CREATE TABLE half (x)');
        throw new Error('boom');
      },
    };
    expect(() => openStoreFile(file, [...MIGRATIONS, bad])).toThrow(/boom/);
    const s = openStoreFile(file, MIGRATIONS);
    expect(s.db.prepare("SELECT name FROM sqlite_master WHERE name = 'half'").get()).toBeUndefined();
    s.close();
  });

  it('validates user names', () => {
    const s = openStore(tmp(), MIGRATIONS);
    expect(() => ensureUser(s.db, '../etc')).toThrow(/not a valid user name/);
    expect(ensureUser(s.db, 'octo-cat').name).toBe('octo-cat');
    s.close();
  });
});
