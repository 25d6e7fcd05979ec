/**
 * The PII vault: which token stands for which value, per scope, encrypted at rest.
 *
 * A scope is whose tokens these are: a user and an API token over MCP today (MCP
 * sessions come and go; the token is what a client keeps), a user and a conversation
 * for the built-in chat later. Lookups always include the user, so one user's tokens
 * never resolve for another.
 *
 * Contracts (tested in vault.test.ts):
 * - within a scope, the same value always gets the same token, and different values
 *   never share one, also across purges (counters outlive values);
 * - `detokenize(tokenize(x).text).text === x` for every string x;
 * - a token the scope does not know (never issued, purged, another scope's) is left as
 *   it is and reported, never guessed;
 * - a value unused for `ttlMs` is gone: its token no longer resolves, even before
 *   `purgeExpired` deletes the row.
 */
import type Database from 'better-sqlite3';
import { createDetector, type Detector, type Segment } from './detector.js';
import type { TokenType } from './entities.js';
import { Sealer } from './sealing.js';
import { formatToken, tokenRegex } from './token-format.js';
import { VaultMemory, type RememberedValue, type ScopeMemory } from './vault-memory.js';

export interface PiiScopeRef {
  userId: number;
  kind: 'token' | 'conversation';
  /** The API token's or the conversation's stable id (never the token secret itself). */
  id: string;
}

export interface PiiVaultOptions {
  /** A value unused (neither tokenized nor resolved) for this long is forgotten. */
  ttlMs: number;
  /** Which entities to find; default all, no allow-list. */
  detector?: Detector;
  /** Clock, for tests. */
  now?: () => number;
}

/** One replaced value, safe to log and audit: it carries no raw value. */
export interface FoundToken {
  type: TokenType;
  token: string;
}

export interface TokenizeResult {
  text: string;
  found: FoundToken[];
}

export interface DetokenizeResult {
  text: string;
  /** Token literals left as they were because this scope does not know them (deduplicated). */
  unknown: string[];
}

/**
 * Tokenizes text arriving in chunks: `push` returns what can be sent on now, `end` the
 * rest. The concatenation of the outputs equals `tokenize` of the concatenated input,
 * however the input was chunked; at most one record (records.ts, 64 KiB) is held back.
 */
export interface PiiTokenStream {
  push(chunk: string): string;
  end(): string;
  /** Everything replaced so far. */
  readonly found: readonly FoundToken[];
}

/** Prepared once per vault: an MCP request opens a scope per tool call, and preparing costs more than running. */
function prepareStatements(db: Database.Database) {
  return {
    addScope: db.prepare('INSERT INTO pii_scopes (user_id, kind, ref, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING'),
    scopeId: db.prepare('SELECT id FROM pii_scopes WHERE user_id = ? AND kind = ? AND ref = ?').pluck(),
    byMac: db.prepare('SELECT type, n, last_used_at FROM pii_values WHERE scope_id = ? AND mac = ?'),
    byToken: db.prepare('SELECT sealed, last_used_at FROM pii_values WHERE scope_id = ? AND type = ? AND n = ?'),
    touch: db.prepare('UPDATE pii_values SET last_used_at = ? WHERE scope_id = ? AND type = ? AND n = ?'),
    forget: db.prepare('DELETE FROM pii_values WHERE scope_id = ? AND type = ? AND n = ?'),
    // Counters only grow: a number once issued in a scope is never issued again.
    lastN: db.prepare('SELECT last_n FROM pii_counters WHERE scope_id = ? AND type = ?').pluck(),
    saveN: db.prepare(
      'INSERT INTO pii_counters (scope_id, type, last_n) VALUES (?, ?, ?) ON CONFLICT (scope_id, type) DO UPDATE SET last_n = excluded.last_n',
    ),
    insert: db.prepare('INSERT INTO pii_values (scope_id, type, n, mac, sealed, last_used_at) VALUES (?, ?, ?, ?, ?, ?)'),
  };
}

type Statements = ReturnType<typeof prepareStatements>;

interface ValueRow {
  type: TokenType;
  n: number;
  last_used_at: number;
}

export class PiiVault {
  readonly ttlMs: number;
  private readonly sealer: Sealer;
  private readonly detector: Detector;
  private readonly now: () => number;
  private readonly memory = new VaultMemory();
  private readonly stmts: Statements;

  constructor(
    private readonly db: Database.Database,
    key: Buffer,
    options: PiiVaultOptions,
  ) {
    if (!(options.ttlMs > 0)) throw new Error('PiiVault: ttlMs must be positive');
    this.ttlMs = options.ttlMs;
    this.sealer = new Sealer(key);
    this.detector = options.detector ?? createDetector();
    this.now = options.now ?? Date.now;
    this.stmts = prepareStatements(db);
  }

  /** The scope for a user and an API token or conversation, created on first use. */
  scope(ref: PiiScopeRef): PiiScope {
    // Looked up on every call, not cached: a scope row can go (dropScope, a deleted user).
    let id = this.stmts.scopeId.get(ref.userId, ref.kind, ref.id) as number | undefined;
    if (id === undefined) {
      this.stmts.addScope.run(ref.userId, ref.kind, ref.id, this.now());
      id = this.stmts.scopeId.get(ref.userId, ref.kind, ref.id) as number;
    }
    return new PiiScope(this.db, this.stmts, this.sealer, this.detector, ref.userId, id, this.ttlMs, this.now, this.memory.forScope(id));
  }

  /** Deletes values unused for the TTL; returns how many. Run it periodically. */
  purgeExpired(): number {
    this.memory.clear();
    return this.db.prepare('DELETE FROM pii_values WHERE last_used_at < ?').run(this.now() - this.ttlMs).changes;
  }

  /** Forgets a scope entirely (API token revoked, conversation deleted). */
  dropScope(ref: PiiScopeRef): void {
    const row = this.db
      .prepare('DELETE FROM pii_scopes WHERE user_id = ? AND kind = ? AND ref = ? RETURNING id')
      .get(ref.userId, ref.kind, ref.id) as { id: number } | undefined;
    if (row) this.memory.forgetScope(row.id);
  }
}

export class PiiScope {
  /** @internal Use PiiVault.scope(). */
  constructor(
    private readonly db: Database.Database,
    private readonly stmts: Statements,
    private readonly sealer: Sealer,
    private readonly detector: Detector,
    private readonly userId: number,
    private readonly scopeId: number,
    private readonly ttlMs: number,
    private readonly now: () => number,
    private readonly memory: ScopeMemory,
  ) {}

  /** Replaces every detected value with its token; for text headed to a model. */
  tokenize(text: string): TokenizeResult {
    const stream = this.stream();
    const out = stream.push(text) + stream.end();
    return { text: out, found: [...stream.found] };
  }

  stream(): PiiTokenStream {
    const session = this.detector.session();
    const found: FoundToken[] = [];
    return {
      found,
      push: (chunk) => this.replaceSpans(session.push(chunk), found),
      end: () => this.replaceSpans(session.end(), found),
    };
  }

  /**
   * Replaces every token this scope knows with its value; for code, file contents and
   * tool arguments coming from a model. Unknown tokens stay and are reported.
   */
  detokenize(text: string): DetokenizeResult {
    const unknown = new Set<string>();
    const out = this.resolveIn(text, unknown);
    return { text: out, unknown: [...unknown] };
  }

  /** detokenize over every string (and object key) of a JSON-like value, e.g. tool arguments. */
  detokenizeDeep<T>(value: T): { value: T; unknown: string[] } {
    const unknown = new Set<string>();
    const walk = (v: unknown): unknown => {
      if (typeof v === 'string') return this.resolveIn(v, unknown);
      if (Array.isArray(v)) return v.map(walk);
      if (v !== null && typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype) {
        return Object.fromEntries(Object.entries(v).map(([k, x]) => [this.resolveIn(k, unknown), walk(x)]));
      }
      return v;
    };
    return { value: walk(value) as T, unknown: [...unknown] };
  }

  private replaceSpans(segment: Segment, found: FoundToken[]): string {
    const { text, spans } = segment;
    if (!spans.length) return text;
    const values = spans.map((s) => text.slice(s.start, s.end));
    // Values the scope used lately need no database at all (most output repeats them);
    // the rest are looked up or issued in one transaction, however many there are.
    const tokens = values.map((v) => this.rememberedToken(v));
    if (tokens.includes(undefined)) {
      // IMMEDIATE: counters are read then written, so take the write lock up front.
      try {
        this.db
          .transaction(() => {
            const counters = new Map<TokenType, number>();
            spans.forEach((s, i) => (tokens[i] ??= this.tokenFor(s.type, values[i]!, counters)));
            for (const [type, n] of counters) this.stmts.saveN.run(this.scopeId, type, n);
          })
          .immediate();
      } catch (e) {
        // The rows were rolled back: what memory learned in the transaction is not true.
        this.memory.clear();
        throw e;
      }
    }
    const parts: string[] = [];
    let at = 0;
    spans.forEach((s, i) => {
      parts.push(text.slice(at, s.start), tokens[i]!);
      found.push({ type: s.type, token: tokens[i]! });
      at = s.end;
    });
    parts.push(text.slice(at));
    return parts.join('');
  }

  /** The token of a value used lately, when using it now needs no write (see `touch`). */
  private rememberedToken(value: string): string | undefined {
    const known = this.memory.byValue.get(value);
    if (!known) return undefined;
    const now = this.now();
    return now - known.lastUsedAt <= this.touchInterval() ? known.token : undefined;
  }

  /** How stale a recorded use may get before the next use is written. */
  private touchInterval(): number {
    return Math.min(this.ttlMs / 100, 60_000);
  }

  private aad(type: TokenType, n: number): string {
    return `${this.userId}:${this.scopeId}:${type}:${n}`;
  }

  private expired(lastUsedAt: number, now: number): boolean {
    return lastUsedAt < now - this.ttlMs;
  }

  /**
   * Records a use, unless one was recorded lately: a write per value per call would
   * cost more than the rest of tokenizing it. Expiry is late by at most 1% of the TTL
   * (and at most a minute).
   */
  private touch(v: RememberedValue, now: number): void {
    if (now - v.lastUsedAt <= this.touchInterval()) return;
    this.stmts.touch.run(now, this.scopeId, v.type, v.n);
    v.lastUsedAt = now;
  }

  /**
   * The token for a value, issuing one if the scope has none. Runs inside a transaction;
   * `counters` holds the counters it advanced, for the caller to save.
   */
  private tokenFor(type: TokenType, value: string, counters: Map<TokenType, number>): string {
    const now = this.now();
    const known = this.memory.byValue.get(value);
    if (known && !this.expired(known.lastUsedAt, now)) {
      this.touch(known, now);
      return known.token;
    }
    if (known) this.memory.forget(known);
    const mac = this.sealer.mac(this.scopeId, value);
    let row = this.stmts.byMac.get(this.scopeId, mac) as ValueRow | undefined;
    if (row && this.expired(row.last_used_at, now)) {
      this.stmts.forget.run(this.scopeId, row.type, row.n);
      row = undefined;
    }
    if (row) {
      // The same value keeps its token even if it is now found as another type.
      const v = { value, token: formatToken(row.type, row.n), type: row.type, n: row.n, lastUsedAt: row.last_used_at };
      this.touch(v, now);
      this.memory.remember(v);
      return v.token;
    }
    const n = (counters.get(type) ?? ((this.stmts.lastN.get(this.scopeId, type) as number | undefined) ?? 0)) + 1;
    counters.set(type, n);
    this.stmts.insert.run(this.scopeId, type, n, mac, this.sealer.seal(value, this.aad(type, n)), now);
    const v = { value, token: formatToken(type, n), type, n, lastUsedAt: now };
    this.memory.remember(v);
    return v.token;
  }

  private resolveIn(text: string, unknown: Set<string>): string {
    if (!text.includes('_')) return text;
    return text.replace(tokenRegex(), (literal, type: TokenType, n: string) => {
      const value = this.valueFor(literal, type, Number(n));
      if (value === undefined) unknown.add(literal);
      return value ?? literal;
    });
  }

  private valueFor(literal: string, type: TokenType, n: number): string | undefined {
    const now = this.now();
    const known = this.memory.byToken.get(literal);
    if (known && !this.expired(known.lastUsedAt, now)) {
      this.touch(known, now);
      return known.value;
    }
    if (known) this.memory.forget(known);
    const row = this.stmts.byToken.get(this.scopeId, type, n) as { sealed: Buffer; last_used_at: number } | undefined;
    if (!row || this.expired(row.last_used_at, now)) return undefined;
    const value = this.sealer.open(row.sealed, this.aad(type, n));
    if (value === undefined) return undefined;
    const v = { value, token: literal, type, n, lastUsedAt: row.last_used_at };
    this.touch(v, now);
    this.memory.remember(v);
    return value;
  }
}
