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
import { statement, type Db } from '../store/store.js';

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

interface ConversationRow {
  id: string;
  user_id: number;
  title: string;
  model: string;
  source: ConversationSource;
  created_at: number;
  updated_at: number;
}

const toConversation = (r: ConversationRow): Conversation => ({
  id: r.id,
  userId: r.user_id,
  title: r.title,
  model: r.model,
  source: r.source,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

interface TurnRow {
  id: number;
  conversation_id: string;
  model: string;
  status: TurnStatus;
  note: string | null;
  rounds: number;
  started_at: number;
  ended_at: number | null;
}

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

/** A title from the first words of a message (already on the model side). */
export function titleFrom(text: string): string {
  const oneLine = text.replace(/\s+/g, ' ').trim();
  return oneLine.length > MAX_TITLE_CHARS ? `${oneLine.slice(0, MAX_TITLE_CHARS - 1)}…` : oneLine;
}

export function createConversation(db: Db, o: { userId: number; model: string; source: ConversationSource; title?: string }): Conversation {
  const id = crypto.randomBytes(12).toString('base64url');
  const now = Date.now();
  statement(db, 'INSERT INTO conversations (id, user_id, title, model, source, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)').run(
    id,
    o.userId,
    o.title ?? '',
    o.model,
    o.source,
    now,
    now,
  );
  return { id, userId: o.userId, title: o.title ?? '', model: o.model, source: o.source, createdAt: now, updatedAt: now };
}

/** The user's conversation `id`; throws ConversationNotFound for anyone else's (the same answer as for none). */
export function getConversation(db: Db, userId: number, id: string): Conversation {
  const r = statement(db, 'SELECT * FROM conversations WHERE id = ? AND user_id = ?').get(id, userId) as ConversationRow | undefined;
  if (!r) throw new ConversationNotFound();
  return toConversation(r);
}

export function listConversations(db: Db, userId: number, opts: { source?: ConversationSource; limit?: number } = {}): Conversation[] {
  const rows = opts.source
    ? statement(db, 'SELECT * FROM conversations WHERE user_id = ? AND source = ? ORDER BY updated_at DESC LIMIT ?').all(userId, opts.source, opts.limit ?? 200)
    : statement(db, 'SELECT * FROM conversations WHERE user_id = ? ORDER BY updated_at DESC LIMIT ?').all(userId, opts.limit ?? 200);
  return (rows as ConversationRow[]).map(toConversation);
}

export function updateConversation(db: Db, id: string, fields: { title?: string; model?: string }): void {
  if (fields.title !== undefined) statement(db, 'UPDATE conversations SET title = ? WHERE id = ?').run(titleFrom(fields.title), id);
  if (fields.model !== undefined) statement(db, 'UPDATE conversations SET model = ? WHERE id = ?').run(fields.model, id);
}

export function deleteConversation(db: Db, userId: number, id: string): boolean {
  return statement(db, 'DELETE FROM conversations WHERE id = ? AND user_id = ?').run(id, userId).changes > 0;
}

/** Messages deleted per statement by `deleteConversationInSteps`: a few milliseconds of work each. */
export const DELETE_STEP_MESSAGES = 2000;

/**
 * Deletes a conversation as `deleteConversation` does, but its messages first, in steps
 * of DELETE_STEP_MESSAGES with the event loop free between them: one statement over a
 * conversation of 50,000 messages holds the loop (and every other member) ≈130 ms.
 */
export async function deleteConversationInSteps(db: Db, userId: number, id: string): Promise<boolean> {
  if (!statement(db, 'SELECT 1 FROM conversations WHERE id = ? AND user_id = ?').get(id, userId)) return false;
  const step = statement(db, 'DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE conversation_id = ? ORDER BY id LIMIT ?)');
  while (step.run(id, DELETE_STEP_MESSAGES).changes === DELETE_STEP_MESSAGES) await new Promise((r) => setImmediate(r));
  return deleteConversation(db, userId, id);
}

export function startTurn(db: Db, conversationId: string, model: string): Turn {
  const now = Date.now();
  const r = statement(db, "INSERT INTO turns (conversation_id, model, status, started_at) VALUES (?, ?, 'running', ?)").run(conversationId, model, now);
  statement(db, 'UPDATE conversations SET updated_at = ? WHERE id = ?').run(now, conversationId);
  return { id: Number(r.lastInsertRowid), conversationId, model, status: 'running', note: null, rounds: 0, startedAt: now, endedAt: null };
}

export function endTurn(db: Db, turnId: number, status: Exclude<TurnStatus, 'running'>, rounds: number, note?: string): void {
  statement(db, 'UPDATE turns SET status = ?, note = ?, rounds = ?, ended_at = ? WHERE id = ?').run(status, note ?? null, rounds, Date.now(), turnId);
}

export function turnsOf(db: Db, conversationId: string): Turn[] {
  return (statement(db, 'SELECT * FROM turns WHERE conversation_id = ? ORDER BY id').all(conversationId) as TurnRow[]).map(toTurn);
}

/**
 * Turns left running by a gateway that stopped: marked interrupted, with a note the user
 * reads. Returns how many.
 */
export function markInterruptedTurns(db: Db, note: string): number {
  return statement(db, "UPDATE turns SET status = 'interrupted', note = ?, ended_at = ? WHERE status = 'running'").run(note, Date.now()).changes;
}

export function addMessage(
  db: Db,
  o: { conversationId: string; turnId?: number; message: ModelMessage; model?: string; keyOwner?: 'user' | 'team'; usage?: Usage; files?: Record<string, FileChange[]> },
): number {
  const u = o.usage ?? NO_USAGE;
  const r = statement(
    db,
    `INSERT INTO messages (conversation_id, turn_id, role, content, model, key_owner, input_tokens, output_tokens, cached_input_tokens, created_at, files)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  ).run(
    o.conversationId,
    o.turnId ?? null,
    o.message.role,
    JSON.stringify(o.message),
    o.model ?? null,
    o.keyOwner ?? null,
    u.inputTokens,
    u.outputTokens,
    u.cachedInputTokens,
    Date.now(),
    o.files ? JSON.stringify(o.files) : null,
  );
  return Number(r.lastInsertRowid);
}

export function messagesOf(db: Db, conversationId: string): StoredMessage[] {
  const rows = statement(db, 'SELECT * FROM messages WHERE conversation_id = ? ORDER BY id').all(conversationId) as {
    id: number;
    turn_id: number | null;
    content: string;
    model: string | null;
    input_tokens: number;
    output_tokens: number;
    cached_input_tokens: number;
    created_at: number;
    files: string | null;
    html: string | null;
  }[];
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
export function setMessageHtml(db: Db, messageId: number, html: string): void {
  statement(db, 'UPDATE messages SET html = ? WHERE id = ?').run(html, messageId);
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
export function usageByUserAndModel(db: Db, since = 0): UsageRow[] {
  return (
    statement(
      db,
      `SELECT c.user_id AS userId, u.name AS user, m.model AS model, COUNT(*) AS rounds,
              SUM(m.key_owner = 'user') AS ownKeyRounds,
              SUM(m.input_tokens) AS inputTokens, SUM(m.output_tokens) AS outputTokens, SUM(m.cached_input_tokens) AS cachedInputTokens
       FROM messages m JOIN conversations c ON c.id = m.conversation_id JOIN users u ON u.id = c.user_id
       WHERE m.role = 'assistant' AND m.model IS NOT NULL AND m.created_at >= ?
       GROUP BY c.user_id, m.model ORDER BY u.name, m.model`,
    ).all(since) as UsageRow[]
  ).map((r) => ({ ...r, ownKeyRounds: r.ownKeyRounds ?? 0 }));
}

/**
 * The /v1 conversation of `userId` whose client was last answered with the history of
 * digest `digest` (api-history.ts), taken: its digest is cleared, so a second request
 * with the same history, or one while this one runs, starts a conversation of its own.
 */
export function takeApiConversation(db: Db, userId: number, digest: string): Conversation | undefined {
  const r = statement(
    db,
    `UPDATE conversations SET client_digest = NULL WHERE id = (
       SELECT id FROM conversations WHERE user_id = ? AND source = 'api' AND client_digest = ? ORDER BY updated_at DESC LIMIT 1
     ) RETURNING *`,
  ).get(userId, digest) as ConversationRow | undefined;
  return r && toConversation(r);
}

/** Records the digest of the history a /v1 conversation's client was just answered with. */
export function setClientDigest(db: Db, conversationId: string, digest: string): void {
  statement(db, 'UPDATE conversations SET client_digest = ? WHERE id = ?').run(digest, conversationId);
}

/**
 * Deletes up to `limit` /v1 conversations, of one user or of all, whose last message is
 * older than `before` (epoch ms), never one with a turn running.
 * Returns what was deleted, so that their PII scopes can go too.
 */
export function deleteApiConversations(db: Db, o: { before: number; userId?: number; limit?: number }): { id: string; userId: number }[] {
  return statement(
    db,
    `DELETE FROM conversations WHERE id IN (
       SELECT c.id FROM conversations c
       WHERE c.source = 'api' AND c.updated_at < ? AND (? IS NULL OR c.user_id = ?)
         AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.conversation_id = c.id AND t.status = 'running')
       LIMIT ?
     ) RETURNING id, user_id AS userId`,
  ).all(o.before, o.userId ?? null, o.userId ?? null, o.limit ?? 500) as { id: string; userId: number }[];
}

/**
 * Bytes a user's conversations take in the store: their messages (with the files each lists and their rendered HTML) and titles.
 * A scan of every message the user has: the store quota reads the running totals the store keeps instead (src/limits/schema.ts).
 */
export function conversationBytes(db: Db, userId: number): { web: number; api: number } {
  const rows = statement(
    db,
    `SELECT c.source AS source,
            COALESCE(SUM((SELECT COALESCE(SUM(octet_length(m.content) + COALESCE(octet_length(m.files), 0) + COALESCE(octet_length(m.html), 0)), 0) FROM messages m WHERE m.conversation_id = c.id) + octet_length(c.title)), 0) AS bytes
     FROM conversations c WHERE c.user_id = ? GROUP BY c.source`,
  ).all(userId) as { source: ConversationSource; bytes: number }[];
  return { web: rows.find((r) => r.source === 'web')?.bytes ?? 0, api: rows.find((r) => r.source === 'api')?.bytes ?? 0 };
}
