/**
 * Conversations of the /v1 API across requests. An OpenAI-style client sends the whole
 * history with every request; storing it each time would grow the store by the whole
 * history per request. Instead an API conversation keeps the digest of the history its
 * client was last answered with (the client's messages and the answer, as the client
 * saw them). A request whose earlier messages have that digest continues the
 * conversation, and only its new message is stored; anything else (an edited or
 * regenerated history, an answer the client rewrote, a conversation since deleted)
 * starts a new conversation from the history sent.
 *
 * The digest is an HMAC under a key of the data directory (`history.key`), never a plain
 * hash: the history holds the client's values, personal data included, and a plain hash
 * of a short message could be confirmed by guessing against a copy of the database.
 *
 * API conversations are deleted SANDGATE_API_CONVERSATION_DAYS after their last message,
 * with the PII scope of what their model was shown.
 */
import crypto from 'node:crypto';
import { conversationScopeRef, dropPiiScope } from '../pii/scopes.js';
import { loadOrCreateKey } from '../secrets/key-file.js';
import type { Db } from '../store/store.js';
import { deleteApiConversations } from './conversations.js';

/** A message of a client's history as the agent takes it: text, from the user or the assistant. */
export interface ClientMessage {
  role: 'user' | 'assistant';
  text: string;
}

/** The key file of history digests, in the data directory. */
export const HISTORY_KEY_FILE = 'history.key';

/** Digests of client histories, keyed per gateway and per user. */
export class HistoryDigests {
  private readonly key: Buffer;

  constructor(dataDir: string) {
    this.key = loadOrCreateKey(dataDir, HISTORY_KEY_FILE);
  }

  /**
   * The digest of `messages` for `userId`. Line endings and the whitespace around each
   * text do not count: chat front ends trim what they show and send back.
   */
  of(userId: number, messages: readonly ClientMessage[]): string {
    const canonical = JSON.stringify([userId, messages.map((m) => [m.role, m.text.replace(/\r\n?/g, '\n').trim()])]);
    return crypto.createHmac('sha256', this.key).update(canonical, 'utf8').digest('base64url');
  }
}

const DAY_MS = 86_400_000;
/** Conversations deleted per statement: a sweep of many never holds the write lock long. */
const SWEEP_BATCH = 200;

/**
 * Deletes the API conversations whose last message is more than `days` days before
 * `now` (none when `days` is 0), never one with a turn running, and the PII scopes of
 * what their models were shown. Returns how many went.
 */
export async function sweepApiConversations(db: Db, o: { days: number; now?: number }): Promise<number> {
  if (o.days <= 0) return 0;
  return deleteInBatches(db, { before: (o.now ?? Date.now()) - o.days * DAY_MS });
}

/** Deletes every API conversation of `userId` but one with a turn running, with their PII scopes. Returns how many went. */
export async function deleteUserApiConversations(db: Db, userId: number): Promise<number> {
  return deleteInBatches(db, { before: Number.MAX_SAFE_INTEGER, userId });
}

async function deleteInBatches(db: Db, o: { before: number; userId?: number }): Promise<number> {
  let total = 0;
  for (;;) {
    // A conversation and its PII scope go together or not at all.
    const gone = await db.transaction().execute(async (tx) => {
      const rows = await deleteApiConversations(tx, { ...o, limit: SWEEP_BATCH });
      for (const r of rows) await dropPiiScope(tx, conversationScopeRef(r.userId, r.id));
      return rows.length;
    });
    total += gone;
    if (gone < SWEEP_BATCH) return total;
  }
}
