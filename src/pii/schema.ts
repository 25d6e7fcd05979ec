/**
 * The vault's tables, as a migration for the store to register (src/store/migrations.ts
 * keeps the list; this module only defines the step).
 *
 * No column holds a raw value: `mac` is a keyed HMAC (lookup without plaintext) and
 * `sealed` is AES-256-GCM ciphertext. Scopes and counters hold no PII and outlive the
 * values they numbered, so a purged value's token is never handed to another value.
 */
import type { Migration } from '../store/migrations.js';

export const piiMigration: Migration = {
  description: 'PII vault: scopes, token counters, sealed values',
  up(db) {
    db.exec(`
      CREATE TABLE pii_scopes (
        id INTEGER PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        kind TEXT NOT NULL CHECK (kind IN ('token', 'conversation')),
        ref TEXT NOT NULL,           -- the API token's or conversation's id, never a secret
        created_at INTEGER NOT NULL,
        UNIQUE (user_id, kind, ref)
      );
      CREATE TABLE pii_counters (
        scope_id INTEGER NOT NULL REFERENCES pii_scopes(id) ON DELETE CASCADE,
        type TEXT NOT NULL,
        last_n INTEGER NOT NULL,
        PRIMARY KEY (scope_id, type)
      ) WITHOUT ROWID;
      CREATE TABLE pii_values (
        scope_id INTEGER NOT NULL REFERENCES pii_scopes(id) ON DELETE CASCADE,
        type TEXT NOT NULL,
        n INTEGER NOT NULL,
        mac BLOB NOT NULL,           -- HMAC-SHA256 of scope and value
        sealed BLOB NOT NULL,        -- AES-256-GCM: iv (12) | tag (16) | ciphertext
        last_used_at INTEGER NOT NULL,
        PRIMARY KEY (scope_id, type, n),
        UNIQUE (scope_id, mac)
      );
      CREATE INDEX pii_values_last_used ON pii_values (last_used_at);
    `);
  },
};

/**
 * Values sealed in batches: every value a tokenizing call issues goes into one
 * AES-256-GCM record, with its token inside the plaintext, instead of one record, one
 * HMAC and one unique index entry per value. Each record keeps its values' last uses
 * (for the TTL) in clear: times, nothing about the values. A scope is read whole into
 * memory on first use (vault-memory.ts), so finding a value's token needs no keyed
 * digest on disk.
 *
 * Rows sealed one by one under version 2 move to `pii_values_v1`; the vault moves each
 * scope's live ones into a batch the first time it reads that scope.
 */
export const piiBatchesMigration: Migration = {
  description: 'PII vault: values sealed in batches',
  up(db) {
    db.exec(`
      ALTER TABLE pii_values RENAME TO pii_values_v1;
      CREATE TABLE pii_batches (
        id INTEGER PRIMARY KEY,
        scope_id INTEGER NOT NULL REFERENCES pii_scopes(id) ON DELETE CASCADE,
        sealed BLOB NOT NULL,        -- AES-256-GCM of [[type, n, value], ...]: iv (12) | tag (16) | ciphertext
        uses TEXT NOT NULL,          -- JSON: last use (ms) of each value, in the same order
        oldest_use INTEGER NOT NULL  -- the smallest of uses, for the purge
      );
      CREATE INDEX pii_batches_scope ON pii_batches (scope_id);
    `);
  },
};
