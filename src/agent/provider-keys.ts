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
import type { Db } from '../store/store.js';
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

  async set(userId: number, provider: string, value: string): Promise<void> {
    if (!(KEYED_PROVIDERS as readonly string[]).includes(provider)) throw new ProviderKeyError(`unknown provider "${provider}": use one of ${KEYED_PROVIDERS.join(', ')}`);
    const v = value.trim();
    if (!v || v.length > MAX_KEY_CHARS || /[\s\0]/.test(v)) throw new ProviderKeyError('an API key is one line of text without spaces (at most 4096 characters)');
    await this.db
      .insertInto('provider_keys')
      .values({ user_id: userId, provider, sealed: seal(this.key, v, aad(userId, provider)), updated_at: Date.now() })
      .onConflict((oc) => oc.columns(['user_id', 'provider']).doUpdateSet((eb) => ({ sealed: eb.ref('excluded.sealed'), updated_at: eb.ref('excluded.updated_at') })))
      .execute();
  }

  async delete(userId: number, provider: string): Promise<boolean> {
    const r = await this.db.deleteFrom('provider_keys').where('user_id', '=', userId).where('provider', '=', provider).executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  /** Whether the user has a key for the provider that opens (one sealed under a replaced key file does not). */
  async has(userId: number, provider: ProviderId): Promise<boolean> {
    return (await this.get(userId, provider)) !== undefined;
  }

  /** The providers the user has a key for, and when each was set. */
  async list(userId: number): Promise<{ provider: string; updatedAt: number }[]> {
    const rows = await this.db.selectFrom('provider_keys').select(['provider', 'updated_at']).where('user_id', '=', userId).orderBy('provider').execute();
    return rows.map((r) => ({ provider: r.provider, updatedAt: r.updated_at }));
  }

  /** The key itself, for the request that uses it; undefined when none is set or it cannot be opened (the key file changed). */
  async get(userId: number, provider: ProviderId): Promise<string | undefined> {
    const row = await this.db.selectFrom('provider_keys').select('sealed').where('user_id', '=', userId).where('provider', '=', provider).executeTakeFirst();
    if (!row) return undefined;
    try {
      return open(this.key, row.sealed, aad(userId, provider)).toString('utf8');
    } catch {
      return undefined;
    }
  }
}
