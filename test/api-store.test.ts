/**
 * What the /v1 API leaves in the store, with the official `openai` client against the
 * real gateway and a stand-in provider: a client that resends a growing history stores
 * each message once (the conversation is continued, not stored again); API conversations
 * are deleted after SANDGATE_API_CONVERSATION_DAYS by the gateway's own sweep; and a
 * user whose store quota is full is refused clearly on /v1 and in the web chat, losing
 * nothing, while another user keeps working.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conversationBytes, listConversations, messagesOf } from '../src/agent/conversations.js';
import { openStore, type Db } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';
import { ensureUser } from '../src/accounts/accounts.js';
import { startGateway, type Gateway } from './support/mcp.js';
import { startStandin, type Standin } from './support/model-standins.js';
import { webSession } from './support/web-session.js';

const MODEL = 'anthropic:claude-test';
const DAY_MS = 86_400_000;

let standin: Standin;

beforeAll(async () => {
  // The answer says how many messages the model was given, so a test sees the whole history reached it.
  standin = await startStandin('anthropic', (req) => ({ text: [`Read ${(req.body.messages as unknown[]).length} messages.`] }));
});

afterAll(async () => {
  await standin?.close();
});

const modelEnv = () => ({ SANDGATE_ANTHROPIC_API_KEY: 'sk-team', SANDGATE_ANTHROPIC_BASE_URL: standin.baseURL, SANDGATE_MODELS: MODEL });
const clientOf = (gw: Gateway, token: string) => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: token, maxRetries: 0 });
type Message = OpenAI.Chat.Completions.ChatCompletionMessageParam;

/** PII scopes of conversation `id` (0 or 1). */
const scopesOf = async (db: Db, id: string) =>
  Number((await db.selectFrom('pii_scopes').select((eb) => eb.fn.countAll<number>().as('n')).where('kind', '=', 'conversation').where('ref', '=', id).executeTakeFirstOrThrow()).n);

describe('a client that resends its history', () => {
  let gw: Gateway;
  beforeAll(async () => {
    gw = await startGateway({ pii: true, env: modelEnv() });
  });
  afterAll(async () => {
    await gw?.close();
  });

  it('stores each message once: ten requests with a growing history store about the new messages only', async () => {
    const db = gw.gateway.store.db;
    const client = clientOf(gw, await gw.tokenFor('hana', 'openwebui'));
    const hana = await ensureUser(db, 'hana');
    const messages: Message[] = [{ role: 'system', content: 'Answer briefly.' }];
    let newBytes = 0;
    for (let i = 1; i <= 10; i++) {
      const note = `Note ${i}: ${'the quarterly numbers look fine overall '.repeat(500)}`;
      messages.push({ role: 'user', content: note });
      const r = await client.chat.completions.create({ model: MODEL, messages });
      const answer = r.choices[0]!.message.content!;
      // The model was given the whole conversation: every earlier note and answer, and this note.
      expect(answer).toBe(`Read ${2 * i - 1} messages.`);
      messages.push({ role: 'assistant', content: answer });
      newBytes += Buffer.byteLength(note) + Buffer.byteLength(answer);
    }
    expect(await listConversations(db, hana.id, { source: 'api' })).toHaveLength(1);
    const stored = (await conversationBytes(db, hana.id)).api;
    // Each message once, with its JSON framing; storing each history again would be about 5.5 times as much.
    expect(stored).toBeGreaterThan(newBytes * 0.9);
    expect(stored).toBeLessThan(newBytes * 1.2);

    // A history the client changed (an earlier answer edited) is not that conversation: a new one starts from it.
    const edited = messages.map((m, i) => (i === 2 ? { role: 'assistant' as const, content: 'An answer I rewrote.' } : m));
    const r = await client.chat.completions.create({ model: MODEL, messages: [...edited, { role: 'user', content: 'And now?' }] });
    expect(r.choices[0]!.message.content).toBe('Read 21 messages.');
    expect(await listConversations(db, hana.id, { source: 'api' })).toHaveLength(2);
  });

  it('continues a streamed conversation too, and two requests with the same history do not share one', async () => {
    const db = gw.gateway.store.db;
    const client = clientOf(gw, await gw.tokenFor('ivo', 'librechat'));
    const ivo = await ensureUser(db, 'ivo');
    const first: Message[] = [{ role: 'user', content: 'Hello there.' }];
    let answer = '';
    for await (const chunk of await client.chat.completions.create({ model: MODEL, messages: first, stream: true })) answer += chunk.choices[0]?.delta.content ?? '';
    expect(answer).toBe('Read 1 messages.');
    const next: Message[] = [...first, { role: 'assistant', content: answer }, { role: 'user', content: 'Go on.' }];
    const [a, b] = await Promise.all([client.chat.completions.create({ model: MODEL, messages: next }), client.chat.completions.create({ model: MODEL, messages: next })]);
    // One continued the conversation, the other started its own from the history; both saw all three messages.
    expect([a.choices[0]!.message.content, b.choices[0]!.message.content]).toEqual(['Read 3 messages.', 'Read 3 messages.']);
    const conversations = await listConversations(db, ivo.id, { source: 'api' });
    expect(conversations).toHaveLength(2);
    expect((await Promise.all(conversations.map(async (c) => (await messagesOf(db, c.id)).length))).sort()).toEqual([4, 4]);
  });
});

describe('retention of API conversations', () => {
  it('the gateway deletes those idle past SANDGATE_API_CONVERSATION_DAYS, with their personal data; web chats and recent ones stay', async () => {
    const env = { ...modelEnv(), SANDGATE_API_CONVERSATION_DAYS: '30' };
    const first = await startGateway({ pii: true, env });
    const dataDir = first.dataDir;
    const token = await first.tokenFor('rita', 'app');
    const databaseUrl = first.harness.config.databaseUrl;
    const old: Message[] = [{ role: 'user', content: 'Write to rita@example.com about the old plan.' }];
    const recent: Message[] = [{ role: 'user', content: 'What about the new plan?' }];
    let oldAnswer: string;
    try {
      oldAnswer = (await clientOf(first, token).chat.completions.create({ model: MODEL, messages: old })).choices[0]!.message.content!;
      await clientOf(first, token).chat.completions.create({ model: MODEL, messages: recent });
      const rita = await ensureUser(first.gateway.store.db, 'rita');
      await first.gateway.agent.startConversation(rita, { source: 'web' });
    } finally {
      await first.close({ keepData: true });
    }

    // Time passes: the first API conversation and the web chat were last used 31 days ago, the other API one 29.
    const store = await openStore({ dataDir, databaseUrl }, MIGRATIONS);
    const rita = await ensureUser(store.db, 'rita');
    const api = await listConversations(store.db, rita.id, { source: 'api' });
    const firstMessages = await Promise.all(api.map(async (c) => ({ id: c.id, first: (await messagesOf(store.db, c.id))[0]! })));
    const oldId = firstMessages.find((c) => c.first.message.content.toString().includes('old plan'))!.id;
    const recentId = api.find((c) => c.id !== oldId)!.id;
    const webId = (await listConversations(store.db, rita.id, { source: 'web' }))[0]!.id;
    const setAge = (id: string, days: number) => store.db.updateTable('conversations').set({ updated_at: Date.now() - days * DAY_MS }).where('id', '=', id).execute();
    await setAge(oldId, 31);
    await setAge(recentId, 29);
    await setAge(webId, 31);
    expect(await scopesOf(store.db, oldId)).toBe(1);
    await store.close();

    const gw = await startGateway({ pii: true, env: { ...env, ...(databaseUrl ? { SANDGATE_DATABASE_URL: databaseUrl } : {}) }, dataDir });
    try {
      const db = gw.gateway.store.db;
      expect((await listConversations(db, rita.id, { source: 'api' })).map((c) => c.id)).toEqual([recentId]);
      expect((await listConversations(db, rita.id, { source: 'web' })).map((c) => c.id)).toEqual([webId]);
      expect(await messagesOf(db, oldId)).toEqual([]);
      expect(await scopesOf(db, oldId)).toBe(0);
      // The client still holds that history: it goes on, in a new conversation started from it.
      const r = await clientOf(gw, token).chat.completions.create({ model: MODEL, messages: [...old, { role: 'assistant', content: oldAnswer! }, { role: 'user', content: 'Send it.' }] });
      expect(r.choices[0]!.message.content).toBe('Read 3 messages.');
      expect(await listConversations(db, rita.id, { source: 'api' })).toHaveLength(2);
    } finally {
      await gw.close();
    }
  });
});

describe('the store quota', () => {
  let gw: Gateway;
  beforeAll(async () => {
    // A context large enough for the long histories below: this is about the store, not the model.
    gw = await startGateway({ env: { ...modelEnv(), SANDGATE_STORE_QUOTA_MB: '1', SANDGATE_AGENT_CONTEXT_TOKENS: '2000000' } });
  });
  afterAll(async () => {
    await gw?.close();
  });

  it('refuses a full user clearly on /v1 and in the web chat, stores nothing and loses nothing, while another user keeps working', async () => {
    const db = gw.gateway.store.db;
    const quinn = await ensureUser(db, 'quinn');
    const quinnApi = clientOf(gw, await gw.tokenFor('quinn', 'app'));
    // 900 kB of history: under the 1 MiB quota.
    const big: Message[] = [
      { role: 'user', content: `Here is the log: ${'a'.repeat(450_000)}` },
      { role: 'assistant', content: `It says: ${'b'.repeat(450_000)}` },
      { role: 'user', content: 'Summarise it.' },
    ];
    const bigAnswer = (await quinnApi.chat.completions.create({ model: MODEL, messages: big })).choices[0]!.message.content!;
    expect(bigAnswer).toBe('Read 3 messages.');
    const before = { bytes: await conversationBytes(db, quinn.id), conversations: (await listConversations(db, quinn.id)).length };

    // Another 200 kB would go past it.
    const more: Message[] = [
      { role: 'user', content: `Another log: ${'c'.repeat(200_000)}` },
      { role: 'assistant', content: 'Noted.' },
      { role: 'user', content: 'And this one?' },
    ];
    const refused = await quinnApi.chat.completions.create({ model: MODEL, messages: more }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.APIError);
    expect(refused).toMatchObject({ status: 403, type: 'insufficient_quota', code: 'store_quota_exceeded' });
    const message = (refused as Error).message;
    expect(message).toMatch(/of your 1\.0 MiB quota \(SANDGATE_STORE_QUOTA_MB=1\), and this would store 195 KiB more, so nothing was stored/);
    expect(message).toContain(`chats at ${gw.url}/chat, API conversations at ${gw.url}/tokens`);
    expect({ bytes: await conversationBytes(db, quinn.id), conversations: (await listConversations(db, quinn.id)).length }).toEqual(before);

    // What is stored stays usable: the conversation goes on with a short message.
    const next = await quinnApi.chat.completions.create({ model: MODEL, messages: [...big, { role: 'assistant', content: bigAnswer }, { role: 'user', content: 'Thanks.' }] });
    expect(next.choices[0]!.message.content).toBe('Read 5 messages.');

    // The web chat says the same where its errors show.
    const web = await webSession(gw, quinn);
    const created = await web.post('/chat/new');
    expect(created.status).toBe(303);
    const chat = created.headers.get('location')!;
    const sent = await web.post(`${chat}/send`, { text: 'd'.repeat(200_000) });
    expect(sent.status).toBe(403);
    expect(await sent.text()).toMatch(/^<div class="notice error" role="alert">Your stored conversations take .* \(SANDGATE_STORE_QUOTA_MB=1\).*Delete conversations you no longer need/);
    expect(await messagesOf(db, chat.slice('/c/'.length))).toEqual([]);

    // Another user is not affected.
    const rosa = await ensureUser(db, 'rosa');
    const rosaAnswer = await clientOf(gw, await gw.tokenFor('rosa', 'app')).chat.completions.create({ model: MODEL, messages: more });
    expect(rosaAnswer.choices[0]!.message.content).toBe('Read 3 messages.');
    expect(await listConversations(db, rosa.id, { source: 'api' })).toHaveLength(1);

    // The tokens page shows the usage and deletes the API conversations; then there is room again.
    const page = await (await web.get('/tokens', { htmx: false })).text();
    expect(page).toMatch(/The gateway keeps <strong>[\d.]+ KiB<\/strong> for you, of your quota of 1\.0 MiB/);
    const deleted = await web.post('/tokens/api-conversations/delete');
    expect(await deleted.text()).toContain('Deleted 1 API conversation.');
    expect(await listConversations(db, quinn.id, { source: 'api' })).toEqual([]);
    expect((await quinnApi.chat.completions.create({ model: MODEL, messages: more })).choices[0]!.message.content).toBe('Read 3 messages.');
  });
});
