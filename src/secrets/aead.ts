/**
 * Encryption at rest, one way for everything the gateway seals (PII vault records,
 * upstream credentials): AES-256-GCM with a fresh 96-bit IV per message and additional
 * authenticated data naming what the message belongs to, so a sealed value moved to
 * another row, user or scope does not open. Layout: IV (12) | tag (16) | ciphertext.
 */
import crypto from 'node:crypto';

export const IV_BYTES = 12;
const TAG_BYTES = 16;

/** Seals `plaintext` under `key` bound to `aad`; `iv` must never repeat under one key (default: a random one). */
export function seal(key: crypto.CipherKey, plaintext: string | Buffer, aad: Buffer, iv: Buffer = crypto.randomBytes(IV_BYTES)): Buffer {
  const cipher = crypto.createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(aad);
  const ct = Buffer.concat([typeof plaintext === 'string' ? cipher.update(plaintext, 'utf8') : cipher.update(plaintext), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), ct]);
}

/** Opens what `seal` made; throws when the key, the AAD or any byte is not the sealed one. */
export function open(key: crypto.CipherKey, sealed: Buffer, aad: Buffer): Buffer {
  const decipher = crypto.createDecipheriv('aes-256-gcm', key, sealed.subarray(0, IV_BYTES));
  decipher.setAAD(aad);
  decipher.setAuthTag(sealed.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
  return Buffer.concat([decipher.update(sealed.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]);
}
