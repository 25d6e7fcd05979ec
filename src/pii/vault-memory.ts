/**
 * The vault's in-process copy of its scopes: every live value of a scope, with its
 * token and last use, and the scope's counters. A scope is read whole from the database
 * the first time it is used (and again after it was unloaded), so while it is loaded
 * the memory is the complete answer: a value it does not hold has no token yet, a token
 * it does not hold resolves to nothing. The database is written through before what
 * memory learned leaves the vault; when a write fails the scope is unloaded and read
 * again.
 *
 * One ScopeMemory object per scope id while anything holds it, even when unloaded, so
 * two requests of one scope never hold diverging copies. Work on a scope takes turns
 * (`turn`): a tokenizing call reads memory, numbers new values and waits for their write
 * before the next call of that scope looks, so two tool results of one conversation
 * tokenized at once never give one number to two values, nor two numbers to one value.
 * Loading happens in a turn too. Unloading does not need one: whatever a turn under way
 * writes is in the database when the next turn reads it again.
 *
 * Bounded: past MAX_REMEMBERED values or MAX_KEPT_SCOPES scopes, the least recently
 * used scopes are unloaded and let go. A scope let go while a request still holds its
 * memory (through its PiiScope) is found again through a weak reference, so a request
 * that opens it meanwhile shares that object; once nothing holds it, it is collected,
 * and the next use makes a new one and reads the database. A gateway that has seen a
 * million conversations keeps only the ones in use and the most recent.
 */
import type { TokenType } from './entities.js';

export const MAX_REMEMBERED = 100_000;
/** Scopes kept in memory past their use (loaded or not), most recently used first. */
export const MAX_KEPT_SCOPES = 10_000;

/** A settled promise made when the module loads, in no request's context. */
const SETTLED: Promise<unknown> = Promise.resolve();

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
  /**
   * The row's use list as last read or written: a use is written only over this text,
   * so a batch changed meanwhile (sealed again by a purge) is noticed, not overwritten.
   */
  uses: string;
}

export class ScopeMemory {
  readonly byValue = new Map<string, RememberedValue>();
  readonly byToken = new Map<string, RememberedValue>();
  /** The last number issued per type. */
  readonly counters = new Map<TokenType, number>();
  loaded = false;
  /** Set when the scope was dropped: holders of this object must not read another scope into it. */
  retired = false;
  /** Set once a PiiScope holds this object: from then on it stays the scope's one memory. */
  handedOut = false;
  /** Settles when the last turn queued so far has. */
  private tail: Promise<unknown> = SETTLED;
  /** Turns queued and not yet settled. */
  private pending = 0;

  constructor(
    /** Whose scope this is; a dropped scope's id can be taken by a new one. */
    readonly owner: string,
  ) {}

  /** Runs `fn` once every turn queued before it on this scope has settled, failed ones included. */
  turn<T>(fn: () => Promise<T>): Promise<T> {
    this.pending++;
    const result = this.tail.then(fn);
    const tail: Promise<void> = (this.tail = result.then(
      (): void => this.settled(tail),
      (): void => this.settled(tail),
    ));
    return result;
  }

  /**
   * With no turn left, the tail is one made outside any request: a promise keeps the
   * async context it was made in (the request, its body and socket), and a scope's
   * memory lives as long as the vault.
   */
  private settled(tail: Promise<unknown>): void {
    if (--this.pending === 0 && this.tail === tail) this.tail = SETTLED;
  }

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

export interface VaultMemoryLimits {
  values: number;
  scopes: number;
}

export class VaultMemory {
  /** Kept past their use, in least-recently-used order. */
  private readonly kept = new Map<number, ScopeMemory>();
  /** Every memory made and not yet collected: held by requests, or kept above. */
  private readonly known = new Map<number, WeakRef<ScopeMemory>>();
  private readonly collected = new FinalizationRegistry<number>((scopeId) => {
    if (this.known.get(scopeId)?.deref() === undefined) this.known.delete(scopeId);
  });

  constructor(private readonly limits: VaultMemoryLimits = { values: MAX_REMEMBERED, scopes: MAX_KEPT_SCOPES }) {}

  /** The memory of a scope, marked as the most recently used; unloads and lets go of others past the bounds. */
  forScope(scopeId: number, owner: string): ScopeMemory {
    const m = this.current(scopeId, owner) ?? this.add(scopeId, new ScopeMemory(owner));
    m.handedOut = true;
    this.kept.delete(scopeId);
    this.kept.set(scopeId, m);
    let total = 0;
    for (const s of this.kept.values()) total += s.byValue.size;
    for (const [id, s] of this.kept) {
      if ((total <= this.limits.values && this.kept.size <= this.limits.scopes) || s === m) break;
      total -= s.byValue.size;
      s.unload();
      this.kept.delete(id);
    }
    return m;
  }

  /**
   * Runs `fn` in a turn of the scope, for work on its rows from outside a request (the
   * purge), with the scope's memory if this process has one. Neither loads the scope nor
   * counts as a use; a memory made only for this turn is let go after it.
   */
  async inTurn<T>(scopeId: number, owner: string, fn: (memory: ScopeMemory) => Promise<T>): Promise<T> {
    let m = this.current(scopeId, owner);
    const made = !m;
    m ??= this.add(scopeId, new ScopeMemory(owner));
    const memory = m;
    try {
      return await memory.turn(() => fn(memory));
    } finally {
      if (made && !memory.handedOut && this.known.get(scopeId)?.deref() === memory) this.known.delete(scopeId);
    }
  }

  forgetScope(scopeId: number): void {
    const m = this.known.get(scopeId)?.deref();
    if (m) this.retire(m);
    this.known.delete(scopeId);
    this.kept.delete(scopeId);
  }

  /** How many scopes are kept past their use, and how many memories exist at all (kept, or held by a request). */
  sizes(): { kept: number; known: number } {
    return { kept: this.kept.size, known: this.known.size };
  }

  private add(scopeId: number, m: ScopeMemory): ScopeMemory {
    this.known.set(scopeId, new WeakRef(m));
    this.collected.register(m, scopeId);
    return m;
  }

  /** The memory of the scope id, unless it belonged to a dropped scope whose id was taken since. */
  private current(scopeId: number, owner: string): ScopeMemory | undefined {
    const m = this.known.get(scopeId)?.deref();
    if (!m || m.owner === owner) return m;
    this.retire(m);
    this.known.delete(scopeId);
    this.kept.delete(scopeId);
    return undefined;
  }

  private retire(m: ScopeMemory): void {
    m.unload();
    m.retired = true;
  }
}
