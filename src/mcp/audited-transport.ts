/**
 * A Transport decorator that writes one audit entry per JSON-RPC request: it sees the
 * request going in (method, tool, argument shape) and the response going out (outcome),
 * so nothing in the tools has to remember to audit. Requests still pending when the
 * transport closes (the client went away) are recorded as errors.
 */
import type { Transport, TransportSendOptions } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage, MessageExtraInfo, RequestId } from '@modelcontextprotocol/sdk/types.js';
import type { AuditEntry } from '../audit/audit.js';

/** Result `_meta` key by which a tool tells the audit log why it failed; removed before sending. */
export const ERROR_CLASS_META = 'org.sandgate/errorClass';

interface Pending {
  method: string;
  tool: string | null;
  args: unknown;
}

type Outcome = Pick<AuditEntry, 'method' | 'tool' | 'args' | 'outcome' | 'errorClass'>;

/** What an incoming request is, for the audit log. Values never leave here except as a shape. */
export function describeRequest(msg: { method: string; params?: unknown }): Pending {
  const params = (msg.params ?? undefined) as Record<string, unknown> | undefined;
  if (msg.method === 'tools/call') {
    return { method: msg.method, tool: typeof params?.name === 'string' ? params.name : null, args: params?.arguments ?? {} };
  }
  const { _meta: _m, ...rest } = params ?? {};
  return { method: msg.method, tool: null, args: params === undefined ? undefined : rest };
}

export class AuditedTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void;
  private readonly pending = new Map<RequestId, Pending>();

  constructor(
    private readonly inner: Transport,
    /** `at`: performance.now() when the response was handed to the HTTP layer. */
    private readonly record: (o: Outcome, at: number) => void,
  ) {
    inner.onmessage = (message, extra) => {
      if ('method' in message && 'id' in message) this.pending.set(message.id, describeRequest(message));
      this.onmessage?.(message, extra);
    };
    inner.onerror = (e) => this.onerror?.(e);
    inner.onclose = () => {
      for (const p of this.pending.values()) this.record({ ...p, outcome: 'error', errorClass: 'aborted' }, performance.now());
      this.pending.clear();
      this.onclose?.();
    };
  }

  get sessionId(): string | undefined {
    return this.inner.sessionId;
  }

  start(): Promise<void> {
    return this.inner.start();
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  async send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    let outcome: Outcome | undefined;
    if (('result' in message || 'error' in message) && 'id' in message && message.id !== undefined) {
      const p = this.pending.get(message.id);
      if (p) {
        this.pending.delete(message.id);
        if ('error' in message) {
          outcome = { ...p, outcome: 'error', errorClass: `jsonrpc:${message.error.code}` };
        } else {
          const result = message.result as { isError?: boolean; _meta?: Record<string, unknown> };
          const errorClass = result._meta?.[ERROR_CLASS_META];
          if (result._meta && errorClass !== undefined) {
            delete result._meta[ERROR_CLASS_META];
            if (!Object.keys(result._meta).length) delete result._meta;
          }
          outcome = { ...p, outcome: result.isError ? 'error' : 'ok', errorClass: result.isError ? String(errorClass ?? 'tool_error') : null };
        }
      }
    }
    await this.inner.send(message, options);
    // The entry is written once the response is on its way, off the caller's latency.
    if (outcome) {
      const o = outcome;
      const at = performance.now();
      setImmediate(() => this.record(o, at));
    }
  }

  setProtocolVersion(version: string): void {
    this.inner.setProtocolVersion?.(version);
  }
}
