/**
 * The vault key: SANDGATE_PII_KEY (base64 or hex), else `<dataDir>/pii.key`, created on
 * first start; the same rules as every key of the gateway (src/secrets/key-file.ts).
 */
import { loadOrCreateKey } from '../secrets/key-file.js';

export const PII_KEY_FILE = 'pii.key';

/** The configured vault key, else the key file's, else a new one. Throws KeyFileError. */
export function loadOrCreatePiiKey(dataDir: string, configured?: string): Buffer {
  return loadOrCreateKey(dataDir, PII_KEY_FILE, { configured, setting: 'SANDGATE_PII_KEY' });
}
