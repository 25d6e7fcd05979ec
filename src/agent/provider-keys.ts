/**
 * Users' own API keys for model providers: write-only (set, delete, whether one is set;
 * never shown again), sealed at rest (src/secrets/aead.ts) under `<dataDir>/provider-keys.key`
 * with the rules of every key file, each bound to its row so a sealed key copied to
 * another user does not open. A key is used for its owner's requests to that provider
 * only: never logged, never in an audit row, never sent to a sandbox.
 */
import { GatewayError } from '../errors.js';
import { open, seal } from '../secrets/aead.js';
import { loadOrCreateKey } from '../secrets/key-file.js';
import { statement, type Db } from '../store/store.js';
import { KEYED_PROVIDERS, type KeyLookup, type ProviderId } from './models.js';

export const PROVIDER_KEYS_FILE = 'provider-keys.key';
/** Longest key accepted (real ones are under 200 characters). */
const MAX_KEY_CHARS = 4096;

export class ProviderKeyError extends GatewayError {
  override name = 'ProviderKeyError';
  constructor(message: string) {
    super(message, { reason: 'invalid_request', status: 400 });
  }
}

const aad = (userId: number, provider: string) => Buffer.from(`provider-key\0${userId}\0${provider}`, 'utf8');

export class ProviderKeys implements KeyLookup {
  private readonly key: Buffer;

  constructor(
    private readonly db: Db,
    dataDir: string,
  ) {
    this.key = loadOrCreateKey(dataDir, PROVIDER_KEYS_FILE);
  }

  set(userId: number, provider: string, value: string): void {
    if (!(KEYED_PROVIDERS as readonly string[]).includes(provider)) throw new ProviderKeyError(`unknown provider "${provider}": use one of ${KEYED_PROVIDERS.join(', ')}`);
    const v = value.trim();
    if (!v || v.length > MAX_KEY_CHARS || /[\s\0]/.test(v)) throw new ProviderKeyError('an API key is one line of text without spaces (at most 4096 characters)');
    statement(
      this.db,
      `INSERT INTO provider_keys (user_id, provider, sealed, updated_at) VALUES (?, ?, ?, ?)
       ON CONFLICT(user_id, provider) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at`,
    ).run(userId, provider, seal(this.key, v, aad(userId, provider)), Date.now());
  }

  delete(userId: number, provider: string): boolean {
    return statement(this.db, 'DELETE FROM provider_keys WHERE user_id = ? AND provider = ?').run(userId, provider).changes > 0;
  }

  /** Whether the user has a key for the provider that opens (one sealed under a replaced key file does not). */
  has(userId: number, provider: ProviderId): boolean {
    return this.get(userId, provider) !== undefined;
  }

  /** The providers the user has a key for, and when each was set. */
  list(userId: number): { provider: string; updatedAt: number }[] {
    return (statement(this.db, 'SELECT provider, updated_at FROM provider_keys WHERE user_id = ? ORDER BY provider').all(userId) as { provider: string; updated_at: number }[]).map((r) => ({
      provider: r.provider,
      updatedAt: r.updated_at,
    }));
  }

  /** The key itself, for the request that uses it; undefined when none is set or it cannot be opened (the key file changed). */
  get(userId: number, provider: ProviderId): string | undefined {
    const row = statement(this.db, 'SELECT sealed FROM provider_keys WHERE user_id = ? AND provider = ?').get(userId, provider) as { sealed: Buffer } | undefined;
    if (!row) return undefined;
    try {
      return open(this.key, row.sealed, aad(userId, provider)).toString('utf8');
    } catch {
      return undefined;
    }
  }
}
