/**
 * The store's own tables: users and their sandboxes (the first step of the schema; see
 * registry.ts for the order of all steps).
 */
import type { Migration } from '../store/migrations.js';

export const usersMigration: Migration = {
  description: 'users and sandboxes',
  up(db) {
    db.exec(`
      CREATE TABLE users (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        is_admin INTEGER NOT NULL DEFAULT 0,
        permissions TEXT,            -- JSON ceiling; NULL means the configured default
        workspace_id TEXT UNIQUE,    -- the user's workspace volume, assigned at first use
        created_at INTEGER NOT NULL
      );
      CREATE TABLE sandboxes (
        user_id INTEGER PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
        container_id TEXT UNIQUE,
        started_at INTEGER,
        last_used_at INTEGER,
        executions INTEGER NOT NULL DEFAULT 0
      );
    `);
  },
};

/**
 * Users are bound to GitHub's numeric account id, not only to a login (logins can be
 * renamed and registered again by someone else), and the membership check is per user:
 * the member's latest OAuth token (sealed), when GitHub last said yes, and whether a
 * check said no (suspended: nothing of theirs works until a GitHub sign-in is allowed
 * again). A login some account held before is remembered, so another account cannot
 * take it over.
 */
export const githubIdentityMigration: Migration = {
  description: 'users bound to GitHub account ids, per-user membership checks',
  up(db) {
    db.exec(`
      ALTER TABLE users ADD COLUMN github_id INTEGER;           -- GitHub's numeric account id, from the first GitHub sign-in
      ALTER TABLE users ADD COLUMN github_token TEXT;           -- the latest OAuth token, sealed to the user (web.key)
      ALTER TABLE users ADD COLUMN github_checked_at INTEGER;   -- when GitHub last confirmed the membership
      ALTER TABLE users ADD COLUMN suspended_at INTEGER;        -- a membership check said no
      ALTER TABLE users ADD COLUMN suspended_reason TEXT;       -- why, in words for the member and their tools
      CREATE UNIQUE INDEX users_github_id ON users(github_id);
      CREATE TABLE github_former_logins (
        login TEXT PRIMARY KEY COLLATE NOCASE,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        github_id INTEGER NOT NULL,
        renamed_at INTEGER NOT NULL
      );
    `);
  },
};
