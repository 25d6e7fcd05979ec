/**
 * The audit log: who (user, token) did what (method, tool, argument shape), how long
 * it took and how it ended. The MCP endpoint records every request; the upstream hub
 * records every upstream call. Entries are read per user: `listAudit` has no
 * "everyone" mode on purpose, so a per-user page cannot leak another user's rows.
 *
 * Nothing a client, a model, code in a sandbox or an upstream server chooses is stored
 * as it came: `recordAudit` reduces every such field to a fixed vocabulary or a strict
 * pattern (an exception class named after an e-mail address becomes `code:other`, a
 * method nobody knows `other`), and `argsShape` keeps only the keys a tool's own schema
 * declares. The log stays free of personal data whatever its callers pass.
 */
import type { Selectable } from 'kysely';
import type { Caller, ViaKind } from '../auth/caller.js';
import { EGRESS_REASONS, SANDBOX_ERROR_REASONS, TOKEN_FAILURES, UPSTREAM_ERROR_REASONS, WORKSPACE_ERROR_CODES } from '../reasons.js';
import type { Db } from '../store/store.js';
import { prepared } from '../store/prepared.js';
import type { AuditKind, AuditLogTable, AuditOutcome } from './schema.js';

export type { AuditKind, AuditOutcome } from './schema.js';

export interface AuditEntry {
  /** Epoch ms when the request arrived; defaults to now minus the duration. */
  ts?: number;
  userId: number;
  tokenId?: number | null;
  tokenName?: string | null;
  /** How the caller came (src/auth/caller.ts); the token columns go with `token`. */
  via?: ViaKind | null;
  conversationId?: string | null;
  /** Whom an admin's action was about. */
  targetUserId?: number | null;
  kind: AuditKind;
  /** JSON-RPC method (`tools/call`), or for upstream calls the server name. */
  method: string;
  tool?: string | null;
  /** The arguments; only their shape is stored, and no key (see `argsShape`): pass `argsShape` to keep declared keys. */
  args?: unknown;
  /** Or the shape itself, when the caller already computed it with `argsShape`. */
  argsShape?: unknown;
  durationMs: number;
  outcome: AuditOutcome;
  /** A class name, not a message: `PermissionError`, `ENOENT`, `timeout`, `jsonrpc:-32602` (see auditErrorClass). */
  errorClass?: string | null;
}

export interface AuditRecord {
  id: number;
  ts: number;
  userId: number;
  via: ViaKind | null;
  tokenId: number | null;
  tokenName: string | null;
  conversationId: string | null;
  targetUserId: number | null;
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

/** The part of a JSON Schema that argsShape reads: which keys an object may have. */
export interface KeySchema {
  properties?: Record<string, unknown>;
  items?: unknown;
}

const asKeySchema = (v: unknown): KeySchema | undefined => (v !== null && typeof v === 'object' ? (v as KeySchema) : undefined);

/**
 * The shape of a value: strings become `string(<length>)`, numbers `number`, arrays
 * `{ array: <length>, item: <shape of the first item> }`. Objects keep only the keys their
 * `schema` declares (at most 50, four levels deep), each with its own shape; any other
 * key is only counted (`"…": "2 other keys"`), since a key can be data too (a map from
 * e-mail addresses to orders). No value, and no key the schema does not name, survives.
 */
export function argsShape(value: unknown, schema?: unknown, depth = 0): unknown {
  if (value === null) return 'null';
  if (typeof value === 'string') return `string(${value.length})`;
  if (typeof value !== 'object') return typeof value;
  if (depth >= MAX_DEPTH) return Array.isArray(value) ? `array(${value.length})` : 'object';
  const s = asKeySchema(schema);
  if (Array.isArray(value)) return value.length ? { array: value.length, item: argsShape(value[0], s?.items, depth + 1) } : { array: 0 };
  const declared = s?.properties ?? {};
  const out: Record<string, unknown> = {};
  let others = 0;
  let kept = 0;
  for (const k of Object.keys(value)) {
    if (Object.hasOwn(declared, k) && kept < MAX_KEYS) {
      out[k] = argsShape((value as Record<string, unknown>)[k], declared[k], depth + 1);
      kept++;
    } else others++;
  }
  if (others) out['…'] = `${others} other key${others === 1 ? '' : 's'}`;
  return out;
}

/**
 * Request methods of MCP clients (every protocol version, and the tasks extension's), the
 * endpoint's own `authenticate`, and `task`: the end of a task's run (src/mcp/tasks/).
 */
const METHODS = new Set([
  'initialize',
  'ping',
  'server/discover',
  'tools/list',
  'tools/call',
  'resources/list',
  'resources/templates/list',
  'resources/read',
  'resources/subscribe',
  'resources/unsubscribe',
  'prompts/list',
  'prompts/get',
  'completion/complete',
  'logging/setLevel',
  'tasks/get',
  'tasks/result',
  'tasks/list',
  'tasks/cancel',
  'tasks/update',
  'task',
  'authenticate',
]);

/** Python's built-in exception classes: a run that raised one is audited as `code:<name>`. */
const PYTHON_EXCEPTIONS = new Set(
  (
    'ArithmeticError AssertionError AttributeError BaseException BaseExceptionGroup BlockingIOError BrokenPipeError BufferError ' +
    'ChildProcessError ConnectionAbortedError ConnectionError ConnectionRefusedError ConnectionResetError EOFError Exception ' +
    'ExceptionGroup FileExistsError FileNotFoundError FloatingPointError GeneratorExit ImportError IndentationError IndexError ' +
    'InterruptedError IsADirectoryError KeyError KeyboardInterrupt LookupError MemoryError ModuleNotFoundError NameError ' +
    'NotADirectoryError NotImplementedError OSError OverflowError PermissionError ProcessLookupError RecursionError ' +
    'ReferenceError RuntimeError StopAsyncIteration StopIteration SyntaxError SystemError SystemExit TabError TimeoutError ' +
    'TypeError UnboundLocalError UnicodeDecodeError UnicodeEncodeError UnicodeError UnicodeTranslateError ValueError ZeroDivisionError'
  ).split(' '),
);

/** Every error class the log stores as it is; anything else becomes `other`. */
const ERROR_CLASSES = new Set<string>([
  ...TOKEN_FAILURES,
  ...WORKSPACE_ERROR_CODES,
  ...UPSTREAM_ERROR_REASONS,
  ...EGRESS_REASONS,
  ...SANDBOX_ERROR_REASONS.map((r) => `SandboxError:${r}`),
  'PermissionError',
  'rate_limited',
  'aborted',
  'tool_error',
  'timeout',
  'killed',
  'exit',
  'internal',
  'code:other',
]);

/** An error class as the log keeps it: from the vocabulary above, or `other`. */
export function auditErrorClass(raw: string | null | undefined): string | null {
  if (raw === null || raw === undefined) return null;
  if (ERROR_CLASSES.has(raw) || /^jsonrpc:-?\d{1,6}$/.test(raw)) return raw;
  if (raw.startsWith('code:')) return PYTHON_EXCEPTIONS.has(raw.slice(5)) ? raw : 'code:other';
  return 'other';
}

/**
 * A method as the log keeps it: an MCP method (kind `mcp`), an upstream server's name
 * (`upstream`), or for the gateway's own actions (`web`, `agent`, `admin`) the action's
 * name, which the code names (`tokens/create`, `sandbox/stop`), never a user.
 */
function auditMethod(kind: AuditKind, raw: string): string {
  if (kind === 'upstream') return /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(raw) ? raw : '?';
  if (kind === 'mcp') return METHODS.has(raw) ? raw : 'other';
  return /^[a-z][a-z_]{0,31}(\/[a-z][a-z_]{0,31}){0,2}$/.test(raw) ? raw : 'other';
}

/** The columns that say who called and how, for an entry. */
export function callerColumns(caller: Caller): Pick<AuditEntry, 'userId' | 'via' | 'tokenId' | 'tokenName' | 'conversationId'> {
  const via = caller.via;
  return {
    userId: caller.user.id,
    via: via.kind,
    tokenId: via.kind === 'token' ? via.tokenId : null,
    tokenName: via.kind === 'token' ? via.tokenName : null,
    conversationId: via.kind === 'agent' ? via.conversationId : null,
  };
}

/** Tool names callers pass are already checked against what exists; this is the last line. */
function auditTool(raw: string | null | undefined): string | null {
  if (raw === null || raw === undefined) return null;
  return /^[A-Za-z0-9_.?-]{1,64}(\/[A-Za-z0-9_.?-]{1,64})?$/.test(raw) ? raw : '?';
}

/**
 * Writes one entry: a single INSERT, on the path of every request. Rejects when the
 * write fails; a caller that does not wait for it must catch that and log it.
 */
export async function recordAudit(db: Db, e: AuditEntry): Promise<void> {
  await insertAudit(db, {
    ts: e.ts ?? Math.round(Date.now() - e.durationMs),
    user_id: e.userId,
    via: e.via ?? (e.tokenId ? 'token' : null),
    token_id: e.tokenId ?? null,
    token_name: e.tokenName ?? null,
    conversation_id: e.conversationId ?? null,
    kind: e.kind,
    method: auditMethod(e.kind, e.method),
    tool: auditTool(e.tool),
    args_shape: e.argsShape !== undefined ? JSON.stringify(e.argsShape) : e.args === undefined ? null : JSON.stringify(argsShape(e.args)),
    target_user_id: e.targetUserId ?? null,
    duration_ms: Math.round(e.durationMs * 1000) / 1000,
    outcome: e.outcome,
    error_class: auditErrorClass(e.errorClass),
  });
}

/** One audit row, every column given: compiled once, as every request writes one. */
const insertAudit = prepared((db, p: Omit<Selectable<AuditLogTable>, 'id'>) =>
  db.insertInto('audit_log').values({
    ts: p.ts,
    user_id: p.user_id,
    via: p.via,
    token_id: p.token_id,
    token_name: p.token_name,
    conversation_id: p.conversation_id,
    kind: p.kind,
    method: p.method,
    tool: p.tool,
    args_shape: p.args_shape,
    target_user_id: p.target_user_id,
    duration_ms: p.duration_ms,
    outcome: p.outcome,
    error_class: p.error_class,
  }),
);

type AuditRow = Selectable<AuditLogTable>;

export const AUDIT_KINDS: readonly AuditKind[] = ['mcp', 'upstream', 'web', 'agent', 'admin', 'egress'];
export const AUDIT_OUTCOMES: readonly AuditOutcome[] = ['ok', 'error', 'denied', 'rate_limited'];

const toAuditRecord = (r: AuditRow): AuditRecord => ({
  id: r.id,
  ts: r.ts,
  userId: r.user_id,
  via: r.via,
  tokenId: r.token_id,
  tokenName: r.token_name,
  conversationId: r.conversation_id,
  targetUserId: r.target_user_id,
  kind: r.kind,
  method: r.method,
  tool: r.tool,
  argsShape: r.args_shape === null ? null : (JSON.parse(r.args_shape) as unknown),
  durationMs: r.duration_ms,
  outcome: r.outcome,
  errorClass: r.error_class,
});

/** One user's entries, newest first. `before` (an entry id) pages backwards. */
export async function listAudit(db: Db, userId: number, opts: { limit?: number; before?: number } = {}): Promise<AuditRecord[]> {
  return queryAudit(db, { userId, limit: opts.limit, before: opts.before });
}

export interface AuditQuery {
  userId?: number;
  kind?: AuditKind;
  /** The tool, or the action of an admin or web entry (its method). */
  tool?: string;
  outcome?: AuditOutcome;
  /** Epoch ms, inclusive. */
  since?: number;
  /** Epoch ms, exclusive. */
  until?: number;
  /** An entry id: entries older than it (paging backwards). */
  before?: number;
  limit?: number;
}

/** Entries of every user matching `q`, newest first, at most `limit` (1000). */
export async function queryAudit(db: Db, q: AuditQuery): Promise<AuditRecord[]> {
  const given = <T>(v: T | undefined | ''): v is T => v !== undefined && v !== '';
  let query = db.selectFrom('audit_log').selectAll();
  if (given(q.userId)) query = query.where('user_id', '=', q.userId);
  if (given(q.kind)) query = query.where('kind', '=', q.kind);
  if (q.tool) {
    const tool = q.tool;
    query = query.where((eb) => eb.or([eb('tool', '=', tool), eb('method', '=', tool)]));
  }
  if (given(q.outcome)) query = query.where('outcome', '=', q.outcome);
  if (given(q.since)) query = query.where('ts', '>=', q.since);
  if (given(q.until)) query = query.where('ts', '<', q.until);
  if (given(q.before)) query = query.where('id', '<', q.before);
  const limit = Math.min(Math.max(q.limit ?? 100, 1), 1000);
  const rows = await query.orderBy('id', 'desc').limit(limit).execute();
  return rows.map(toAuditRecord);
}

/** Calls per upstream server (entries of kind `upstream`), with how many failed, since `since`. */
export async function upstreamCallCounts(db: Db, since = 0): Promise<Map<string, { calls: number; failed: number; lastAt: number }>> {
  const rows = await db
    .selectFrom('audit_log')
    .select((eb) => [
      'method as server',
      eb.fn.countAll<number>().as('calls'),
      // Literals, not parameters: Postgres cannot tell the type of a bound value inside SUM(CASE …).
      eb.fn.sum<number | null>(eb.case().when('outcome', '!=', 'ok').then(eb.lit(1)).else(eb.lit(0)).end()).as('failed'),
      eb.fn.max('ts').as('lastAt'),
    ])
    .where('kind', '=', 'upstream')
    .where('ts', '>=', since)
    .groupBy('method')
    .execute();
  return new Map(rows.map((r) => [r.server, { calls: Number(r.calls), failed: Number(r.failed ?? 0), lastAt: Number(r.lastAt) }]));
}
