/**
 * The store's own tables: users and their sandboxes (the first step of the schema; see
 * registry.ts for the order of all steps).
 */
import type { Migration } from './migrations.js';

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
