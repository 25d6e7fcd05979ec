import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ALL_MIGRATIONS } from '../store/registry.js';
import { openStore, type Store } from '../store/store.js';
import { ensureUser } from '../store/users.js';
import { argsShape, listAudit, recordAudit } from './audit.js';

describe('argsShape', () => {
  it('keeps keys, types and string lengths, never values', () => {
    const args = { code: 'print("alice@example.com")', timeout_seconds: 30, permissions: { read: ['/workspace/secret'] }, flag: true, none: null, empty: [] };
    const shape = argsShape(args);
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

  it('bounds depth and width', () => {
    const deep = { a: { b: { c: { d: { e: 'x' } } } } };
    expect(argsShape(deep)).toEqual({ a: { b: { c: { d: 'object' } } } });
    const wide = Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`k${i}`, i]));
    expect(Object.keys(argsShape(wide) as object)).toHaveLength(51);
  });
});

describe('audit log', () => {
  let dir: string;
  let store: Store;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-audit-'));
    store = openStore(dir, ALL_MIGRATIONS);
  });
  afterEach(() => {
    store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('records entries and lists them per user, newest first', () => {
    const a = ensureUser(store.db, 'alice').id;
    const b = ensureUser(store.db, 'bob').id;
    recordAudit(store.db, { userId: a, tokenId: 1, tokenName: 'laptop', kind: 'mcp', method: 'tools/call', tool: 'execute_code', args: { code: 'secret' }, durationMs: 12.3456, outcome: 'ok' });
    recordAudit(store.db, { userId: a, kind: 'upstream', method: 'github', tool: 'list_issues', args: { repo: 'x' }, durationMs: 40, outcome: 'error', errorClass: 'ToolError' });
    recordAudit(store.db, { userId: b, kind: 'mcp', method: 'tools/list', durationMs: 1, outcome: 'ok' });
    const mine = listAudit(store.db, a);
    expect(mine.map((e) => e.tool)).toEqual(['list_issues', 'execute_code']);
    expect(mine[1]).toMatchObject({ tokenName: 'laptop', kind: 'mcp', argsShape: { code: 'string(6)' }, durationMs: 12.346, outcome: 'ok', errorClass: null });
    expect(mine[0]).toMatchObject({ kind: 'upstream', outcome: 'error', errorClass: 'ToolError', tokenName: null });
    expect(listAudit(store.db, b)).toHaveLength(1);
    expect(JSON.stringify(listAudit(store.db, a))).not.toContain('secret');
    expect(listAudit(store.db, a, { limit: 1, before: mine[0]!.id })[0]!.tool).toBe('execute_code');
  });

  it('refuses unknown outcomes and kinds', () => {
    const a = ensureUser(store.db, 'alice').id;
    expect(() => recordAudit(store.db, { userId: a, kind: 'mcp', method: 'x', durationMs: 1, outcome: 'maybe' as 'ok' })).toThrow();
  });
});
