/**
 * The upstream module's tables, as migrations (src/migrations.ts keeps the ordered
 * list): the sealed per-user credentials (credentials.ts) and the uid of each stdio
 * connection (identities.ts).
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

export const UPSTREAM_IDENTITIES_MIGRATION: Migration = {
  description: 'a uid of its own for each stdio upstream connection',
  up(db) {
    db.exec(`
      CREATE TABLE upstream_identities (
        id INTEGER PRIMARY KEY,        -- the uid is the gateway's block (uidBlockOf) + id
        connection TEXT NOT NULL UNIQUE -- "<server id>/shared" or "<server id>/user-<user id>"
      );
    `);
  },
};
