/**
 * Helpers for the PII tests and the benchmark: a throw-away store with the full schema,
 * a user to own scopes, and a seeded random source for property tests.
 */
import fs from 'node:fs';
import crypto from 'node:crypto';
import type { Store } from '../../src/store/store.js';
import { ensureUser } from '../../src/accounts/accounts.js';
import { PiiVault, type PiiVaultOptions } from '../../src/pii/vault.js';
import { openTestStore } from './store.js';

export interface TestVault {
  store: Store;
  vault: PiiVault;
  key: Buffer;
  /** The store's data directory (the SQLite file is in it). */
  dir: string;
  userId(name: string): Promise<number>;
  cleanup(): Promise<void>;
}

/** A vault over a fresh store: a SQLite file in a temporary directory, or a fresh Postgres database in the postgres project. */
export async function openTestVault(options: Partial<PiiVaultOptions> = {}): Promise<TestVault> {
  const store = await openTestStore();
  const key = crypto.randomBytes(32);
  const vault = new PiiVault(store.db, key, { ttlMs: 7 * 24 * 3_600_000, ...options });
  return {
    store,
    vault,
    key,
    dir: store.dataDir,
    userId: async (name) => (await ensureUser(store.db, name)).id,
    async cleanup() {
      await store.close();
      fs.rmSync(store.dataDir, { recursive: true, force: true });
    },
  };
}

/** mulberry32: a small seeded PRNG, so property tests fail the same way twice. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Splits text into chunks of random sizes (1 to maxChunk characters). */
export function randomChunks(text: string, random: () => number, maxChunk: number): string[] {
  const chunks: string[] = [];
  for (let i = 0; i < text.length; ) {
    const n = 1 + Math.floor(random() * maxChunk);
    chunks.push(text.slice(i, i + n));
    i += n;
  }
  return chunks;
}
