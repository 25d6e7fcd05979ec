/**
 * The store keeps each user's usage as running totals (schema.ts): after every kind of
 * write the gateway does (messages added and rendered, titles changed, conversations,
 * turns and users deleted, vault batches sealed, resealed and dropped) they equal a
 * full scan of what is stored. And requests in flight hold their room until they end.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { addMessage, createConversation, deleteApiConversations, deleteConversation, setMessageHtml, startTurn, updateConversation } from '../agent/conversations.js';
import { dropPiiScope } from '../pii/scopes.js';
import { MIGRATIONS } from '../migrations.js';
import { openStore, type Db } from '../store/store.js';
import { storePerTest, type TestStore } from '../../test/support/store.js';
import { testDatabaseUrl } from '../../test/support/postgres.js';
import { deleteUser, ensureUser } from '../accounts/accounts.js';
import { storeUsageMigration } from './schema.js';
import { reserveStoreRoom, StoreQuotaExceeded, storeUsage } from './store-quota.js';

const config = { storeQuotaMb: 1, apiConversationDays: 30, piiTtlHours: 24, publicUrl: 'https://gate.example' };

/** The usage as the quota measured it before it kept totals: every row, summed. */
async function scannedUsage(db: Db, userId: number): Promise<{ web: number; api: number; personalData: number; tokenPersonalData: number }> {
  const one = async (q: ReturnType<typeof sql<{ n: number }>>) => (await q.execute(db)).rows[0]!.n;
  const conversations = (source: string) =>
    one(sql<{ n: number }>`
      SELECT COALESCE(SUM((SELECT COALESCE(SUM(octet_length(m.content) + COALESCE(octet_length(m.files), 0) + COALESCE(octet_length(m.html), 0)), 0) FROM messages m WHERE m.conversation_id = c.id) + octet_length(c.title)), 0) AS n
      FROM conversations c WHERE c.user_id = ${userId} AND c.source = ${source}`);
  const vault = async (kind: string) =>
    (await one(sql<{ n: number }>`SELECT COALESCE(SUM(length(b.sealed) + octet_length(b.uses)), 0) AS n FROM pii_batches b JOIN pii_scopes s ON s.id = b.scope_id WHERE s.user_id = ${userId} AND s.kind = ${kind}`)) +
    (await one(sql<{ n: number }>`SELECT COALESCE(SUM(length(v.sealed) + length(v.mac)), 0) AS n FROM pii_values_v1 v JOIN pii_scopes s ON s.id = v.scope_id WHERE s.user_id = ${userId} AND s.kind = ${kind}`));
  return { web: await conversations('web'), api: await conversations('api'), personalData: await vault('conversation'), tokenPersonalData: await vault('token') };
}

async function expectTotalsMatchScan(db: Db, userId: number): Promise<void> {
  const { web, api, personalData, tokenPersonalData } = await storeUsage(db, config, userId);
  expect({ web, api, personalData, tokenPersonalData }).toEqual(await scannedUsage(db, userId));
}

const scope = async (db: Db, userId: number, kind: 'conversation' | 'token', ref: string) =>
  (await db.insertInto('pii_scopes').values({ user_id: userId, kind, ref, created_at: 0 }).returning('id').executeTakeFirstOrThrow()).id;
const batch = async (db: Db, scopeId: number, sealed: Buffer, uses: string) =>
  (await db.insertInto('pii_batches').values({ scope_id: scopeId, sealed, uses, oldest_use: 0 }).returning('id').executeTakeFirstOrThrow()).id;
const sealedValue = (db: Db, scopeId: number, n: number) =>
  db.insertInto('pii_values_v1').values({ scope_id: scopeId, type: 'EMAIL', n, mac: Buffer.alloc(32, n), sealed: Buffer.alloc(40 + n), last_used_at: 0 }).execute();

let store: TestStore;
storePerTest((s) => (store = s));

describe('running totals of the store quota', () => {
  it('equal a full scan after messages, HTML, titles, turns, conversation, vault and user writes and deletes', async () => {
    const db = store.db;
    const ana = (await ensureUser(db, 'ana')).id;
    const ben = (await ensureUser(db, 'ben')).id;
    const both = async () => {
      for (const u of [ana, ben]) await expectTotalsMatchScan(db, u);
    };

    const chat = await createConversation(db, { userId: ana, model: 'm', source: 'web', title: 'Überblick' });
    const api = await createConversation(db, { userId: ana, model: 'm', source: 'api' });
    const bens = await createConversation(db, { userId: ben, model: 'm', source: 'api' });
    const turn = await startTurn(db, chat.id, 'm');
    const first = await addMessage(db, { conversationId: chat.id, turnId: turn.id, message: { role: 'user', content: 'Grüße, naïve café ☕' } });
    await addMessage(db, { conversationId: chat.id, turnId: turn.id, message: { role: 'assistant', content: [{ type: 'text', text: 'ok' }] }, files: { 'a.txt': [] } });
    await addMessage(db, { conversationId: chat.id, message: { role: 'user', content: 'no turn' } });
    for (let i = 0; i < 20; i++) await addMessage(db, { conversationId: api.id, message: { role: 'user', content: 'a'.repeat(i) } });
    await addMessage(db, { conversationId: bens.id, message: { role: 'user', content: 'ben' } });
    await both();
    expect((await storeUsage(db, config, ana)).web).toBeGreaterThan(0);

    await setMessageHtml(db, first, '<p>Grüße</p>');
    await setMessageHtml(db, first, '<p>Grüße, naïve</p>');
    await updateConversation(db, chat.id, { title: 'A longer title, with ünïcödé' });
    await updateConversation(db, api.id, { model: 'other' });
    await both();

    const convScope = await scope(db, ana, 'conversation', chat.id);
    const tokenScope = await scope(db, ana, 'token', '7');
    const b1 = await batch(db, convScope, Buffer.alloc(100), '[1,2]');
    await batch(db, convScope, Buffer.alloc(60), '[3]');
    await batch(db, tokenScope, Buffer.alloc(80), '[4,5,6]');
    await sealedValue(db, convScope, 1);
    await sealedValue(db, tokenScope, 2);
    await both();
    expect((await storeUsage(db, config, ana)).tokenPersonalData).toBeGreaterThan(0);

    await db.updateTable('pii_batches').set({ sealed: Buffer.alloc(150), uses: '[1,2,9]' }).where('id', '=', b1).execute();
    await db.updateTable('pii_batches').set({ uses: '[]', oldest_use: 5 }).where('scope_id', '=', tokenScope).execute();
    await db.deleteFrom('pii_batches').where('id', '=', b1).execute();
    await db.deleteFrom('pii_values_v1').where('scope_id', '=', convScope).execute();
    await both();
    await dropPiiScope(db, { userId: ana, kind: 'token', id: '7' });
    await both();
    expect((await storeUsage(db, config, ana)).tokenPersonalData).toBe(0);

    // A turn's deletion cascades to its messages; a conversation's to its messages and turns.
    await db.deleteFrom('turns').where('id', '=', turn.id).execute();
    await both();
    expect(await deleteConversation(db, ana, chat.id)).toBe(true);
    await both();
    expect((await storeUsage(db, config, ana)).web).toBe(0);
    expect(await deleteApiConversations(db, { before: Date.now() + 1, userId: ana })).toHaveLength(1);
    await both();
    expect((await storeUsage(db, config, ana)).api).toBe(0);

    // Moved to another user or source (the gateway does not, but the totals follow).
    const moving = await createConversation(db, { userId: ana, model: 'm', source: 'web', title: 'moving' });
    await addMessage(db, { conversationId: moving.id, message: { role: 'user', content: 'along' } });
    await db.updateTable('conversations').set({ user_id: ben, source: 'api' }).where('id', '=', moving.id).execute();
    await both();
    await db.updateTable('conversations').set({ user_id: ana, source: 'web', title: 'moved back' }).where('id', '=', moving.id).execute();
    await both();
    await db.deleteFrom('conversations').where('id', '=', moving.id).execute();
    await both();

    // A user's deletion takes their totals, and everything counted in them, with it.
    const again = await createConversation(db, { userId: ana, model: 'm', source: 'web' });
    await addMessage(db, { conversationId: again.id, message: { role: 'user', content: 'still here' } });
    await setMessageHtml(db, await addMessage(db, { conversationId: again.id, message: { role: 'user', content: 'twice' } }), '<p>twice</p>');
    await batch(db, await scope(db, ana, 'conversation', again.id), Buffer.alloc(30), '[1]');
    await sealedValue(db, await scope(db, ana, 'token', '8'), 3);
    await both();
    expect(await deleteUser(db, ana)).toBe(true);
    expect(await db.selectFrom('store_usage').selectAll().where('user_id', '=', ana).execute()).toEqual([]);
    await expectTotalsMatchScan(db, ben);
    expect((await storeUsage(db, config, ben)).api).toBeGreaterThan(0);
  });

  it('equal a full scan when a user is deleted in the transaction that wrote their rows', async () => {
    const db = store.db;
    const ana = (await ensureUser(db, 'ana')).id;
    const ben = (await ensureUser(db, 'ben')).id;
    await db.transaction().execute(async (tx) => {
      const chat = await createConversation(tx, { userId: ana, model: 'm', source: 'web', title: 'both' });
      await addMessage(tx, { conversationId: chat.id, message: { role: 'user', content: 'one' } });
      await addMessage(tx, { conversationId: chat.id, message: { role: 'user', content: 'two' } });
      const s = await scope(tx, ana, 'conversation', chat.id);
      await batch(tx, s, Buffer.alloc(10), '[1]');
      await batch(tx, s, Buffer.alloc(20), '[2]');
      await createConversation(tx, { userId: ben, model: 'm', source: 'api', title: 'ben' });
      expect(await deleteUser(tx, ana)).toBe(true);
    });
    expect(await db.selectFrom('store_usage').selectAll().where('user_id', '=', ana).execute()).toEqual([]);
    await expectTotalsMatchScan(db, ben);
  });

  it('are filled in once from what a store held before they were kept', async () => {
    // A store of its own, made at the step before the totals.
    await store.close();
    fs.rmSync(store.dataDir, { recursive: true, force: true });
    const where = { dataDir: fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-quota-')), databaseUrl: await testDatabaseUrl() };
    const before = await openStore(where, MIGRATIONS.slice(0, MIGRATIONS.indexOf(storeUsageMigration)));
    const ana = (await ensureUser(before.db, 'ana')).id;
    const chat = await createConversation(before.db, { userId: ana, model: 'm', source: 'web', title: 'Grüße' });
    const api = await createConversation(before.db, { userId: ana, model: 'm', source: 'api' });
    await addMessage(before.db, { conversationId: chat.id, message: { role: 'user', content: 'café' } });
    await addMessage(before.db, { conversationId: api.id, message: { role: 'user', content: 'hello' } });
    await batch(before.db, await scope(before.db, ana, 'conversation', chat.id), Buffer.alloc(50), '[1]');
    await sealedValue(before.db, await scope(before.db, ana, 'token', '3'), 4);
    await before.close();

    store = Object.assign(await openStore(where, MIGRATIONS), { dataDir: where.dataDir, options: where });
    await expectTotalsMatchScan(store.db, ana);
    const u = await storeUsage(store.db, config, ana);
    expect([u.web, u.api, u.personalData, u.tokenPersonalData].every((n) => n > 0)).toBe(true);
  });
});

describe('reserveStoreRoom', () => {
  it('counts the room of requests in flight until they end, so a burst cannot pass one check together', async () => {
    const ana = (await ensureUser(store.db, 'ana')).id;
    const ben = (await ensureUser(store.db, 'ben')).id;
    const half = 600 * 1024;
    const release = await reserveStoreRoom(store.db, config, ana, half);
    await expect(reserveStoreRoom(store.db, config, ana, half)).rejects.toThrow(StoreQuotaExceeded);
    await expect(reserveStoreRoom(store.db, config, ana, half)).rejects.toThrow(/requests still running will store up to 600 KiB more/);
    // Another user's room is their own.
    (await reserveStoreRoom(store.db, config, ben, half))();
    release();
    release();
    (await reserveStoreRoom(store.db, config, ana, half))();
  });

  it('lets one of a burst checked at the same moment through, not all', async () => {
    const ana = (await ensureUser(store.db, 'ana')).id;
    const burst = await Promise.allSettled(Array.from({ length: 5 }, () => reserveStoreRoom(store.db, config, ana, 600 * 1024)));
    expect(burst.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    // A refused request holds nothing: once the one let through ends, the room is free again.
    for (const r of burst) if (r.status === 'fulfilled') r.value();
    (await reserveStoreRoom(store.db, config, ana, 600 * 1024))();
  });
});
