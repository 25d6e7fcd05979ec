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
 *   `purgeExpired` deletes it, and after the purge it is not on disk, even sealed.
 *
 * Storage (schema.ts): the values one call issues are sealed together in one record,
 * their tokens inside the ciphertext and their last uses beside it. A scope is read
 * whole into memory on first use (vault-memory.ts) and written through, so a value new
 * to the scope costs map inserts and a share of one seal and one row insert, not a
 * keyed hash, a seal and indexed rows of its own.
 */
import type Database from 'better-sqlite3';
import { createDetector, type Detector, type Segment } from './detector.js';
import type { TokenType } from './entities.js';
import { Sealer } from './sealing.js';
import { formatToken, tokenRegex } from './token-format.js';
import { dropPiiScope, type PiiScopeRef } from './scopes.js';
import { VaultMemory, type RememberedValue, type ScopeMemory, type StoredBatch } from './vault-memory.js';

export type { PiiScopeRef } from './scopes.js';

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
    counters: db.prepare('SELECT type, last_n FROM pii_counters WHERE scope_id = ?'),
    // Counters only grow: a number once issued in a scope is never issued again.
    saveN: db.prepare(
      'INSERT INTO pii_counters (scope_id, type, last_n) VALUES (?, ?, ?) ON CONFLICT (scope_id, type) DO UPDATE SET last_n = excluded.last_n',
    ),
    batches: db.prepare('SELECT id, sealed, uses FROM pii_batches WHERE scope_id = ?'),
    addBatch: db.prepare('INSERT INTO pii_batches (scope_id, sealed, uses, oldest_use) VALUES (?, ?, ?, ?)'),
    setUses: db.prepare('UPDATE pii_batches SET uses = ?, oldest_use = ? WHERE id = ?'),
    legacy: db.prepare('SELECT type, n, sealed, last_used_at FROM pii_values_v1 WHERE scope_id = ?'),
    dropLegacy: db.prepare('DELETE FROM pii_values_v1 WHERE scope_id = ?'),
  };
}

type Statements = ReturnType<typeof prepareStatements>;

/** What a batch's ciphertext holds: each value with its token's type and number. */
type BatchItem = [type: TokenType, n: number, value: string];

/** A batch is bound to its user and scope: moved to another scope, it does not open. */
function batchAad(userId: number, scopeId: number): string {
  return `${userId}:${scopeId}`;
}

interface BatchRow {
  id: number;
  sealed: Buffer;
  uses: string;
}

/** A batch's use list, or undefined when it is not a list of times. */
function parseUses(text: string): number[] | undefined {
  try {
    const uses = JSON.parse(text) as unknown;
    return Array.isArray(uses) && uses.every((u) => typeof u === 'number') ? uses : undefined;
  } catch {
    return undefined;
  }
}

function usesOf(items: readonly RememberedValue[]): [uses: string, oldest: number] {
  const uses = items.map((v) => v.lastUsedAt);
  return [JSON.stringify(uses), Math.min(...uses)];
}

/** Seals and stores values just issued as one batch; runs inside a transaction. */
function storeBatch(stmts: Statements, sealer: Sealer, userId: number, scopeId: number, values: RememberedValue[]): void {
  const items: BatchItem[] = values.map((v) => [v.type, v.n, v.value]);
  const id = Number(stmts.addBatch.run(scopeId, sealer.seal(JSON.stringify(items), batchAad(userId, scopeId)), ...usesOf(values)).lastInsertRowid);
  const batch = { id, items: values };
  for (const v of values) v.batch = batch;
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
    // Looked up on every call, not cached: a scope row can go (dropScope, a revoked token, a deleted user).
    let id = this.stmts.scopeId.get(ref.userId, ref.kind, ref.id) as number | undefined;
    if (id === undefined) {
      this.stmts.addScope.run(ref.userId, ref.kind, ref.id, this.now());
      id = this.stmts.scopeId.get(ref.userId, ref.kind, ref.id) as number;
    }
    const memory = this.memory.forScope(id, `${ref.userId}:${ref.kind}:${ref.id}`);
    if (!memory.loaded) this.load(ref.userId, id, memory);
    const scopeId = id;
    return new PiiScope(this.db, this.stmts, this.sealer, this.detector, ref.userId, id, this.ttlMs, this.now, memory, () =>
      this.load(ref.userId, scopeId, memory),
    );
  }

  /**
   * Reads a scope whole: its counters and every value still live. A batch that does not
   * open (another key, or moved from another scope) contributes nothing.
   */
  private load(userId: number, scopeId: number, memory: ScopeMemory): void {
    memory.unload();
    this.moveLegacyValues(userId, scopeId);
    for (const { type, last_n } of this.stmts.counters.all(scopeId) as Array<{ type: TokenType; last_n: number }>) {
      memory.counters.set(type, last_n);
    }
    const cutoff = this.now() - this.ttlMs;
    for (const b of this.stmts.batches.all(scopeId) as BatchRow[]) {
      const opened = this.openBatch(userId, scopeId, b);
      if (!opened) continue;
      // Expired values stay in the batch's list (their uses are written back with it) but not in the maps.
      const batch: StoredBatch = { id: b.id, items: [] };
      opened.forEach(([type, n, value], i) => {
        const v: RememberedValue = { value, token: formatToken(type, n), type, n, lastUsedAt: opened.uses[i]!, batch };
        batch.items.push(v);
        if (v.lastUsedAt >= cutoff) memory.remember(v);
      });
    }
    memory.loaded = true;
  }

  /** A batch's values with their last uses, or undefined when it does not open or does not add up. */
  private openBatch(userId: number, scopeId: number, row: BatchRow): (BatchItem[] & { uses: number[] }) | undefined {
    const json = this.sealer.open(row.sealed, batchAad(userId, scopeId));
    if (json === undefined) return undefined;
    const items = JSON.parse(json) as BatchItem[];
    // The use list is not under the seal: a damaged one costs this batch, not the scope.
    const uses = parseUses(row.uses);
    return uses?.length === items.length ? Object.assign(items, { uses }) : undefined;
  }

  /** Values sealed one by one (schema version 2) move into one batch of their scope. */
  private moveLegacyValues(userId: number, scopeId: number): void {
    const rows = this.stmts.legacy.all(scopeId) as Array<{ type: TokenType; n: number; sealed: Buffer; last_used_at: number }>;
    if (!rows.length) return;
    const live: RememberedValue[] = [];
    for (const r of rows) {
      if (r.last_used_at < this.now() - this.ttlMs) continue;
      const value = this.sealer.open(r.sealed, `${userId}:${scopeId}:${r.type}:${r.n}`);
      if (value !== undefined) live.push({ value, token: formatToken(r.type, r.n), type: r.type, n: r.n, lastUsedAt: r.last_used_at });
    }
    this.db.transaction(() => {
      if (live.length) storeBatch(this.stmts, this.sealer, userId, scopeId, live);
      this.stmts.dropLegacy.run(scopeId);
    })();
  }

  /**
   * Deletes values unused for the TTL; returns how many. Run it periodically. A batch
   * that held one is sealed again without it, so no expired value stays on disk, even
   * encrypted.
   */
  purgeExpired(): number {
    const cutoff = this.now() - this.ttlMs;
    const purged = this.db.transaction(() => {
      const stale = this.db
        .prepare('SELECT b.id, b.scope_id AS scopeId, s.user_id AS userId, b.sealed, b.uses FROM pii_batches b JOIN pii_scopes s ON s.id = b.scope_id WHERE b.oldest_use < ?')
        .all(cutoff) as Array<BatchRow & { scopeId: number; userId: number }>;
      const reseal = this.db.prepare('UPDATE pii_batches SET sealed = ?, uses = ?, oldest_use = ? WHERE id = ?');
      const remove = this.db.prepare('DELETE FROM pii_batches WHERE id = ?');
      let n = 0;
      for (const b of stale) {
        const uses = parseUses(b.uses);
        if (!uses) {
          remove.run(b.id); // unreadable without its use list (see openBatch)
          continue;
        }
        const keep = uses.map((u) => u >= cutoff);
        n += keep.filter((k) => !k).length;
        if (!keep.includes(true)) {
          remove.run(b.id);
          continue;
        }
        const items = this.openBatch(b.userId, b.scopeId, b);
        if (!items) continue; // unreadable with this key: its live values are unreachable either way
        const kept = items.filter((_, i) => keep[i]);
        const keptUses = uses.filter((_, i) => keep[i]);
        reseal.run(this.sealer.seal(JSON.stringify(kept), batchAad(b.userId, b.scopeId)), JSON.stringify(keptUses), Math.min(...keptUses), b.id);
      }
      return n + this.db.prepare('DELETE FROM pii_values_v1 WHERE last_used_at < ?').run(cutoff).changes;
    })();
    this.memory.unloadAll();
    return purged;
  }

  /** Forgets a scope entirely (API token revoked, conversation deleted); false if there was none. */
  dropScope(ref: PiiScopeRef): boolean {
    const id = dropPiiScope(this.db, ref);
    if (id !== undefined) this.memory.forgetScope(id);
    return id !== undefined;
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
    /** Reads the scope again when memory was unloaded since (a purge, the memory bound, a failed write). */
    private readonly reload: () => void,
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

  private ready(): ScopeMemory {
    if (this.memory.retired) throw new Error('this PII scope was dropped (its API token was revoked or its conversation deleted)');
    if (!this.memory.loaded) this.reload();
    return this.memory;
  }

  private replaceSpans(segment: Segment, found: FoundToken[]): string {
    const { text, spans } = segment;
    if (!spans.length) return text;
    const memory = this.ready();
    const now = this.now();
    // Values the scope knows are looked up in memory; new ones are numbered there and
    // written, sealed together, in one transaction with the uses that need recording.
    const issued: RememberedValue[] = [];
    const touched: RememberedValue[] = [];
    const tokens = spans.map((s) => {
      const value = text.slice(s.start, s.end);
      let v = memory.byValue.get(value);
      if (v && this.expired(v.lastUsedAt, now)) {
        // Seen again after its TTL: a new number, since the old token may still sit in some context.
        memory.forget(v);
        v = undefined;
      }
      if (v) {
        if (this.touchDue(v, now)) touched.push(v);
      } else {
        // The same value keeps its token even if it is later found as another type.
        const n = (memory.counters.get(s.type) ?? 0) + 1;
        memory.counters.set(s.type, n);
        v = { value, token: formatToken(s.type, n), type: s.type, n, lastUsedAt: now };
        memory.remember(v);
        issued.push(v);
      }
      return v.token;
    });
    if (issued.length || touched.length) this.write(issued, touched, now);
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

  private write(issued: RememberedValue[], touched: readonly RememberedValue[], now: number): void {
    try {
      // IMMEDIATE: take the write lock up front rather than upgrading mid-way.
      this.db
        .transaction(() => {
          if (issued.length) {
            storeBatch(this.stmts, this.sealer, this.userId, this.scopeId, issued);
            const counters = new Map(issued.map((v) => [v.type, this.memory.counters.get(v.type)!]));
            for (const [type, n] of counters) this.stmts.saveN.run(this.scopeId, type, n);
          }
          // A use is recorded in the batch that holds the value, one write per batch.
          for (const v of touched) v.lastUsedAt = now;
          for (const b of new Set(touched.map((v) => v.batch!))) this.stmts.setUses.run(...usesOf(b.items), b.id);
        })
        .immediate();
    } catch (e) {
      // The rows were rolled back: what memory learned here is not true.
      this.memory.unload();
      throw e;
    }
  }

  /**
   * Whether a use must be written: not when one was written lately, since a write per
   * value per call would cost more than the rest of tokenizing it. Expiry is late by at
   * most 1% of the TTL (and at most a minute).
   */
  private touchDue(v: RememberedValue, now: number): boolean {
    return now - v.lastUsedAt > Math.min(this.ttlMs / 100, 60_000);
  }

  private expired(lastUsedAt: number, now: number): boolean {
    return lastUsedAt < now - this.ttlMs;
  }

  private resolveIn(text: string, unknown: Set<string>): string {
    if (!text.includes('_')) return text;
    return text.replace(tokenRegex(), (literal) => {
      const value = this.valueFor(literal);
      if (value === undefined) unknown.add(literal);
      return value ?? literal;
    });
  }

  private valueFor(literal: string): string | undefined {
    const memory = this.ready();
    const v = memory.byToken.get(literal);
    if (!v) return undefined;
    const now = this.now();
    if (this.expired(v.lastUsedAt, now)) {
      memory.forget(v);
      return undefined;
    }
    if (this.touchDue(v, now)) this.write([], [v], now);
    return v.value;
  }
}
