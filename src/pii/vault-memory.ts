/**
 * The vault's in-process copy of its scopes: every live value of a scope, with its
 * token and last use, and the scope's counters. A scope is read whole from the database
 * the first time it is used (and again after it was unloaded), so while it is loaded
 * the memory is the complete answer: a value it does not hold has no token yet, a token
 * it does not hold resolves to nothing. The database is written through, in the same
 * transaction that changes memory; when a write fails the scope is unloaded and read
 * again.
 *
 * One ScopeMemory object per scope id for the life of the vault, even when unloaded, so
 * two requests of one scope never hold diverging copies. A gateway runs one process per
 * database; the command line only deletes scopes (a revoked token), which the gateway
 * notices by looking the scope up on every request.
 *
 * Bounded: past MAX_REMEMBERED values the least recently used scopes are unloaded.
 */
import type { TokenType } from './entities.js';

export const MAX_REMEMBERED = 100_000;

export interface RememberedValue {
  value: string;
  token: string;
  type: TokenType;
  n: number;
  lastUsedAt: number;
  /** The stored batch holding it; set once the value is written. */
  batch?: StoredBatch;
}

/** A pii_batches row: its values in order, whose uses are written back together. */
export interface StoredBatch {
  id: number;
  items: RememberedValue[];
}

export class ScopeMemory {
  readonly byValue = new Map<string, RememberedValue>();
  readonly byToken = new Map<string, RememberedValue>();
  /** The last number issued per type. */
  readonly counters = new Map<TokenType, number>();
  loaded = false;
  /** Set when the scope was dropped: holders of this object must not read another scope into it. */
  retired = false;

  constructor(
    /** Whose scope this is; a dropped scope's id can be taken by a new one. */
    readonly owner: string,
  ) {}

  remember(v: RememberedValue): void {
    this.byValue.set(v.value, v);
    this.byToken.set(v.token, v);
  }

  forget(v: RememberedValue): void {
    this.byValue.delete(v.value);
    this.byToken.delete(v.token);
  }

  /** Drops the contents; the next use reads the scope from the database again. */
  unload(): void {
    this.byValue.clear();
    this.byToken.clear();
    this.counters.clear();
    this.loaded = false;
  }
}

export class VaultMemory {
  /** In least-recently-used order. */
  private readonly scopes = new Map<number, ScopeMemory>();

  /** The memory of a scope, marked as the most recently used; unloads others past the bound. */
  forScope(scopeId: number, owner: string): ScopeMemory {
    let m = this.scopes.get(scopeId);
    if (m) this.scopes.delete(scopeId);
    if (m && m.owner !== owner) {
      m.unload();
      m.retired = true;
      m = undefined;
    }
    m ??= new ScopeMemory(owner);
    this.scopes.set(scopeId, m);
    let total = 0;
    for (const s of this.scopes.values()) total += s.byValue.size;
    for (const s of this.scopes.values()) {
      if (total <= MAX_REMEMBERED || s === m) break;
      total -= s.byValue.size;
      s.unload();
    }
    return m;
  }

  forgetScope(scopeId: number): void {
    const m = this.scopes.get(scopeId);
    if (m) {
      m.unload();
      m.retired = true;
    }
    this.scopes.delete(scopeId);
  }

  unloadAll(): void {
    for (const s of this.scopes.values()) s.unload();
  }
}
