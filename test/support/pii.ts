/**
 * Helpers for the PII tests and the benchmark: a throw-away store with the full schema,
 * a user to own scopes, and a seeded random source for property tests.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import { openStoreFile, type Store } from '../../src/store/store.js';
import { ensureUser } from '../../src/accounts/accounts.js';
import { MIGRATIONS } from '../../src/migrations.js';
import { PiiVault, type PiiVaultOptions } from '../../src/pii/vault.js';

export interface TestVault {
  store: Store;
  vault: PiiVault;
  key: Buffer;
  dir: string;
  userId(name: string): number;
  cleanup(): void;
}

/** A vault over a fresh SQLite file in a temporary directory. */
export function openTestVault(options: Partial<PiiVaultOptions> = {}): TestVault {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-pii-'));
  const store = openStoreFile(path.join(dir, 'sandgate.db'), MIGRATIONS);
  const key = crypto.randomBytes(32);
  const vault = new PiiVault(store.db, key, { ttlMs: 7 * 24 * 3_600_000, ...options });
  return {
    store,
    vault,
    key,
    dir,
    userId: (name) => ensureUser(store.db, name).id,
    cleanup() {
      store.close();
      fs.rmSync(dir, { recursive: true, force: true });
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
