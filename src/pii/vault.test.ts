import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createDetector } from './detector.js';
import { openTestVault, seededRandom, type TestVault } from '../../test/support/pii.js';
import { MIGRATIONS, versionOf } from '../migrations.js';
import { openStoreFile } from '../store/store.js';
import { ensureUser } from '../accounts/accounts.js';
import { piiBatchesMigration } from './schema.js';
import { Sealer } from './sealing.js';
import { PiiVault } from './vault.js';

const open: TestVault[] = [];
function testVault(...args: Parameters<typeof openTestVault>): TestVault {
  const t = openTestVault(...args);
  open.push(t);
  return t;
}
afterEach(() => open.splice(0).forEach((t) => t.cleanup()));

const TEXT = 'Contact jane.roe@example.com or +1 415 555 0134; card 4111 1111 1111 1111; from 203.0.113.5.';

describe('PiiVault tokenization', () => {
  it('replaces values with tokens and gets them back exactly', () => {
    const t = testVault();
    const scope = t.vault.scope({ userId: t.userId('ana'), kind: 'token', id: 'tok1' });
    const { text, found } = scope.tokenize(TEXT);
    expect(text).toBe('Contact [EMAIL_1] or [PHONE_1]; card [CARD_1]; from [IP_1].');
    expect(found.map((f) => f.token)).toEqual(['[EMAIL_1]', '[PHONE_1]', '[CARD_1]', '[IP_1]']);
    expect(JSON.stringify(found)).not.toContain('jane');
    expect(scope.detokenize(text)).toEqual({ text: TEXT, unknown: [] });
  });

  it('same value, same token for the whole scope; different values, different tokens', () => {
    const t = testVault();
    const ref = { userId: t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const a = t.vault.scope(ref).tokenize('a@x.io b@x.io a@x.io').text;
    expect(a).toBe('[EMAIL_1] [EMAIL_2] [EMAIL_1]');
    // A new PiiScope object (a new MCP request) for the same scope sees the same tokens.
    expect(t.vault.scope(ref).tokenize('b@x.io c@x.io').text).toBe('[EMAIL_2] [EMAIL_3]');
    // Another API token of the same user is another scope.
    expect(t.vault.scope({ ...ref, id: 'tok2' }).tokenize('c@x.io').text).toBe('[EMAIL_1]');
  });

  it('reports tokens it does not know and never guesses', () => {
    const t = testVault();
    const scope = t.vault.scope({ userId: t.userId('ana'), kind: 'token', id: 'tok1' });
    scope.tokenize('a@x.io');
    const r = scope.detokenize('send to [EMAIL_1] and [EMAIL_2], [EMAIL_2], [NAME_7], [EMAIL_01], [FOO_1]');
    expect(r.text).toBe('send to a@x.io and [EMAIL_2], [EMAIL_2], [NAME_7], [EMAIL_01], [FOO_1]');
    expect(r.unknown).toEqual(['[EMAIL_2]', '[NAME_7]']);
  });

  it("one user's tokens never resolve for another", () => {
    const t = testVault();
    const ana = t.vault.scope({ userId: t.userId('ana'), kind: 'token', id: 'shared-id' });
    const bob = t.vault.scope({ userId: t.userId('bob'), kind: 'token', id: 'shared-id' });
    expect(ana.tokenize('secret-person@corp.example').text).toBe('[EMAIL_1]');
    expect(bob.detokenize('[EMAIL_1]')).toEqual({ text: '[EMAIL_1]', unknown: ['[EMAIL_1]'] });
    expect(bob.tokenize('other@corp.example').text).toBe('[EMAIL_1]');
    expect(ana.detokenize('[EMAIL_1]').text).toBe('secret-person@corp.example');
    expect(bob.detokenize('[EMAIL_1]').text).toBe('other@corp.example');
  });

  it('conversation scopes are separate from token scopes', () => {
    const t = testVault();
    const userId = t.userId('ana');
    t.vault.scope({ userId, kind: 'token', id: 'x' }).tokenize('a@x.io');
    expect(t.vault.scope({ userId, kind: 'conversation', id: 'x' }).detokenize('[EMAIL_1]').unknown).toEqual(['[EMAIL_1]']);
  });

  it('text that already contains token literals round-trips exactly', () => {
    const t = testVault();
    const scope = t.vault.scope({ userId: t.userId('ana'), kind: 'token', id: 'tok1' });
    scope.tokenize('a@x.io');
    const input = 'the doc says [EMAIL_1] and [TOKEN_1] but a@x.io is real';
    const { text } = scope.tokenize(input);
    expect(text).toBe('the doc says [TOKEN_1] and [TOKEN_2] but [EMAIL_1] is real');
    expect(scope.detokenize(text).text).toBe(input);
  });

  it('round-trips random text mixing values, token literals and unicode', () => {
    const t = testVault();
    const scope = t.vault.scope({ userId: t.userId('ana'), kind: 'token', id: 'tok1' });
    const random = seededRandom(42);
    const pieces = ['a@x.io', '[EMAIL_1]', '[IP_2]', ' ', '\n', 'Jane Roe', '10.0.0.1', '4111111111111111', 'é', '😀', '[', ']', '_', '1', 'EMAIL', '"', '\\'];
    for (let i = 0; i < 300; i++) {
      const n = 1 + Math.floor(random() * 30);
      const x = Array.from({ length: n }, () => pieces[Math.floor(random() * pieces.length)]).join('');
      expect(scope.detokenize(scope.tokenize(x).text).text).toBe(x);
    }
  });

  it('detokenizes tool arguments deeply, keys included', () => {
    const t = testVault();
    const scope = t.vault.scope({ userId: t.userId('ana'), kind: 'token', id: 'tok1' });
    scope.tokenize('a@x.io 10.0.0.1');
    const args = { to: ['[EMAIL_1]', 'x'], meta: { '[IP_1]': 1, note: 'hi [EMAIL_1], [EMAIL_9]' }, n: 3, ok: true, none: null };
    expect(scope.detokenizeDeep(args)).toEqual({
      value: { to: ['a@x.io', 'x'], meta: { '10.0.0.1': 1, note: 'hi a@x.io, [EMAIL_9]' }, n: 3, ok: true, none: null },
      unknown: ['[EMAIL_9]'],
    });
  });

  it('applies the detector settings (entity types, allow-list)', () => {
    const t = testVault({ detector: createDetector({ entities: ['EMAIL'], allow: ['support@acme.com'] }) });
    const scope = t.vault.scope({ userId: t.userId('ana'), kind: 'token', id: 'tok1' });
    expect(scope.tokenize('support@acme.com jo@acme.com 10.0.0.1').text).toBe('support@acme.com [EMAIL_1] 10.0.0.1');
  });
});

describe('PiiVault storage', () => {
  it('stores no raw value: not in the database file, not in its WAL', () => {
    const t = testVault();
    const scope = t.vault.scope({ userId: t.userId('ana'), kind: 'token', id: 'tok1' });
    const values = ['very.unusual.address@example.org', '4111 1111 1111 1111', 'DE89 3704 0044 0532 0130 00', 'Giada Hornung'];
    scope.tokenize(values.map((v) => `value: ${v}\n`).join(''));
    t.store.db.pragma('wal_checkpoint(FULL)');
    const files = fs.readdirSync(t.dir).filter((f) => f.startsWith('sandgate.db'));
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) {
      const bytes = fs.readFileSync(path.join(t.dir, f));
      for (const v of values) {
        expect(bytes.includes(Buffer.from(v, 'utf8')), `${v} in ${f}`).toBe(false);
        expect(bytes.includes(Buffer.from(v, 'utf16le')), `${v} (utf16) in ${f}`).toBe(false);
      }
    }
  });

  it('a batch moved to another scope, or altered, does not open', () => {
    const t = testVault();
    const ana = { userId: t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const bob = { userId: t.userId('bob'), kind: 'token' as const, id: 'tok1' };
    t.vault.scope(ana).tokenize('a@x.io b@x.io');
    t.vault.scope(bob).tokenize('c@x.io');
    const scopeOf = (userId: number) => t.store.db.prepare('SELECT id FROM pii_scopes WHERE user_id = ?').pluck().get(userId) as number;
    // Ana's sealed values, with their uses, copied into Bob's scope.
    t.store.db
      .prepare('UPDATE pii_batches SET (sealed, uses) = (SELECT sealed, uses FROM pii_batches WHERE scope_id = ?) WHERE scope_id = ?')
      .run(scopeOf(ana.userId), scopeOf(bob.userId));
    // A new vault (a restarted gateway) reads from the database, not from memory.
    const restarted = new PiiVault(t.store.db, t.key, { ttlMs: 3_600_000 });
    expect(restarted.scope(bob).detokenize('[EMAIL_1] [EMAIL_2]').unknown).toEqual(['[EMAIL_1]', '[EMAIL_2]']);
    expect(restarted.scope(ana).detokenize('[EMAIL_1] [EMAIL_2]').text).toBe('a@x.io b@x.io');
    // A damaged use list (it is not under the seal) costs that batch only, never the scope.
    const uses = t.store.db.prepare('SELECT uses FROM pii_batches WHERE scope_id = ?').pluck().get(scopeOf(ana.userId));
    t.store.db.prepare("INSERT INTO pii_batches (scope_id, sealed, uses, oldest_use) VALUES (?, x'00', 'not json', 0)").run(scopeOf(ana.userId));
    expect(new PiiVault(t.store.db, t.key, { ttlMs: 3_600_000 }).scope(ana).detokenize('[EMAIL_1]').text).toBe('a@x.io');
    t.store.db.prepare("UPDATE pii_batches SET uses = 'not json' WHERE scope_id = ? AND sealed != x'00'").run(scopeOf(ana.userId));
    expect(new PiiVault(t.store.db, t.key, { ttlMs: 3_600_000 }).scope(ana).detokenize('[EMAIL_1]').unknown).toEqual(['[EMAIL_1]']);
    // ...and the purge still runs: it drops the record with no readable uses.
    expect(() => new PiiVault(t.store.db, t.key, { ttlMs: 3_600_000 }).purgeExpired()).not.toThrow();
    expect(t.store.db.prepare("SELECT COUNT(*) FROM pii_batches WHERE sealed = x'00'").pluck().get()).toBe(0);
    t.store.db.prepare('UPDATE pii_batches SET uses = ? WHERE scope_id = ?').run(uses, scopeOf(ana.userId));
    expect(new PiiVault(t.store.db, t.key, { ttlMs: 3_600_000 }).scope(ana).detokenize('[EMAIL_1]').text).toBe('a@x.io');
    // One flipped bit and the whole batch is refused, not misread.
    t.store.db.prepare('UPDATE pii_batches SET sealed = CAST(sealed AS BLOB) || x\'00\' WHERE scope_id = ?').run(scopeOf(ana.userId));
    const again = new PiiVault(t.store.db, t.key, { ttlMs: 3_600_000 });
    expect(again.scope(ana).detokenize('[EMAIL_1]').unknown).toEqual(['[EMAIL_1]']);
  });

  it('reads values sealed one by one by the previous schema, and moves them into a batch', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-pii-legacy-'));
    try {
      const file = path.join(dir, 'sandgate.db');
      const key = crypto.randomBytes(32);
      const old = openStoreFile(file, MIGRATIONS.slice(0, versionOf(piiBatchesMigration) - 1));
      const userId = ensureUser(old.db, 'ana').id;
      old.db.prepare("INSERT INTO pii_scopes (user_id, kind, ref, created_at) VALUES (?, 'token', 'tok1', 0)").run(userId);
      const scopeId = old.db.prepare('SELECT id FROM pii_scopes').pluck().get() as number;
      const sealer = new Sealer(key);
      const now = Date.now();
      const put = (type: string, n: number, value: string, lastUsedAt: number) =>
        old.db
          .prepare('INSERT INTO pii_values (scope_id, type, n, mac, sealed, last_used_at) VALUES (?, ?, ?, ?, ?, ?)')
          .run(scopeId, type, n, crypto.randomBytes(32), sealer.seal(value, `${userId}:${scopeId}:${type}:${n}`), lastUsedAt);
      put('EMAIL', 1, 'a@x.io', now);
      put('IP', 1, '10.0.0.1', now);
      put('EMAIL', 2, 'stale@x.io', now - 7_200_000);
      old.db.prepare("INSERT INTO pii_counters (scope_id, type, last_n) VALUES (?, 'EMAIL', 2), (?, 'IP', 1)").run(scopeId, scopeId);
      old.close();

      const store = openStoreFile(file, MIGRATIONS);
      try {
        const vault = new PiiVault(store.db, key, { ttlMs: 3_600_000 });
        const scope = vault.scope({ userId, kind: 'token', id: 'tok1' });
        expect(scope.detokenize('[EMAIL_1] [IP_1] [EMAIL_2]')).toEqual({ text: 'a@x.io 10.0.0.1 [EMAIL_2]', unknown: ['[EMAIL_2]'] });
        expect(scope.tokenize('b@x.io a@x.io stale@x.io').text).toBe('[EMAIL_3] [EMAIL_1] [EMAIL_4]');
        expect(store.db.prepare('SELECT COUNT(*) FROM pii_values_v1').pluck().get()).toBe(0);
        const restarted = new PiiVault(store.db, key, { ttlMs: 3_600_000 });
        expect(restarted.scope({ userId, kind: 'token', id: 'tok1' }).detokenize('[EMAIL_1] [IP_1] [EMAIL_3]').text).toBe('a@x.io 10.0.0.1 b@x.io');
      } finally {
        store.close();
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a vault with another key reads nothing back', () => {
    const t = testVault();
    const ref = { userId: t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    t.vault.scope(ref).tokenize('a@x.io');
    const other = new PiiVault(t.store.db, Buffer.alloc(32, 7), { ttlMs: 1000 * 3600 });
    expect(other.scope(ref).detokenize('[EMAIL_1]').unknown).toEqual(['[EMAIL_1]']);
  });

  it('a restarted vault resolves what the last one issued', () => {
    const t = testVault();
    const ref = { userId: t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const { text } = t.vault.scope(ref).tokenize('a@x.io and 10.0.0.1');
    const restarted = new PiiVault(t.store.db, t.key, { ttlMs: 3_600_000 });
    expect(restarted.scope(ref).detokenize(text)).toEqual({ text: 'a@x.io and 10.0.0.1', unknown: [] });
    expect(restarted.scope(ref).tokenize('10.0.0.1 b@x.io').text).toBe('[IP_1] [EMAIL_2]');
  });

  it('forgets values unused for the TTL, and never reuses their numbers', () => {
    let now = 1_000_000;
    const t = testVault({ ttlMs: 1000, now: () => now });
    const ref = { userId: t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    expect(t.vault.scope(ref).tokenize('a@x.io b@x.io').text).toBe('[EMAIL_1] [EMAIL_2]');
    now += 600;
    expect(t.vault.scope(ref).detokenize('[EMAIL_2]').text).toBe('b@x.io'); // use refreshes b
    now += 600;
    // a is past its TTL: it no longer resolves, before and after the purge.
    expect(t.vault.scope(ref).detokenize('[EMAIL_1] [EMAIL_2]')).toEqual({ text: '[EMAIL_1] b@x.io', unknown: ['[EMAIL_1]'] });
    // The use of b was written, not only remembered: a restarted vault agrees.
    const restarted = new PiiVault(t.store.db, t.key, { ttlMs: 1000, now: () => now });
    expect(restarted.scope(ref).detokenize('[EMAIL_1] [EMAIL_2]')).toEqual({ text: '[EMAIL_1] b@x.io', unknown: ['[EMAIL_1]'] });
    expect(t.vault.purgeExpired()).toBe(1);
    expect(t.store.db.prepare('SELECT SUM(json_array_length(uses)) FROM pii_batches').pluck().get()).toBe(1);
    // Its batch was sealed again without it: a vault that would keep values forever finds only b.
    const forever = new PiiVault(t.store.db, t.key, { ttlMs: Number.MAX_SAFE_INTEGER, now: () => now });
    expect(forever.scope(ref).detokenize('[EMAIL_1] [EMAIL_2]').text).toBe('[EMAIL_1] b@x.io');
    // Seen again, a gets a new number: [EMAIL_1] may still be in some model's context.
    expect(t.vault.scope(ref).tokenize('a@x.io c@x.io').text).toBe('[EMAIL_3] [EMAIL_4]');
  });

  it('a failed write leaves no token behind in memory either', () => {
    const t = testVault();
    const ref = { userId: t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const scope = t.vault.scope(ref);
    scope.tokenize('a@x.io');
    t.store.db.exec(`CREATE TRIGGER fail BEFORE INSERT ON pii_batches BEGIN SELECT RAISE(ABORT, 'disk full'); END`);
    expect(() => scope.tokenize('b@x.io c@x.io')).toThrow(/disk full/);
    t.store.db.exec('DROP TRIGGER fail');
    // b@x.io was never stored: it must not keep a token only memory knows.
    expect(t.vault.scope(ref).tokenize('c@x.io b@x.io a@x.io').text).toBe('[EMAIL_2] [EMAIL_3] [EMAIL_1]');
  });

  it("a dropped scope's id taken by another user's scope shows that user nothing of the old one", () => {
    const t = testVault();
    const ana = { userId: t.userId('ana'), kind: 'token' as const, id: '7' };
    const held = t.vault.scope(ana);
    held.tokenize('a@x.io');
    const anaScopeId = t.store.db.prepare('SELECT id FROM pii_scopes').pluck().get();
    t.vault.dropScope(ana);
    const bob = t.vault.scope({ userId: t.userId('bob'), kind: 'token', id: '8' });
    expect(t.store.db.prepare('SELECT id FROM pii_scopes').pluck().get()).toBe(anaScopeId); // SQLite reuses the largest id
    expect(bob.detokenize('[EMAIL_1]').unknown).toEqual(['[EMAIL_1]']);
    expect(bob.tokenize('b@x.io').text).toBe('[EMAIL_1]');
    // A request of the dropped scope still in flight fails rather than read Bob's values.
    expect(() => held.detokenize('[EMAIL_1]')).toThrow(/dropped/);
  });

  it('dropping a scope forgets it', () => {
    const t = testVault();
    const ref = { userId: t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    t.vault.scope(ref).tokenize('a@x.io');
    t.vault.dropScope(ref);
    expect(t.store.db.prepare('SELECT COUNT(*) AS n FROM pii_batches').get()).toEqual({ n: 0 });
    expect(t.vault.scope(ref).detokenize('[EMAIL_1]').unknown).toEqual(['[EMAIL_1]']);
  });
});
