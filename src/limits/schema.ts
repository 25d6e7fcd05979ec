/**
 * Each user's store usage as running totals the database keeps itself, so checking the
 * quota (store-quota.ts) reads four rows instead of every message the user has.
 *
 * `store_usage` holds, per user, the bytes of their web chats (`web`), of their /v1
 * conversations (`api`) and of the sealed personal data in their PII vault scopes
 * (`pii_conversation`, `pii_token`). Triggers on every table counted add and subtract
 * each row's size as it is written, changed or deleted, with the same measures a full
 * scan would take (`octet_length` of the text, `length` of the blobs), so the totals
 * always equal that scan. A parent's delete first deletes its children itself (a
 * conversation its messages, a vault scope its values) while the parent still says whose
 * bytes they are; the foreign keys' cascades then find nothing left. A user's rows go
 * with the user (ON DELETE CASCADE). A row is only ever added by a write that adds
 * bytes; decreases update an existing row, so a user's deletion never recreates one.
 *
 * Postgres runs the same statements from PL/pgSQL trigger functions, one per trigger.
 * Its AFTER triggers fire when the statement that caused them ends; a statement run
 * inside a trigger (a parent deleting its children) is a statement of its own, so its
 * children's triggers still run while the parent row is there.
 */
import type { Migration } from '../store/migrations.js';

declare module '../store/tables.js' {
  interface Tables {
    store_usage: StoreUsageTable;
    rate_buckets: RateBucketsTable;
  }
}

export interface StoreUsageTable {
  user_id: number;
  kind: 'web' | 'api' | 'pii_conversation' | 'pii_token';
  bytes: number;
}

const MESSAGE_BYTES = (m: string) => `(octet_length(${m}.content) + COALESCE(octet_length(${m}.files), 0) + COALESCE(octet_length(${m}.html), 0))`;
const BATCH_BYTES = (b: string) => `(length(${b}.sealed) + octet_length(${b}.uses))`;
const VALUE_BYTES = (v: string) => `(length(${v}.sealed) + length(${v}.mac))`;
const ADD = 'ON CONFLICT (user_id, kind) DO UPDATE SET bytes = bytes + excluded.bytes';
/** Postgres finds a bare `bytes` ambiguous there (the row in the table, or the one proposed): the table's is named. */
const PG_ADD = 'ON CONFLICT (user_id, kind) DO UPDATE SET bytes = store_usage.bytes + excluded.bytes';

/** Adds `bytes` to the user and kind of the conversation `conversationId` (upsert). */
const addToConversation = (conversationId: string, bytes: string, add = ADD) =>
  `INSERT INTO store_usage (user_id, kind, bytes) SELECT c.user_id, c.source, ${bytes} FROM conversations c WHERE c.id = ${conversationId} ${add};`;
const subtractFromConversation = (conversationId: string, bytes: string) =>
  `UPDATE store_usage SET bytes = bytes - ${bytes} WHERE (user_id, kind) = (SELECT c.user_id, c.source FROM conversations c WHERE c.id = ${conversationId});`;
const addToScope = (scopeId: string, bytes: string, add = ADD) =>
  `INSERT INTO store_usage (user_id, kind, bytes) SELECT s.user_id, 'pii_' || s.kind, ${bytes} FROM pii_scopes s WHERE s.id = ${scopeId} ${add};`;
const subtractFromScope = (scopeId: string, bytes: string) =>
  `UPDATE store_usage SET bytes = bytes - ${bytes} WHERE (user_id, kind) = (SELECT s.user_id, 'pii_' || s.kind FROM pii_scopes s WHERE s.id = ${scopeId});`;

/** Triggers keeping the totals of one vault table whose rows measure `bytes(row)`. */
const vaultTriggers = (table: string, bytes: (row: string) => string, columns: string) => `
  CREATE TRIGGER store_usage_${table}_insert AFTER INSERT ON ${table} BEGIN
    ${addToScope('NEW.scope_id', bytes('NEW'))}
  END;
  CREATE TRIGGER store_usage_${table}_update AFTER UPDATE OF ${columns}, scope_id ON ${table} BEGIN
    ${subtractFromScope('OLD.scope_id', bytes('OLD'))}
    ${addToScope('NEW.scope_id', bytes('NEW'))}
  END;
  CREATE TRIGGER store_usage_${table}_delete AFTER DELETE ON ${table} BEGIN
    ${subtractFromScope('OLD.scope_id', bytes('OLD'))}
  END;
`;

/**
 * A Postgres row trigger and the PL/pgSQL function it runs (named alike): `body` is its
 * statements. A BEFORE DELETE trigger's function returns the old row, so the delete goes on.
 */
const pgTrigger = (name: string, fires: string, body: string, when?: string) => `
  CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    ${body}
    RETURN ${fires.startsWith('BEFORE') ? 'OLD' : 'NULL'};
  END $$;
  CREATE TRIGGER ${name} ${fires} FOR EACH ROW ${when ? `WHEN (${when}) ` : ''}EXECUTE FUNCTION ${name}();
`;

/** The same triggers on Postgres, where `length` of a bytea is its bytes, as of a blob on SQLite. */
const pgVaultTriggers = (table: string, bytes: (row: string) => string, columns: string) => `
  ${pgTrigger(`store_usage_${table}_insert`, `AFTER INSERT ON ${table}`, addToScope('NEW.scope_id', bytes('NEW'), PG_ADD))}
  ${pgTrigger(
    `store_usage_${table}_update`,
    `AFTER UPDATE OF ${columns}, scope_id ON ${table}`,
    `${subtractFromScope('OLD.scope_id', bytes('OLD'))}
    ${addToScope('NEW.scope_id', bytes('NEW'), PG_ADD)}`,
  )}
  ${pgTrigger(`store_usage_${table}_delete`, `AFTER DELETE ON ${table}`, subtractFromScope('OLD.scope_id', bytes('OLD')))}
`;

/** What a store held before the totals were kept, summed once (the same statements on both databases). */
const INITIAL_TOTALS = `
      INSERT INTO store_usage (user_id, kind, bytes)
        SELECT c.user_id, c.source, SUM(octet_length(c.title) + (SELECT COALESCE(SUM(${MESSAGE_BYTES('m')}), 0) FROM messages m WHERE m.conversation_id = c.id))
        FROM conversations c GROUP BY c.user_id, c.source;
      INSERT INTO store_usage (user_id, kind, bytes)
        SELECT s.user_id, 'pii_' || s.kind, SUM(x.bytes)
        FROM (SELECT scope_id, ${BATCH_BYTES('b')} AS bytes FROM pii_batches b UNION ALL SELECT scope_id, ${VALUE_BYTES('v')} FROM pii_values_v1 v) x
        JOIN pii_scopes s ON s.id = x.scope_id GROUP BY s.user_id, s.kind;
`;

/** A conversation's messages, in bytes. */
const conversationMessageBytes = (conversationId: string) =>
  `(SELECT COALESCE(SUM(${MESSAGE_BYTES('m')}), 0) FROM messages m WHERE m.conversation_id = ${conversationId})`;

export const storeUsageMigration: Migration = {
  description: 'store quota: running totals of each user\'s stored bytes, kept by triggers',
  sqlite: `
      CREATE TABLE store_usage (
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        kind TEXT NOT NULL CHECK (kind IN ('web', 'api', 'pii_conversation', 'pii_token')),
        bytes INTEGER NOT NULL,
        PRIMARY KEY (user_id, kind)
      ) WITHOUT ROWID;
${INITIAL_TOTALS}
      CREATE TRIGGER store_usage_message_insert AFTER INSERT ON messages BEGIN
        ${addToConversation('NEW.conversation_id', MESSAGE_BYTES('NEW'))}
      END;
      CREATE TRIGGER store_usage_message_update AFTER UPDATE OF content, files, html, conversation_id ON messages BEGIN
        ${subtractFromConversation('OLD.conversation_id', MESSAGE_BYTES('OLD'))}
        ${addToConversation('NEW.conversation_id', MESSAGE_BYTES('NEW'))}
      END;
      CREATE TRIGGER store_usage_message_delete AFTER DELETE ON messages BEGIN
        ${subtractFromConversation('OLD.conversation_id', MESSAGE_BYTES('OLD'))}
      END;

      CREATE TRIGGER store_usage_conversation_insert AFTER INSERT ON conversations BEGIN
        INSERT INTO store_usage (user_id, kind, bytes) VALUES (NEW.user_id, NEW.source, octet_length(NEW.title)) ${ADD};
      END;
      CREATE TRIGGER store_usage_conversation_title AFTER UPDATE OF title ON conversations
        WHEN OLD.user_id = NEW.user_id AND OLD.source = NEW.source BEGIN
        UPDATE store_usage SET bytes = bytes - octet_length(OLD.title) + octet_length(NEW.title) WHERE user_id = NEW.user_id AND kind = NEW.source;
      END;
      -- Not done by the gateway today; kept right so the totals cannot drift if it ever is.
      CREATE TRIGGER store_usage_conversation_moved AFTER UPDATE OF user_id, source ON conversations
        WHEN OLD.user_id <> NEW.user_id OR OLD.source <> NEW.source BEGIN
        UPDATE store_usage SET bytes = bytes - octet_length(OLD.title) - (SELECT COALESCE(SUM(${MESSAGE_BYTES('m')}), 0) FROM messages m WHERE m.conversation_id = NEW.id)
          WHERE user_id = OLD.user_id AND kind = OLD.source;
        INSERT INTO store_usage (user_id, kind, bytes)
          VALUES (NEW.user_id, NEW.source, octet_length(NEW.title) + (SELECT COALESCE(SUM(${MESSAGE_BYTES('m')}), 0) FROM messages m WHERE m.conversation_id = NEW.id)) ${ADD};
      END;
      CREATE TRIGGER store_usage_conversation_delete BEFORE DELETE ON conversations BEGIN
        DELETE FROM messages WHERE conversation_id = OLD.id;
        UPDATE store_usage SET bytes = bytes - octet_length(OLD.title) WHERE user_id = OLD.user_id AND kind = OLD.source;
      END;

      ${vaultTriggers('pii_batches', BATCH_BYTES, 'sealed, uses')}
      ${vaultTriggers('pii_values_v1', VALUE_BYTES, 'sealed, mac')}
      CREATE TRIGGER store_usage_pii_scope_delete BEFORE DELETE ON pii_scopes BEGIN
        DELETE FROM pii_batches WHERE scope_id = OLD.id;
        DELETE FROM pii_values_v1 WHERE scope_id = OLD.id;
      END;
    `,
  // The user's key is checked at commit: Postgres checks it again on a total updated twice
  // in one transaction, and when a user is deleted, the deletes of their conversations and
  // vault scopes that cascade from it subtract from their totals after the user row is gone
  // (the totals go too, by the same cascade, before the check).
  postgres: `
      CREATE TABLE store_usage (
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
        kind TEXT NOT NULL CHECK (kind IN ('web', 'api', 'pii_conversation', 'pii_token')),
        bytes BIGINT NOT NULL,
        PRIMARY KEY (user_id, kind)
      );
${INITIAL_TOTALS}
      ${pgTrigger('store_usage_message_insert', 'AFTER INSERT ON messages', addToConversation('NEW.conversation_id', MESSAGE_BYTES('NEW'), PG_ADD))}
      ${pgTrigger(
        'store_usage_message_update',
        'AFTER UPDATE OF content, files, html, conversation_id ON messages',
        `${subtractFromConversation('OLD.conversation_id', MESSAGE_BYTES('OLD'))}
        ${addToConversation('NEW.conversation_id', MESSAGE_BYTES('NEW'), PG_ADD)}`,
      )}
      ${pgTrigger('store_usage_message_delete', 'AFTER DELETE ON messages', subtractFromConversation('OLD.conversation_id', MESSAGE_BYTES('OLD')))}

      ${pgTrigger(
        'store_usage_conversation_insert',
        'AFTER INSERT ON conversations',
        `INSERT INTO store_usage (user_id, kind, bytes) VALUES (NEW.user_id, NEW.source, octet_length(NEW.title)) ${PG_ADD};`,
      )}
      ${pgTrigger(
        'store_usage_conversation_title',
        'AFTER UPDATE OF title ON conversations',
        'UPDATE store_usage SET bytes = bytes - octet_length(OLD.title) + octet_length(NEW.title) WHERE user_id = NEW.user_id AND kind = NEW.source;',
        'OLD.user_id = NEW.user_id AND OLD.source = NEW.source',
      )}
      ${pgTrigger(
        'store_usage_conversation_moved',
        'AFTER UPDATE OF user_id, source ON conversations',
        `UPDATE store_usage SET bytes = bytes - octet_length(OLD.title) - ${conversationMessageBytes('NEW.id')}
          WHERE user_id = OLD.user_id AND kind = OLD.source;
        INSERT INTO store_usage (user_id, kind, bytes)
          VALUES (NEW.user_id, NEW.source, octet_length(NEW.title) + ${conversationMessageBytes('NEW.id')}) ${PG_ADD};`,
        'OLD.user_id <> NEW.user_id OR OLD.source <> NEW.source',
      )}
      ${pgTrigger(
        'store_usage_conversation_delete',
        'BEFORE DELETE ON conversations',
        `DELETE FROM messages WHERE conversation_id = OLD.id;
        UPDATE store_usage SET bytes = bytes - octet_length(OLD.title) WHERE user_id = OLD.user_id AND kind = OLD.source;`,
      )}

      ${pgVaultTriggers('pii_batches', BATCH_BYTES, 'sealed, uses')}
      ${pgVaultTriggers('pii_values_v1', VALUE_BYTES, 'sealed, mac')}
      ${pgTrigger(
        'store_usage_pii_scope_delete',
        'BEFORE DELETE ON pii_scopes',
        `DELETE FROM pii_batches WHERE scope_id = OLD.id;
        DELETE FROM pii_values_v1 WHERE scope_id = OLD.id;`,
      )}
    `,
};

/**
 * The token buckets of the rate limits, when gateways share the store (store-rate-limit.ts):
 * a row per limiter and key that took since its bucket was last full. A missing row is a
 * full bucket, so rows idle long enough to be full again are deleted, a bounded few at a
 * time, which keeps the table to about the users active in the last refill period.
 * `refilled_at` has no index on purpose: every take changes it, and an index on it would
 * turn each take into an index write as well (on Postgres, no update in place); the
 * sweep's scan of so small a table costs less.
 */
export interface RateBucketsTable {
  /** Which limiter: two never share a bucket, even for one key. */
  limiter: string;
  /** Whose bucket, as the limiter names it (`user:7`). */
  bucket: string;
  /** Tokens left at `refilled_at` (a fraction between refills). */
  tokens: number;
  /** Epoch ms the tokens were counted at; never moves back. */
  refilled_at: number;
}

export const rateBucketsMigration: Migration = {
  description: 'rate limits: token buckets in the store, shared by the gateways on it',
  sqlite: `
      CREATE TABLE rate_buckets (
        limiter TEXT NOT NULL,
        bucket TEXT NOT NULL,
        tokens REAL NOT NULL,
        refilled_at INTEGER NOT NULL,
        PRIMARY KEY (limiter, bucket)
      ) WITHOUT ROWID;
    `,
  postgres: `
      CREATE TABLE rate_buckets (
        limiter TEXT NOT NULL,
        bucket TEXT NOT NULL,
        tokens DOUBLE PRECISION NOT NULL,
        refilled_at BIGINT NOT NULL,
        PRIMARY KEY (limiter, bucket)
      );
    `,
};

/**
 * The buckets unlogged on Postgres: a take's commit then waits for no WAL flush (every
 * MCP call and page POST takes one), and the table is not copied to standbys. What that
 * gives up is the buckets themselves after a crash or a failover to a standby: Postgres
 * empties an unlogged table then, and an empty table is every bucket full, as after a
 * quiet spell. Nothing else is kept in it. SQLite gateways keep their buckets in memory.
 */
export const rateBucketsUnloggedMigration: Migration = {
  description: 'rate limits: the token buckets unlogged on Postgres (a take commits without a WAL flush)',
  sqlite: `
      -- Nothing to do: a gateway on SQLite is the only one on its file and keeps its buckets in memory.
    `,
  postgres: `
      ALTER TABLE rate_buckets SET UNLOGGED;
    `,
};
