/**
 * Per-user credentials for per-user upstream servers, encrypted at rest
 * (src/secrets/aead.ts) under a key kept in `<dataDir>/upstream.key`.
 * Each value is bound to its row (user, server, name) as additional authenticated data,
 * so a sealed value copied to another row does not decrypt.
 *
 * Values go into the upstream connection only (env for stdio, headers for http): never
 * into a sandbox, a log line or an audit entry.
 */
import { GatewayError } from '../errors.js';
import { open, seal } from '../secrets/aead.js';
import { loadOrCreateKey } from '../secrets/key-file.js';
import type { Db } from '../store/store.js';

export const CREDENTIALS_KEY_FILE = 'upstream.key';

/** A stored credential cannot be read (its key file was replaced): the user sets it again. */
export class CredentialError extends GatewayError {
  override name = 'CredentialError';
  constructor(message: string) {
    super(message, { reason: 'credential_unreadable', status: 409, operator: false });
  }
}

/** The key that seals users' credentials: `<dataDir>/upstream.key`, with the rules of every key (src/secrets/key-file.ts). */
export function loadOrCreateCredentialsKey(dataDir: string): Buffer {
  return loadOrCreateKey(dataDir, CREDENTIALS_KEY_FILE);
}

export interface CredentialStore {
  /** Stores (or replaces) one credential. */
  set(userId: number, server: string, name: string, value: string): void;
  /** Deletes one credential, or all of a user's credentials for the server; returns how many. */
  delete(userId: number, server: string, name?: string): number;
  /** The user's decrypted credentials for the server, by name. */
  get(userId: number, server: string): Record<string, string>;
  /** Names of the credentials the user has stored for the server (no values). */
  names(userId: number, server: string): string[];
}

const aad = (userId: number, server: string, name: string) => Buffer.from(`${userId}\0${server}\0${name}`, 'utf8');

/** A CredentialStore over the `upstream_credentials` table (schema.ts). */
export function createCredentialStore(db: Db, key: Buffer): CredentialStore {
  return {
    set(userId, server, name, value) {
      db.prepare(
        `INSERT INTO upstream_credentials (user_id, server, name, sealed, updated_at) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT(user_id, server, name) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at`,
      ).run(userId, server, name, seal(key, value, aad(userId, server, name)), Date.now());
    },
    delete(userId, server, name) {
      const r =
        name === undefined
          ? db.prepare('DELETE FROM upstream_credentials WHERE user_id = ? AND server = ?').run(userId, server)
          : db.prepare('DELETE FROM upstream_credentials WHERE user_id = ? AND server = ? AND name = ?').run(userId, server, name);
      return r.changes;
    },
    get(userId, server) {
      const rows = db
        .prepare('SELECT name, sealed FROM upstream_credentials WHERE user_id = ? AND server = ?')
        .all(userId, server) as { name: string; sealed: Buffer }[];
      const out: Record<string, string> = {};
      for (const r of rows) {
        try {
          out[r.name] = open(key, r.sealed, aad(userId, server, r.name)).toString('utf8');
        } catch {
          throw new CredentialError(
            `your stored credential ${r.name} for upstream server "${server}" cannot be decrypted (was ${CREDENTIALS_KEY_FILE} replaced?): set it again`,
          );
        }
      }
      return out;
    },
    names(userId, server) {
      return (
        db.prepare('SELECT name FROM upstream_credentials WHERE user_id = ? AND server = ? ORDER BY name').all(userId, server) as {
          name: string;
        }[]
      ).map((r) => r.name);
    },
  };
}
