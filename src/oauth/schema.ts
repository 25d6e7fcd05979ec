/**
 * Schema of the gateway's own OAuth authorization server (src/oauth/), for MCP clients
 * that sign in with a browser instead of a pasted personal token.
 *
 * A user's consent to one client is a **grant**, and a grant is a row of `api_tokens`
 * with `kind = 'app'` and the client's id. So everything a personal token has, a
 * connected app has too, by the same code: its own PII scope, its name in the audit
 * log, a revocation on the tokens page and by admins, the user's disabling. The row's
 * `hash` is random and never given to anyone: a grant is used only through the access
 * and refresh tokens issued for it.
 *
 * - `oauth_clients`: clients that registered (RFC 7591), and the Client ID Metadata
 *   Documents fetched for clients whose id is a URL, as validated.
 * - `oauth_codes`: authorization codes (a hash each), single use, a minute long.
 * - `oauth_tokens`: access and refresh tokens (a hash each) of a grant. A refresh token
 *   is used once: its use marks it rotated, and a second use revokes the whole grant.
 */
import type { Generated } from 'kysely';
import type { Migration } from '../store/migrations.js';

declare module '../store/tables.js' {
  interface Tables {
    oauth_clients: OAuthClientsTable;
    oauth_codes: OAuthCodesTable;
    oauth_tokens: OAuthTokensTable;
  }
}

export interface OAuthClientsTable {
  client_id: string;
  /** `registered`: by dynamic registration; `document`: a Client ID Metadata Document (the id is its URL). */
  source: 'registered' | 'document';
  /** The client's metadata as validated (JSON). */
  metadata: string;
  created_at: number;
  /** When a document was fetched (refetched once it is older than its lifetime). */
  fetched_at: number | null;
  /** When a grant was last made for it: a registration never used is removed after a day. */
  used_at: number | null;
}

export interface OAuthCodesTable {
  /** SHA-256 of the code. */
  hash: Buffer;
  grant_id: number;
  client_id: string;
  redirect_uri: string;
  /** The PKCE S256 challenge. */
  code_challenge: string;
  resource: string;
  scope: string;
  created_at: number;
  expires_at: number;
  used_at: number | null;
}

export interface OAuthTokensTable {
  id: Generated<number>;
  /** SHA-256 of the token. */
  hash: Buffer;
  kind: 'access' | 'refresh';
  grant_id: number;
  resource: string;
  scope: string;
  created_at: number;
  expires_at: number;
  /** A refresh token: when it was exchanged (a second exchange is a reuse). */
  used_at: number | null;
  revoked_at: number | null;
  /** SHA-256 of the code the chain of tokens began with (refreshes keep it): a code used twice revokes that chain only. */
  origin: Buffer;
}

export const oauthMigration: Migration = {
  description: 'OAuth for MCP clients: grants as app tokens, clients, codes, access and refresh tokens',
  sqlite: `
      ALTER TABLE api_tokens ADD COLUMN kind TEXT NOT NULL DEFAULT 'personal' CHECK (kind IN ('personal', 'app'));
      ALTER TABLE api_tokens ADD COLUMN client_id TEXT;
      CREATE INDEX api_tokens_user_client ON api_tokens(user_id, client_id) WHERE client_id IS NOT NULL;
      CREATE TABLE oauth_clients (
        client_id TEXT PRIMARY KEY,
        source TEXT NOT NULL CHECK (source IN ('registered', 'document')),
        metadata TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        fetched_at INTEGER,
        used_at INTEGER
      );
      CREATE INDEX oauth_clients_unused ON oauth_clients(created_at) WHERE used_at IS NULL;
      CREATE TABLE oauth_codes (
        hash BLOB PRIMARY KEY,
        grant_id INTEGER NOT NULL REFERENCES api_tokens(id) ON DELETE CASCADE,
        client_id TEXT NOT NULL,
        redirect_uri TEXT NOT NULL,
        code_challenge TEXT NOT NULL,
        resource TEXT NOT NULL,
        scope TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        used_at INTEGER
      );
      CREATE INDEX oauth_codes_grant ON oauth_codes(grant_id);
      CREATE INDEX oauth_codes_expiry ON oauth_codes(expires_at);
      CREATE TABLE oauth_tokens (
        id INTEGER PRIMARY KEY,
        hash BLOB NOT NULL UNIQUE,
        kind TEXT NOT NULL CHECK (kind IN ('access', 'refresh')),
        grant_id INTEGER NOT NULL REFERENCES api_tokens(id) ON DELETE CASCADE,
        resource TEXT NOT NULL,
        scope TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        used_at INTEGER,
        revoked_at INTEGER,
        origin BLOB NOT NULL
      );
      CREATE INDEX oauth_tokens_grant ON oauth_tokens(grant_id);
      CREATE INDEX oauth_tokens_origin ON oauth_tokens(origin);
      CREATE INDEX oauth_tokens_expiry ON oauth_tokens(expires_at);
    `,
  postgres: `
      ALTER TABLE api_tokens ADD COLUMN kind TEXT NOT NULL DEFAULT 'personal' CHECK (kind IN ('personal', 'app'));
      ALTER TABLE api_tokens ADD COLUMN client_id TEXT;
      CREATE INDEX api_tokens_user_client ON api_tokens(user_id, client_id) WHERE client_id IS NOT NULL;
      CREATE TABLE oauth_clients (
        client_id TEXT PRIMARY KEY,
        source TEXT NOT NULL CHECK (source IN ('registered', 'document')),
        metadata TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        fetched_at BIGINT,
        used_at BIGINT
      );
      CREATE INDEX oauth_clients_unused ON oauth_clients(created_at) WHERE used_at IS NULL;
      CREATE TABLE oauth_codes (
        hash BYTEA PRIMARY KEY,
        grant_id BIGINT NOT NULL REFERENCES api_tokens(id) ON DELETE CASCADE,
        client_id TEXT NOT NULL,
        redirect_uri TEXT NOT NULL,
        code_challenge TEXT NOT NULL,
        resource TEXT NOT NULL,
        scope TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        used_at BIGINT
      );
      CREATE INDEX oauth_codes_grant ON oauth_codes(grant_id);
      CREATE INDEX oauth_codes_expiry ON oauth_codes(expires_at);
      CREATE TABLE oauth_tokens (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        hash BYTEA NOT NULL UNIQUE,
        kind TEXT NOT NULL CHECK (kind IN ('access', 'refresh')),
        grant_id BIGINT NOT NULL REFERENCES api_tokens(id) ON DELETE CASCADE,
        resource TEXT NOT NULL,
        scope TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        used_at BIGINT,
        revoked_at BIGINT,
        origin BYTEA NOT NULL
      );
      CREATE INDEX oauth_tokens_grant ON oauth_tokens(grant_id);
      CREATE INDEX oauth_tokens_origin ON oauth_tokens(origin);
      CREATE INDEX oauth_tokens_expiry ON oauth_tokens(expires_at);
    `,
};
