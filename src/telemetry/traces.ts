/**
 * Traces with OpenTelemetry, sent over OTLP/HTTP to SANDGATE_TRACES_URL. Off by default,
 * and then free: no provider exists, `span` runs its function and nothing else, and no
 * header is read.
 *
 * On, a request is a server span (continuing the W3C `traceparent` its client sent), an
 * MCP request inside it a child (or a child of the `traceparent` in the request's
 * `_meta`, as MCP clients pass it), and the sandbox run and the model rounds it causes are
 * children of those. Spans carry names, ids and outcomes: never code, arguments, output
 * or a message's text.
 *
 * One tracing per process (the gateway's): `startTracing` sets it up, its `stop` flushes
 * what is pending and turns it off again.
 */
import { context, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler } from '@opentelemetry/sdk-trace-base';
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';

let tracer: Tracer | undefined;
const propagator = new W3CTraceContextPropagator();
let contextManager: AsyncLocalStorageContextManager | undefined;

export interface TracingSettings {
  /** The OTLP/HTTP traces endpoint. */
  url: string;
  /** Comma-separated name=value headers for the endpoint. */
  headers?: string;
  /** Share of new traces kept, 0 to 1. */
  sampleRatio?: number;
  /** service.instance.id: the replica. */
  instance?: string;
  version?: string;
}

/** Whether spans are being made. */
export function tracing(): boolean {
  return tracer !== undefined;
}

/** Parses `a=b,c=d` into headers; names lower-case, values as written (a value may hold `=`). */
export function parseHeaders(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (text ?? '').split(',')) {
    const at = part.indexOf('=');
    if (at <= 0) continue;
    out[part.slice(0, at).trim().toLowerCase()] = part.slice(at + 1).trim();
  }
  return out;
}

/** Starts tracing for this process; returns the function that flushes and stops it. */
export function startTracing(settings: TracingSettings): () => Promise<void> {
  if (!contextManager) {
    contextManager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(contextManager);
  }
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({
      [ATTR_SERVICE_NAME]: 'sandgate',
      ...(settings.version && { [ATTR_SERVICE_VERSION]: settings.version }),
      ...(settings.instance && { 'service.instance.id': settings.instance }),
    }),
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(settings.sampleRatio ?? 1) }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: settings.url, headers: parseHeaders(settings.headers) }), { scheduledDelayMillis: 1000 })],
  });
  const mine = (tracer = provider.getTracer('sandgate', settings.version));
  return async () => {
    if (tracer === mine) tracer = undefined;
    await provider.shutdown().catch(() => undefined);
  };
}

/** The context a `traceparent` (and `tracestate`) continue, when both are well-formed; else undefined. */
export function continued(carrier: { traceparent?: unknown; tracestate?: unknown } | undefined): Context | undefined {
  if (!tracer || typeof carrier?.traceparent !== 'string') return undefined;
  const fields: Record<string, string> = { traceparent: carrier.traceparent.slice(0, 128) };
  if (typeof carrier.tracestate === 'string') fields.tracestate = carrier.tracestate.slice(0, 512);
  const ctx = propagator.extract(ROOT_CONTEXT, fields, {
    get: (c, k) => c[k],
    keys: (c) => Object.keys(c),
  });
  return trace.getSpanContext(ctx) ? ctx : undefined;
}

/**
 * Starts a span under `parent` (else the active one) and returns it with the context it
 * is active in; undefined when tracing is off. For spans whose end is not a function's
 * return (a request, an MCP message): the caller ends it.
 */
export function openSpan(name: string, opts: { kind?: SpanKind; attributes?: Attributes; parent?: Context } = {}): { span: Span; ctx: Context } | undefined {
  if (!tracer) return undefined;
  const parent = opts.parent ?? context.active();
  const span = tracer.startSpan(name, { kind: opts.kind ?? SpanKind.INTERNAL, attributes: opts.attributes }, parent);
  return { span, ctx: trace.setSpan(parent, span) };
}

/** Listeners later added to `emitter` (a request's body events) run with `ctx` active. */
export function bindEmitter<E extends NodeJS.EventEmitter>(ctx: Context, emitter: E): E {
  return context.bind(ctx, emitter);
}

/** Runs `fn` with `ctx` active (a span from openSpan); just runs it without one. */
export function within<T>(ctx: Context | undefined, fn: () => T): T {
  return ctx ? context.with(ctx, fn) : fn();
}

/**
 * Runs `fn` inside a span named `name`, ended when it settles (an error status if it
 * throws). With tracing off, `fn` runs with nothing around it. `fn` may add attributes
 * (an outcome) to the span it is given.
 */
export function span<T>(name: string, attributes: Attributes, fn: (span?: Span) => Promise<T>, kind: SpanKind = SpanKind.INTERNAL): Promise<T> {
  if (!tracer) return fn();
  return tracer.startActiveSpan(name, { kind, attributes }, async (s) => {
    try {
      return await fn(s);
    } catch (e) {
      failed(s, e);
      throw e;
    } finally {
      s.end();
    }
  });
}

/** Marks `s` failed with `e`'s kind (its name, never its message: that can hold a user's data). */
export function failed(s: Span | undefined, e: unknown): void {
  s?.setStatus({ code: SpanStatusCode.ERROR, message: e instanceof Error ? e.name : 'error' });
}

export { SpanKind, SpanStatusCode };
