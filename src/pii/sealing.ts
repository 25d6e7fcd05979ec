/**
 * Encryption at rest for vault values (src/secrets/aead.ts: AES-256-GCM, a fresh IV per
 * record, the record's owner as associated data, so a record moved to another user's
 * scope fails to open), under a key derived from the vault key with HKDF, with IVs
 * drawn from the CSPRNG in blocks.
 */
import crypto from 'node:crypto';
import { IV_BYTES, open, seal } from '../secrets/aead.js';

/** IVs drawn from the CSPRNG at a time: one call per value cost more than the encryption. */
const IV_POOL_BYTES = IV_BYTES * 512;

export class Sealer {
  private readonly encKey: crypto.KeyObject;
  private readonly ivPool = Buffer.alloc(IV_POOL_BYTES);
  private ivAt = IV_POOL_BYTES;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new Error('the PII vault key must be 32 bytes');
    this.encKey = crypto.createSecretKey(Buffer.from(crypto.hkdfSync('sha256', key, Buffer.alloc(0), 'sandgate pii aes-256-gcm', 32)));
  }

  /** A fresh random IV. Each is used once: the pool is refilled, never reread. */
  private nextIv(): Buffer {
    if (this.ivAt + IV_BYTES > IV_POOL_BYTES) {
      crypto.randomFillSync(this.ivPool);
      this.ivAt = 0;
    }
    const iv = this.ivPool.subarray(this.ivAt, this.ivAt + IV_BYTES);
    this.ivAt += IV_BYTES;
    return iv;
  }

  seal(value: string, aad: string): Buffer {
    return seal(this.encKey, value, Buffer.from(aad, 'utf8'), Buffer.from(this.nextIv()));
  }

  /** The value, or undefined when the ciphertext or its row identity was tampered with. */
  open(sealed: Buffer, aad: string): string | undefined {
    try {
      return open(this.encKey, sealed, Buffer.from(aad, 'utf8')).toString('utf8');
    } catch {
      return undefined;
    }
  }
}
