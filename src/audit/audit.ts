/**
 * The audit log: who (user, token) did what (method, tool, argument shape), how long
 * it took and how it ended. The MCP endpoint records every request; the upstream hub
 * records every upstream call. Entries are read per user: `listAudit` has no
 * "everyone" mode on purpose, so a per-user page cannot leak another user's rows.
 */
import type { Statement } from 'better-sqlite3';
import type { Db } from '../store/store.js';

export type AuditKind = 'mcp' | 'upstream';
export type AuditOutcome = 'ok' | 'error' | 'denied' | 'rate_limited';

export interface AuditEntry {
  /** Epoch ms when the request arrived; defaults to now minus the duration. */
  ts?: number;
  userId: number;
  tokenId?: number | null;
  tokenName?: string | null;
  kind: AuditKind;
  /** JSON-RPC method (`tools/call`), or for upstream calls the server name. */
  method: string;
  tool?: string | null;
  /** The arguments; only their shape is stored (see `argsShape`). */
  args?: unknown;
  /** Or the shape itself, when the caller already computed it with `argsShape`. */
  argsShape?: unknown;
  durationMs: number;
  outcome: AuditOutcome;
  /** A class name, not a message: `PermissionError`, `ENOENT`, `timeout`, `jsonrpc:-32602`. */
  errorClass?: string | null;
}

export interface AuditRecord {
  id: number;
  ts: number;
  userId: number;
  tokenId: number | null;
  tokenName: string | null;
  kind: AuditKind;
  method: string;
  tool: string | null;
  argsShape: unknown;
  durationMs: number;
  outcome: AuditOutcome;
  errorClass: string | null;
}

const MAX_DEPTH = 4;
const MAX_KEYS = 50;

/**
 * The shape of a value: strings become `string(<length>)`, numbers `number`, arrays
 * `{ array: <length>, item: <shape of the first item> }`, objects keep their keys (at most
 * 50, four levels deep). No value ever survives.
 */
export function argsShape(value: unknown, depth = 0): unknown {
  if (value === null) return 'null';
  if (typeof value === 'string') return `string(${value.length})`;
  if (typeof value !== 'object') return typeof value;
  if (depth >= MAX_DEPTH) return Array.isArray(value) ? `array(${value.length})` : 'object';
  if (Array.isArray(value)) return value.length ? { array: value.length, item: argsShape(value[0], depth + 1) } : { array: 0 };
  const out: Record<string, unknown> = {};
  const keys = Object.keys(value);
  for (const k of keys.slice(0, MAX_KEYS)) out[k] = argsShape((value as Record<string, unknown>)[k], depth + 1);
  if (keys.length > MAX_KEYS) out['…'] = `${keys.length - MAX_KEYS} more keys`;
  return out;
}

const INSERT_SQL = `INSERT INTO audit_log (ts, user_id, token_id, token_name, kind, method, tool, args_shape, duration_ms, outcome, error_class)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`;
/** Every request writes one row: prepare the insert once per database. */
const inserts = new WeakMap<Db, Statement>();

export function recordAudit(db: Db, e: AuditEntry): void {
  const ts = e.ts ?? Math.round(Date.now() - e.durationMs);
  let insert = inserts.get(db);
  if (!insert) inserts.set(db, (insert = db.prepare(INSERT_SQL)));
  insert.run(
    ts,
    e.userId,
    e.tokenId ?? null,
    e.tokenName ?? null,
    e.kind,
    e.method,
    e.tool ?? null,
    e.argsShape !== undefined ? JSON.stringify(e.argsShape) : e.args === undefined ? null : JSON.stringify(argsShape(e.args)),
    Math.round(e.durationMs * 1000) / 1000,
    e.outcome,
    e.errorClass ?? null,
  );
}

interface AuditRow {
  id: number;
  ts: number;
  user_id: number;
  token_id: number | null;
  token_name: string | null;
  kind: AuditKind;
  method: string;
  tool: string | null;
  args_shape: string | null;
  duration_ms: number;
  outcome: AuditOutcome;
  error_class: string | null;
}

/** One user's entries, newest first. `before` (an entry id) pages backwards. */
export function listAudit(db: Db, userId: number, opts: { limit?: number; before?: number } = {}): AuditRecord[] {
  const limit = Math.min(Math.max(opts.limit ?? 100, 1), 1000);
  const rows = db
    .prepare(`SELECT * FROM audit_log WHERE user_id = ?${opts.before ? ' AND id < ?' : ''} ORDER BY id DESC LIMIT ?`)
    .all(...(opts.before ? [userId, opts.before, limit] : [userId, limit])) as AuditRow[];
  return rows.map((r) => ({
    id: r.id,
    ts: r.ts,
    userId: r.user_id,
    tokenId: r.token_id,
    tokenName: r.token_name,
    kind: r.kind,
    method: r.method,
    tool: r.tool,
    argsShape: r.args_shape === null ? null : (JSON.parse(r.args_shape) as unknown),
    durationMs: r.duration_ms,
    outcome: r.outcome,
    errorClass: r.error_class,
  }));
}
