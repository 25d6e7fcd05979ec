/**
 * Which request a piece of work belongs to, wherever that work ends up running.
 *
 * `requestContext()` is the app's first middleware: everything a request starts (its
 * handlers, the promises they create, timers, stream callbacks) runs inside the
 * request's AsyncLocalStorage context, so a failure that escapes the request, such as a
 * promise rejected with nobody awaiting it, can still say whose request it came from.
 *
 * `guardStrayRejections(logger)` is the process-level net main.ts installs: Node's
 * default ends the whole gateway (every user's sessions, turns and streams) on one
 * unhandled rejection. The guard logs it at error level with the request it came from
 * and keeps serving. It is a net, not a handler: every route still answers its own
 * failures (src/http/errors.ts); a rejection that reaches the guard is a bug to fix.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Request, RequestHandler } from 'express';
import type { Logger } from '../logger.js';

/** What the log says about a request: never its headers, body or query (they can hold secrets). */
export interface RequestSummary {
  method: string;
  path: string;
  /** The signed-in user (a page's session or an API token's user), once authentication has run. */
  userId?: number;
}

const current = new AsyncLocalStorage<Request>();

export function requestContext(): RequestHandler {
  return function requestContext(req, _res, next) {
    // The body's events come from the connection, which was set up before the request
    // began: without this, a listener of 'data' or 'end' (and a stream piped from the
    // request, as an upload's parser is) would run outside the request's context.
    const emit = req.emit;
    req.emit = function emitInContext(this: Request, ...args: Parameters<Request['emit']>) {
      return current.run(req, () => emit.apply(this, args));
    } as Request['emit'];
    current.run(req, next);
  };
}

/** The request the calling code runs for, or undefined outside any request. */
export function currentRequest(): RequestSummary | undefined {
  const req = current.getStore();
  if (!req) return undefined;
  // Read now, not at the start: the user is known only after authentication has run.
  const user = (req.user as { id?: unknown } | undefined) ?? (req as Request & { principal?: { user?: { id?: unknown } } }).principal?.user;
  const userId = typeof user?.id === 'number' ? user.id : undefined;
  // The original URL (a router strips its mount path from `path`), without its query.
  const path = (req.originalUrl ?? req.url ?? '').split('?')[0] ?? '';
  return { method: req.method, path, ...(userId !== undefined ? { userId } : {}) };
}

/**
 * Logs every unhandled promise rejection at error level, with the request it escaped
 * from when there is one, instead of letting Node end the process. Node runs the
 * `unhandledRejection` listener in the rejected promise's async context, which is how
 * the request is known. Returns a function that removes the guard.
 */
export function guardStrayRejections(logger: Logger, proc: NodeJS.Process = process): () => void {
  const onRejection = (reason: unknown) => {
    logger.error({ err: reason, req: currentRequest() ?? null }, 'a promise was rejected with nobody to handle it; the gateway keeps serving');
  };
  proc.on('unhandledRejection', onRejection);
  return () => void proc.off('unhandledRejection', onRejection);
}
