import fs from 'node:fs';
import { simulateReadableStream } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ensureUser, type User } from '../accounts/accounts.js';
import { configFor } from '../config.js';
import { createLogger } from '../logger.js';
import { IDENTITY_BOUNDARY } from '../pii/boundary.js';
import type { Store } from '../store/store.js';
import { openTestStore } from '../../test/support/store.js';
import { createConversation, messagesOf, turnsOf, type Conversation } from './conversations.js';
import type { AgentEvent } from './events.js';
import { runTurn, type TurnOutcome } from './loop.js';
import { ModelCatalog } from './models.js';

let store: Store & { dataDir: string };
let user: User;
let conversation: Conversation;

beforeEach(async () => {
  store = await openTestStore();
  user = await ensureUser(store.db, 'ann');
  conversation = await createConversation(store.db, { userId: user.id, model: 'openai:gpt-test', source: 'web' });
});
afterEach(async () => {
  await store.close();
  fs.rmSync(store.dataDir, { recursive: true, force: true });
});

type StreamPart = Awaited<ReturnType<MockLanguageModelV3['doStream']>>['stream'] extends ReadableStream<infer P> ? P : never;

/** A model that answers `text`, after `before` has run (while the turn waits for it). */
function answering(text: string, before: () => Promise<void> = async () => {}) {
  const usage = { inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 2, text: 2, reasoning: 0 } };
  const chunks: StreamPart[] = [
    { type: 'stream-start', warnings: [] },
    { type: 'text-start', id: 't' },
    { type: 'text-delta', id: 't', delta: text },
    { type: 'text-end', id: 't' },
    { type: 'finish', finishReason: { unified: 'stop', raw: 'stop' }, usage },
  ];
  return new MockLanguageModelV3({
    doStream: async () => {
      await before();
      return { stream: simulateReadableStream({ chunks }) };
    },
  });
}

async function turn(model: MockLanguageModelV3, text: string): Promise<{ outcome: TurnOutcome; events: AgentEvent[] }> {
  const config = configFor({});
  const events: AgentEvent[] = [];
  const outcome = await runTurn(
    { config, db: store.db, logger: createLogger('silent'), boundary: IDENTITY_BOUNDARY, catalog: new ModelCatalog(config) },
    {
      conversation,
      caller: { user, via: { kind: 'agent', conversationId: conversation.id } },
      choice: { id: 'openai:gpt-test', provider: 'openai', model: 'gpt-test' },
      model,
      keyOwner: 'team',
      connection: () => Promise.reject(new Error('no tools in this test')),
      instructions: '',
      text,
      sink: (e) => events.push(e),
      signal: new AbortController().signal,
    },
    { set: {}, schemas: new Map(), chars: 0 },
  );
  return { outcome, events };
}

describe('a turn and the store', () => {
  it('stores the message and the answer in order, and the turn as complete', async () => {
    const { outcome } = await turn(answering('hello back'), 'hello');
    expect(outcome.reason).toBe('complete');
    const stored = await messagesOf(store.db, conversation.id);
    expect(stored.map((m) => [m.message.role, m.turnId])).toEqual([
      ['user', outcome.turnId],
      ['assistant', outcome.turnId],
    ]);
    expect(stored[1]!.usage).toEqual({ inputTokens: 10, outputTokens: 2, cachedInputTokens: 0 });
    expect((await turnsOf(store.db, conversation.id)).map((t) => [t.status, t.rounds])).toEqual([['complete', 1]]);
  });

  it('a write that fails ends the turn as failed, with a note the user reads, instead of leaving it running', async () => {
    // The store loses the messages table while the model answers: the answer cannot be kept.
    const model = answering('lost', async () => void (await sql`DROP TABLE messages`.execute(store.db)));
    const { outcome, events } = await turn(model, 'hello');
    expect(outcome.reason).toBe('failed');
    expect(outcome.message).toMatch(/could not save this conversation/);
    expect(events.filter((e) => e.type === 'error' || e.type === 'done')).toEqual([
      { type: 'error', code: 'store_unavailable', message: outcome.message },
      { type: 'done', reason: 'failed', message: outcome.message },
    ]);
    expect((await turnsOf(store.db, conversation.id)).map((t) => [t.status, t.note])).toEqual([['failed', outcome.message]]);
  });
});
