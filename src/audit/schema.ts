/**
 * Schema of the audit log (store migration 4): one row per MCP request and per upstream
 * tool call. Arguments are recorded as their shape (keys, types, string lengths), never
 * their values, so the log itself holds no user data worth stealing.
 */
import type { Migration } from '../store/migrations.js';

export const auditMigration: Migration = {
  description: 'audit log',
  up(db) {
    db.exec(`
      CREATE TABLE audit_log (
        id INTEGER PRIMARY KEY,
        ts INTEGER NOT NULL,                 -- epoch ms when the request arrived
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        token_id INTEGER,                    -- NULL for calls not made with a token (e.g. the chat agent)
        token_name TEXT,
        kind TEXT NOT NULL CHECK (kind IN ('mcp', 'upstream')),
        method TEXT NOT NULL,                -- JSON-RPC method, or the upstream server name
        tool TEXT,                           -- tool (or resource) the request named
        args_shape TEXT,                     -- JSON shape of the arguments, never values
        duration_ms REAL NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'error', 'denied', 'rate_limited')),
        error_class TEXT
      );
      CREATE INDEX audit_log_user_ts ON audit_log(user_id, ts);
    `);
  },
};
