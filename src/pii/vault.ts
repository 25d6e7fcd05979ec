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
 *   `purgeExpired` deletes it, and after the purge it is not on disk, even sealed;
 * - a token that leaves the vault (in what `tokenize` resolves to, or a stream pushes)
 *   is stored before the text carrying it is handed over: a restarted gateway, or
 *   another one on the same database, resolves it.
 *
 * Storage (schema.ts): the values one call issues are sealed together in one record,
 * their tokens inside the ciphertext and their last uses beside it. A scope is read
 * whole into memory on first use (vault-memory.ts) and written through, so a value new
 * to the scope costs map inserts and a share of one seal and one row insert, not a
 * keyed hash, a seal and indexed rows of its own. Calls on one scope take turns
 * (ScopeMemory.turn); counters in the database only grow, whoever writes them.
 */
import { createDetector, type Detector, type Segment } from './detector.js';
import type { TokenType } from './entities.js';
import { Sealer } from './sealing.js';
import { formatToken, tokenRegex } from './token-format.js';
import { dropPiiScope, type PiiScopeRef } from './scopes.js';
import { VaultMemory, type RememberedValue, type ScopeMemory, type StoredBatch, type VaultMemoryLimits } from './vault-memory.js';
import { dialectOf, type Db } from '../store/store.js';
import { prepared } from '../store/prepared.js';

export type { PiiScopeRef } from './scopes.js';

export interface PiiVaultOptions {
  /** A value unused (neither tokenized nor resolved) for this long is forgotten. */
  ttlMs: number;
  /** Which entities to find; default all, no allow-list. */
  detector?: Detector;
  /** Clock, for tests. */
  now?: () => number;
  /** How much of the vault stays in memory past its use; default MAX_REMEMBERED values and MAX_KEPT_SCOPES scopes. */
  memoryLimits?: VaultMemoryLimits;
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
 * Tokenizes text arriving in chunks: `push` resolves to what can be sent on now, `end`
 * to the rest, each once the values it issued are stored. The concatenation of the
 * outputs equals `tokenize` of the concatenated input, however the input was chunked;
 * at most one record (records.ts, 64 KiB) is held back. Calls resolve in the order they
 * were made.
 */
export interface PiiTokenStream {
  push(chunk: string): Promise<string>;
  end(): Promise<string>;
  /** Everything replaced so far. */
  readonly found: readonly FoundToken[];
}

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

/** Values just issued, sealed as one pii_batches row (sealing is done before any transaction starts). */
function sealBatch(sealer: Sealer, userId: number, scopeId: number, values: RememberedValue[]) {
  const items: BatchItem[] = values.map((v) => [v.type, v.n, v.value]);
  const [uses, oldest] = usesOf(values);
  return { scope_id: scopeId, sealed: sealer.seal(JSON.stringify(items), batchAad(userId, scopeId)), uses, oldest_use: oldest };
}

/** Stores a sealed batch; its values learn which row holds them once the transaction it runs in has committed. */
async function insertBatch(db: Db, row: ReturnType<typeof sealBatch>): Promise<number> {
  return (await db.insertInto('pii_batches').values(row).returning('id').executeTakeFirstOrThrow()).id;
}

function attachBatch(values: RememberedValue[], id: number, uses: string): void {
  const batch: StoredBatch = { id, items: values, uses };
  for (const v of values) v.batch = batch;
}

/** A batch's use list changed in the database since this process read it (a purge sealed it again, or another gateway wrote it). */
class BatchChanged extends Error {
  override name = 'BatchChanged';
}

/** Postgres reports a serialization conflict or a broken deadlock: the transaction can run again. */
const RETRYABLE_CODES = new Set(['40001', '40P01']);

function worthRetrying(e: unknown): boolean {
  if (e instanceof BatchChanged) return true;
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && RETRYABLE_CODES.has(code);
}

/**
 * How long the calls of one holder (a request, a turn) reuse a scope id they looked up
 * (on Postgres). Short, since only this vault's own drops end it early: a scope dropped
 * elsewhere (a deleted conversation or token, the command line, another gateway) may be
 * written to for at most this long; its rows are gone, so such a write fails, and since
 * Postgres never gives the id to another scope it can reach no other scope's values.
 */
const SCOPE_ID_KEPT_MS = 1000;

/** Attempts of one call on a scope whose write met a change made elsewhere (each reads the scope again). */
const MAX_ATTEMPTS = 3;

/** What the scopes of one vault share. */
interface VaultContext {
  db: Db;
  sealer: Sealer;
  detector: Detector;
  ttlMs: number;
  now: () => number;
}

/** A scope's id, read by every call that crosses the boundary (once per request or turn: keptScopeId): compiled once. */
const scopeByRef = prepared((db, p: { userId: number; kind: PiiScopeRef['kind']; ref: string }) =>
  db.selectFrom('pii_scopes').select('id').where('user_id', '=', p.userId).where('kind', '=', p.kind).where('ref', '=', p.ref),
);

/** The writes a call on a scope needs before its answer may leave: values it issued, uses it refreshed. */
interface Writes {
  issued: RememberedValue[];
  touched: Set<RememberedValue>;
}

export class PiiVault {
  readonly ttlMs: number;
  private readonly ctx: VaultContext;
  private readonly memory: VaultMemory;

  constructor(db: Db, key: Buffer, options: PiiVaultOptions) {
    if (!(options.ttlMs > 0)) throw new Error('PiiVault: ttlMs must be positive');
    this.ttlMs = options.ttlMs;
    this.memory = new VaultMemory(options.memoryLimits);
    this.ctx = { db, sealer: new Sealer(key), detector: options.detector ?? createDetector(), ttlMs: options.ttlMs, now: options.now ?? Date.now };
  }

  /** How many scopes this process keeps in memory past their use, and how many exist at all. */
  memorySizes(): { kept: number; known: number } {
    return this.memory.sizes();
  }

  /**
   * The scope for a user and an API token or conversation, created on first use and read
   * into memory. `holder` (the caller object of one request or turn) lets the calls made
   * for it share one lookup of the scope's id for SCOPE_ID_KEPT_MS: a tool call crosses
   * the boundary twice (arguments in, result out), and each lookup is a round trip to the
   * store. Without `holder` the id is looked up every time.
   */
  async scope(ref: PiiScopeRef, holder?: object): Promise<PiiScope> {
    // Never kept longer than that: a scope row can go (dropScope, a revoked token, a deleted user).
    // Only on Postgres, which never gives a deleted row's id to another: SQLite gives the
    // highest one again, and its lookups are local and cheap anyway.
    const id = holder && this.keepsIds ? await this.keptScopeId(ref, holder) : await this.scopeId(ref);
    const memory = this.memory.forScope(id, ownerOf(ref));
    const scope = new PiiScope(this.ctx, ref.userId, id, memory, () => this.load(ref.userId, id, memory));
    if (!memory.loaded) await memory.turn(() => scope.ready());
    return scope;
  }

  /** Ids looked up for a holder: its scopes' owners to the lookup and when it was made, under the drop generation it was made in. */
  private readonly keptIds = new WeakMap<object, Map<string, { id: Promise<number>; at: number; generation: number }>>();
  /** Grows with every drop through this vault, so no kept id outlives a drop. */
  private dropGeneration = 0;
  private get keepsIds(): boolean {
    return dialectOf(this.ctx.db) === 'postgres';
  }

  private keptScopeId(ref: PiiScopeRef, holder: object): Promise<number> {
    let ids = this.keptIds.get(holder);
    if (!ids) this.keptIds.set(holder, (ids = new Map()));
    const key = ownerOf(ref);
    const now = this.ctx.now();
    const kept = ids.get(key);
    if (kept && kept.generation === this.dropGeneration && now - kept.at < SCOPE_ID_KEPT_MS) return kept.id;
    const id = this.scopeId(ref);
    ids.set(key, { id, at: now, generation: this.dropGeneration });
    // A failed lookup is not kept: the next call asks again.
    id.catch(() => ids.delete(key));
    return id;
  }

  private async scopeId(ref: PiiScopeRef): Promise<number> {
    const { db } = this.ctx;
    const find = async () => (await scopeByRef(db, { userId: ref.userId, kind: ref.kind, ref: ref.id }))[0];
    const found = await find();
    if (found) return found.id;
    // Another request (or gateway) may add it at the same moment: then this insert adds nothing and the row is theirs.
    const added = await db
      .insertInto('pii_scopes')
      .values({ user_id: ref.userId, kind: ref.kind, ref: ref.id, created_at: this.ctx.now() })
      .onConflict((oc) => oc.columns(['user_id', 'kind', 'ref']).doNothing())
      .returning('id')
      .executeTakeFirst();
    const row = added ?? (await find());
    if (!row) throw new Error('this PII scope was dropped while it was being opened');
    return row.id;
  }

  /**
   * Reads a scope whole: its counters and every value still live. A batch that does not
   * open (another key, or moved from another scope) contributes nothing. Runs in a turn
   * of the scope.
   */
  private async load(userId: number, scopeId: number, memory: ScopeMemory): Promise<void> {
    const { db, sealer } = this.ctx;
    memory.unload();
    await this.moveLegacyValues(userId, scopeId);
    // Batches before counters: a batch is written with its counters, so counters read
    // after it cover every number in it, whoever wrote it meanwhile.
    const rows = await db.selectFrom('pii_batches').select(['id', 'sealed', 'uses']).where('scope_id', '=', scopeId).orderBy('id').execute();
    const counters = await db.selectFrom('pii_counters').select(['type', 'last_n']).where('scope_id', '=', scopeId).execute();
    for (const { type, last_n } of counters) memory.counters.set(type as TokenType, last_n);
    const cutoff = this.ctx.now() - this.ttlMs;
    for (const b of rows) {
      const opened = openBatch(sealer, userId, scopeId, b);
      if (!opened) continue;
      // Expired values stay in the batch's list (their uses are written back with it) but not in the maps.
      const batch: StoredBatch = { id: b.id, items: [], uses: b.uses };
      opened.forEach(([type, n, value], i) => {
        const v: RememberedValue = { value, token: formatToken(type, n), type, n, lastUsedAt: opened.uses[i]!, batch };
        batch.items.push(v);
        if (v.lastUsedAt >= cutoff) memory.remember(v);
        // Never below a number already stored, even if its counter row says less.
        if (n > (memory.counters.get(type) ?? 0)) memory.counters.set(type, n);
      });
    }
    memory.loaded = true;
  }

  /**
   * Values sealed one by one (schema version 2) move into one batch of their scope. The
   * rows are deleted and their batch added in one transaction, by whoever deletes them
   * first, so they are never moved twice.
   */
  private async moveLegacyValues(userId: number, scopeId: number): Promise<void> {
    const { db, sealer } = this.ctx;
    const any = await db.selectFrom('pii_values_v1').select('n').where('scope_id', '=', scopeId).limit(1).executeTakeFirst();
    if (!any) return;
    await db.transaction().execute(async (tx) => {
      const rows = await tx.deleteFrom('pii_values_v1').where('scope_id', '=', scopeId).returning(['type', 'n', 'sealed', 'last_used_at']).execute();
      const cutoff = this.ctx.now() - this.ttlMs;
      const live: RememberedValue[] = [];
      for (const r of rows) {
        if (r.last_used_at < cutoff) continue;
        const type = r.type as TokenType;
        const value = sealer.open(r.sealed, `${userId}:${scopeId}:${r.type}:${r.n}`);
        if (value !== undefined) live.push({ value, token: formatToken(type, r.n), type, n: r.n, lastUsedAt: r.last_used_at });
      }
      if (live.length) await insertBatch(tx, sealBatch(sealer, userId, scopeId, live));
    });
  }

  /**
   * Deletes values unused for the TTL; returns how many. Run it periodically. A batch
   * that held one is sealed again without it, so no expired value stays on disk, even
   * encrypted. Each scope is purged in a turn of its own, so a call on it never writes
   * uses over a batch the purge is sealing again; and a batch whose uses changed since
   * the purge read it (another gateway used it) is left for the next purge.
   */
  async purgeExpired(): Promise<number> {
    const { db } = this.ctx;
    const cutoff = this.ctx.now() - this.ttlMs;
    const scopes = await db
      .selectFrom('pii_batches as b')
      .innerJoin('pii_scopes as s', 's.id', 'b.scope_id')
      .where('b.oldest_use', '<', cutoff)
      .select(['s.id', 's.user_id', 's.kind', 's.ref'])
      .distinct()
      .orderBy('s.id')
      .execute();
    let purged = 0;
    for (const s of scopes) {
      const ref: PiiScopeRef = { userId: s.user_id, kind: s.kind, id: s.ref };
      purged += await this.memory.inTurn(s.id, ownerOf(ref), async (memory) => {
        const { values, changed } = await this.purgeScope(s.user_id, s.id, cutoff);
        // Memory's copies of the batches sealed again no longer match the rows.
        if (changed) memory.unload();
        return values;
      });
    }
    const legacy = await db.deleteFrom('pii_values_v1').where('last_used_at', '<', cutoff).executeTakeFirst();
    return purged + Number(legacy.numDeletedRows);
  }

  private async purgeScope(userId: number, scopeId: number, cutoff: number): Promise<{ values: number; changed: boolean }> {
    const { db, sealer } = this.ctx;
    const stale = await db
      .selectFrom('pii_batches')
      .select(['id', 'sealed', 'uses'])
      .where('scope_id', '=', scopeId)
      .where('oldest_use', '<', cutoff)
      .orderBy('id')
      .execute();
    // Decided and sealed before the transaction; each write applies only to the row as it was read.
    const changes: Array<{ row: BatchRow; values: number; reseal?: { sealed: Buffer; uses: string; oldest_use: number } }> = [];
    for (const b of stale) {
      const uses = parseUses(b.uses);
      if (!uses) {
        changes.push({ row: b, values: 0 }); // unreadable without its use list (see openBatch)
        continue;
      }
      const keep = uses.map((u) => u >= cutoff);
      const values = keep.filter((k) => !k).length;
      if (!keep.includes(true)) {
        changes.push({ row: b, values });
        continue;
      }
      const items = openBatch(sealer, userId, scopeId, b);
      if (!items) continue; // unreadable with this key: its live values are unreachable either way
      const kept = items.filter((_, i) => keep[i]);
      const keptUses = uses.filter((_, i) => keep[i]);
      changes.push({
        row: b,
        values,
        reseal: { sealed: sealer.seal(JSON.stringify(kept), batchAad(userId, scopeId)), uses: JSON.stringify(keptUses), oldest_use: Math.min(...keptUses) },
      });
    }
    if (!changes.length) return { values: 0, changed: false };
    return db.transaction().execute(async (tx) => {
      let values = 0;
      let changed = false;
      for (const c of changes) {
        const r = c.reseal
          ? await tx.updateTable('pii_batches').set(c.reseal).where('id', '=', c.row.id).where('uses', '=', c.row.uses).executeTakeFirst()
          : await tx.deleteFrom('pii_batches').where('id', '=', c.row.id).where('uses', '=', c.row.uses).executeTakeFirst();
        if (Number('numUpdatedRows' in r ? r.numUpdatedRows : r.numDeletedRows) === 1) {
          values += c.values;
          changed = true;
        }
      }
      return { values, changed };
    });
  }

  /** Forgets a scope entirely (API token revoked, conversation deleted); false if there was none. */
  async dropScope(ref: PiiScopeRef): Promise<boolean> {
    this.dropGeneration++;
    const id = await dropPiiScope(this.ctx.db, ref);
    // Again once it is gone: a lookup made while the delete ran kept the old id.
    this.dropGeneration++;
    if (id !== undefined) this.memory.forgetScope(id);
    return id !== undefined;
  }
}

/** Whose scope a memory holds: a scope id taken by another scope after a drop names another owner. */
function ownerOf(ref: PiiScopeRef): string {
  return `${ref.userId}:${ref.kind}:${ref.id}`;
}

/** A batch's values with their last uses, or undefined when it does not open or does not add up. */
function openBatch(sealer: Sealer, userId: number, scopeId: number, row: BatchRow): (BatchItem[] & { uses: number[] }) | undefined {
  const json = sealer.open(row.sealed, batchAad(userId, scopeId));
  if (json === undefined) return undefined;
  const items = JSON.parse(json) as BatchItem[];
  // The use list is not under the seal: a damaged one costs this batch, not the scope.
  const uses = parseUses(row.uses);
  return uses?.length === items.length ? Object.assign(items, { uses }) : undefined;
}

export class PiiScope {
  /** @internal Use PiiVault.scope(). */
  constructor(
    private readonly ctx: VaultContext,
    private readonly userId: number,
    private readonly scopeId: number,
    private readonly memory: ScopeMemory,
    /** Reads the scope again when memory was unloaded since (a purge, the memory bound, a failed write). */
    private readonly reload: () => Promise<void>,
  ) {}

  /**
   * Replaces every detected value with its token; for text headed to a model. Resolves
   * once every value it issued is stored.
   */
  async tokenize(text: string): Promise<TokenizeResult> {
    const found: FoundToken[] = [];
    const out = await this.replaceSpans({ text, spans: this.ctx.detector.detect(text) }, found);
    return { text: out, found };
  }

  stream(): PiiTokenStream {
    const session = this.ctx.detector.session();
    const found: FoundToken[] = [];
    return {
      found,
      // Detection runs at the call, in call order; the lookups then take the scope's turns in that order too.
      push: async (chunk) => this.replaceSpans(session.push(chunk), found),
      end: async () => this.replaceSpans(session.end(), found),
    };
  }

  /**
   * Replaces every token this scope knows with its value; for code, file contents and
   * tool arguments coming from a model. Unknown tokens stay and are reported.
   */
  async detokenize(text: string): Promise<DetokenizeResult> {
    if (!mayHoldToken(text)) return { text, unknown: [] };
    return this.run((memory, now, writes) => {
      const unknown = new Set<string>();
      const out = this.resolveIn(text, unknown, memory, now, writes);
      return { text: out, unknown: [...unknown] };
    });
  }

  /** detokenize over every string (and object key) of a JSON-like value, e.g. tool arguments. */
  async detokenizeDeep<T>(value: T): Promise<{ value: T; unknown: string[] }> {
    return this.run((memory, now, writes) => {
      const unknown = new Set<string>();
      const resolve = (s: string) => this.resolveIn(s, unknown, memory, now, writes);
      const walk = (v: unknown): unknown => {
        if (typeof v === 'string') return resolve(v);
        if (Array.isArray(v)) return v.map(walk);
        if (v !== null && typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype) {
          return Object.fromEntries(Object.entries(v).map(([k, x]) => [resolve(k), walk(x)]));
        }
        return v;
      };
      return { value: walk(value) as T, unknown: [...unknown] };
    });
  }

  /** @internal The scope's memory, read from the database if it is not loaded; call it in a turn of the scope. */
  async ready(): Promise<ScopeMemory> {
    this.assertLive();
    if (!this.memory.loaded) {
      await this.reload();
      // Dropped while it was being read: what was read must not be used.
      this.assertLive();
    }
    return this.memory;
  }

  private assertLive(): void {
    if (this.memory.retired) throw new Error('this PII scope was dropped (its API token was revoked or its conversation deleted)');
  }

  /**
   * Runs `work` on the loaded scope in the scope's turn, then stores what it issued and
   * the uses it refreshed, all in one transaction, before its result is released. When
   * the write fails memory is unloaded (what it learned is not true); when it failed
   * because a batch changed elsewhere, the scope is read again and `work` runs again.
   */
  private run<T>(work: (memory: ScopeMemory, now: number, writes: Writes) => T): Promise<T> {
    return this.memory.turn(async () => {
      for (let attempt = 1; ; attempt++) {
        const memory = await this.ready();
        const now = this.ctx.now();
        const writes: Writes = { issued: [], touched: new Set() };
        const result = work(memory, now, writes);
        if (!writes.issued.length && !writes.touched.size) return result;
        try {
          await this.write(writes, now);
          return result;
        } catch (e) {
          memory.unload();
          if (attempt < MAX_ATTEMPTS && worthRetrying(e)) continue;
          throw e;
        }
      }
    });
  }

  private async replaceSpans(segment: Segment, found: FoundToken[]): Promise<string> {
    const { text, spans } = segment;
    if (!spans.length) return text;
    // Values the scope knows are looked up in memory; new ones are numbered there and
    // written, sealed together, in one transaction with the uses that need recording.
    const tokens = await this.run((memory, now, writes) =>
      spans.map((s) => {
        const value = text.slice(s.start, s.end);
        let v = memory.byValue.get(value);
        if (v && this.expired(v.lastUsedAt, now)) {
          // Seen again after its TTL: a new number, since the old token may still sit in some context.
          memory.forget(v);
          v = undefined;
        }
        if (v) {
          if (this.touchDue(v, now)) writes.touched.add(v);
        } else {
          // The same value keeps its token even if it is later found as another type.
          const n = (memory.counters.get(s.type) ?? 0) + 1;
          memory.counters.set(s.type, n);
          v = { value, token: formatToken(s.type, n), type: s.type, n, lastUsedAt: now };
          memory.remember(v);
          writes.issued.push(v);
        }
        return v.token;
      }),
    );
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

  /**
   * One transaction: the uses first (each only over the use list memory last saw, so a
   * batch sealed again meanwhile is noticed), then the new batch and its counters.
   * Counters only grow: a number stored by anyone is never lowered, so never issued again.
   */
  private async write({ issued, touched }: Writes, now: number): Promise<void> {
    const { db, sealer } = this.ctx;
    // A use is recorded in the batch that holds the value, one write per batch.
    for (const v of touched) v.lastUsedAt = now;
    const batches = new Set<StoredBatch>();
    for (const v of touched) if (v.batch) batches.add(v.batch);
    const uses = [...batches].map((b) => ({ batch: b, text: usesOf(b.items) }));
    const row = issued.length ? sealBatch(sealer, this.userId, this.scopeId, issued) : undefined;
    // Numbers are issued in increasing order: the last of a type is its counter.
    const counters = new Map(issued.map((v) => [v.type, v.n]));
    const batchId = await db.transaction().execute(async (tx) => {
      for (const { batch, text } of uses) {
        const r = await tx
          .updateTable('pii_batches')
          .set({ uses: text[0], oldest_use: text[1] })
          .where('id', '=', batch.id)
          .where('uses', '=', batch.uses)
          .executeTakeFirst();
        if (Number(r.numUpdatedRows) !== 1) throw new BatchChanged('a batch of this PII scope changed while it was in use');
      }
      if (!row) return undefined;
      const id = await insertBatch(tx, row);
      await tx
        .insertInto('pii_counters')
        .values([...counters].map(([type, n]) => ({ scope_id: this.scopeId, type, last_n: n })))
        .onConflict((oc) =>
          oc.columns(['scope_id', 'type']).doUpdateSet((eb) => ({
            last_n: eb.case().when('excluded.last_n', '>', eb.ref('pii_counters.last_n')).then(eb.ref('excluded.last_n')).else(eb.ref('pii_counters.last_n')).end(),
          })),
        )
        .execute();
      return id;
    });
    for (const { batch, text } of uses) batch.uses = text[0];
    if (row && batchId !== undefined) attachBatch(issued, batchId, row.uses);
  }

  /**
   * Whether a use must be written: not when one was written lately, since a write per
   * value per call would cost more than the rest of tokenizing it. Expiry is late by at
   * most 1% of the TTL (and at most a minute).
   */
  private touchDue(v: RememberedValue, now: number): boolean {
    return now - v.lastUsedAt > Math.min(this.ctx.ttlMs / 100, 60_000);
  }

  private expired(lastUsedAt: number, now: number): boolean {
    return lastUsedAt < now - this.ctx.ttlMs;
  }

  private resolveIn(text: string, unknown: Set<string>, memory: ScopeMemory, now: number, writes: Writes): string {
    if (!mayHoldToken(text)) return text;
    return text.replace(tokenRegex(), (literal) => {
      const value = this.valueFor(literal, memory, now, writes);
      if (value === undefined) unknown.add(literal);
      return value ?? literal;
    });
  }

  private valueFor(literal: string, memory: ScopeMemory, now: number, writes: Writes): string | undefined {
    const v = memory.byToken.get(literal);
    if (!v) return undefined;
    if (this.expired(v.lastUsedAt, now)) {
      memory.forget(v);
      return undefined;
    }
    if (this.touchDue(v, now)) writes.touched.add(v);
    return v.value;
  }
}

/** Every token literal has an underscore: text without one needs no lookup. */
function mayHoldToken(text: string): boolean {
  return text.includes('_');
}
