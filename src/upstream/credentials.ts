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
  set(userId: number, server: string, name: string, value: string): Promise<void>;
  /** Deletes one credential, or all of a user's credentials for the server; returns how many. */
  delete(userId: number, server: string, name?: string): Promise<number>;
  /** The user's decrypted credentials for the server, by name. */
  get(userId: number, server: string): Promise<Record<string, string>>;
  /** Names of the credentials the user has stored for the server (no values). */
  names(userId: number, server: string): Promise<string[]>;
}

const aad = (userId: number, server: string, name: string) => Buffer.from(`${userId}\0${server}\0${name}`, 'utf8');

/** A CredentialStore over the `upstream_credentials` table (schema.ts). */
export function createCredentialStore(db: Db, key: Buffer): CredentialStore {
  return {
    async set(userId, server, name, value) {
      await db
        .insertInto('upstream_credentials')
        .values({ user_id: userId, server, name, sealed: seal(key, value, aad(userId, server, name)), updated_at: Date.now() })
        .onConflict((oc) =>
          oc.columns(['user_id', 'server', 'name']).doUpdateSet((eb) => ({ sealed: eb.ref('excluded.sealed'), updated_at: eb.ref('excluded.updated_at') })),
        )
        .execute();
    },
    async delete(userId, server, name) {
      let query = db.deleteFrom('upstream_credentials').where('user_id', '=', userId).where('server', '=', server);
      if (name !== undefined) query = query.where('name', '=', name);
      const r = await query.executeTakeFirst();
      return Number(r.numDeletedRows);
    },
    async get(userId, server) {
      const rows = await db
        .selectFrom('upstream_credentials')
        .select(['name', 'sealed'])
        .where('user_id', '=', userId)
        .where('server', '=', server)
        .orderBy('name')
        .execute();
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
    async names(userId, server) {
      const rows = await db
        .selectFrom('upstream_credentials')
        .select('name')
        .where('user_id', '=', userId)
        .where('server', '=', server)
        .orderBy('name')
        .execute();
      return rows.map((r) => r.name);
    },
  };
}
