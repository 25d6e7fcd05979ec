import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore, openStoreFile, type Store } from '../store/store.js';
import { MIGRATIONS, versionOf } from '../migrations.js';
import { auditCallersMigration } from './schema.js';
import { ensureUser } from '../accounts/accounts.js';
import { argsShape, auditErrorClass, listAudit, recordAudit } from './audit.js';

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
  let dir: string;
  let store: Store;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-audit-'));
    store = openStore(dir, MIGRATIONS);
  });
  afterEach(() => {
    store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('records entries and lists them per user, newest first', () => {
    const a = ensureUser(store.db, 'alice').id;
    const b = ensureUser(store.db, 'bob').id;
    recordAudit(store.db, { userId: a, tokenId: 1, tokenName: 'laptop', kind: 'mcp', method: 'tools/call', tool: 'execute_code', argsShape: argsShape({ code: 'secret' }, open(['code'])), durationMs: 12.3456, outcome: 'ok' });
    recordAudit(store.db, { userId: a, kind: 'upstream', method: 'github', tool: 'list_issues', args: { repo: 'x' }, durationMs: 40, outcome: 'error', errorClass: 'tool_error' });
    recordAudit(store.db, { userId: b, kind: 'mcp', method: 'tools/list', durationMs: 1, outcome: 'ok' });
    const mine = listAudit(store.db, a);
    expect(mine.map((e) => e.tool)).toEqual(['list_issues', 'execute_code']);
    expect(mine[1]).toMatchObject({ tokenName: 'laptop', kind: 'mcp', argsShape: { code: 'string(6)' }, durationMs: 12.346, outcome: 'ok', errorClass: null });
    expect(mine[0]).toMatchObject({ kind: 'upstream', outcome: 'error', errorClass: 'tool_error', tokenName: null, argsShape: { '…': '1 other key' } });
    expect(listAudit(store.db, b)).toHaveLength(1);
    expect(JSON.stringify(listAudit(store.db, a))).not.toContain('secret');
    expect(listAudit(store.db, a, { limit: 1, before: mine[0]!.id })[0]!.tool).toBe('execute_code');
  });

  it('stores no name a client or code chose unless it is a known method, tool or class', () => {
    const a = ensureUser(store.db, 'alice').id;
    recordAudit(store.db, { userId: a, kind: 'mcp', method: 'ann.lee@example.com', tool: 'ann.lee@example.com', durationMs: 1, outcome: 'error', errorClass: 'code:ann_lee' });
    recordAudit(store.db, { userId: a, kind: 'upstream', method: 'Ann Lee <ann@x.io>', tool: 'memory/ann@x.io', durationMs: 1, outcome: 'error', errorClass: 'Ann Lee' });
    const rows = listAudit(store.db, a);
    expect(rows.map((r) => [r.method, r.tool, r.errorClass])).toEqual([
      ['?', '?', 'other'],
      ['other', '?', 'code:other'],
    ]);
  });

  it('an audit log from before callers were recorded keeps its rows; new kinds and callers can be written', () => {
    const file = path.join(dir, 'old.db');
    const old = openStoreFile(file, MIGRATIONS.slice(0, versionOf(auditCallersMigration) - 1));
    const u = ensureUser(old.db, 'olga').id;
    old.db.prepare(`INSERT INTO audit_log (ts, user_id, token_id, token_name, kind, method, tool, args_shape, duration_ms, outcome, error_class)
      VALUES (1, ?, 7, 'laptop', 'mcp', 'tools/call', 'read_file', NULL, 2, 'ok', NULL)`).run(u);
    old.close();
    const upgraded = openStoreFile(file, MIGRATIONS);
    try {
      expect(listAudit(upgraded.db, u)).toEqual([expect.objectContaining({ via: 'token', tokenId: 7, tokenName: 'laptop', tool: 'read_file', outcome: 'ok' })]);
      recordAudit(upgraded.db, { userId: u, via: 'agent', conversationId: 'c1', kind: 'mcp', method: 'tools/call', tool: 'execute_code', durationMs: 1, outcome: 'ok' });
      recordAudit(upgraded.db, { userId: u, via: 'session', kind: 'admin', method: 'sandbox/stop', targetUserId: u, durationMs: 1, outcome: 'ok' });
      recordAudit(upgraded.db, { userId: u, via: 'session', kind: 'web', method: 'Ann Lee uploads', durationMs: 1, outcome: 'ok' });
      const rows = listAudit(upgraded.db, u);
      expect(rows.map((r) => [r.kind, r.via, r.method, r.conversationId, r.targetUserId])).toEqual([
        ['web', 'session', 'other', null, null],
        ['admin', 'session', 'sandbox/stop', null, u],
        ['mcp', 'agent', 'tools/call', 'c1', null],
        ['mcp', 'token', 'tools/call', null, null],
      ]);
    } finally {
      upgraded.close();
    }
  });

  it('refuses unknown outcomes and kinds', () => {
    const a = ensureUser(store.db, 'alice').id;
    expect(() => recordAudit(store.db, { userId: a, kind: 'mcp', method: 'x', durationMs: 1, outcome: 'maybe' as 'ok' })).toThrow();
  });
});
