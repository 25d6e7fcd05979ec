/**
 * The gateway's keys: 32 bytes each, from a setting (base64 or hex) or from a file in
 * the data directory, created on first start with mode 0600 in a 0700 directory. The
 * same rules for every key (the PII vault's `pii.key`, the upstream credentials'
 * `upstream.key`): a malformed key, or a key file others can read, stops the gateway
 * with what to do instead of being used. Losing a key makes what it sealed unreadable.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { KeyFileError } from '../errors.js';

export const KEY_BYTES = 32;

const HEX_KEY = /^[0-9a-fA-F]{64}$/;
const BASE64_KEY = /^[A-Za-z0-9+/_-]{43}=?$/;

function decodeKey(text: string, source: string): Buffer {
  const t = text.trim();
  if (HEX_KEY.test(t)) return Buffer.from(t, 'hex');
  if (BASE64_KEY.test(t)) return Buffer.from(t.replaceAll('-', '+').replaceAll('_', '/'), 'base64');
  throw new KeyFileError(`${source} is not a ${KEY_BYTES}-byte key in base64 or hex: restore it from a backup (what it sealed cannot be read without it), or generate one with: openssl rand -base64 ${KEY_BYTES}`);
}

export interface KeyOptions {
  /** A key given in a setting (base64 or hex), which wins over the file. */
  configured?: string;
  /** The setting's name, for messages. */
  setting?: string;
}

/**
 * The configured key, else `<dataDir>/<file>`'s, else a new key written there. Throws
 * KeyFileError when a key is malformed or its file can be read by group or others.
 */
export function loadOrCreateKey(dataDir: string, file: string, opts: KeyOptions = {}): Buffer {
  if (opts.configured) return decodeKey(opts.configured, opts.setting ?? 'the configured key');
  const full = path.join(dataDir, file);
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  try {
    const key = crypto.randomBytes(KEY_BYTES);
    // `wx`: never overwrite a key that exists (another process may have just made it).
    fs.writeFileSync(full, key.toString('base64') + '\n', { mode: 0o600, flag: 'wx' });
    return key;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  }
  const mode = fs.statSync(full).mode & 0o777;
  if (mode & 0o077) throw new KeyFileError(`${full} can be read by other users (mode ${mode.toString(8)}): run chmod 600 ${full}`);
  return decodeKey(fs.readFileSync(full, 'utf8'), full);
}
