import fs from 'node:fs';
import path from 'node:path';
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../store/store.js';
import { openTestStore } from '../../test/support/store.js';
import { deleteUser, ensureUser } from '../accounts/accounts.js';
import { checksum, crc32, generateToken, hashToken, isWellFormedToken, TOKEN_LENGTH, TOKEN_PATTERN, TOKEN_PREFIX } from './format.js';
import { recordAudit } from '../audit/audit.js';
import {
  countActiveTokens,
  countTokens,
  createToken,
  DEFAULT_MAX_ACTIVE_TOKENS,
  getToken,
  findTokenBySecret,
  listTokens,
  MAX_TOKEN_LIFETIME_MS,
  MAX_TOKENS_CREATED_PER_DAY,
  parseExpiry,
  purgeOldTokens,
  revokeToken,
  revokeTokenByName,
  TokenError,
  verifyToken,
} from './tokens.js';

describe('token format', () => {
  it('is sgp_ + 32 random base62 + a 6-char CRC32 checksum', () => {
    const t = generateToken();
    expect(t.startsWith(TOKEN_PREFIX)).toBe(true);
    expect(t).toHaveLength(TOKEN_LENGTH);
    expect(t).toMatch(TOKEN_PATTERN);
    expect(t.slice(-6)).toBe(checksum(t.slice(4, 36)));
    expect(isWellFormedToken(t)).toBe(true);
    // >= 160 random bits: 32 base62 characters carry 32 * log2(62) ≈ 190.5.
    expect(32 * Math.log2(62)).toBeGreaterThan(160);
  });

  it('uses the standard CRC32', () => {
    expect(crc32('123456789')).toBe(0xcbf43926);
    expect(crc32('')).toBe(0);
  });

  it('rejects a typo through the checksum', () => {
    const t = generateToken();
    const i = 10;
    const typo = t.slice(0, i) + (t[i] === 'a' ? 'b' : 'a') + t.slice(i + 1);
    expect(isWellFormedToken(typo)).toBe(false);
    expect(isWellFormedToken(t.slice(0, -1))).toBe(false);
    expect(isWellFormedToken(`ghp_${t.slice(4)}`)).toBe(false);
  });

  it('draws every base62 character, uniformly enough', () => {
    const counts = new Map<string, number>();
    for (let i = 0; i < 2000; i++) for (const c of generateToken().slice(4, 36)) counts.set(c, (counts.get(c) ?? 0) + 1);
    expect(counts.size).toBe(62);
    const expected = (2000 * 32) / 62;
    for (const n of counts.values()) expect(Math.abs(n - expected) / expected).toBeLessThan(0.2);
  });

  it('hashes with SHA-256', () => {
    expect(hashToken('x').toString('hex')).toBe('2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881');
  });
});

describe('parseExpiry', () => {
  const now = Date.UTC(2025, 0, 1);
  it('understands durations, dates and never', () => {
    expect(parseExpiry('30d', now)).toBe(now + 30 * 86_400_000);
    expect(parseExpiry('12h', now)).toBe(now + 12 * 3_600_000);
    expect(parseExpiry('2w', now)).toBe(now + 14 * 86_400_000);
    expect(parseExpiry('1y', now)).toBe(now + 365 * 86_400_000);
    expect(parseExpiry('2025-02-01', now)).toBe(Date.UTC(2025, 1, 1));
    expect(parseExpiry('never', now)).toBeNull();
  });
  it('says what it accepts', () => {
    expect(() => parseExpiry('soon', now)).toThrow(/30d, 12h, 8w, 1y/);
    expect(() => parseExpiry('2024-01-01', now)).toThrow(/past/);
    expect(() => parseExpiry('0d', now)).toThrow(TokenError);
  });
  it('refuses an expiry more than 5 years ahead, however it is written', () => {
    expect(parseExpiry('5y', now)).toBe(now + 5 * 365 * 86_400_000);
    expect(parseExpiry('2030-01-01', now)).toBe(Date.UTC(2030, 0, 1));
    for (const far of ['6y', '1831d', '262w', `${'9'.repeat(400)}d`, '2030-01-07', '275760-09-13', '+010000-01-01']) {
      expect(() => parseExpiry(far, now), far).toThrow(/too far ahead: a token may expire at most 5 years ahead; for a token that never expires, choose "never"/);
    }
  });
});

describe('token store', () => {
  let store: Store & { dataDir: string };
  let alice: number;
  let bob: number;

  beforeEach(async () => {
    store = await openTestStore();
    alice = (await ensureUser(store.db, 'alice')).id;
    bob = (await ensureUser(store.db, 'bob')).id;
  });
  afterEach(async () => {
    await store.close();
    fs.rmSync(store.dataDir, { recursive: true, force: true });
  });

  it('stores only a hash, never the token', async () => {
    const { token, record } = await createToken(store.db, { userId: alice, name: 'laptop' });
    const row = await store.db.selectFrom('api_tokens').selectAll().where('id', '=', record.id).executeTakeFirstOrThrow();
    expect(Object.values(row).some((v) => typeof v === 'string' && v.includes(token.slice(4, 36)))).toBe(false);
    expect(row.hash.equals(hashToken(token))).toBe(true);
    if (store.dialect === 'sqlite') {
      const file = path.join(store.dataDir, 'sandgate.db');
      const dump = fs.readFileSync(file).toString('latin1') + (fs.existsSync(`${file}-wal`) ? fs.readFileSync(`${file}-wal`).toString('latin1') : '');
      expect(dump.includes(token)).toBe(false);
    }
  });

  it('verifies a good token and records its last use', async () => {
    const { token, record } = await createToken(store.db, { userId: alice, name: 'laptop', now: 1000 });
    expect(record.lastUsedAt).toBeNull();
    const r = await verifyToken(store.db, token, 5000);
    expect(r.ok).toBe(true);
    if (r.ok) expect(r.principal).toMatchObject({ tokenId: record.id, tokenName: 'laptop', user: { name: 'alice' } });
    expect((await listTokens(store.db, { userId: alice }))[0]!.lastUsedAt).toBe(5000);
    // Within the second: not written again. Earlier than the last: never back in time.
    await verifyToken(store.db, token, 5500);
    await verifyToken(store.db, token, 4000);
    expect((await getToken(store.db, record.id))!.lastUsedAt).toBe(5000);
    await verifyToken(store.db, token, 6000);
    expect((await getToken(store.db, record.id))!.lastUsedAt).toBe(6000);
  });

  it('says why a token is refused', async () => {
    expect(await verifyToken(store.db, undefined)).toMatchObject({ ok: false, reason: 'missing' });
    expect(await verifyToken(store.db, 'sgp_short')).toMatchObject({ ok: false, reason: 'malformed' });
    expect(await verifyToken(store.db, generateToken())).toMatchObject({ ok: false, reason: 'unknown' });
    const r = await verifyToken(store.db, undefined);
    expect(!r.ok && r.message).toMatch(/sandgate tokens create/);
  });

  it('expires at expires_at', async () => {
    const { token } = await createToken(store.db, { userId: alice, name: 'ci', expiresAt: 10_000, now: 1000 });
    expect((await verifyToken(store.db, token, 9_999)).ok).toBe(true);
    const r = await verifyToken(store.db, token, 10_000);
    expect(r).toMatchObject({ ok: false, reason: 'expired' });
    expect(!r.ok && r.message).toMatch(/"ci" expired/);
  });

  it('stores no expiry that is not a time within 5 years', async () => {
    for (const expiresAt of [Number.POSITIVE_INFINITY, 1e300, Number.NaN, 1000.5, 1000 + MAX_TOKEN_LIFETIME_MS + 1]) {
      await expect(createToken(store.db, { userId: alice, name: 'ci', expiresAt, now: 1000 }), String(expiresAt)).rejects.toThrow(TokenError);
    }
    expect(await listTokens(store.db, { includeRevoked: true })).toEqual([]);
    expect((await createToken(store.db, { userId: alice, name: 'ci', expiresAt: 1000 + MAX_TOKEN_LIFETIME_MS, now: 1000 })).record.expiresAt).toBe(1000 + MAX_TOKEN_LIFETIME_MS);
  });

  it('caps the active tokens of a user; revoked and expired ones do not count', async () => {
    for (let i = 0; i < 3; i++) await createToken(store.db, { userId: alice, name: `t${i}`, maxActive: 3 });
    await expect(createToken(store.db, { userId: alice, name: 'extra', maxActive: 3 })).rejects.toThrow(
      /already has 3 active tokens, the most one user may hold \(SANDGATE_MAX_TOKENS_PER_USER=3\)/,
    );
    // Another user has a cap of their own.
    await createToken(store.db, { userId: bob, name: 'extra', maxActive: 3 });
    await revokeTokenByName(store.db, alice, 't0');
    await createToken(store.db, { userId: alice, name: 'short', expiresAt: 2000, now: 1000, maxActive: 3 });
    await expect(createToken(store.db, { userId: alice, name: 'extra', now: 1500, maxActive: 3 })).rejects.toThrow(/already has 3 active tokens/);
    await createToken(store.db, { userId: alice, name: 'extra', now: 2000, maxActive: 3 });
    // Without a cap given, the setting's default holds.
    for (let i = 0; i < DEFAULT_MAX_ACTIVE_TOKENS; i++) await createToken(store.db, { userId: bob, name: `d${i}`, maxActive: 100 });
    await expect(createToken(store.db, { userId: bob, name: 'one-more' })).rejects.toThrow(/SANDGATE_MAX_TOKENS_PER_USER=20/);
  });

  it('holds the caps when creations race: no more pass than the limits have room for', async () => {
    const active = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => createToken(store.db, { userId: alice, name: `race-${i}`, maxActive: 3 })));
    expect(active.filter((r) => r.status === 'fulfilled')).toHaveLength(3);
    for (const r of active) if (r.status === 'rejected') expect(String(r.reason)).toMatch(/already has 3 active tokens/);
    expect(await countActiveTokens(store.db, alice)).toBe(3);

    const now = Date.UTC(2026, 0, 10);
    const daily = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => createToken(store.db, { userId: bob, name: `day-${i}`, now, maxPerDay: 2 })));
    expect(daily.filter((r) => r.status === 'fulfilled')).toHaveLength(2);
    expect(await countTokens(store.db, { userId: bob, includeRevoked: true })).toBe(2);

    // One live token of a name, however many ask for it at once.
    const named = await Promise.allSettled(Array.from({ length: 4 }, () => createToken(store.db, { userId: alice, name: 't0', maxActive: 100 })));
    expect(named.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    for (const r of named) if (r.status === 'rejected') expect(String(r.reason)).toMatch(/already has an active token named "t0"/);
  });

  it('revocation takes effect on the very next verification', async () => {
    const { token, record } = await createToken(store.db, { userId: alice, name: 'laptop' });
    expect((await verifyToken(store.db, token)).ok).toBe(true);
    expect(await revokeToken(store.db, record.id)).toBe(true);
    expect(await verifyToken(store.db, token)).toMatchObject({ ok: false, reason: 'revoked' });
    expect(await revokeToken(store.db, record.id)).toBe(false);
  });

  it('revokes by name, and only the owner can revoke by id when scoped', async () => {
    const a = await createToken(store.db, { userId: alice, name: 'laptop' });
    expect(await revokeToken(store.db, a.record.id, { userId: bob })).toBe(false);
    expect((await verifyToken(store.db, a.token)).ok).toBe(true);
    expect(await revokeTokenByName(store.db, alice, 'laptop')).toBe(a.record.id);
    expect(await revokeTokenByName(store.db, alice, 'laptop')).toBeUndefined();
    expect((await verifyToken(store.db, a.token)).ok).toBe(false);
  });

  it('keeps names unique per user among live tokens', async () => {
    await createToken(store.db, { userId: alice, name: 'laptop' });
    await expect(createToken(store.db, { userId: alice, name: 'laptop' })).rejects.toThrow(/already has an active token named "laptop"/);
    await createToken(store.db, { userId: bob, name: 'laptop' });
    await revokeTokenByName(store.db, alice, 'laptop');
    await createToken(store.db, { userId: alice, name: 'laptop' });
    // An expired token frees its name.
    await createToken(store.db, { userId: alice, name: 'ci', expiresAt: 2000, now: 1000 });
    const again = await createToken(store.db, { userId: alice, name: 'ci', now: 3000 });
    expect(again.record.name).toBe('ci');
    expect((await listTokens(store.db, { userId: alice })).map((t) => t.name).sort()).toEqual(['ci', 'laptop']);
    expect(await listTokens(store.db, { userId: alice, includeRevoked: true })).toHaveLength(4);
  });

  it('lists newest first, the active ones first when asked, a page at a time', async () => {
    const made = async (name: string, now: number, expiresAt?: number) => (await createToken(store.db, { userId: alice, name, now, expiresAt })).record;
    const a = await made('a', 1000);
    const b = await made('b', 2000, 2500);
    const c = await made('c', 3000);
    const d = await made('d', 3000);
    await revokeToken(store.db, c.id, { now: 3500 });
    const e = await made('e', 4000);
    const bobs = (await createToken(store.db, { userId: bob, name: 'bobs', now: 5000 })).record;
    await revokeToken(store.db, bobs.id, { now: 5000 });
    const names = (list: { name: string }[]) => list.map((t) => t.name);
    expect(names(await listTokens(store.db, { userId: alice }))).toEqual(['e', 'd', 'b', 'a']);
    // At 3000, b has expired: it goes with the revoked ones.
    expect(names(await listTokens(store.db, { userId: alice, includeRevoked: true, activeFirst: true, now: 3000 }))).toEqual(['e', 'd', 'a', 'c', 'b']);
    expect(names(await listTokens(store.db, { userId: alice, includeRevoked: true, activeFirst: true, now: 3000, limit: 2, offset: 2 }))).toEqual(['a', 'c']);
    expect(names(await listTokens(store.db, { includeRevoked: true, activeFirst: true, now: 3000, limit: 3, offset: 3 }))).toEqual(['bobs', 'c', 'b']);
    expect(await countTokens(store.db, { userId: alice })).toBe(4);
    expect(await countTokens(store.db, { includeRevoked: true })).toBe(6);
    expect([a, b, d, e].every((t) => t.userName === 'alice')).toBe(true);
  });

  it('rejects bad names and past expiries', async () => {
    await expect(createToken(store.db, { userId: alice, name: '' })).rejects.toThrow(/not allowed/);
    await expect(createToken(store.db, { userId: alice, name: 'a\nb' })).rejects.toThrow(/not allowed/);
    await expect(createToken(store.db, { userId: alice, name: 'x', expiresAt: 1, now: 2 })).rejects.toThrow(/past/);
    await expect(createToken(store.db, { userId: 999_999, name: 'x' })).rejects.toThrow(/no user with id 999999/);
  });

  it('finds a leaked token by its secret', async () => {
    const { token, record } = await createToken(store.db, { userId: alice, name: 'laptop' });
    expect((await findTokenBySecret(store.db, token))?.id).toBe(record.id);
    expect(await findTokenBySecret(store.db, generateToken())).toBeUndefined();
    expect(await findTokenBySecret(store.db, 'not a token')).toBeUndefined();
  });

  it('goes with its user', async () => {
    const { token } = await createToken(store.db, { userId: alice, name: 'laptop' });
    expect(await deleteUser(store.db, alice)).toBe(true);
    expect(await verifyToken(store.db, token)).toMatchObject({ ok: false, reason: 'unknown' });
  });

  it('bounds creations per user per day, revoked ones included, so create-and-revoke cannot pile up rows', async () => {
    const now = Date.UTC(2026, 0, 10);
    for (let i = 0; i < MAX_TOKENS_CREATED_PER_DAY; i++) {
      const { record } = await createToken(store.db, { userId: alice, name: 'churn', now: now + i });
      await revokeToken(store.db, record.id, { now: now + i });
    }
    await expect(createToken(store.db, { userId: alice, name: 'churn', now: now + 1000 })).rejects.toThrow(
      /created 50 tokens in the last 24 hours, the most one user may create in a day \(revoked ones count too\): use a token already made, or try again after 2026-01-11T00:00:00Z/,
    );
    expect(await countTokens(store.db, { userId: alice, includeRevoked: true })).toBe(MAX_TOKENS_CREATED_PER_DAY);
    // Another user is not held back, and a day after the first creation one more goes in.
    await createToken(store.db, { userId: bob, name: 'churn', now: now + 1000 });
    await createToken(store.db, { userId: alice, name: 'churn', now: now + 86_400_000 + 1 });
  });

  it('counts active tokens from the active rows alone, whatever was revoked', async () => {
    if (store.dialect === 'sqlite') {
      const plan = await sql<{ detail: string }>`EXPLAIN QUERY PLAN SELECT COUNT(*) FROM api_tokens WHERE user_id = ${alice} AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ${0})`.execute(store.db);
      expect(plan.rows.map((p) => p.detail).join('\n')).toMatch(/USING COVERING INDEX api_tokens_user_active \(user_id=\? AND revoked_at=\?\)/);
      const recent = await sql<{ detail: string }>`EXPLAIN QUERY PLAN SELECT created_at FROM api_tokens WHERE user_id = ${alice} AND created_at > ${0} ORDER BY created_at DESC LIMIT ${1}`.execute(store.db);
      expect(recent.rows.map((p) => p.detail).join('\n')).toMatch(/USING COVERING INDEX api_tokens_user_created \(user_id=\? AND created_at>\?\)/);
    } else {
      // A table this small is read whole unless told otherwise: what matters is that the index can answer.
      const plans = await store.db.transaction().execute(async (tx) => {
        await sql`SET LOCAL enable_seqscan = off`.execute(tx);
        await sql`SET LOCAL enable_bitmapscan = off`.execute(tx);
        const explain = async (q: ReturnType<typeof sql>) => (await q.execute(tx)).rows.map((r) => (r as { 'QUERY PLAN': string })['QUERY PLAN']).join('\n');
        return [
          await explain(sql`EXPLAIN SELECT COUNT(*) FROM api_tokens WHERE user_id = ${alice} AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ${0})`),
          await explain(sql`EXPLAIN SELECT created_at FROM api_tokens WHERE user_id = ${alice} AND created_at > ${0} ORDER BY created_at DESC LIMIT ${1}`),
        ];
      });
      // Either index holds the unrevoked rows apart: the covering one, or the partial one of live names.
      expect(plans[0]).toMatch(/Index (Only )?Scan using (api_tokens_user_active|api_tokens_live_name) on api_tokens/);
      expect(plans[1]).toMatch(/Index Only Scan Backward using api_tokens_user_created/);
    }
    await createToken(store.db, { userId: alice, name: 'a' });
    await createToken(store.db, { userId: alice, name: 'b', expiresAt: 2000, now: 1000 });
    await revokeToken(store.db, (await createToken(store.db, { userId: alice, name: 'c' })).record.id);
    expect(await countActiveTokens(store.db, alice)).toBe(1);
  });

  it('purges tokens revoked or expired more than 90 days ago, and leaves the audit log whole', async () => {
    const day = 86_400_000;
    const now = Date.UTC(2026, 6, 1);
    const t0 = now - 200 * day;
    const make = async (name: string, expiresAt?: number) => (await createToken(store.db, { userId: alice, name, now: t0, expiresAt, maxPerDay: 100 })).record;
    const oldRevoked = await make('old-revoked');
    const newRevoked = await make('new-revoked');
    const oldExpired = await make('old-expired', now - 91 * day);
    await make('new-expired', now - 89 * day);
    const active = await make('active');
    await revokeToken(store.db, oldRevoked.id, { now: now - 91 * day });
    await revokeToken(store.db, newRevoked.id, { now: now - 89 * day });
    for (const t of [oldRevoked, oldExpired, active]) {
      await recordAudit(store.db, { ts: t0 + 1, userId: alice, via: 'token', tokenId: t.id, tokenName: t.name, kind: 'mcp', method: 'tools/call', tool: 'run', durationMs: 1, outcome: 'ok' });
    }
    const audit = () => store.db.selectFrom('audit_log').select(['token_id', 'token_name']).orderBy('id').execute();
    const before = await audit();
    expect(before).toHaveLength(3);

    expect(await purgeOldTokens(store.db, { now, batch: 1 })).toBe(2);
    expect((await listTokens(store.db, { includeRevoked: true })).map((t) => t.name).sort()).toEqual(['active', 'new-expired', 'new-revoked']);
    expect(await audit()).toEqual(before);
    // Postgres holds every foreign key at every write; SQLite is asked.
    if (store.dialect === 'sqlite') expect((await sql`PRAGMA foreign_key_check`.execute(store.db)).rows).toEqual([]);
    expect(await purgeOldTokens(store.db, { now })).toBe(0);

    // The newest row stays, however old, so the next token gets a new id.
    await revokeToken(store.db, active.id, { now: now - 100 * day });
    await store.db.deleteFrom('api_tokens').where('id', '<>', active.id).execute();
    expect(await purgeOldTokens(store.db, { now })).toBe(0);
    expect((await make('next')).id).toBeGreaterThan(active.id);
    expect(await purgeOldTokens(store.db, { now })).toBe(1);
    expect((await listTokens(store.db, { includeRevoked: true })).map((t) => t.name)).toEqual(['next']);
  });
});
