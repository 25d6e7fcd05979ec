/**
 * The upstream module's table, as a migration the store registers at version 5
 * (src/store/migrations.ts keeps the ordered list).
 */
import type { Migration } from '../store/migrations.js';

export const UPSTREAM_MIGRATION: Migration = {
  description: 'per-user credentials for upstream MCP servers (AES-256-GCM)',
  up(db) {
    db.exec(`
      CREATE TABLE upstream_credentials (
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        server TEXT NOT NULL,          -- the name under mcpServers
        name TEXT NOT NULL,            -- env var (stdio) or header (http) it is injected as
        sealed BLOB NOT NULL,          -- 12-byte IV | 16-byte GCM tag | ciphertext
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (user_id, server, name)
      );
    `);
  },
};
