/**
 * The built-in agent's tables (a step of the store's schema, registry.ts):
 *
 * - conversations: one per chat (the web app) or per conversation of a /v1 client
 *   (continued across its requests: api-history.ts);
 * - turns: a user message and everything that answered it, with how it ended;
 * - messages: the conversation as the model saw it (tokens in place of personal data,
 *   never the values), one row per message, with the usage of the round that made it;
 * - provider_keys: users' own API keys for model providers, sealed.
 */
import type { Generated } from 'kysely';
import type { Migration } from '../store/migrations.js';

declare module '../store/tables.js' {
  interface Tables {
    conversations: ConversationsTable;
    turns: TurnsTable;
    messages: MessagesTable;
    provider_keys: ProviderKeysTable;
  }
}

export interface ConversationsTable {
  id: string;
  user_id: number;
  title: Generated<string>;
  model: string;
  source: 'web' | 'api';
  created_at: number;
  updated_at: number;
  /** apiHistoryMigration. */
  client_digest: string | null;
}

export interface TurnsTable {
  id: Generated<number>;
  conversation_id: string;
  model: string;
  status: 'running' | 'complete' | 'stopped' | 'cancelled' | 'interrupted' | 'failed';
  note: string | null;
  rounds: Generated<number>;
  started_at: number;
  ended_at: number | null;
  /** turnsReplicaMigration: the gateway replica running it (null on a store no replicas share). */
  replica_id: Generated<string | null>;
}

export interface MessagesTable {
  id: Generated<number>;
  conversation_id: string;
  turn_id: number | null;
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  model: string | null;
  key_owner: 'user' | 'team' | null;
  input_tokens: Generated<number>;
  output_tokens: Generated<number>;
  cached_input_tokens: Generated<number>;
  created_at: number;
  /** Added by the web app's step (src/auth/schema.ts): JSON of the files each tool call changed. */
  files: string | null;
  /** renderedAnswersMigration. */
  html: string | null;
}

export interface ProviderKeysTable {
  user_id: number;
  provider: string;
  sealed: Buffer;
  updated_at: number;
}

export const agentMigration: Migration = {
  description: 'conversations of the built-in agent, their turns and messages, and users\' own provider keys',
  sqlite: `
      CREATE TABLE conversations (
        id TEXT PRIMARY KEY,                 -- random, URL-safe
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        title TEXT NOT NULL DEFAULT '',      -- model side: tokens, never personal data
        model TEXT NOT NULL,                 -- provider:model of the next turn
        source TEXT NOT NULL CHECK (source IN ('web', 'api')),
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
      );
      CREATE INDEX conversations_user ON conversations(user_id, updated_at);
      CREATE TABLE turns (
        id INTEGER PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        model TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'stopped', 'cancelled', 'interrupted', 'failed')),
        note TEXT,                           -- why it ended early, in words for the user
        rounds INTEGER NOT NULL DEFAULT 0,
        started_at INTEGER NOT NULL,
        ended_at INTEGER
      );
      CREATE INDEX turns_conversation ON turns(conversation_id, id);
      CREATE INDEX turns_running ON turns(status) WHERE status = 'running';
      CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        turn_id INTEGER REFERENCES turns(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
        content TEXT NOT NULL,               -- JSON: the message as sent to the model
        model TEXT,                          -- assistant rows: who wrote it
        key_owner TEXT CHECK (key_owner IN ('user', 'team')),
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        cached_input_tokens INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL
      );
      CREATE INDEX messages_conversation ON messages(conversation_id, id);
      CREATE INDEX messages_usage ON messages(model, created_at) WHERE role = 'assistant';
      CREATE TABLE provider_keys (
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        provider TEXT NOT NULL,
        sealed BLOB NOT NULL,                -- 12-byte IV | 16-byte GCM tag | ciphertext
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (user_id, provider)
      );
    `,
  postgres: `
      CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        title TEXT NOT NULL DEFAULT '',
        model TEXT NOT NULL,
        source TEXT NOT NULL CHECK (source IN ('web', 'api')),
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
      );
      CREATE INDEX conversations_user ON conversations(user_id, updated_at);
      CREATE TABLE turns (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        model TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'stopped', 'cancelled', 'interrupted', 'failed')),
        note TEXT,
        rounds BIGINT NOT NULL DEFAULT 0,
        started_at BIGINT NOT NULL,
        ended_at BIGINT
      );
      CREATE INDEX turns_conversation ON turns(conversation_id, id);
      CREATE INDEX turns_running ON turns(status) WHERE status = 'running';
      CREATE TABLE messages (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        turn_id BIGINT REFERENCES turns(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
        content TEXT NOT NULL,
        model TEXT,
        key_owner TEXT CHECK (key_owner IN ('user', 'team')),
        input_tokens BIGINT NOT NULL DEFAULT 0,
        output_tokens BIGINT NOT NULL DEFAULT 0,
        cached_input_tokens BIGINT NOT NULL DEFAULT 0,
        created_at BIGINT NOT NULL
      );
      CREATE INDEX messages_conversation ON messages(conversation_id, id);
      CREATE INDEX messages_usage ON messages(model, created_at) WHERE role = 'assistant';
      CREATE TABLE provider_keys (
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        provider TEXT NOT NULL,
        sealed BYTEA NOT NULL,
        updated_at BIGINT NOT NULL,
        PRIMARY KEY (user_id, provider)
      );
    `,
};

/**
 * What /v1 conversations need to outlive one request (api-history.ts): the digest of the
 * history their client was last answered with, found by user, and their age, found by
 * source, for the retention sweep.
 */
export const apiHistoryMigration: Migration = {
  description: 'conversations of the /v1 API continued across requests, and their age',
  sqlite: `
      ALTER TABLE conversations ADD COLUMN client_digest TEXT;   -- /v1: keyed HMAC of the history last answered; NULL otherwise
      CREATE INDEX conversations_client_digest ON conversations(user_id, client_digest) WHERE client_digest IS NOT NULL;
      CREATE INDEX conversations_source_age ON conversations(source, updated_at);
    `,
  postgres: `
      ALTER TABLE conversations ADD COLUMN client_digest TEXT;
      CREATE INDEX conversations_client_digest ON conversations(user_id, client_digest) WHERE client_digest IS NOT NULL;
      CREATE INDEX conversations_source_age ON conversations(source, updated_at);
    `,
};

/**
 * Answers rendered once: the HTML of each assistant message's text, made from the model's
 * side (tokens, never personal data) when it is first shown, so that no page load
 * formats Markdown again. Tokens are put back in its text, never in its links, as it is
 * shown (src/web/chat/transcript.ts).
 */
export const renderedAnswersMigration: Migration = {
  description: 'the HTML of answers, rendered once',
  sqlite: `ALTER TABLE messages ADD COLUMN html TEXT;   -- JSON {v, parts: [html per text part]}; NULL until first shown`,
  postgres: 'ALTER TABLE messages ADD COLUMN html TEXT',
};

export const turnsReplicaMigration: Migration = {
  description: 'the gateway replica running each turn',
  sqlite: `ALTER TABLE turns ADD COLUMN replica_id TEXT;   -- NULL: a gateway that shares its store with none`,
  postgres: 'ALTER TABLE turns ADD COLUMN replica_id TEXT',
};
