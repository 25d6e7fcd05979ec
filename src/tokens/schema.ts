/**
 * Schema of personal API tokens (store migration 3). Only a SHA-256 hash of each token
 * is kept; the token itself is shown once, at creation.
 */
import type { Migration } from '../store/migrations.js';

export const tokensMigration: Migration = {
  description: 'personal API tokens',
  up(db) {
    db.exec(`
      CREATE TABLE api_tokens (
        id INTEGER PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        hash BLOB NOT NULL UNIQUE,     -- SHA-256 of the whole token
        created_at INTEGER NOT NULL,
        expires_at INTEGER,            -- NULL: never
        last_used_at INTEGER,
        revoked_at INTEGER
      );
      -- A name identifies one live token per user; revoked ones keep their name for history.
      CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens(user_id, name) WHERE revoked_at IS NULL;
      CREATE INDEX api_tokens_user ON api_tokens(user_id);
    `);
  },
};

/**
 * Indexes that keep token work proportional to what is live (a later step of the
 * schema): counting a user's active tokens reads only their unrevoked rows (revoked_at
 * IS NULL is an equality on the index; covered, with the expiry), counting their recent creations reads only that window, and the purge of
 * old revoked or expired rows finds them without a scan.
 */
export const tokensActiveIndexMigration: Migration = {
  description: 'personal API tokens: indexes for active counts, recent creations and the purge',
  up(db) {
    db.exec(`
      CREATE INDEX api_tokens_user_active ON api_tokens(user_id, revoked_at, expires_at);
      CREATE INDEX api_tokens_user_created ON api_tokens(user_id, created_at);
      CREATE INDEX api_tokens_revoked ON api_tokens(revoked_at) WHERE revoked_at IS NOT NULL;
      CREATE INDEX api_tokens_expiry ON api_tokens(expires_at) WHERE revoked_at IS NULL AND expires_at IS NOT NULL;
    `);
  },
};
