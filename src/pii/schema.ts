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
  version: 2,
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
