import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { openStore } from '../store/store.js';
import { MIGRATIONS, versionOf } from '../migrations.js';
import { auditCallersMigration } from './schema.js';
import { ensureUser } from '../accounts/accounts.js';
import { argsShape, auditErrorClass, listAudit, queryAudit, recordAudit, upstreamCallCounts } from './audit.js';
import { storePerTest, type TestStore } from '../../test/support/store.js';
import { testDatabaseUrl } from '../../test/support/postgres.js';

const open = (keys: string[]) => ({ properties: Object.fromEntries(keys.map((k) => [k, {}])) });

describe('argsShape', () => {
  it('keeps declared keys, types and string lengths, never values', () => {
    const args = { code: 'print("alice@example.com")', timeout_seconds: 30, permissions: { read: ['/workspace/secret'] }, flag: true, none: null, empty: [] };
    const schema = { properties: { code: {}, timeout_seconds: {}, permissions: { properties: { read: { items: {} } } }, flag: {}, none: {}, empty: {} } };
    const shape = argsShape(args, schema);
    expect(shape).toEqual({
      code: 'string(26)',
      timeout_seconds: 'number',
      permissions: { read: { array: 1, item: 'string(17)' } },
      flag: 'boolean',
      none: 'null',
      empty: { array: 0 },
    });
    const text = JSON.stringify(shape);
    expect(text).not.toMatch(/alice|secret|30/);
  });

  it('keys the schema does not declare are counted, never kept: a key can be personal data', () => {
    const args = { orders: { 'ann.lee@example.com': 3, 'Bob Stone': 1 }, note: 'x' };
    const shape = argsShape(args, open(['orders']));
    expect(shape).toEqual({ orders: { '…': '2 other keys' }, '…': '1 other key' });
    expect(argsShape({ 'ann.lee@example.com': 1 })).toEqual({ '…': '1 other key' });
    expect(JSON.stringify(shape)).not.toMatch(/ann|Bob|note/);
  });

  it('bounds depth and width', () => {
    const deep = { a: { b: { c: { d: { e: 'x' } } } } };
    const chain = { properties: { a: { properties: { b: { properties: { c: { properties: { d: open(['e']) } } } } } } } };
    expect(argsShape(deep, chain)).toEqual({ a: { b: { c: { d: 'object' } } } });
    const wide = Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`k${i}`, i]));
    const shape = argsShape(wide, open(Object.keys(wide))) as Record<string, unknown>;
    expect(Object.keys(shape)).toHaveLength(51);
    expect(shape['…']).toBe('10 other keys');
  });
});

describe('auditErrorClass', () => {
  it('keeps its vocabulary and reduces anything else', () => {
    for (const kept of ['ENOENT', 'PermissionError', 'SandboxError:busy', 'timeout', 'jsonrpc:-32602', 'code:ValueError', 'expired', 'unknown_tool']) {
      expect(auditErrorClass(kept)).toBe(kept);
    }
    expect(auditErrorClass('code:ann_lee_at_example_com')).toBe('code:other');
    expect(auditErrorClass('code:AnnLeeError')).toBe('code:other');
    expect(auditErrorClass('ann.lee@example.com')).toBe('other');
    expect(auditErrorClass('jsonrpc:ann')).toBe('other');
    expect(auditErrorClass(null)).toBeNull();
  });
});

describe('audit log', () => {
  let store: TestStore;
  storePerTest((s) => (store = s));

  it('records entries and lists them per user, newest first', async () => {
    const a = (await ensureUser(store.db, 'alice')).id;
    const b = (await ensureUser(store.db, 'bob')).id;
    await recordAudit(store.db, { userId: a, tokenId: 1, tokenName: 'laptop', kind: 'mcp', method: 'tools/call', tool: 'execute_code', argsShape: argsShape({ code: 'secret' }, open(['code'])), durationMs: 12.3456, outcome: 'ok' });
    await recordAudit(store.db, { userId: a, kind: 'upstream', method: 'github', tool: 'list_issues', args: { repo: 'x' }, durationMs: 40, outcome: 'error', errorClass: 'tool_error' });
    await recordAudit(store.db, { userId: b, kind: 'mcp', method: 'tools/list', durationMs: 1, outcome: 'ok' });
    const mine = await listAudit(store.db, a);
    expect(mine.map((e) => e.tool)).toEqual(['list_issues', 'execute_code']);
    expect(mine[1]).toMatchObject({ tokenName: 'laptop', kind: 'mcp', argsShape: { code: 'string(6)' }, durationMs: 12.346, outcome: 'ok', errorClass: null });
    expect(mine[0]).toMatchObject({ kind: 'upstream', outcome: 'error', errorClass: 'tool_error', tokenName: null, argsShape: { '…': '1 other key' } });
    expect(await listAudit(store.db, b)).toHaveLength(1);
    expect(JSON.stringify(await listAudit(store.db, a))).not.toContain('secret');
    expect((await listAudit(store.db, a, { limit: 1, before: mine[0]!.id }))[0]!.tool).toBe('execute_code');
  });

  it('filters entries of every user and counts upstream calls per server', async () => {
    const a = (await ensureUser(store.db, 'alice')).id;
    const b = (await ensureUser(store.db, 'bob')).id;
    const up = { kind: 'upstream', durationMs: 1 } as const;
    await recordAudit(store.db, { ...up, ts: 1000, userId: a, method: 'github', tool: 'github/list_issues', outcome: 'ok' });
    await recordAudit(store.db, { ...up, ts: 2000, userId: b, method: 'github', tool: 'github/list_issues', outcome: 'error', errorClass: 'tool_error' });
    await recordAudit(store.db, { ...up, ts: 3000, userId: b, method: 'github', tool: 'github/?', outcome: 'denied', errorClass: 'unknown_tool' });
    await recordAudit(store.db, { ...up, ts: 4000, userId: a, method: 'memory', tool: 'memory/read_graph', outcome: 'ok' });
    await recordAudit(store.db, { ts: 5000, userId: a, via: 'session', kind: 'admin', method: 'tokens/revoke', targetUserId: b, durationMs: 1, outcome: 'ok' });

    expect((await queryAudit(store.db, {})).map((e) => e.ts)).toEqual([5000, 4000, 3000, 2000, 1000]);
    expect((await queryAudit(store.db, { userId: b })).map((e) => e.ts)).toEqual([3000, 2000]);
    expect((await queryAudit(store.db, { kind: 'admin' })).map((e) => [e.method, e.targetUserId])).toEqual([['tokens/revoke', b]]);
    expect((await queryAudit(store.db, { tool: 'github/list_issues' })).map((e) => e.ts)).toEqual([2000, 1000]);
    expect((await queryAudit(store.db, { tool: 'tokens/revoke' })).map((e) => e.ts)).toEqual([5000]);
    expect((await queryAudit(store.db, { outcome: 'ok', since: 1000, until: 5000 })).map((e) => e.ts)).toEqual([4000, 1000]);
    expect((await queryAudit(store.db, { limit: 2 })).map((e) => e.ts)).toEqual([5000, 4000]);

    const counts = await upstreamCallCounts(store.db);
    expect(Object.fromEntries(counts)).toEqual({
      github: { calls: 3, failed: 2, lastAt: 3000 },
      memory: { calls: 1, failed: 0, lastAt: 4000 },
    });
    expect(Object.fromEntries(await upstreamCallCounts(store.db, 2500))).toEqual({
      github: { calls: 1, failed: 1, lastAt: 3000 },
      memory: { calls: 1, failed: 0, lastAt: 4000 },
    });
    expect((await upstreamCallCounts(store.db, 10_000)).size).toBe(0);
  });

  it('stores no name a client or code chose unless it is a known method, tool or class', async () => {
    const a = (await ensureUser(store.db, 'alice')).id;
    await recordAudit(store.db, { userId: a, kind: 'mcp', method: 'ann.lee@example.com', tool: 'ann.lee@example.com', durationMs: 1, outcome: 'error', errorClass: 'code:ann_lee' });
    await recordAudit(store.db, { userId: a, kind: 'upstream', method: 'Ann Lee <ann@x.io>', tool: 'memory/ann@x.io', durationMs: 1, outcome: 'error', errorClass: 'Ann Lee' });
    const rows = await listAudit(store.db, a);
    expect(rows.map((r) => [r.method, r.tool, r.errorClass])).toEqual([
      ['?', '?', 'other'],
      ['other', '?', 'code:other'],
    ]);
  });

  it('an audit log from before callers were recorded keeps its rows; new kinds and callers can be written', async () => {
    // Another database than the test's own, on the same kind of server.
    const options = { dataDir: fs.mkdtempSync(`${store.dataDir}-old-`), databaseUrl: await testDatabaseUrl() };
    try {
      const old = await openStore(options, MIGRATIONS.slice(0, versionOf(auditCallersMigration) - 1));
      const u = (await ensureUser(old.db, 'olga')).id;
      await old.db
        .insertInto('audit_log')
        .values({ ts: 1, user_id: u, token_id: 7, token_name: 'laptop', kind: 'mcp', method: 'tools/call', tool: 'read_file', args_shape: null, duration_ms: 2, outcome: 'ok', error_class: null })
        .execute();
      await old.close();
      const upgraded = await openStore(options, MIGRATIONS);
      try {
        expect(await listAudit(upgraded.db, u)).toEqual([expect.objectContaining({ via: 'token', tokenId: 7, tokenName: 'laptop', tool: 'read_file', outcome: 'ok' })]);
        await recordAudit(upgraded.db, { userId: u, via: 'agent', conversationId: 'c1', kind: 'mcp', method: 'tools/call', tool: 'execute_code', durationMs: 1, outcome: 'ok' });
        await recordAudit(upgraded.db, { userId: u, via: 'session', kind: 'admin', method: 'sandbox/stop', targetUserId: u, durationMs: 1, outcome: 'ok' });
        await recordAudit(upgraded.db, { userId: u, via: 'session', kind: 'web', method: 'Ann Lee uploads', durationMs: 1, outcome: 'ok' });
        const rows = await listAudit(upgraded.db, u);
        expect(rows.map((r) => [r.kind, r.via, r.method, r.conversationId, r.targetUserId])).toEqual([
          ['web', 'session', 'other', null, null],
          ['admin', 'session', 'sandbox/stop', null, u],
          ['mcp', 'agent', 'tools/call', 'c1', null],
          ['mcp', 'token', 'tools/call', null, null],
        ]);
        // The id sequence goes on after the rows kept.
        expect(rows[2]!.id).toBeGreaterThan(rows[3]!.id);
      } finally {
        await upgraded.close();
      }
    } finally {
      fs.rmSync(options.dataDir, { recursive: true, force: true });
    }
  });

  it('refuses unknown outcomes, kinds and callers', async () => {
    const a = (await ensureUser(store.db, 'alice')).id;
    await expect(recordAudit(store.db, { userId: a, kind: 'mcp', method: 'x', durationMs: 1, outcome: 'maybe' as 'ok' })).rejects.toThrow();
    await expect(recordAudit(store.db, { userId: a, kind: 'shell' as 'mcp', method: 'x', durationMs: 1, outcome: 'ok' })).rejects.toThrow();
    await expect(recordAudit(store.db, { userId: a, via: 'phone' as 'token', kind: 'mcp', method: 'x', durationMs: 1, outcome: 'ok' })).rejects.toThrow();
    expect(await listAudit(store.db, a)).toEqual([]);
  });
});
