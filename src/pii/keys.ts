/**
 * The vault key: 32 bytes from configuration (SANDGATE_PII_KEY, base64 or hex), or from
 * `<dataDir>/pii.key`, created on first start with mode 0600 in a 0700 directory.
 * Losing the key makes every stored value unreadable (tokens then come back as unknown,
 * never as guesses); a key file readable by others is refused rather than used.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

export const KEY_BYTES = 32;
export const KEY_FILE = 'pii.key';

export class PiiKeyError extends Error {
  override name = 'PiiKeyError';
}

const HEX_KEY = /^[0-9a-fA-F]{64}$/;
const BASE64_KEY = /^[A-Za-z0-9+/_-]{43}=?$/;

function decodeKey(text: string, source: string): Buffer {
  const t = text.trim();
  if (HEX_KEY.test(t)) return Buffer.from(t, 'hex');
  if (BASE64_KEY.test(t)) return Buffer.from(t.replaceAll('-', '+').replaceAll('_', '/'), 'base64');
  throw new PiiKeyError(`${source} is not a ${KEY_BYTES}-byte key in base64 or hex. Generate one with: openssl rand -base64 ${KEY_BYTES}`);
}

/**
 * Returns the configured key, else the key file's, else a new key written to the key
 * file. Throws PiiKeyError when a key is malformed or its file is readable by others.
 */
export function loadOrCreateKey(dataDir: string, configured?: string): Buffer {
  if (configured) return decodeKey(configured, 'SANDGATE_PII_KEY');
  const file = path.join(dataDir, KEY_FILE);
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  try {
    const key = crypto.randomBytes(KEY_BYTES);
    // `wx`: never overwrite a key that exists (another process may have just made it).
    fs.writeFileSync(file, key.toString('base64') + '\n', { mode: 0o600, flag: 'wx' });
    return key;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  }
  const mode = fs.statSync(file).mode & 0o777;
  if (mode & 0o077) {
    throw new PiiKeyError(`${file} is readable by other users (mode ${mode.toString(8)}): run chmod 600 ${file}`);
  }
  return decodeKey(fs.readFileSync(file, 'utf8'), file);
}
