import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { KeyFileError } from '../errors.js';
import { loadOrCreatePiiKey, PII_KEY_FILE } from '../pii/keys.js';
import { CREDENTIALS_KEY_FILE, loadOrCreateCredentialsKey } from '../upstream/credentials.js';
import { open, seal } from './aead.js';
import { loadOrCreateKey } from './key-file.js';

const tmp = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-keys-')), 'data');

describe.each([
  ['the PII vault key', PII_KEY_FILE, (dir: string) => loadOrCreatePiiKey(dir)],
  ['the upstream credentials key', CREDENTIALS_KEY_FILE, (dir: string) => loadOrCreateCredentialsKey(dir)],
])('%s: the same rules as every key', (_what, file, load) => {
  it('is created once, 0600 in a 0700 folder, and read back', () => {
    const dir = tmp();
    const key = load(dir);
    expect(key.length).toBe(32);
    expect(fs.statSync(path.join(dir, file)).mode & 0o777).toBe(0o600);
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    expect(load(dir).equals(key)).toBe(true);
  });

  it('a key file others can read is refused, and says how to fix it', () => {
    const dir = tmp();
    load(dir);
    fs.chmodSync(path.join(dir, file), 0o644);
    expect(() => load(dir)).toThrow(KeyFileError);
    expect(() => load(dir)).toThrow(`chmod 600 ${path.join(dir, file)}`);
  });

  it('a damaged key file is an operator error, never a stack trace of its own', () => {
    const dir = tmp();
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, file), 'short\n', { mode: 0o600 });
    const e = (() => {
      try {
        load(dir);
      } catch (err) {
        return err as KeyFileError;
      }
    })();
    expect(e).toBeInstanceOf(KeyFileError);
    expect(e!.reason).toBe('key_invalid');
    expect(e!.message).toMatch(/is not a 32-byte key in base64 or hex: restore it from a backup/);
  });
});

describe('keys and sealing', () => {
  it('prefers a configured key, in base64 or hex, and names the setting when it is bad', () => {
    const hex = 'ab'.repeat(32);
    expect(loadOrCreateKey('/nonexistent', 'x.key', { configured: hex }).toString('hex')).toBe(hex);
    const b64 = Buffer.alloc(32, 1).toString('base64');
    expect(loadOrCreatePiiKey('/nonexistent', b64).equals(Buffer.alloc(32, 1))).toBe(true);
    expect(() => loadOrCreatePiiKey('/nonexistent', 'too-short')).toThrow(/SANDGATE_PII_KEY is not a 32-byte key/);
  });

  it('sealed data opens only with its key and its associated data', () => {
    const key = Buffer.alloc(32, 7);
    const sealed = seal(key, 'secret', Buffer.from('row 1'));
    expect(open(key, sealed, Buffer.from('row 1')).toString()).toBe('secret');
    expect(() => open(key, sealed, Buffer.from('row 2'))).toThrow();
    expect(() => open(Buffer.alloc(32, 8), sealed, Buffer.from('row 1'))).toThrow();
    expect(seal(key, 'secret', Buffer.from('row 1')).equals(sealed)).toBe(false); // a fresh IV each time
  });
});
