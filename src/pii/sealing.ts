/**
 * Encryption at rest for vault values: AES-256-GCM with a fresh 96-bit IV per value and
 * the row's identity as associated data (a sealed value moved to another row, or
 * another user's scope, fails to open), plus the HMAC used to find a value's token
 * without storing the value. Both keys are derived from the vault key with HKDF, so
 * one configured secret serves both purposes without reuse.
 */
import crypto from 'node:crypto';

const IV_BYTES = 12;
const TAG_BYTES = 16;
/** IVs drawn from the CSPRNG at a time: one call per value cost more than the encryption. */
const IV_POOL_BYTES = IV_BYTES * 512;

export class Sealer {
  private readonly encKey: crypto.KeyObject;
  private readonly macKey: crypto.KeyObject;
  private readonly ivPool = Buffer.alloc(IV_POOL_BYTES);
  private ivAt = IV_POOL_BYTES;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new Error('the PII vault key must be 32 bytes');
    this.encKey = crypto.createSecretKey(Buffer.from(crypto.hkdfSync('sha256', key, Buffer.alloc(0), 'sandgate pii aes-256-gcm', 32)));
    this.macKey = crypto.createSecretKey(Buffer.from(crypto.hkdfSync('sha256', key, Buffer.alloc(0), 'sandgate pii hmac-sha256', 32)));
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

  /** Keyed digest of a value within a scope: equal values in one scope, equal digests. */
  mac(scopeId: number, value: string): Buffer {
    return crypto.createHmac('sha256', this.macKey).update(`${scopeId}\u0000`).update(value, 'utf8').digest();
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
