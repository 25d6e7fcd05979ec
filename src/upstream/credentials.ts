/**
 * Per-user credentials for per-user upstream servers, encrypted at rest with
 * AES-256-GCM under a key kept in `<dataDir>/upstream.key` (created 0600 when absent).
 * Each value is bound to its row (user, server, name) as additional authenticated data,
 * so a sealed value copied to another row does not decrypt.
 *
 * Values go into the upstream connection only (env for stdio, headers for http): never
 * into a sandbox, a log line or an audit entry.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Db } from '../store/store.js';

export const KEY_FILE = 'upstream.key';
const IV_BYTES = 12;
const TAG_BYTES = 16;

export class CredentialError extends Error {
  override name = 'CredentialError';
}

/**
 * Reads `<dataDir>/upstream.key` (32 random bytes, base64), creating it with mode 0600
 * when absent. Losing the file makes stored credentials unreadable: users re-enter them.
 */
export function loadOrCreateKey(dataDir: string): Buffer {
  const file = path.join(dataDir, KEY_FILE);
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  try {
    fs.writeFileSync(file, `${crypto.randomBytes(32).toString('base64')}\n`, { flag: 'wx', mode: 0o600 });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  }
  const key = Buffer.from(fs.readFileSync(file, 'utf8').trim(), 'base64');
  if (key.length !== 32) {
    throw new CredentialError(`${file} does not hold a 32-byte base64 key; restore it from a backup, or delete it (stored upstream credentials are then lost)`);
  }
  return key;
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

export function seal(key: Buffer, plaintext: string, ad: Buffer): Buffer {
  const iv = crypto.randomBytes(IV_BYTES);
  const cipher = crypto.createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(ad);
  const data = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), data]);
}

export function open(key: Buffer, sealed: Buffer, ad: Buffer): string {
  const decipher = crypto.createDecipheriv('aes-256-gcm', key, sealed.subarray(0, IV_BYTES));
  decipher.setAAD(ad);
  decipher.setAuthTag(sealed.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
  return Buffer.concat([decipher.update(sealed.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString('utf8');
}

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
          out[r.name] = open(key, r.sealed, aad(userId, server, r.name));
        } catch {
          throw new CredentialError(
            `your stored credential ${r.name} for upstream server "${server}" cannot be decrypted (was ${KEY_FILE} replaced?): set it again`,
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
