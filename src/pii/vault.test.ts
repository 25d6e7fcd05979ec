import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql, type Kysely } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { createDetector } from './detector.js';
import { openTestVault, seededRandom, type TestVault } from '../../test/support/pii.js';
import { testDatabaseUrl } from '../../test/support/postgres.js';
import { MIGRATIONS, versionOf } from '../migrations.js';
import { dialectOf, openStore, type Store } from '../store/store.js';
import { piiBatchesMigration, type PiiValuesV1Table } from './schema.js';
import { Sealer } from './sealing.js';
import { PiiVault, type PiiScopeRef } from './vault.js';

const open: TestVault[] = [];
async function testVault(...args: Parameters<typeof openTestVault>): Promise<TestVault> {
  const t = await openTestVault(...args);
  open.push(t);
  return t;
}
afterEach(async () => {
  for (const t of open.splice(0)) await t.cleanup();
});

const TEXT = 'Contact jane.roe@example.com or +1 415 555 0134; card 4111 1111 1111 1111; from 203.0.113.5.';
const HOUR = 3_600_000;

async function scopeIdOf(t: TestVault, ref: PiiScopeRef): Promise<number> {
  const row = await t.store.db
    .selectFrom('pii_scopes')
    .select('id')
    .where('user_id', '=', ref.userId)
    .where('kind', '=', ref.kind)
    .where('ref', '=', ref.id)
    .executeTakeFirstOrThrow();
  return row.id;
}

async function batchCount(t: TestVault): Promise<number> {
  const r = await t.store.db.selectFrom('pii_batches').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
  return Number(r.n);
}

/** Makes every insert into pii_batches fail, as a full disk would; returns the undo. */
async function failBatchInserts(store: Store): Promise<() => Promise<void>> {
  const db = store.db;
  if (store.dialect === 'sqlite') {
    await sql`CREATE TRIGGER fail BEFORE INSERT ON pii_batches BEGIN SELECT RAISE(ABORT, 'disk full'); END`.execute(db);
    return async () => void (await sql`DROP TRIGGER fail`.execute(db));
  }
  await sql`CREATE FUNCTION fail() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk full'; END $$`.execute(db);
  await sql`CREATE TRIGGER fail BEFORE INSERT ON pii_batches FOR EACH ROW EXECUTE FUNCTION fail()`.execute(db);
  return async () => {
    await sql`DROP TRIGGER fail ON pii_batches`.execute(db);
    await sql`DROP FUNCTION fail()`.execute(db);
  };
}

/** Everything the store keeps, as bytes: the SQLite files (WAL included), or every vault row on Postgres. */
async function storedBytes(t: TestVault): Promise<Array<[where: string, bytes: Buffer]>> {
  if (t.store.dialect === 'sqlite') {
    await sql`PRAGMA wal_checkpoint(FULL)`.execute(t.store.db);
    const files = fs.readdirSync(t.dir).filter((f) => f.startsWith('sandgate.db'));
    return files.map((f) => [f, fs.readFileSync(path.join(t.dir, f))]);
  }
  const out: Array<[string, Buffer]> = [];
  for (const table of ['pii_scopes', 'pii_counters', 'pii_batches', 'pii_values_v1'] as const) {
    for (const row of await t.store.db.selectFrom(table).selectAll().execute()) {
      for (const [column, v] of Object.entries(row)) out.push([`${table}.${column}`, Buffer.isBuffer(v) ? v : Buffer.from(String(v), 'utf8')]);
    }
  }
  return out;
}

describe('PiiVault tokenization', () => {
  it('replaces values with tokens and gets them back exactly', async () => {
    const t = await testVault();
    const scope = await t.vault.scope({ userId: await t.userId('ana'), kind: 'token', id: 'tok1' });
    const { text, found } = await scope.tokenize(TEXT);
    expect(text).toBe('Contact [EMAIL_1] or [PHONE_1]; card [CARD_1]; from [IP_1].');
    expect(found.map((f) => f.token)).toEqual(['[EMAIL_1]', '[PHONE_1]', '[CARD_1]', '[IP_1]']);
    expect(JSON.stringify(found)).not.toContain('jane');
    expect(await scope.detokenize(text)).toEqual({ text: TEXT, unknown: [] });
  });

  it('same value, same token for the whole scope; different values, different tokens', async () => {
    const t = await testVault();
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const a = (await (await t.vault.scope(ref)).tokenize('a@x.io b@x.io a@x.io')).text;
    expect(a).toBe('[EMAIL_1] [EMAIL_2] [EMAIL_1]');
    // A new PiiScope object (a new MCP request) for the same scope sees the same tokens.
    expect((await (await t.vault.scope(ref)).tokenize('b@x.io c@x.io')).text).toBe('[EMAIL_2] [EMAIL_3]');
    // Another API token of the same user is another scope.
    expect((await (await t.vault.scope({ ...ref, id: 'tok2' })).tokenize('c@x.io')).text).toBe('[EMAIL_1]');
  });

  it('reports tokens it does not know and never guesses', async () => {
    const t = await testVault();
    const scope = await t.vault.scope({ userId: await t.userId('ana'), kind: 'token', id: 'tok1' });
    await scope.tokenize('a@x.io');
    const r = await scope.detokenize('send to [EMAIL_1] and [EMAIL_2], [EMAIL_2], [NAME_7], [EMAIL_01], [FOO_1]');
    expect(r.text).toBe('send to a@x.io and [EMAIL_2], [EMAIL_2], [NAME_7], [EMAIL_01], [FOO_1]');
    expect(r.unknown).toEqual(['[EMAIL_2]', '[NAME_7]']);
  });

  it("one user's tokens never resolve for another", async () => {
    const t = await testVault();
    const ana = await t.vault.scope({ userId: await t.userId('ana'), kind: 'token', id: 'shared-id' });
    const bob = await t.vault.scope({ userId: await t.userId('bob'), kind: 'token', id: 'shared-id' });
    expect((await ana.tokenize('secret-person@corp.example')).text).toBe('[EMAIL_1]');
    expect(await bob.detokenize('[EMAIL_1]')).toEqual({ text: '[EMAIL_1]', unknown: ['[EMAIL_1]'] });
    expect((await bob.tokenize('other@corp.example')).text).toBe('[EMAIL_1]');
    expect((await ana.detokenize('[EMAIL_1]')).text).toBe('secret-person@corp.example');
    expect((await bob.detokenize('[EMAIL_1]')).text).toBe('other@corp.example');
  });

  it('the calls of one holder share a scope lookup for a second at most (on Postgres), and a drop through the vault ends it at once', async () => {
    const t = await testVault();
    // SQLite gives a deleted scope's id to the next one made: there every call looks again.
    const keeps = dialectOf(t.store.db) === 'postgres';
    let now = Date.now();
    const vault = new PiiVault(t.store.db, t.key, { ttlMs: HOUR, now: () => now });
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const request = {};
    await (await vault.scope(ref, request)).tokenize('a@x.io');
    // Another scope after it, so that SQLite gives a scope made anew another id, as Postgres always does.
    await vault.scope({ ...ref, id: 'tok2' });
    // The scope's row goes behind this vault's back, as when another gateway drops it.
    await t.store.db.deleteFrom('pii_scopes').where('id', '=', await scopeIdOf(t, ref)).execute();
    // The holder's next call within the second uses the id it looked up; a call without one looks again.
    expect((await (await vault.scope(ref, request)).detokenize('[EMAIL_1]')).text).toBe(keeps ? 'a@x.io' : '[EMAIL_1]');
    expect((await (await vault.scope(ref)).detokenize('[EMAIL_1]')).unknown).toEqual(['[EMAIL_1]']);
    now += 1000;
    expect((await (await vault.scope(ref, request)).detokenize('[EMAIL_1]')).unknown).toEqual(['[EMAIL_1]']);
    // A drop through the vault: the same holder's very next call opens the scope anew.
    const turn = {};
    expect((await (await vault.scope(ref, turn)).tokenize('b@x.io')).text).toBe('[EMAIL_1]');
    await vault.dropScope(ref);
    expect((await (await vault.scope(ref, turn)).detokenize('[EMAIL_1]')).unknown).toEqual(['[EMAIL_1]']);
  });

  it('conversation scopes are separate from token scopes', async () => {
    const t = await testVault();
    const userId = await t.userId('ana');
    await (await t.vault.scope({ userId, kind: 'token', id: 'x' })).tokenize('a@x.io');
    expect((await (await t.vault.scope({ userId, kind: 'conversation', id: 'x' })).detokenize('[EMAIL_1]')).unknown).toEqual(['[EMAIL_1]']);
  });

  it('text that already contains token literals round-trips exactly', async () => {
    const t = await testVault();
    const scope = await t.vault.scope({ userId: await t.userId('ana'), kind: 'token', id: 'tok1' });
    await scope.tokenize('a@x.io');
    const input = 'the doc says [EMAIL_1] and [TOKEN_1] but a@x.io is real';
    const { text } = await scope.tokenize(input);
    expect(text).toBe('the doc says [TOKEN_1] and [TOKEN_2] but [EMAIL_1] is real');
    expect((await scope.detokenize(text)).text).toBe(input);
  });

  it('round-trips random text mixing values, token literals and unicode', async () => {
    const t = await testVault();
    const scope = await t.vault.scope({ userId: await t.userId('ana'), kind: 'token', id: 'tok1' });
    const random = seededRandom(42);
    const pieces = ['a@x.io', '[EMAIL_1]', '[IP_2]', ' ', '\n', 'Jane Roe', '10.0.0.1', '4111111111111111', 'é', '😀', '[', ']', '_', '1', 'EMAIL', '"', '\\'];
    for (let i = 0; i < 300; i++) {
      const n = 1 + Math.floor(random() * 30);
      const x = Array.from({ length: n }, () => pieces[Math.floor(random() * pieces.length)]).join('');
      expect((await scope.detokenize((await scope.tokenize(x)).text)).text).toBe(x);
    }
  });

  it('detokenizes tool arguments deeply, keys included', async () => {
    const t = await testVault();
    const scope = await t.vault.scope({ userId: await t.userId('ana'), kind: 'token', id: 'tok1' });
    await scope.tokenize('a@x.io 10.0.0.1');
    const args = { to: ['[EMAIL_1]', 'x'], meta: { '[IP_1]': 1, note: 'hi [EMAIL_1], [EMAIL_9]' }, n: 3, ok: true, none: null };
    expect(await scope.detokenizeDeep(args)).toEqual({
      value: { to: ['a@x.io', 'x'], meta: { '10.0.0.1': 1, note: 'hi a@x.io, [EMAIL_9]' }, n: 3, ok: true, none: null },
      unknown: ['[EMAIL_9]'],
    });
  });

  it('applies the detector settings (entity types, allow-list)', async () => {
    const t = await testVault({ detector: createDetector({ entities: ['EMAIL'], allow: ['support@acme.com'] }) });
    const scope = await t.vault.scope({ userId: await t.userId('ana'), kind: 'token', id: 'tok1' });
    expect((await scope.tokenize('support@acme.com jo@acme.com 10.0.0.1')).text).toBe('support@acme.com [EMAIL_1] 10.0.0.1');
  });
});

describe('PiiVault under concurrent calls', () => {
  it('calls on one scope at once never give one number to two values, nor two numbers to one value', async () => {
    const t = await testVault();
    const ref = { userId: await t.userId('ana'), kind: 'conversation' as const, id: 'c1' };
    const random = seededRandom(5);
    const values = Array.from({ length: 40 }, (_, i) => `person${i}@example.org`);
    // Tool results of one conversation, through separate requests (scope objects), overlapping values.
    const texts = Array.from({ length: 30 }, () => Array.from({ length: 8 }, () => values[Math.floor(random() * values.length)]).join(' and '));
    const results = await Promise.all(texts.map(async (text) => ({ text, out: (await (await t.vault.scope(ref)).tokenize(text)).text })));
    const tokenOf = new Map<string, string>();
    const valueOf = new Map<string, string>();
    for (const { text, out } of results) {
      const ins = text.split(' and ');
      const outs = out.split(' and ');
      ins.forEach((v, i) => {
        expect(tokenOf.get(v) ?? outs[i]).toBe(outs[i]);
        expect(valueOf.get(outs[i]!) ?? v).toBe(v);
        tokenOf.set(v, outs[i]!);
        valueOf.set(outs[i]!, v);
      });
    }
    const used = new Set(results.flatMap((r) => r.text.split(' and ')));
    expect([...tokenOf.values()].sort()).toEqual(Array.from({ length: used.size }, (_, i) => `[EMAIL_${i + 1}]`).sort());
    // What was answered is what is stored.
    const restarted = await new PiiVault(t.store.db, t.key, { ttlMs: HOUR }).scope(ref);
    for (const [value, token] of tokenOf) expect((await restarted.detokenize(token)).text).toBe(value);
  });

  it('a call never hands over a token another call issued and has not stored', async () => {
    const t = await testVault();
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const scope = await t.vault.scope(ref);
    await scope.tokenize('a@x.io');
    const undo = await failBatchInserts(t.store);
    // The first issues b and fails to store it; the second, made meanwhile, must not answer with b's token.
    const [first, second] = await Promise.allSettled([scope.tokenize('b@x.io'), (await t.vault.scope(ref)).tokenize('a@x.io b@x.io')]);
    expect(first.status).toBe('rejected');
    expect(second.status).toBe('rejected');
    await undo();
    expect((await scope.tokenize('c@x.io b@x.io')).text).toBe('[EMAIL_2] [EMAIL_3]');
  });

  it('a stream and whole-text calls on one scope at once agree, and a pushed token is stored when its push resolves', async () => {
    const t = await testVault();
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const scope = await t.vault.scope(ref);
    const stream = scope.stream();
    // Pushed without waiting, as output arrives; each resolves in call order.
    const pushes = ['mail a@x.io\n', 'and b@x.io\n', 'then c@x.io\n'].map((c) => stream.push(c));
    const other = scope.tokenize('c@x.io b@x.io d@x.io');
    const first = await pushes[0]!;
    expect(first).toBe('mail [EMAIL_1]\n');
    // Stored before it was handed over: a restarted gateway resolves it at once.
    expect((await (await new PiiVault(t.store.db, t.key, { ttlMs: HOUR }).scope(ref)).detokenize('[EMAIL_1]')).text).toBe('a@x.io');
    const streamed = first + (await pushes[1]) + (await pushes[2]) + (await stream.end());
    const whole = (await other).text;
    expect(streamed).toBe('mail [EMAIL_1]\nand [EMAIL_2]\nthen [EMAIL_3]\n');
    expect(whole).toBe('[EMAIL_3] [EMAIL_2] [EMAIL_4]');
  });

  it('counters in the database only grow, whoever wrote them last', async () => {
    const t = await testVault();
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const scope = await t.vault.scope(ref);
    expect((await scope.tokenize('a@x.io')).text).toBe('[EMAIL_1]');
    const scopeId = await scopeIdOf(t, ref);
    // Another gateway on the same database went further meanwhile.
    await t.store.db.updateTable('pii_counters').set({ last_n: 9 }).where('scope_id', '=', scopeId).execute();
    expect((await scope.tokenize('b@x.io')).text).toBe('[EMAIL_2]');
    const counter = await t.store.db.selectFrom('pii_counters').select('last_n').where('scope_id', '=', scopeId).where('type', '=', 'EMAIL').executeTakeFirstOrThrow();
    expect(counter.last_n).toBe(9);
    // A scope read again starts after the highest number stored.
    expect((await (await new PiiVault(t.store.db, t.key, { ttlMs: HOUR }).scope(ref)).tokenize('c@x.io')).text).toBe('[EMAIL_10]');
  });

  it('a scope read again never issues a number a stored batch holds, whatever its counter row says', async () => {
    const t = await testVault();
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    await (await t.vault.scope(ref)).tokenize('a@x.io b@x.io');
    await t.store.db.deleteFrom('pii_counters').execute();
    expect((await (await new PiiVault(t.store.db, t.key, { ttlMs: HOUR }).scope(ref)).tokenize('c@x.io a@x.io')).text).toBe('[EMAIL_3] [EMAIL_1]');
  });

  it('a use written over a batch changed elsewhere reads the scope again instead of damaging the batch', async () => {
    let now = 1_000_000;
    const t = await testVault({ ttlMs: 1000, now: () => now });
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const scope = await t.vault.scope(ref);
    expect((await scope.tokenize('a@x.io b@x.io')).text).toBe('[EMAIL_1] [EMAIL_2]');
    now += 600;
    expect((await scope.detokenize('[EMAIL_2]')).text).toBe('b@x.io');
    now += 600;
    // Another gateway purges a (unused for the TTL) and seals the batch again without it.
    expect(await new PiiVault(t.store.db, t.key, { ttlMs: 1000, now: () => now }).purgeExpired()).toBe(1);
    // This vault's memory still has the old batch: using b writes its use, and must notice.
    now += 20;
    expect(await scope.detokenize('[EMAIL_1] [EMAIL_2]')).toEqual({ text: '[EMAIL_1] b@x.io', unknown: ['[EMAIL_1]'] });
    const restarted = await new PiiVault(t.store.db, t.key, { ttlMs: 1000, now: () => now }).scope(ref);
    expect((await restarted.detokenize('[EMAIL_2]')).text).toBe('b@x.io');
    const rows = await t.store.db.selectFrom('pii_batches').select('uses').execute();
    expect(rows.map((r) => JSON.parse(r.uses) as number[])).toEqual([[now]]);
  });

  it('a purge and calls on the scope it purges at once leave every answered token resolvable', async () => {
    let now = 1_000_000;
    const t = await testVault({ ttlMs: 1000, now: () => now });
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    await (await t.vault.scope(ref)).tokenize('old@x.io kept@x.io');
    now += 600;
    await (await t.vault.scope(ref)).detokenize('[EMAIL_2]');
    now += 600;
    const scope = await t.vault.scope(ref);
    const [purged, a, b] = await Promise.all([t.vault.purgeExpired(), scope.tokenize('kept@x.io new@x.io'), scope.detokenize('[EMAIL_2] [EMAIL_1]')]);
    expect(purged).toBe(1);
    expect(a.text).toBe('[EMAIL_2] [EMAIL_3]');
    expect(b).toEqual({ text: 'kept@x.io [EMAIL_1]', unknown: ['[EMAIL_1]'] });
    const restarted = await new PiiVault(t.store.db, t.key, { ttlMs: 1000, now: () => now }).scope(ref);
    expect(await restarted.detokenize('[EMAIL_1] [EMAIL_2] [EMAIL_3]')).toEqual({ text: '[EMAIL_1] kept@x.io new@x.io', unknown: ['[EMAIL_1]'] });
  });
});

describe('PiiVault storage', () => {
  it('stores no raw value: not in the database (on SQLite: not in its file, not in its WAL)', async () => {
    const t = await testVault();
    const scope = await t.vault.scope({ userId: await t.userId('ana'), kind: 'token', id: 'tok1' });
    const values = ['very.unusual.address@example.org', '4111 1111 1111 1111', 'DE89 3704 0044 0532 0130 00', 'Giada Hornung'];
    await scope.tokenize(values.map((v) => `value: ${v}\n`).join(''));
    const stored = await storedBytes(t);
    expect(stored.length).toBeGreaterThan(0);
    for (const [where, bytes] of stored) {
      for (const v of values) {
        expect(bytes.includes(Buffer.from(v, 'utf8')), `${v} in ${where}`).toBe(false);
        expect(bytes.includes(Buffer.from(v, 'utf16le')), `${v} (utf16) in ${where}`).toBe(false);
      }
    }
  });

  it('a batch moved to another scope, or altered, does not open', async () => {
    const t = await testVault();
    const db = t.store.db;
    const ana = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const bob = { userId: await t.userId('bob'), kind: 'token' as const, id: 'tok1' };
    await (await t.vault.scope(ana)).tokenize('a@x.io b@x.io');
    await (await t.vault.scope(bob)).tokenize('c@x.io');
    const [anaScope, bobScope] = [await scopeIdOf(t, ana), await scopeIdOf(t, bob)];
    const anaBatch = await db.selectFrom('pii_batches').select(['sealed', 'uses']).where('scope_id', '=', anaScope).executeTakeFirstOrThrow();
    // Ana's sealed values, with their uses, copied into Bob's scope.
    await db.updateTable('pii_batches').set({ sealed: anaBatch.sealed, uses: anaBatch.uses }).where('scope_id', '=', bobScope).execute();
    // A new vault (a restarted gateway) reads from the database, not from memory.
    const restarted = new PiiVault(db, t.key, { ttlMs: HOUR });
    expect((await (await restarted.scope(bob)).detokenize('[EMAIL_1] [EMAIL_2]')).unknown).toEqual(['[EMAIL_1]', '[EMAIL_2]']);
    expect((await (await restarted.scope(ana)).detokenize('[EMAIL_1] [EMAIL_2]')).text).toBe('a@x.io b@x.io');
    // A damaged use list (it is not under the seal) costs that batch only, never the scope.
    const junk = Buffer.from([0]);
    await db.insertInto('pii_batches').values({ scope_id: anaScope, sealed: junk, uses: 'not json', oldest_use: 0 }).execute();
    const fresh = () => new PiiVault(db, t.key, { ttlMs: HOUR });
    expect((await (await fresh().scope(ana)).detokenize('[EMAIL_1]')).text).toBe('a@x.io');
    await db.updateTable('pii_batches').set({ uses: 'not json' }).where('scope_id', '=', anaScope).where('sealed', '!=', junk).execute();
    expect((await (await fresh().scope(ana)).detokenize('[EMAIL_1]')).unknown).toEqual(['[EMAIL_1]']);
    // ...and the purge still runs: it drops the record with no readable uses.
    await expect(fresh().purgeExpired()).resolves.toBeTypeOf('number');
    expect(await db.selectFrom('pii_batches').select('id').where('sealed', '=', junk).execute()).toEqual([]);
    await db.updateTable('pii_batches').set({ uses: anaBatch.uses }).where('scope_id', '=', anaScope).execute();
    expect((await (await fresh().scope(ana)).detokenize('[EMAIL_1]')).text).toBe('a@x.io');
    // One flipped bit and the whole batch is refused, not misread.
    await db.updateTable('pii_batches').set({ sealed: Buffer.concat([anaBatch.sealed, junk]) }).where('scope_id', '=', anaScope).execute();
    expect((await (await fresh().scope(ana)).detokenize('[EMAIL_1]')).unknown).toEqual(['[EMAIL_1]']);
  });

  it('reads values sealed one by one by the previous schema, and moves them into a batch', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-pii-legacy-'));
    try {
      const where = { dataDir, databaseUrl: await testDatabaseUrl() };
      const key = crypto.randomBytes(32);
      const old = await openStore(where, MIGRATIONS.slice(0, versionOf(piiBatchesMigration) - 1));
      let userId: number;
      let scopeId: number;
      const now = Date.now();
      try {
        // The tables as that schema had them (pii_values was renamed since).
        const db = old.db as unknown as Kysely<{ pii_values: PiiValuesV1Table }>;
        userId = (await sql<{ id: number }>`INSERT INTO users (name, created_at) VALUES ('ana', 0) RETURNING id`.execute(old.db)).rows[0]!.id;
        scopeId = (await old.db.insertInto('pii_scopes').values({ user_id: userId, kind: 'token', ref: 'tok1', created_at: 0 }).returning('id').executeTakeFirstOrThrow()).id;
        const sealer = new Sealer(key);
        const put = (type: string, n: number, value: string, lastUsedAt: number) => ({
          scope_id: scopeId,
          type,
          n,
          mac: crypto.randomBytes(32),
          sealed: sealer.seal(value, `${userId}:${scopeId}:${type}:${n}`),
          last_used_at: lastUsedAt,
        });
        await db
          .insertInto('pii_values')
          .values([put('EMAIL', 1, 'a@x.io', now), put('IP', 1, '10.0.0.1', now), put('EMAIL', 2, 'stale@x.io', now - 2 * HOUR)])
          .execute();
        await old.db
          .insertInto('pii_counters')
          .values([
            { scope_id: scopeId, type: 'EMAIL', last_n: 2 },
            { scope_id: scopeId, type: 'IP', last_n: 1 },
          ])
          .execute();
      } finally {
        await old.close();
      }

      const store = await openStore(where, MIGRATIONS);
      try {
        const vault = new PiiVault(store.db, key, { ttlMs: HOUR });
        const scope = await vault.scope({ userId, kind: 'token', id: 'tok1' });
        expect(await scope.detokenize('[EMAIL_1] [IP_1] [EMAIL_2]')).toEqual({ text: 'a@x.io 10.0.0.1 [EMAIL_2]', unknown: ['[EMAIL_2]'] });
        expect((await scope.tokenize('b@x.io a@x.io stale@x.io')).text).toBe('[EMAIL_3] [EMAIL_1] [EMAIL_4]');
        expect(await store.db.selectFrom('pii_values_v1').select('n').execute()).toEqual([]);
        const restarted = new PiiVault(store.db, key, { ttlMs: HOUR });
        expect((await (await restarted.scope({ userId, kind: 'token', id: 'tok1' })).detokenize('[EMAIL_1] [IP_1] [EMAIL_3]')).text).toBe('a@x.io 10.0.0.1 b@x.io');
      } finally {
        await store.close();
      }
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('a vault with another key reads nothing back', async () => {
    const t = await testVault();
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    await (await t.vault.scope(ref)).tokenize('a@x.io');
    const other = new PiiVault(t.store.db, Buffer.alloc(32, 7), { ttlMs: HOUR });
    expect((await (await other.scope(ref)).detokenize('[EMAIL_1]')).unknown).toEqual(['[EMAIL_1]']);
  });

  it('a restarted vault resolves what the last one issued', async () => {
    const t = await testVault();
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const { text } = await (await t.vault.scope(ref)).tokenize('a@x.io and 10.0.0.1');
    const restarted = new PiiVault(t.store.db, t.key, { ttlMs: HOUR });
    expect(await (await restarted.scope(ref)).detokenize(text)).toEqual({ text: 'a@x.io and 10.0.0.1', unknown: [] });
    expect((await (await restarted.scope(ref)).tokenize('10.0.0.1 b@x.io')).text).toBe('[IP_1] [EMAIL_2]');
  });

  it('forgets values unused for the TTL, and never reuses their numbers', async () => {
    let now = 1_000_000;
    const t = await testVault({ ttlMs: 1000, now: () => now });
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    expect((await (await t.vault.scope(ref)).tokenize('a@x.io b@x.io')).text).toBe('[EMAIL_1] [EMAIL_2]');
    now += 600;
    expect((await (await t.vault.scope(ref)).detokenize('[EMAIL_2]')).text).toBe('b@x.io'); // use refreshes b
    now += 600;
    // a is past its TTL: it no longer resolves, before and after the purge.
    expect(await (await t.vault.scope(ref)).detokenize('[EMAIL_1] [EMAIL_2]')).toEqual({ text: '[EMAIL_1] b@x.io', unknown: ['[EMAIL_1]'] });
    // The use of b was written, not only remembered: a restarted vault agrees.
    const restarted = new PiiVault(t.store.db, t.key, { ttlMs: 1000, now: () => now });
    expect(await (await restarted.scope(ref)).detokenize('[EMAIL_1] [EMAIL_2]')).toEqual({ text: '[EMAIL_1] b@x.io', unknown: ['[EMAIL_1]'] });
    expect(await t.vault.purgeExpired()).toBe(1);
    const uses = await t.store.db.selectFrom('pii_batches').select('uses').execute();
    expect(uses.reduce((n, r) => n + (JSON.parse(r.uses) as number[]).length, 0)).toBe(1);
    // Its batch was sealed again without it: a vault that would keep values forever finds only b.
    const forever = new PiiVault(t.store.db, t.key, { ttlMs: Number.MAX_SAFE_INTEGER, now: () => now });
    expect((await (await forever.scope(ref)).detokenize('[EMAIL_1] [EMAIL_2]')).text).toBe('[EMAIL_1] b@x.io');
    // Seen again, a gets a new number: [EMAIL_1] may still be in some model's context.
    expect((await (await t.vault.scope(ref)).tokenize('a@x.io c@x.io')).text).toBe('[EMAIL_3] [EMAIL_4]');
  });

  it('a failed write leaves no token behind in memory either', async () => {
    const t = await testVault();
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    const scope = await t.vault.scope(ref);
    await scope.tokenize('a@x.io');
    const undo = await failBatchInserts(t.store);
    await expect(scope.tokenize('b@x.io c@x.io')).rejects.toThrow(/disk full/);
    // A stream hands nothing over either.
    await expect(scope.stream().push('d@x.io\n')).rejects.toThrow(/disk full/);
    await undo();
    // b@x.io was never stored: it must not keep a token only memory knows.
    expect((await (await t.vault.scope(ref)).tokenize('c@x.io b@x.io a@x.io')).text).toBe('[EMAIL_2] [EMAIL_3] [EMAIL_1]');
  });

  it("a dropped scope's id taken by another user's scope shows that user nothing of the old one", async () => {
    const t = await testVault();
    const ana = { userId: await t.userId('ana'), kind: 'token' as const, id: '7' };
    const held = await t.vault.scope(ana);
    await held.tokenize('a@x.io');
    const anaScopeId = await scopeIdOf(t, ana);
    await t.vault.dropScope(ana);
    const bobRef = { userId: await t.userId('bob'), kind: 'token' as const, id: '8' };
    const bob = await t.vault.scope(bobRef);
    // SQLite reuses the largest id; Postgres never does, which leaves nothing to confuse.
    if (t.store.dialect === 'sqlite') expect(await scopeIdOf(t, bobRef)).toBe(anaScopeId);
    expect((await bob.detokenize('[EMAIL_1]')).unknown).toEqual(['[EMAIL_1]']);
    expect((await bob.tokenize('b@x.io')).text).toBe('[EMAIL_1]');
    // A request of the dropped scope still in flight fails rather than read Bob's values.
    await expect(held.detokenize('[EMAIL_1]')).rejects.toThrow(/dropped/);
  });

  it('dropping a scope forgets it', async () => {
    const t = await testVault();
    const ref = { userId: await t.userId('ana'), kind: 'token' as const, id: 'tok1' };
    await (await t.vault.scope(ref)).tokenize('a@x.io');
    expect(await t.vault.dropScope(ref)).toBe(true);
    expect(await t.vault.dropScope(ref)).toBe(false);
    expect(await batchCount(t)).toBe(0);
    expect((await (await t.vault.scope(ref)).detokenize('[EMAIL_1]')).unknown).toEqual(['[EMAIL_1]']);
  });
});
