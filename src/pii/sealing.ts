/**
 * Encryption at rest for vault values: AES-256-GCM with a fresh 96-bit IV per record
 * and the record's owner as associated data (a record moved to another user's scope
 * fails to open). The key is derived from the configured vault key with HKDF.
 */
import crypto from 'node:crypto';

const IV_BYTES = 12;
const TAG_BYTES = 16;
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
    const iv = this.nextIv();
    const cipher = crypto.createCipheriv('aes-256-gcm', this.encKey, iv);
    cipher.setAAD(Buffer.from(aad, 'utf8'));
    const ct = Buffer.concat([cipher.update(value, 'utf8'), cipher.final()]);
    return Buffer.concat([iv, cipher.getAuthTag(), ct]);
  }

  /** The value, or undefined when the ciphertext or its row identity was tampered with. */
  open(sealed: Buffer, aad: string): string | undefined {
    try {
      const decipher = crypto.createDecipheriv('aes-256-gcm', this.encKey, sealed.subarray(0, IV_BYTES));
      decipher.setAAD(Buffer.from(aad, 'utf8'));
      decipher.setAuthTag(sealed.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
      return Buffer.concat([decipher.update(sealed.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString('utf8');
    } catch {
      return undefined;
    }
  }
}
