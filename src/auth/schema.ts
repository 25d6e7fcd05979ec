/**
 * The web app's tables (a step of the store's schema, registry.ts): browser sessions
 * (their ids stored hashed, so a copy of the database signs nobody in), one-time sign-in
 * links, and what the pages need on existing rows: a user's default model and GitHub
 * teams, the files each tool call changed (shown inline again after a reload).
 */
import type { Migration } from '../store/migrations.js';

declare module '../store/tables.js' {
  interface Tables {
    sessions: SessionsTable;
    login_links: LoginLinksTable;
  }
}

/** Browser sessions, as anonymousSessionsMigration leaves them. */
export interface SessionsTable {
  /** SHA-256 of the cookie's session id. */
  sid_hash: string;
  /** Null while nobody has signed in to it (a sign-in under way). */
  user_id: number | null;
  /** express-session's JSON (no secret in clear). */
  data: string;
  expires_at: number;
  created_at: number;
}

export interface LoginLinksTable {
  /** SHA-256 of the link's secret. */
  token_hash: string;
  user_id: number;
  expires_at: number;
  used_at: number | null;
}

export const webMigration: Migration = {
  description: 'browser sessions, one-time sign-in links, user preferences, files shown with tool results',
  sqlite: `
      CREATE TABLE sessions (
        sid_hash TEXT PRIMARY KEY,           -- SHA-256 of the cookie's session id
        user_id INTEGER REFERENCES users(id) ON DELETE CASCADE,
        data TEXT NOT NULL,                  -- express-session's JSON (no secret in clear)
        expires_at INTEGER NOT NULL,
        created_at INTEGER NOT NULL
      );
      CREATE INDEX sessions_user ON sessions(user_id);
      CREATE INDEX sessions_expiry ON sessions(expires_at);
      CREATE TABLE login_links (
        token_hash TEXT PRIMARY KEY,         -- SHA-256 of the link's secret
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        expires_at INTEGER NOT NULL,
        used_at INTEGER
      );
      ALTER TABLE users ADD COLUMN default_model TEXT;
      ALTER TABLE users ADD COLUMN github_teams TEXT;   -- JSON ["org/team", ...] at the last check
      ALTER TABLE messages ADD COLUMN files TEXT;       -- JSON [{path, size}] a tool call changed
    `,
  postgres: `
      CREATE TABLE sessions (
        sid_hash TEXT PRIMARY KEY,
        user_id BIGINT REFERENCES users(id) ON DELETE CASCADE,
        data TEXT NOT NULL,
        expires_at BIGINT NOT NULL,
        created_at BIGINT NOT NULL
      );
      CREATE INDEX sessions_user ON sessions(user_id);
      CREATE INDEX sessions_expiry ON sessions(expires_at);
      CREATE TABLE login_links (
        token_hash TEXT PRIMARY KEY,
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        expires_at BIGINT NOT NULL,
        used_at BIGINT
      );
      ALTER TABLE users ADD COLUMN default_model TEXT;
      ALTER TABLE users ADD COLUMN github_teams TEXT;
      ALTER TABLE messages ADD COLUMN files TEXT;
    `,
};

/** Sessions nobody has signed in to (a sign-in under way) are bounded, oldest dropped first: this finds them in order. */
export const anonymousSessionsMigration: Migration = {
  description: 'sessions of sign-ins under way, by age',
  // user_id in it too: counting them reads the index alone.
  sqlite: 'CREATE INDEX sessions_anonymous ON sessions(user_id, created_at) WHERE user_id IS NULL',
  postgres: 'CREATE INDEX sessions_anonymous ON sessions(user_id, created_at) WHERE user_id IS NULL',
};
