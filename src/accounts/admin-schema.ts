/**
 * What the admin page needs in the store (a step of the schema, registry.ts): whether a
 * user is disabled, when and how they last signed in, and one row per execution with
 * the CPU time it used (usage per user and period).
 */
import type { Migration } from '../store/migrations.js';

export const adminMigration: Migration = {
  description: 'disabled users, last sign-in, executions with their CPU time',
  up(db) {
    db.exec(`
      ALTER TABLE users ADD COLUMN disabled_at INTEGER;    -- set: no session, token or sandbox works
      ALTER TABLE users ADD COLUMN last_sign_in_at INTEGER;
      ALTER TABLE users ADD COLUMN sign_in_method TEXT;    -- 'github' or 'link'
      CREATE TABLE executions (
        id INTEGER PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        ts INTEGER NOT NULL,                 -- epoch ms when the run began
        language TEXT NOT NULL,
        duration_ms REAL NOT NULL,
        cpu_ms REAL,                         -- the container's CPU time during the run; NULL when unknown
        outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'error', 'timeout', 'killed'))
      );
      CREATE INDEX executions_ts ON executions(ts);
      CREATE INDEX executions_user_ts ON executions(user_id, ts);
    `);
  },
};
