/**
 * The store keeps each user's usage as running totals (schema.ts): after every kind of
 * write the gateway does (messages added and rendered, titles changed, conversations,
 * turns and users deleted, vault batches sealed, resealed and dropped) they equal a
 * full scan of what is stored. And requests in flight hold their room until they end.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { addMessage, createConversation, deleteApiConversations, deleteConversation, setMessageHtml, startTurn, updateConversation } from '../agent/conversations.js';
import { dropPiiScope } from '../pii/scopes.js';
import { MIGRATIONS } from '../migrations.js';
import { openStoreFile, type Db, type Store } from '../store/store.js';
import { deleteUser, ensureUser } from '../accounts/accounts.js';
import { storeUsageMigration } from './schema.js';
import { reserveStoreRoom, StoreQuotaExceeded, storeUsage } from './store-quota.js';

const config = { storeQuotaMb: 1, apiConversationDays: 30, piiTtlHours: 24, publicUrl: 'https://gate.example' };

/** The usage as the quota measured it before it kept totals: every row, summed. */
function scannedUsage(db: Db, userId: number): { web: number; api: number; personalData: number; tokenPersonalData: number } {
  const conversations = (source: string) =>
    db
      .prepare(
        `SELECT COALESCE(SUM((SELECT COALESCE(SUM(octet_length(m.content) + COALESCE(octet_length(m.files), 0) + COALESCE(octet_length(m.html), 0)), 0) FROM messages m WHERE m.conversation_id = c.id) + octet_length(c.title)), 0)
         FROM conversations c WHERE c.user_id = ? AND c.source = ?`,
      )
      .pluck()
      .get(userId, source) as number;
  const vault = (kind: string) =>
    (db.prepare('SELECT COALESCE(SUM(length(b.sealed) + octet_length(b.uses)), 0) FROM pii_batches b JOIN pii_scopes s ON s.id = b.scope_id WHERE s.user_id = ? AND s.kind = ?').pluck().get(userId, kind) as number) +
    (db.prepare('SELECT COALESCE(SUM(length(v.sealed) + length(v.mac)), 0) FROM pii_values_v1 v JOIN pii_scopes s ON s.id = v.scope_id WHERE s.user_id = ? AND s.kind = ?').pluck().get(userId, kind) as number);
  return { web: conversations('web'), api: conversations('api'), personalData: vault('conversation'), tokenPersonalData: vault('token') };
}

function expectTotalsMatchScan(db: Db, userId: number): void {
  const { web, api, personalData, tokenPersonalData } = storeUsage(db, config, userId);
  expect({ web, api, personalData, tokenPersonalData }).toEqual(scannedUsage(db, userId));
}

const scope = (db: Db, userId: number, kind: 'conversation' | 'token', ref: string) =>
  Number(db.prepare('INSERT INTO pii_scopes (user_id, kind, ref, created_at) VALUES (?, ?, ?, 0)').run(userId, kind, ref).lastInsertRowid);
const batch = (db: Db, scopeId: number, sealed: Buffer, uses: string) =>
  Number(db.prepare('INSERT INTO pii_batches (scope_id, sealed, uses, oldest_use) VALUES (?, ?, ?, 0)').run(scopeId, sealed, uses).lastInsertRowid);
const sealedValue = (db: Db, scopeId: number, n: number) =>
  db.prepare("INSERT INTO pii_values_v1 (scope_id, type, n, mac, sealed, last_used_at) VALUES (?, 'EMAIL', ?, ?, ?, 0)").run(scopeId, n, Buffer.alloc(32, n), Buffer.alloc(40 + n));

let dir: string;
let store: Store;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-quota-'));
  store = openStoreFile(path.join(dir, 'sandgate.db'), MIGRATIONS);
});
afterEach(() => {
  store.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('running totals of the store quota', () => {
  it('equal a full scan after messages, HTML, titles, turns, conversation, vault and user writes and deletes', () => {
    const db = store.db;
    const ana = ensureUser(db, 'ana').id;
    const ben = ensureUser(db, 'ben').id;
    const both = () => [ana, ben].forEach((u) => expectTotalsMatchScan(db, u));

    const chat = createConversation(db, { userId: ana, model: 'm', source: 'web', title: 'Überblick' });
    const api = createConversation(db, { userId: ana, model: 'm', source: 'api' });
    const bens = createConversation(db, { userId: ben, model: 'm', source: 'api' });
    const turn = startTurn(db, chat.id, 'm');
    const first = addMessage(db, { conversationId: chat.id, turnId: turn.id, message: { role: 'user', content: 'Grüße, naïve café ☕' } });
    addMessage(db, { conversationId: chat.id, turnId: turn.id, message: { role: 'assistant', content: [{ type: 'text', text: 'ok' }] }, files: { 'a.txt': [] } });
    addMessage(db, { conversationId: chat.id, message: { role: 'user', content: 'no turn' } });
    for (let i = 0; i < 20; i++) addMessage(db, { conversationId: api.id, message: { role: 'user', content: 'a'.repeat(i) } });
    addMessage(db, { conversationId: bens.id, message: { role: 'user', content: 'ben' } });
    both();
    expect(storeUsage(db, config, ana).web).toBeGreaterThan(0);

    setMessageHtml(db, first, '<p>Grüße</p>');
    setMessageHtml(db, first, '<p>Grüße, naïve</p>');
    updateConversation(db, chat.id, { title: 'A longer title, with ünïcödé' });
    updateConversation(db, api.id, { model: 'other' });
    both();

    const convScope = scope(db, ana, 'conversation', chat.id);
    const tokenScope = scope(db, ana, 'token', '7');
    const b1 = batch(db, convScope, Buffer.alloc(100), '[1,2]');
    batch(db, convScope, Buffer.alloc(60), '[3]');
    batch(db, tokenScope, Buffer.alloc(80), '[4,5,6]');
    sealedValue(db, convScope, 1);
    sealedValue(db, tokenScope, 2);
    both();
    expect(storeUsage(db, config, ana).tokenPersonalData).toBeGreaterThan(0);

    db.prepare('UPDATE pii_batches SET sealed = ?, uses = ? WHERE id = ?').run(Buffer.alloc(150), '[1,2,9]', b1);
    db.prepare("UPDATE pii_batches SET uses = '[]', oldest_use = 5 WHERE scope_id = ?").run(tokenScope);
    db.prepare('DELETE FROM pii_batches WHERE id = ?').run(b1);
    db.prepare('DELETE FROM pii_values_v1 WHERE scope_id = ?').run(convScope);
    both();
    dropPiiScope(db, { userId: ana, kind: 'token', id: '7' });
    both();
    expect(storeUsage(db, config, ana).tokenPersonalData).toBe(0);

    // A turn's deletion cascades to its messages; a conversation's to its messages and turns.
    db.prepare('DELETE FROM turns WHERE id = ?').run(turn.id);
    both();
    expect(deleteConversation(db, ana, chat.id)).toBe(true);
    both();
    expect(storeUsage(db, config, ana).web).toBe(0);
    expect(deleteApiConversations(db, { before: Date.now() + 1, userId: ana })).toHaveLength(1);
    both();
    expect(storeUsage(db, config, ana).api).toBe(0);

    // A user's deletion takes their totals, and everything counted in them, with it.
    const again = createConversation(db, { userId: ana, model: 'm', source: 'web' });
    addMessage(db, { conversationId: again.id, message: { role: 'user', content: 'still here' } });
    batch(db, scope(db, ana, 'conversation', again.id), Buffer.alloc(30), '[1]');
    both();
    expect(deleteUser(db, ana)).toBe(true);
    expect(db.prepare('SELECT COUNT(*) FROM store_usage WHERE user_id = ?').pluck().get(ana)).toBe(0);
    expectTotalsMatchScan(db, ben);
    expect(storeUsage(db, config, ben).api).toBeGreaterThan(0);
  });

  it('are filled in once from what a store held before they were kept', () => {
    store.close();
    const file = path.join(dir, 'before.db');
    const before = openStoreFile(file, MIGRATIONS.slice(0, MIGRATIONS.indexOf(storeUsageMigration)));
    const ana = ensureUser(before.db, 'ana').id;
    const chat = createConversation(before.db, { userId: ana, model: 'm', source: 'web', title: 'Grüße' });
    const api = createConversation(before.db, { userId: ana, model: 'm', source: 'api' });
    addMessage(before.db, { conversationId: chat.id, message: { role: 'user', content: 'café' } });
    addMessage(before.db, { conversationId: api.id, message: { role: 'user', content: 'hello' } });
    batch(before.db, scope(before.db, ana, 'conversation', chat.id), Buffer.alloc(50), '[1]');
    sealedValue(before.db, scope(before.db, ana, 'token', '3'), 4);
    before.close();

    store = openStoreFile(file, MIGRATIONS);
    expectTotalsMatchScan(store.db, ana);
    const u = storeUsage(store.db, config, ana);
    expect([u.web, u.api, u.personalData, u.tokenPersonalData].every((n) => n > 0)).toBe(true);
  });
});

describe('reserveStoreRoom', () => {
  it('counts the room of requests in flight until they end, so a burst cannot pass one check together', () => {
    const ana = ensureUser(store.db, 'ana').id;
    const ben = ensureUser(store.db, 'ben').id;
    const half = 600 * 1024;
    const release = reserveStoreRoom(store.db, config, ana, half);
    expect(() => reserveStoreRoom(store.db, config, ana, half)).toThrow(StoreQuotaExceeded);
    expect(() => reserveStoreRoom(store.db, config, ana, half)).toThrow(/requests still running will store up to 600 KiB more/);
    // Another user's room is their own.
    reserveStoreRoom(store.db, config, ben, half)();
    release();
    release();
    reserveStoreRoom(store.db, config, ana, half)();
  });
});
