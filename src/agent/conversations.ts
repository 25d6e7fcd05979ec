/**
 * Conversations, turns and messages in the store (schema.ts). Messages are kept as the
 * model saw them (ModelMessage JSON, tokens in place of personal data); what a user sees
 * is put back together from them through the PII boundary. Every statement on these
 * tables is here.
 */
import crypto from 'node:crypto';
import type { ModelMessage } from 'ai';
import { GatewayError } from '../errors.js';
import type { FileChange } from './events.js';
import { sql, type Selectable } from 'kysely';
import type { Db } from '../store/store.js';
import type { ConversationsTable, TurnsTable } from './schema.js';

export type ConversationSource = 'web' | 'api';
export type TurnStatus = 'running' | 'complete' | 'stopped' | 'cancelled' | 'interrupted' | 'failed';

export interface Conversation {
  id: string;
  userId: number;
  title: string;
  model: string;
  source: ConversationSource;
  createdAt: number;
  updatedAt: number;
}

export interface Turn {
  id: number;
  conversationId: string;
  model: string;
  status: TurnStatus;
  note: string | null;
  rounds: number;
  startedAt: number;
  endedAt: number | null;
}

export interface StoredMessage {
  id: number;
  turnId: number | null;
  message: ModelMessage;
  /** Tool messages: the files each call created or changed, by tool call id. */
  files?: Record<string, FileChange[]>;
  /** Assistant messages: their text rendered for the page once it was first shown (JSON kept by src/web/chat/transcript.ts). */
  html?: string;
  model: string | null;
  usage: Usage;
  createdAt: number;
}

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
}

export const NO_USAGE: Usage = { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 };

/** Longest title kept (model side). */
const MAX_TITLE_CHARS = 80;

export class ConversationNotFound extends GatewayError {
  override name = 'ConversationNotFound';
  constructor() {
    super('no such conversation', { reason: 'not_found', status: 404 });
  }
}

type ConversationRow = Pick<Selectable<ConversationsTable>, 'id' | 'user_id' | 'title' | 'model' | 'source' | 'created_at' | 'updated_at'>;

const toConversation = (r: ConversationRow): Conversation => ({
  id: r.id,
  userId: r.user_id,
  title: r.title,
  model: r.model,
  source: r.source,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

type TurnRow = Selectable<TurnsTable>;

const toTurn = (r: TurnRow): Turn => ({
  id: r.id,
  conversationId: r.conversation_id,
  model: r.model,
  status: r.status,
  note: r.note,
  rounds: r.rounds,
  startedAt: r.started_at,
  endedAt: r.ended_at,
});

/**
 * Control characters (C0, DEL, C1). None belongs in a title; and text goes to its column as
 * it is (not JSON, which would escape them), where Postgres refuses a NUL in any text.
 */
const CONTROLS = /\p{Cc}/gu;
/** The same, but for line breaks and tabs, which a note may keep. */
const CONTROLS_BUT_LAYOUT = /[^\P{Cc}\t\n\r]/gu;

/** A title from the first words of a message (already on the model side), on one line without control characters. */
export function titleFrom(text: string): string {
  const oneLine = text.replace(CONTROLS, ' ').replace(/\s+/g, ' ').trim();
  return oneLine.length > MAX_TITLE_CHARS ? `${oneLine.slice(0, MAX_TITLE_CHARS - 1)}…` : oneLine;
}

/** A turn's note as stored: it may quote a provider's error text, control characters and all. */
const noteFrom = (text: string): string => text.replace(CONTROLS_BUT_LAYOUT, '');

export async function createConversation(db: Db, o: { userId: number; model: string; source: ConversationSource; title?: string }): Promise<Conversation> {
  const id = crypto.randomBytes(12).toString('base64url');
  const now = Date.now();
  const title = o.title === undefined ? '' : titleFrom(o.title);
  await db
    .insertInto('conversations')
    .values({ id, user_id: o.userId, title, model: o.model, source: o.source, created_at: now, updated_at: now })
    .execute();
  return { id, userId: o.userId, title, model: o.model, source: o.source, createdAt: now, updatedAt: now };
}

/** The columns a Conversation is made of. */
const CONVERSATION_COLUMNS = ['id', 'user_id', 'title', 'model', 'source', 'created_at', 'updated_at'] as const;

/** The user's conversation `id`; throws ConversationNotFound for anyone else's (the same answer as for none). */
export async function getConversation(db: Db, userId: number, id: string): Promise<Conversation> {
  const r = await db.selectFrom('conversations').select(CONVERSATION_COLUMNS).where('id', '=', id).where('user_id', '=', userId).executeTakeFirst();
  if (!r) throw new ConversationNotFound();
  return toConversation(r);
}

export async function listConversations(db: Db, userId: number, opts: { source?: ConversationSource; limit?: number } = {}): Promise<Conversation[]> {
  let q = db.selectFrom('conversations').select(CONVERSATION_COLUMNS).where('user_id', '=', userId);
  if (opts.source) q = q.where('source', '=', opts.source);
  // id breaks ties: two conversations touched in the same millisecond keep one order.
  const rows = await q.orderBy('updated_at', 'desc').orderBy('id').limit(opts.limit ?? 200).execute();
  return rows.map(toConversation);
}

export async function updateConversation(db: Db, id: string, fields: { title?: string; model?: string }): Promise<void> {
  const set: { title?: string; model?: string } = {};
  if (fields.title !== undefined) set.title = titleFrom(fields.title);
  if (fields.model !== undefined) set.model = fields.model;
  if (!Object.keys(set).length) return;
  await db.updateTable('conversations').set(set).where('id', '=', id).execute();
}

export async function deleteConversation(db: Db, userId: number, id: string): Promise<boolean> {
  const r = await db.deleteFrom('conversations').where('id', '=', id).where('user_id', '=', userId).executeTakeFirst();
  return Number(r.numDeletedRows) > 0;
}

/** Messages deleted per statement by `deleteConversationInSteps`: a few milliseconds of work each. */
export const DELETE_STEP_MESSAGES = 2000;

/**
 * Deletes a conversation as `deleteConversation` does, but its messages first, in steps
 * of DELETE_STEP_MESSAGES with the event loop free between them: one statement over a
 * conversation of 50,000 messages holds the loop (and every other member) ≈130 ms.
 */
export async function deleteConversationInSteps(db: Db, userId: number, id: string): Promise<boolean> {
  const own = await db.selectFrom('conversations').select('id').where('id', '=', id).where('user_id', '=', userId).executeTakeFirst();
  if (!own) return false;
  for (;;) {
    // No DELETE … LIMIT on Postgres: the step's ids are chosen by a subquery.
    const r = await db
      .deleteFrom('messages')
      .where('id', 'in', (eb) => eb.selectFrom('messages').select('id').where('conversation_id', '=', id).orderBy('id').limit(DELETE_STEP_MESSAGES))
      .executeTakeFirst();
    if (Number(r.numDeletedRows) < DELETE_STEP_MESSAGES) break;
    await new Promise((resolve) => setImmediate(resolve));
  }
  return deleteConversation(db, userId, id);
}

/** A turn begins, run by this gateway (`replicaId`: its id among the replicas sharing the store). */
export async function startTurn(db: Db, conversationId: string, model: string, replicaId: string | null = null): Promise<Turn> {
  const now = Date.now();
  // The conversation is touched first: a sweep of idle conversations (deleteApiConversations)
  // that reads it from then on sees it in use, before the turn exists.
  await db.updateTable('conversations').set({ updated_at: now }).where('id', '=', conversationId).execute();
  const { id } = await db.insertInto('turns').values({ conversation_id: conversationId, model, status: 'running', started_at: now, replica_id: replicaId }).returning('id').executeTakeFirstOrThrow();
  return { id, conversationId, model, status: 'running', note: null, rounds: 0, startedAt: now, endedAt: null };
}

export async function endTurn(db: Db, turnId: number, status: Exclude<TurnStatus, 'running'>, rounds: number, note?: string): Promise<void> {
  await db
    .updateTable('turns')
    .set({ status, note: note === undefined ? null : noteFrom(note), rounds, ended_at: Date.now() })
    .where('id', '=', turnId)
    .execute();
}

/** Whether a turn of the conversation is running on some gateway (a Stop is worth passing on). */
export async function hasRunningTurn(db: Db, conversationId: string): Promise<boolean> {
  return !!(await db.selectFrom('turns').select('id').where('conversation_id', '=', conversationId).where('status', '=', 'running').executeTakeFirst());
}

export async function turnsOf(db: Db, conversationId: string): Promise<Turn[]> {
  const rows = await db.selectFrom('turns').selectAll().where('conversation_id', '=', conversationId).orderBy('id').execute();
  return rows.map(toTurn);
}

/**
 * Turns left running by a gateway that stopped: marked interrupted, with a note the user
 * reads. With `liveReplicas` (replicas share the store), only those no live replica runs:
 * another replica's turns go on. Returns how many.
 */
export async function markInterruptedTurns(db: Db, note: string, liveReplicas?: readonly string[]): Promise<number> {
  let q = db.updateTable('turns').set({ status: 'interrupted', note: noteFrom(note), ended_at: Date.now() }).where('status', '=', 'running');
  if (liveReplicas?.length) q = q.where((eb) => eb.or([eb('replica_id', 'is', null), eb('replica_id', 'not in', [...liveReplicas])]));
  const r = await q.executeTakeFirst();
  return Number(r.numUpdatedRows);
}

export async function addMessage(
  db: Db,
  o: { conversationId: string; turnId?: number; message: ModelMessage; model?: string; keyOwner?: 'user' | 'team'; usage?: Usage; files?: Record<string, FileChange[]> },
): Promise<number> {
  const u = o.usage ?? NO_USAGE;
  const r = await db
    .insertInto('messages')
    .values({
      conversation_id: o.conversationId,
      turn_id: o.turnId ?? null,
      role: o.message.role,
      content: JSON.stringify(o.message),
      model: o.model ?? null,
      key_owner: o.keyOwner ?? null,
      input_tokens: u.inputTokens,
      output_tokens: u.outputTokens,
      cached_input_tokens: u.cachedInputTokens,
      created_at: Date.now(),
      files: o.files ? JSON.stringify(o.files) : null,
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  return r.id;
}

export async function messagesOf(db: Db, conversationId: string): Promise<StoredMessage[]> {
  const rows = await db
    .selectFrom('messages')
    .select(['id', 'turn_id', 'content', 'model', 'input_tokens', 'output_tokens', 'cached_input_tokens', 'created_at', 'files', 'html'])
    .where('conversation_id', '=', conversationId)
    .orderBy('id')
    .execute();
  return rows.map((r) => ({
    id: r.id,
    turnId: r.turn_id,
    message: JSON.parse(r.content) as ModelMessage,
    ...(r.files ? { files: JSON.parse(r.files) as Record<string, FileChange[]> } : {}),
    ...(r.html ? { html: r.html } : {}),
    model: r.model,
    usage: { inputTokens: r.input_tokens, outputTokens: r.output_tokens, cachedInputTokens: r.cached_input_tokens },
    createdAt: r.created_at,
  }));
}

/** Keeps a message's rendered HTML (model side: tokens, never values), so it is rendered once. */
export async function setMessageHtml(db: Db, messageId: number, html: string): Promise<void> {
  await db.updateTable('messages').set({ html }).where('id', '=', messageId).execute();
}

export interface UsageRow extends Usage {
  userId: number;
  user: string;
  model: string;
  /** Rounds answered (assistant messages). */
  rounds: number;
  /** Of which on the user's own key. */
  ownKeyRounds: number;
}

/** Tokens by user and model (for the admin page), since `since` (epoch ms) when given. */
export async function usageByUserAndModel(db: Db, since = 0): Promise<UsageRow[]> {
  const rows = await db
    .selectFrom('messages as m')
    .innerJoin('conversations as c', 'c.id', 'm.conversation_id')
    .innerJoin('users as u', 'u.id', 'c.user_id')
    .where('m.role', '=', 'assistant')
    .where('m.model', 'is not', null)
    .where('m.created_at', '>=', since)
    .groupBy(['c.user_id', 'u.name', 'm.model'])
    .orderBy('u.name')
    .orderBy('m.model')
    .select((eb) => [
      'c.user_id as userId',
      'u.name as user',
      'm.model as model',
      eb.fn.countAll<number>().as('rounds'),
      sql<number>`COALESCE(SUM(CASE WHEN ${eb.ref('m.key_owner')} = 'user' THEN 1 ELSE 0 END), 0)`.as('ownKeyRounds'),
      sql<number>`COALESCE(SUM(${eb.ref('m.input_tokens')}), 0)`.as('inputTokens'),
      sql<number>`COALESCE(SUM(${eb.ref('m.output_tokens')}), 0)`.as('outputTokens'),
      sql<number>`COALESCE(SUM(${eb.ref('m.cached_input_tokens')}), 0)`.as('cachedInputTokens'),
    ])
    .execute();
  // Numbers on both databases (Postgres sends COUNT and SUM as int8/numeric text; the store parses them, this makes sure).
  return rows.map((r) => ({
    userId: Number(r.userId),
    user: r.user,
    model: r.model!,
    rounds: Number(r.rounds),
    ownKeyRounds: Number(r.ownKeyRounds),
    inputTokens: Number(r.inputTokens),
    outputTokens: Number(r.outputTokens),
    cachedInputTokens: Number(r.cachedInputTokens),
  }));
}

/**
 * The /v1 conversation of `userId` whose client was last answered with the history of
 * digest `digest` (api-history.ts), taken: its digest is cleared, so a second request
 * with the same history, or one while this one runs, starts a conversation of its own.
 * One statement; the digest is checked again on the row it updates, so of two requests
 * racing for the same conversation on Postgres (where the second waits for the first's
 * row lock, then re-reads the row) only the first gets it.
 */
export async function takeApiConversation(db: Db, userId: number, digest: string): Promise<Conversation | undefined> {
  const r = await db
    .updateTable('conversations')
    .set({ client_digest: null })
    .where('id', '=', (eb) =>
      eb
        .selectFrom('conversations')
        .select('id')
        .where('user_id', '=', userId)
        .where('source', '=', 'api')
        .where('client_digest', '=', digest)
        .orderBy('updated_at', 'desc')
        .orderBy('id')
        .limit(1),
    )
    .where('client_digest', '=', digest)
    .returning(CONVERSATION_COLUMNS)
    .executeTakeFirst();
  return r && toConversation(r);
}

/** Records the digest of the history a /v1 conversation's client was just answered with. */
export async function setClientDigest(db: Db, conversationId: string, digest: string): Promise<void> {
  await db.updateTable('conversations').set({ client_digest: digest }).where('id', '=', conversationId).execute();
}

/**
 * Deletes up to `limit` /v1 conversations, of one user or of all, whose last message is
 * older than `before` (epoch ms), never one with a turn running.
 * Returns what was deleted, so that their PII scopes can go too.
 */
export async function deleteApiConversations(db: Db, o: { before: number; userId?: number; limit?: number }): Promise<{ id: string; userId: number }[]> {
  const rows = await db
    .deleteFrom('conversations')
    .where('id', 'in', (eb) => {
      let q = eb
        .selectFrom('conversations as c')
        .select('c.id')
        .where('c.source', '=', 'api')
        .where('c.updated_at', '<', o.before)
        .where((w) => w.not(w.exists(w.selectFrom('turns as t').select('t.id').whereRef('t.conversation_id', '=', 'c.id').where('t.status', '=', 'running'))));
      if (o.userId !== undefined) q = q.where('c.user_id', '=', o.userId);
      return q.orderBy('c.updated_at').orderBy('c.id').limit(o.limit ?? 500);
    })
    // Checked again on the row deleted: on Postgres a turn that started since the
    // subquery read the table has made the conversation recent (startTurn), and it stays.
    .where('source', '=', 'api')
    .where('updated_at', '<', o.before)
    .returning(['id', 'user_id'])
    .execute();
  return rows.map((r) => ({ id: r.id, userId: r.user_id }));
}

/**
 * Bytes a user's conversations take in the store: their messages (with the files each lists and their rendered HTML) and titles.
 * A scan of every message the user has: the store quota reads the running totals the store keeps instead (src/limits/schema.ts).
 */
export async function conversationBytes(db: Db, userId: number): Promise<{ web: number; api: number }> {
  const rows = await db
    .selectFrom('conversations as c')
    .where('c.user_id', '=', userId)
    .groupBy('c.source')
    .select((eb) => [
      'c.source as source',
      sql<number>`COALESCE(SUM(octet_length(${eb.ref('c.title')}) + (${eb
        .selectFrom('messages as m')
        .whereRef('m.conversation_id', '=', 'c.id')
        .select(sql<number>`COALESCE(SUM(octet_length(m.content) + COALESCE(octet_length(m.files), 0) + COALESCE(octet_length(m.html), 0)), 0)`.as('bytes'))})), 0)`.as('bytes'),
    ])
    .execute();
  const bytes = (source: ConversationSource) => Number(rows.find((r) => r.source === source)?.bytes ?? 0);
  return { web: bytes('web'), api: bytes('api') };
}
