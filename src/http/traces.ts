/**
 * Each request a server span (src/telemetry/traces.ts), continuing the `traceparent` its
 * client sent, named by its route's template once it is answered; everything the request
 * starts runs inside it. Nothing at all when tracing is off.
 */
import type { RequestHandler } from 'express';
import { bindEmitter, continued, openSpan, SpanKind, SpanStatusCode, tracing, within } from '../telemetry/traces.js';
import { routeTemplate } from './metrics.js';

export function requestSpans(): RequestHandler {
  return function requestSpans(req, res, next) {
    if (!tracing()) return next();
    const opened = openSpan(`${req.method} request`, {
      kind: SpanKind.SERVER,
      parent: continued({ traceparent: req.headers.traceparent, tracestate: req.headers.tracestate }),
      attributes: { 'http.request.method': req.method },
    });
    if (!opened) return next();
    const { span, ctx } = opened;
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      const route = routeTemplate(req);
      span.updateName(`${req.method} ${route}`);
      span.setAttributes({ 'http.route': route, 'http.response.status_code': res.statusCode });
      // A request the client closed before its answer counts as an error too.
      if (res.statusCode >= 500 || !res.writableFinished) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    };
    res.once('finish', end);
    res.once('close', end);
    // The body's events come from the connection: its parser's callbacks (and the handler
    // they call) continue in the request's span too.
    bindEmitter(ctx, req);
    within(ctx, next);
  };
}
