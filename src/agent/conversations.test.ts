import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { storeUsage } from '../limits/store-quota.js';
import { openStoreFile, type Store } from '../store/store.js';
import { MIGRATIONS } from '../migrations.js';
import { ensureUser } from '../accounts/accounts.js';
import { addMessage, createConversation, DELETE_STEP_MESSAGES, deleteConversationInSteps, startTurn } from './conversations.js';

let dir: string;
let store: Store;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-conversations-'));
  store = openStoreFile(path.join(dir, 'sandgate.db'), MIGRATIONS);
});
afterEach(() => {
  store.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const count = (sql: string, ...args: unknown[]) => store.db.prepare(sql).pluck().get(...args) as number;

describe('deleteConversationInSteps', () => {
  it('deletes a conversation longer than one step, with its turns and messages, and frees its room in the quota', async () => {
    const db = store.db;
    const ann = ensureUser(db, 'ann');
    const c = createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'web', title: 'long' });
    const turn = startTurn(db, c.id, 'openai:gpt-test');
    const n = DELETE_STEP_MESSAGES * 2 + 17;
    db.transaction(() => {
      for (let i = 0; i < n; i++) addMessage(db, { conversationId: c.id, turnId: turn.id, message: { role: 'user', content: `m${i}` } });
    })();
    const kept = createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'web', title: 'kept' });
    addMessage(db, { conversationId: kept.id, message: { role: 'user', content: 'stays' } });
    expect(storeUsage(db, { storeQuotaMb: 1 }, ann.id).web).toBeGreaterThan(n * 10);

    expect(await deleteConversationInSteps(db, ann.id, c.id)).toBe(true);
    expect(count('SELECT count(*) FROM messages WHERE conversation_id = ?', c.id)).toBe(0);
    expect(count('SELECT count(*) FROM turns WHERE conversation_id = ?', c.id)).toBe(0);
    expect(count('SELECT count(*) FROM conversations WHERE id = ?', c.id)).toBe(0);
    expect(count('SELECT count(*) FROM messages WHERE conversation_id = ?', kept.id)).toBe(1);
    // Only what is left counts: the kept conversation's message and title.
    expect(storeUsage(db, { storeQuotaMb: 1 }, ann.id).web).toBeLessThan(200);
  });

  it('deletes nothing of another user’s conversation', async () => {
    const db = store.db;
    const ann = ensureUser(db, 'ann');
    const bob = ensureUser(db, 'bob');
    const c = createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'web' });
    addMessage(db, { conversationId: c.id, message: { role: 'user', content: 'mine' } });
    expect(await deleteConversationInSteps(db, bob.id, c.id)).toBe(false);
    expect(count('SELECT count(*) FROM messages WHERE conversation_id = ?', c.id)).toBe(1);
  });
});
