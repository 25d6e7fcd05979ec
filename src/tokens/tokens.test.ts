import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../store/store.js';
import { MIGRATIONS } from '../migrations.js';
import { ensureUser } from '../accounts/accounts.js';
import { checksum, crc32, generateToken, hashToken, isWellFormedToken, TOKEN_LENGTH, TOKEN_PATTERN, TOKEN_PREFIX } from './format.js';
import { recordAudit } from '../audit/audit.js';
import {
  countActiveTokens,
  countTokens,
  createToken,
  DEFAULT_MAX_ACTIVE_TOKENS,
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
  let dir: string;
  let store: Store;
  let alice: number;
  let bob: number;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-tokens-'));
    store = openStore(dir, MIGRATIONS);
    alice = ensureUser(store.db, 'alice').id;
    bob = ensureUser(store.db, 'bob').id;
  });
  afterEach(() => {
    store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('stores only a hash, never the token', () => {
    const { token, record } = createToken(store.db, { userId: alice, name: 'laptop' });
    const row = store.db.prepare('SELECT * FROM api_tokens WHERE id = ?').get(record.id) as Record<string, unknown>;
    expect(Object.values(row).some((v) => typeof v === 'string' && v.includes(token.slice(4, 36)))).toBe(false);
    expect((row.hash as Buffer).equals(hashToken(token))).toBe(true);
    const dump = fs.readFileSync(path.join(dir, 'sandgate.db')).toString('latin1') + (fs.existsSync(path.join(dir, 'sandgate.db-wal')) ? fs.readFileSync(path.join(dir, 'sandgate.db-wal')).toString('latin1') : '');
    expect(dump.includes(token)).toBe(false);
  });

  it('verifies a good token and records its last use', () => {
    const { token, record } = createToken(store.db, { userId: alice, name: 'laptop', now: 1000 });
    expect(record.lastUsedAt).toBeNull();
    const r = verifyToken(store.db, token, 5000);
    expect(r.ok).toBe(true);
    if (r.ok) expect(r.principal).toMatchObject({ tokenId: record.id, tokenName: 'laptop', user: { name: 'alice' } });
    expect(listTokens(store.db, { userId: alice })[0]!.lastUsedAt).toBe(5000);
  });

  it('says why a token is refused', () => {
    expect(verifyToken(store.db, undefined)).toMatchObject({ ok: false, reason: 'missing' });
    expect(verifyToken(store.db, 'sgp_short')).toMatchObject({ ok: false, reason: 'malformed' });
    expect(verifyToken(store.db, generateToken())).toMatchObject({ ok: false, reason: 'unknown' });
    const r = verifyToken(store.db, undefined);
    expect(!r.ok && r.message).toMatch(/sandgate tokens create/);
  });

  it('expires at expires_at', () => {
    const { token } = createToken(store.db, { userId: alice, name: 'ci', expiresAt: 10_000, now: 1000 });
    expect(verifyToken(store.db, token, 9_999).ok).toBe(true);
    const r = verifyToken(store.db, token, 10_000);
    expect(r).toMatchObject({ ok: false, reason: 'expired' });
    expect(!r.ok && r.message).toMatch(/"ci" expired/);
  });

  it('stores no expiry that is not a time within 5 years', () => {
    for (const expiresAt of [Number.POSITIVE_INFINITY, 1e300, Number.NaN, 1000.5, 1000 + MAX_TOKEN_LIFETIME_MS + 1]) {
      expect(() => createToken(store.db, { userId: alice, name: 'ci', expiresAt, now: 1000 }), String(expiresAt)).toThrow(TokenError);
    }
    expect(listTokens(store.db, { includeRevoked: true })).toEqual([]);
    expect(createToken(store.db, { userId: alice, name: 'ci', expiresAt: 1000 + MAX_TOKEN_LIFETIME_MS, now: 1000 }).record.expiresAt).toBe(1000 + MAX_TOKEN_LIFETIME_MS);
  });

  it('caps the active tokens of a user; revoked and expired ones do not count', () => {
    for (let i = 0; i < 3; i++) createToken(store.db, { userId: alice, name: `t${i}`, maxActive: 3 });
    expect(() => createToken(store.db, { userId: alice, name: 'extra', maxActive: 3 })).toThrow(/already has 3 active tokens, the most one user may hold \(SANDGATE_MAX_TOKENS_PER_USER=3\)/);
    // Another user has a cap of their own.
    createToken(store.db, { userId: bob, name: 'extra', maxActive: 3 });
    revokeTokenByName(store.db, alice, 't0');
    createToken(store.db, { userId: alice, name: 'short', expiresAt: 2000, now: 1000, maxActive: 3 });
    expect(() => createToken(store.db, { userId: alice, name: 'extra', now: 1500, maxActive: 3 })).toThrow(/already has 3 active tokens/);
    createToken(store.db, { userId: alice, name: 'extra', now: 2000, maxActive: 3 });
    // Without a cap given, the setting's default holds.
    for (let i = 0; i < DEFAULT_MAX_ACTIVE_TOKENS; i++) createToken(store.db, { userId: bob, name: `d${i}`, maxActive: 100 });
    expect(() => createToken(store.db, { userId: bob, name: 'one-more' })).toThrow(/SANDGATE_MAX_TOKENS_PER_USER=20/);
  });

  it('revocation takes effect on the very next verification', () => {
    const { token, record } = createToken(store.db, { userId: alice, name: 'laptop' });
    expect(verifyToken(store.db, token).ok).toBe(true);
    expect(revokeToken(store.db, record.id)).toBe(true);
    expect(verifyToken(store.db, token)).toMatchObject({ ok: false, reason: 'revoked' });
    expect(revokeToken(store.db, record.id)).toBe(false);
  });

  it('revokes by name, and only the owner can revoke by id when scoped', () => {
    const a = createToken(store.db, { userId: alice, name: 'laptop' });
    expect(revokeToken(store.db, a.record.id, { userId: bob })).toBe(false);
    expect(verifyToken(store.db, a.token).ok).toBe(true);
    expect(revokeTokenByName(store.db, alice, 'laptop')).toBe(a.record.id);
    expect(verifyToken(store.db, a.token).ok).toBe(false);
  });

  it('keeps names unique per user among live tokens', () => {
    createToken(store.db, { userId: alice, name: 'laptop' });
    expect(() => createToken(store.db, { userId: alice, name: 'laptop' })).toThrow(/already has an active token named "laptop"/);
    createToken(store.db, { userId: bob, name: 'laptop' });
    revokeTokenByName(store.db, alice, 'laptop');
    createToken(store.db, { userId: alice, name: 'laptop' });
    // An expired token frees its name.
    createToken(store.db, { userId: alice, name: 'ci', expiresAt: 2000, now: 1000 });
    const again = createToken(store.db, { userId: alice, name: 'ci', now: 3000 });
    expect(again.record.name).toBe('ci');
    expect(listTokens(store.db, { userId: alice }).map((t) => t.name).sort()).toEqual(['ci', 'laptop']);
    expect(listTokens(store.db, { userId: alice, includeRevoked: true })).toHaveLength(4);
  });

  it('rejects bad names and past expiries', () => {
    expect(() => createToken(store.db, { userId: alice, name: '' })).toThrow(/not allowed/);
    expect(() => createToken(store.db, { userId: alice, name: 'a\nb' })).toThrow(/not allowed/);
    expect(() => createToken(store.db, { userId: alice, name: 'x', expiresAt: 1, now: 2 })).toThrow(/past/);
  });

  it('finds a leaked token by its secret', () => {
    const { token, record } = createToken(store.db, { userId: alice, name: 'laptop' });
    expect(findTokenBySecret(store.db, token)?.id).toBe(record.id);
    expect(findTokenBySecret(store.db, generateToken())).toBeUndefined();
  });

  it('goes with its user', () => {
    const { token } = createToken(store.db, { userId: alice, name: 'laptop' });
    store.db.prepare('DELETE FROM users WHERE id = ?').run(alice);
    expect(verifyToken(store.db, token)).toMatchObject({ ok: false, reason: 'unknown' });
  });
  it('bounds creations per user per day, revoked ones included, so create-and-revoke cannot pile up rows', () => {
    const now = Date.UTC(2026, 0, 10);
    for (let i = 0; i < MAX_TOKENS_CREATED_PER_DAY; i++) {
      const { record } = createToken(store.db, { userId: alice, name: 'churn', now: now + i });
      revokeToken(store.db, record.id, { now: now + i });
    }
    expect(() => createToken(store.db, { userId: alice, name: 'churn', now: now + 1000 })).toThrow(
      /created 50 tokens in the last 24 hours, the most one user may create in a day \(revoked ones count too\): use a token already made, or try again after 2026-01-11T00:00:00Z/,
    );
    expect(countTokens(store.db, { userId: alice, includeRevoked: true })).toBe(MAX_TOKENS_CREATED_PER_DAY);
    // Another user is not held back, and a day after the first creation one more goes in.
    createToken(store.db, { userId: bob, name: 'churn', now: now + 1000 });
    createToken(store.db, { userId: alice, name: 'churn', now: now + 86_400_000 + 1 });
  });

  it('counts active tokens from the active rows alone, whatever was revoked', () => {
    const plan = store.db
      .prepare('EXPLAIN QUERY PLAN SELECT COUNT(*) FROM api_tokens WHERE user_id = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)')
      .all(alice, 0) as Array<{ detail: string }>;
    expect(plan.map((p) => p.detail).join('\n')).toMatch(/USING COVERING INDEX api_tokens_user_active \(user_id=\? AND revoked_at=\?\)/);
    const recent = store.db.prepare('EXPLAIN QUERY PLAN SELECT created_at FROM api_tokens WHERE user_id = ? AND created_at > ? ORDER BY created_at DESC LIMIT ?').all(alice, 0, 1) as Array<{ detail: string }>;
    expect(recent.map((p) => p.detail).join('\n')).toMatch(/USING COVERING INDEX api_tokens_user_created \(user_id=\? AND created_at>\?\)/);
    createToken(store.db, { userId: alice, name: 'a' });
    createToken(store.db, { userId: alice, name: 'b', expiresAt: 2000, now: 1000 });
    revokeToken(store.db, createToken(store.db, { userId: alice, name: 'c' }).record.id);
    expect(countActiveTokens(store.db, alice)).toBe(1);
  });

  it('purges tokens revoked or expired more than 90 days ago, and leaves the audit log whole', () => {
    const day = 86_400_000;
    const now = Date.UTC(2026, 6, 1);
    const t0 = now - 200 * day;
    const make = (name: string, expiresAt?: number) => createToken(store.db, { userId: alice, name, now: t0, expiresAt, maxPerDay: 100 }).record;
    const oldRevoked = make('old-revoked');
    const newRevoked = make('new-revoked');
    const oldExpired = make('old-expired', now - 91 * day);
    make('new-expired', now - 89 * day);
    const active = make('active');
    revokeToken(store.db, oldRevoked.id, { now: now - 91 * day });
    revokeToken(store.db, newRevoked.id, { now: now - 89 * day });
    for (const t of [oldRevoked, oldExpired, active]) {
      recordAudit(store.db, { ts: t0 + 1, userId: alice, via: 'token', tokenId: t.id, tokenName: t.name, kind: 'mcp', method: 'tools/call', tool: 'run', durationMs: 1, outcome: 'ok' });
    }
    const audit = () => store.db.prepare('SELECT token_id, token_name FROM audit_log ORDER BY id').all();
    const before = audit();
    expect(before).toHaveLength(3);

    expect(purgeOldTokens(store.db, { now, batch: 1 })).toBe(2);
    expect(listTokens(store.db, { includeRevoked: true }).map((t) => t.name).sort()).toEqual(['active', 'new-expired', 'new-revoked']);
    expect(audit()).toEqual(before);
    expect(store.db.pragma('foreign_key_check')).toEqual([]);
    expect(purgeOldTokens(store.db, { now })).toBe(0);

    // The newest row stays, however old, so the next token gets a new id.
    revokeToken(store.db, active.id, { now: now - 100 * day });
    store.db.prepare('DELETE FROM api_tokens WHERE id <> ?').run(active.id);
    expect(purgeOldTokens(store.db, { now })).toBe(0);
    expect(make('next').id).toBeGreaterThan(active.id);
    expect(purgeOldTokens(store.db, { now })).toBe(1);
    expect(listTokens(store.db, { includeRevoked: true }).map((t) => t.name)).toEqual(['next']);
  });
});
