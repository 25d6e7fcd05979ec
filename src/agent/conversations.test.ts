import { describe, expect, it } from 'vitest';
import { storeUsage } from '../limits/store-quota.js';
import { ensureUser } from '../accounts/accounts.js';
import { storePerTest, type TestStore } from '../../test/support/store.js';
import {
  addMessage,
  conversationBytes,
  createConversation,
  DELETE_STEP_MESSAGES,
  deleteApiConversations,
  deleteConversationInSteps,
  endTurn,
  listConversations,
  markInterruptedTurns,
  messagesOf,
  setClientDigest,
  startTurn,
  takeApiConversation,
  turnsOf,
  updateConversation,
  usageByUserAndModel,
} from './conversations.js';

let store: TestStore;
storePerTest((s) => (store = s));

const messagesIn = async (conversationId: string) =>
  Number((await store.db.selectFrom('messages').select((eb) => eb.fn.countAll<number>().as('n')).where('conversation_id', '=', conversationId).executeTakeFirstOrThrow()).n);
const turnsIn = async (conversationId: string) =>
  Number((await store.db.selectFrom('turns').select((eb) => eb.fn.countAll<number>().as('n')).where('conversation_id', '=', conversationId).executeTakeFirstOrThrow()).n);
const conversationsWithId = async (id: string) =>
  Number((await store.db.selectFrom('conversations').select((eb) => eb.fn.countAll<number>().as('n')).where('id', '=', id).executeTakeFirstOrThrow()).n);

describe('deleteConversationInSteps', () => {
  it('deletes a conversation longer than one step, with its turns and messages, and frees its room in the quota', async () => {
    const db = store.db;
    const ann = await ensureUser(db, 'ann');
    const c = await createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'web', title: 'long' });
    const turn = await startTurn(db, c.id, 'openai:gpt-test');
    const n = DELETE_STEP_MESSAGES * 2 + 17;
    await db.transaction().execute(async (tx) => {
      for (let i = 0; i < n; i++) await addMessage(tx, { conversationId: c.id, turnId: turn.id, message: { role: 'user', content: `m${i}` } });
    });
    const kept = await createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'web', title: 'kept' });
    await addMessage(db, { conversationId: kept.id, message: { role: 'user', content: 'stays' } });
    expect((await storeUsage(db, { storeQuotaMb: 1 }, ann.id)).web).toBeGreaterThan(n * 10);

    expect(await deleteConversationInSteps(db, ann.id, c.id)).toBe(true);
    expect(await messagesIn(c.id)).toBe(0);
    expect(await turnsIn(c.id)).toBe(0);
    expect(await conversationsWithId(c.id)).toBe(0);
    expect(await messagesIn(kept.id)).toBe(1);
    // Only what is left counts: the kept conversation's message and title.
    expect((await storeUsage(db, { storeQuotaMb: 1 }, ann.id)).web).toBeLessThan(200);
  });

  it('deletes nothing of another user’s conversation', async () => {
    const db = store.db;
    const ann = await ensureUser(db, 'ann');
    const bob = await ensureUser(db, 'bob');
    const c = await createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'web' });
    await addMessage(db, { conversationId: c.id, message: { role: 'user', content: 'mine' } });
    expect(await deleteConversationInSteps(db, bob.id, c.id)).toBe(false);
    expect(await messagesIn(c.id)).toBe(1);
  });
});

describe('turns and messages', () => {
  it('keeps messages and turns in the order they were written, and marks turns left running as interrupted', async () => {
    const db = store.db;
    const ann = await ensureUser(db, 'ann');
    const c = await createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'web' });
    const first = await startTurn(db, c.id, 'openai:gpt-test');
    const ids: number[] = [];
    for (let i = 0; i < 30; i++) ids.push(await addMessage(db, { conversationId: c.id, turnId: first.id, message: { role: i % 2 ? 'assistant' : 'user', content: `m${i}` } }));
    await endTurn(db, first.id, 'complete', 3);
    const second = await startTurn(db, c.id, 'openai:gpt-test');
    const stored = await messagesOf(db, c.id);
    expect(stored.map((m) => m.id)).toEqual(ids);
    expect(stored.map((m) => m.message.content)).toEqual(Array.from({ length: 30 }, (_, i) => `m${i}`));

    expect(await markInterruptedTurns(db, 'restarted')).toBe(1);
    const turns = await turnsOf(db, c.id);
    expect(turns.map((t) => [t.id, t.status, t.rounds, t.note])).toEqual([
      [first.id, 'complete', 3, null],
      [second.id, 'interrupted', 0, 'restarted'],
    ]);
    expect(await markInterruptedTurns(db, 'restarted')).toBe(0);
  });

  it('with replicas, marks only the turns of replicas no longer alive (and those of no replica)', async () => {
    const db = store.db;
    const ann = await ensureUser(db, 'ann');
    const c = await createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'web' });
    const onLive = await startTurn(db, c.id, 'openai:gpt-test', 'live-replica');
    const onDead = await startTurn(db, c.id, 'openai:gpt-test', 'dead-replica');
    const onNone = await startTurn(db, c.id, 'openai:gpt-test');
    expect(await markInterruptedTurns(db, 'its gateway stopped', ['live-replica', 'starting-replica'])).toBe(2);
    const status = new Map((await turnsOf(db, c.id)).map((t) => [t.id, t.status]));
    expect([status.get(onLive.id), status.get(onDead.id), status.get(onNone.id)]).toEqual(['running', 'interrupted', 'interrupted']);
  });

  it('stores control characters a user or a provider sent in no title and in no note (Postgres refuses a NUL in text)', async () => {
    const db = store.db;
    const ann = await ensureUser(db, 'ann');
    // The first message names the conversation (as a turn does), starting with a NUL.
    const c = await createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'web' });
    await updateConversation(db, c.id, { title: '\u0000Hello\u0007there,\u0000\u001bworld\u007f\u0085!\n' });
    const named = await createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'api', title: '\u0000\u0000report' });
    expect(named.title).toBe('report');
    const titles = (await listConversations(db, ann.id)).map((x) => [x.id, x.title]);
    expect(titles).toEqual(expect.arrayContaining([[c.id, 'Hello there, world !'], [named.id, 'report']]));
    // A turn's note may quote a provider's error: its lines are kept, its other control characters are not.
    const turn = await startTurn(db, c.id, 'openai:gpt-test');
    await endTurn(db, turn.id, 'failed', 0, 'The provider said:\n\u0000bad\u0000 request\tagain');
    const running = await startTurn(db, named.id, 'openai:gpt-test');
    expect(await markInterruptedTurns(db, 'stopped\u0000')).toBe(1);
    expect((await turnsOf(db, c.id)).map((t) => t.note)).toEqual(['The provider said:\nbad request\tagain']);
    expect((await turnsOf(db, named.id)).map((t) => [t.id, t.note])).toEqual([[running.id, 'stopped']]);
  });

  it('sums usage by user and model as numbers, own-key rounds apart', async () => {
    const db = store.db;
    const ann = await ensureUser(db, 'ann');
    const bob = await ensureUser(db, 'bob');
    const a = await createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'web' });
    const b = await createConversation(db, { userId: bob.id, model: 'openai:gpt-test', source: 'api' });
    const answer = { role: 'assistant' as const, content: 'ok' };
    await addMessage(db, { conversationId: a.id, message: { role: 'user', content: 'hi' } });
    await addMessage(db, { conversationId: a.id, message: answer, model: 'openai:gpt-test', keyOwner: 'user', usage: { inputTokens: 10, outputTokens: 2, cachedInputTokens: 1 } });
    await addMessage(db, { conversationId: a.id, message: answer, model: 'openai:gpt-test', keyOwner: 'team', usage: { inputTokens: 5, outputTokens: 3, cachedInputTokens: 0 } });
    await addMessage(db, { conversationId: b.id, message: answer, model: 'anthropic:claude-test', keyOwner: 'team', usage: { inputTokens: 7, outputTokens: 1, cachedInputTokens: 0 } });
    expect(await usageByUserAndModel(db)).toEqual([
      { userId: ann.id, user: 'ann', model: 'openai:gpt-test', rounds: 2, ownKeyRounds: 1, inputTokens: 15, outputTokens: 5, cachedInputTokens: 1 },
      { userId: bob.id, user: 'bob', model: 'anthropic:claude-test', rounds: 1, ownKeyRounds: 0, inputTokens: 7, outputTokens: 1, cachedInputTokens: 0 },
    ]);
    expect(await usageByUserAndModel(db, Date.now() + 60_000)).toEqual([]);

    const bytes = await conversationBytes(db, ann.id);
    expect(bytes.api).toBe(0);
    expect(bytes.web).toBe((await messagesOf(db, a.id)).reduce((n, m) => n + Buffer.byteLength(JSON.stringify(m.message)), 0));
    expect(await conversationBytes(db, 9999)).toEqual({ web: 0, api: 0 });
  });
});

describe('API conversations', () => {
  it('one conversation is taken by one request only, even when several ask for it at once', async () => {
    const db = store.db;
    const ann = await ensureUser(db, 'ann');
    const c = await createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'api' });
    await setClientDigest(db, c.id, 'digest-1');
    const taken = await Promise.all(Array.from({ length: 8 }, () => takeApiConversation(db, ann.id, 'digest-1')));
    expect(taken.filter(Boolean).map((t) => t!.id)).toEqual([c.id]);
    expect(await takeApiConversation(db, ann.id, 'digest-1')).toBeUndefined();
    // Another user's digest never matches.
    await setClientDigest(db, c.id, 'digest-2');
    const bob = await ensureUser(db, 'bob');
    expect(await takeApiConversation(db, bob.id, 'digest-2')).toBeUndefined();
    expect((await takeApiConversation(db, ann.id, 'digest-2'))?.id).toBe(c.id);
  });

  it('a request that finds the conversation while another is taking it waits, then does not get it', async () => {
    const db = store.db;
    const ann = await ensureUser(db, 'ann');
    const c = await createConversation(db, { userId: ann.id, model: 'openai:gpt-test', source: 'api' });
    await setClientDigest(db, c.id, 'digest-1');
    let second: Promise<unknown> | undefined;
    await db.transaction().execute(async (tx) => {
      expect((await takeApiConversation(tx, ann.id, 'digest-1'))?.id).toBe(c.id);
      // Started while the first has taken the row but not committed: on Postgres it reads the
      // row as it was, waits for the first's lock, then must see the digest gone.
      second = takeApiConversation(db, ann.id, 'digest-1');
      await new Promise((resolve) => setTimeout(resolve, 300));
    });
    expect(await second).toBeUndefined();
  });

  it('deletes idle ones, never one with a turn running, nor a web chat', async () => {
    const db = store.db;
    const ann = await ensureUser(db, 'ann');
    const bob = await ensureUser(db, 'bob');
    const idle = await createConversation(db, { userId: ann.id, model: 'm:x', source: 'api' });
    const running = await createConversation(db, { userId: ann.id, model: 'm:x', source: 'api' });
    const web = await createConversation(db, { userId: ann.id, model: 'm:x', source: 'web' });
    const bobs = await createConversation(db, { userId: bob.id, model: 'm:x', source: 'api' });
    await startTurn(db, running.id, 'm:x');
    const later = Date.now() + 60_000;
    expect(await deleteApiConversations(db, { before: later, userId: ann.id })).toEqual([{ id: idle.id, userId: ann.id }]);
    expect((await listConversations(db, ann.id)).map((c) => c.id).sort()).toEqual([running.id, web.id].sort());
    expect(await deleteApiConversations(db, { before: later })).toEqual([{ id: bobs.id, userId: bob.id }]);
    expect(await deleteApiConversations(db, { before: 0 })).toEqual([]);
  });
});
