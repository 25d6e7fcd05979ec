/**
 * One audit entry per JSON-RPC request, taken at the transport: the request going in
 * (method, tool, argument shape) and the response going out (outcome), so nothing in
 * the tools has to remember to audit. Requests still pending when the transport closes
 * (the client went away) are recorded as errors.
 *
 * The SDK builds the transport for each exchange itself (a per-request transport for
 * 2026-07-28, a stateless Streamable HTTP transport for 2025 versions) and checks what
 * kind it is, so the audit taps the transport it was given instead of wrapping it: it
 * sets `onmessage` and `onclose` before the server connects (Protocol.connect keeps
 * callbacks already set and calls them first) and wraps that instance's `send`.
 */
import type { JSONRPCMessage, RequestId, Transport } from '@modelcontextprotocol/server';
import { argsShape, type AuditEntry } from '../audit/audit.js';

/** Result `_meta` key by which a tool tells the audit log why it failed; removed before sending. */
export const ERROR_CLASS_META = 'org.sandgate/errorClass';

interface Pending {
  method: string;
  tool: string | null;
  argsShape: unknown;
}

export type Outcome = Pick<AuditEntry, 'method' | 'tool' | 'argsShape' | 'outcome' | 'errorClass'>;

/** The parameters of MCP's own requests (other than tools/call) whose names the log keeps. */
const MCP_PARAMS = {
  properties: {
    uri: {},
    cursor: {},
    name: {},
    level: {},
    protocolVersion: {},
    capabilities: {},
    clientInfo: { properties: { name: {}, version: {} } },
    ref: { properties: { type: {}, uri: {}, name: {} } },
    argument: { properties: { name: {}, value: {} } },
    arguments: {},
  },
};

/**
 * What an incoming request is, for the audit log. Values never leave here except as a
 * shape, and keys only as the tool's schema (`schemaOf`) names them: a tool name that
 * is not a tool is `?`.
 */
export function describeRequest(msg: { method: string; params?: unknown }, schemaOf: (tool: string) => unknown = () => undefined): Pending {
  const params = (msg.params ?? undefined) as Record<string, unknown> | undefined;
  if (msg.method === 'tools/call') {
    const name = typeof params?.name === 'string' ? params.name : undefined;
    const schema = name === undefined ? undefined : schemaOf(name);
    return { method: msg.method, tool: schema ? name! : name === undefined ? null : '?', argsShape: argsShape(params?.arguments ?? {}, schema) };
  }
  const { _meta: _m, ...rest } = params ?? {};
  return { method: msg.method, tool: null, argsShape: params === undefined ? undefined : argsShape(rest, MCP_PARAMS) };
}

/** The outcome of the response to `p`; strips ERROR_CLASS_META from a result in place. */
function outcomeOf(p: Pending, message: JSONRPCMessage): Outcome {
  if ('error' in message) return { ...p, outcome: 'error', errorClass: `jsonrpc:${message.error.code}` };
  const result = (message as { result: { isError?: boolean; _meta?: Record<string, unknown> } }).result;
  const errorClass = result._meta?.[ERROR_CLASS_META];
  if (result._meta && errorClass !== undefined) {
    delete result._meta[ERROR_CLASS_META];
    if (!Object.keys(result._meta).length) delete result._meta;
  }
  return { ...p, outcome: result.isError ? 'error' : 'ok', errorClass: result.isError ? String(errorClass ?? 'tool_error') : null };
}

/** When a request arrived (epoch ms) and how long it took, for its audit row. */
export interface Timing {
  ts: number;
  durationMs: number;
}

/**
 * Audits every request that passes `transport`. Call before the server connects to it.
 * A request's time runs from its arrival on the transport to its response being handed
 * back, unless `arrival` says when the whole exchange arrived (an HTTP request, whose
 * authentication then counts too).
 */
export function auditTransport(
  transport: Transport,
  record: (o: Outcome, timing: Timing) => void,
  opts: { schemaOf?: (tool: string) => unknown; arrival?: { at: number; t0: number } } = {},
): void {
  const pending = new Map<RequestId, Pending & { at: number; t0: number }>();
  const previous = { onmessage: transport.onmessage, onclose: transport.onclose };
  const timing = (p: { at: number; t0: number }, end: number): Timing => {
    const from = opts.arrival ?? p;
    return { ts: from.at, durationMs: end - from.t0 };
  };

  transport.onmessage = (message, extra) => {
    if ('method' in message && 'id' in message) pending.set(message.id, { ...describeRequest(message, opts.schemaOf), at: Date.now(), t0: performance.now() });
    previous.onmessage?.(message, extra);
  };
  transport.onclose = () => {
    const end = performance.now();
    for (const { at, t0, ...p } of pending.values()) record({ ...p, outcome: 'error', errorClass: 'aborted' }, timing({ at, t0 }, end));
    pending.clear();
    previous.onclose?.();
  };

  const send = transport.send.bind(transport);
  transport.send = async (message, options) => {
    let outcome: Outcome | undefined;
    let started: { at: number; t0: number } | undefined;
    if (('result' in message || 'error' in message) && 'id' in message && message.id !== undefined) {
      const p = pending.get(message.id);
      if (p) {
        pending.delete(message.id);
        const { at, t0, ...rest } = p;
        started = { at, t0 };
        outcome = outcomeOf(rest, message);
      }
    }
    await send(message, options);
    // The entry is written once the response is on its way, off the caller's latency.
    if (outcome && started) {
      const o = outcome;
      const t = timing(started, performance.now());
      setImmediate(() => record(o, t));
    }
  };
}
