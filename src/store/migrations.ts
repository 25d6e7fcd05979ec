/**
 * Schema history, append-only: never edit a migration that has shipped; add a new one.
 * Version N is at index N-1. Each runs in a transaction with the user_version bump.
 */
import type Database from 'better-sqlite3';

export interface Migration {
  version: number;
  description: string;
  up(db: Database.Database): void;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
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
  },
];
