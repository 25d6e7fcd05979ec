/**
 * The vault's in-process memory of recently used values, so a value seen in one MCP
 * request is not hashed and looked up again in the next. It mirrors rows of
 * pii_values (with their last use) and is only ever a shortcut: every answer it gives
 * is one the database would give, and what it does not hold is read from there.
 *
 * Bounded: past MAX_REMEMBERED values the least recently used scopes are forgotten.
 * It holds plaintext values in memory, as the process does anyway while it tokenizes;
 * a gateway runs one process per database, so no other process can change rows
 * behind it except by purging expired ones, which it treats as expired too.
 */
import type { TokenType } from './entities.js';

export const MAX_REMEMBERED = 100_000;

export interface RememberedValue {
  value: string;
  token: string;
  type: TokenType;
  n: number;
  lastUsedAt: number;
}

export class ScopeMemory {
  readonly byValue = new Map<string, RememberedValue>();
  readonly byToken = new Map<string, RememberedValue>();

  remember(v: RememberedValue): void {
    this.byValue.set(v.value, v);
    this.byToken.set(v.token, v);
  }

  forget(v: RememberedValue): void {
    this.byValue.delete(v.value);
    this.byToken.delete(v.token);
  }

  clear(): void {
    this.byValue.clear();
    this.byToken.clear();
  }
}

export class VaultMemory {
  private readonly scopes = new Map<number, ScopeMemory>();

  /** The memory of a scope, marked as the most recently used; trims the others. */
  forScope(scopeId: number): ScopeMemory {
    let m = this.scopes.get(scopeId);
    if (m) this.scopes.delete(scopeId);
    else m = new ScopeMemory();
    this.scopes.set(scopeId, m);
    let total = 0;
    for (const s of this.scopes.values()) total += s.byValue.size;
    for (const [id, s] of this.scopes) {
      if (total <= MAX_REMEMBERED || s === m) break;
      total -= s.byValue.size;
      this.scopes.delete(id);
    }
    return m;
  }

  forgetScope(scopeId: number): void {
    this.scopes.delete(scopeId);
  }

  clear(): void {
    this.scopes.clear();
  }
}
