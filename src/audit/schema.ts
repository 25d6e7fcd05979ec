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

/**
 * The audit log learns who called and how (a later step of the schema): `via` is how the
 * caller came (an API token, a browser session, a conversation of the built-in agent),
 * `conversation_id` which conversation, `target_user_id` whom an admin's action was
 * about; `kind` gains the web app, the agent and admin actions. SQLite cannot change a
 * CHECK constraint in place, so the table is rebuilt here, rows kept; rows from before
 * came with a token when they name one.
 */
export const auditCallersMigration: Migration = {
  description: 'audit log: how each caller came, and web, agent and admin actions',
  up(db) {
    db.exec(`
      CREATE TABLE audit_log_callers (
        id INTEGER PRIMARY KEY,
        ts INTEGER NOT NULL,                 -- epoch ms when the request arrived
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        via TEXT CHECK (via IN ('token', 'session', 'agent')),
        token_id INTEGER,                    -- via token
        token_name TEXT,
        conversation_id TEXT,                -- via agent
        kind TEXT NOT NULL CHECK (kind IN ('mcp', 'upstream', 'web', 'agent', 'admin')),
        method TEXT NOT NULL,                -- JSON-RPC method, upstream server, or the action
        tool TEXT,                           -- tool (or resource) the request named
        args_shape TEXT,                     -- JSON shape of the arguments, never values
        target_user_id INTEGER,              -- an admin action's subject
        duration_ms REAL NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'error', 'denied', 'rate_limited')),
        error_class TEXT
      );
      INSERT INTO audit_log_callers (id, ts, user_id, via, token_id, token_name, kind, method, tool, args_shape, duration_ms, outcome, error_class)
        SELECT id, ts, user_id, CASE WHEN token_id IS NOT NULL THEN 'token' END, token_id, token_name, kind, method, tool, args_shape, duration_ms, outcome, error_class
        FROM audit_log;
      DROP TABLE audit_log;
      ALTER TABLE audit_log_callers RENAME TO audit_log;
      CREATE INDEX audit_log_user_ts ON audit_log(user_id, ts);
      CREATE INDEX audit_log_ts ON audit_log(ts);
    `);
  },
};
