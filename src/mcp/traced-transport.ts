/**
 * A span for each JSON-RPC request a server answers (src/telemetry/traces.ts), so a tool
 * call, and the sandbox run and the upstream calls it makes, show in the caller's trace.
 * Its parent is the trace named in the request's `params._meta` (`traceparent`,
 * `tracestate`), as MCP clients pass it; else the HTTP request's span. Nothing when
 * tracing is off.
 *
 * Set after the server connected: the SDK's own `onmessage` (which dispatches to the
 * handler) then runs inside the span, and so does every promise the handler makes.
 */
import type { RequestId, Transport } from '@modelcontextprotocol/server';
import type { Span } from '@opentelemetry/api';
import { continued, failed, openSpan, tracing, within } from '../telemetry/traces.js';

export function traceTransport(transport: Transport): void {
  if (!tracing()) return;
  const open = new Map<RequestId, Span>();
  const dispatch = transport.onmessage;
  transport.onmessage = (message, extra) => {
    if (!('method' in message) || !('id' in message)) return dispatch?.(message, extra);
    const params = message.params as { name?: unknown; _meta?: { traceparent?: unknown; tracestate?: unknown } } | undefined;
    const tool = message.method === 'tools/call' && typeof params?.name === 'string' ? params.name.slice(0, 64) : undefined;
    const opened = openSpan(tool ? `${message.method} ${tool}` : message.method.slice(0, 64), {
      parent: continued(params?._meta),
      attributes: { 'mcp.method.name': message.method.slice(0, 64), ...(tool && { 'gen_ai.tool.name': tool }), 'jsonrpc.request.id': String(message.id).slice(0, 64) },
    });
    if (!opened) return dispatch?.(message, extra);
    open.get(message.id)?.end();
    open.set(message.id, opened.span);
    within(opened.ctx, () => dispatch?.(message, extra));
  };
  const send = transport.send.bind(transport);
  transport.send = async (message, options) => {
    if (('result' in message || 'error' in message) && 'id' in message && message.id !== undefined) {
      const span = open.get(message.id);
      if (span) {
        open.delete(message.id);
        const error = 'error' in message ? `jsonrpc:${message.error.code}` : (message.result as { isError?: boolean }).isError ? 'tool_error' : undefined;
        span.setAttribute('sandgate.outcome', error ? 'error' : 'ok');
        if (error) {
          span.setAttribute('error.type', error);
          failed(span, new Error(error));
        }
        span.end();
      }
    }
    return send(message, options);
  };
  const closed = transport.onclose;
  transport.onclose = () => {
    for (const span of open.values()) {
      span.setAttribute('error.type', 'aborted');
      failed(span, new Error('aborted'));
      span.end();
    }
    open.clear();
    closed?.();
  };
}
