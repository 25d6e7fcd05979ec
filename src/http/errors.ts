/**
 * The HTTP boundary of the error tree (src/errors.ts): one handler for every route's
 * errors and one for paths nothing answered. A browser asking for a page gets a page of
 * the site (views/web/error.eta, in the site layout, with a way back); an htmx request
 * gets the notice it swaps into the page; an API client (the MCP endpoint, /v1, the health
 * checks, anything asking for JSON) gets `{"error": message}`. A GatewayError's own status
 * and message are used; anything else is an internal error: logged with its stack,
 * answered 500 without detail. Express 5 brings a route's rejected promise here as it
 * does a thrown error.
 */
import type { ErrorRequestHandler, Express, Request, RequestHandler, Response } from 'express';
import type { Config } from '../config.js';
import { GatewayError } from '../errors.js';
import type { Logger } from '../logger.js';
import { renderPartial, securityHeaders } from '../web/render.js';

const API_PATHS = /^\/(mcp|v1|api|healthz|readyz)(\/|$)/i;
const TITLES: Record<number, string> = { 400: 'Bad request', 401: 'Sign-in needed', 403: 'Not allowed', 404: 'Not found', 413: 'Too large', 429: 'Too many requests', 507: 'Workspace full' };

/** Whether the request is a browser's for a page (not an API call). */
export function wantsPage(req: Request): boolean {
  if (API_PATHS.test(req.path)) return false;
  return req.accepts(['json', 'html']) === 'html';
}

/**
 * The gateway's own origin, which a way back on an error page must come from: the one of
 * SANDGATE_PUBLIC_URL when the operator set it (a reverse proxy may hand on another Host),
 * else none, and the request's Host stands for it. Kept on the app (its locals), so that
 * every error page, whoever sends it, reads the same.
 */
export function setOwnOrigin(app: Express, config: Pick<Config, 'publicUrl' | 'publicUrlSet'>): void {
  app.locals.ownOrigin = config.publicUrlSet ? new URL(config.publicUrl).origin : undefined;
}

/**
 * The page this one was reached from, when it is one of ours (its path only): the way back.
 * The path goes into an href as it is, so it must be one a browser reads as a path here:
 * `//evil.example/x` (which a Referer of `https://gw//evil.example/x` or `/\evil.example`
 * gives) is another site's address, and a backslash or a control character is read as
 * a slash or dropped by some browsers.
 */
function previousPage(req: Request): string | undefined {
  const referer = req.get('Referer');
  if (!referer) return undefined;
  try {
    const from = new URL(referer);
    if (from.protocol !== 'http:' && from.protocol !== 'https:') return undefined;
    const own = req.app.locals.ownOrigin as string | undefined;
    if (own === undefined ? from.host !== req.get('Host') : from.origin !== own) return undefined;
    const back = from.pathname + from.search;
    // eslint-disable-next-line no-control-regex
    if (!back.startsWith('/') || back.startsWith('//') || /[\\\x00-\x1f\x7f]/.test(back)) return undefined;
    return back === req.originalUrl ? undefined : back;
  } catch {
    return undefined;
  }
}

/** Answers with the site's error page: its title for the status, the message, and a way back. */
export function sendErrorPage(req: Request, res: Response, status: number, message: string): void {
  const title = TITLES[status] ?? (status >= 500 ? 'Something went wrong' : 'Cannot do that');
  // A page of the site, so the site's page headers; no session is opened for it (no form, no sign-out).
  securityHeaders(req, res, () => {});
  res
    .status(status)
    .set('Cache-Control', 'no-store')
    .type('html')
    .send(renderPartial('error', { title, status, message, previous: previousPage(req), csrf: '' }));
}

/**
 * A page refused to its visitor (not signed in as needed, not an admin): the error page
 * for a browser's page request, else the plain text such refusals have always answered
 * (htmx shows it where it puts errors; a script reads it as it is).
 */
export function sendRefusal(req: Request, res: Response, status: number, message: string): void {
  // The JSON under a page's /api (the admin's, for scripts) answers as it always has.
  const api = /\/api(\/|$)/i.test(req.baseUrl + req.path);
  if (!req.get('HX-Request') && !api && wantsPage(req)) return sendErrorPage(req, res, status, message);
  res.status(status).type('text').send(message);
}

function send(req: Request, res: Response, status: number, message: string): void {
  // An htmx request swaps the answer into the page: a notice, not a whole page.
  if (req.get('HX-Request')) return void res.status(status).type('html').send(renderPartial('notice', { message, error: true }));
  if (wantsPage(req)) sendErrorPage(req, res, status, message);
  else res.status(status).json({ error: message });
}

export function notFound(): RequestHandler {
  return function notFound(req, res) {
    if (wantsPage(req)) send(req, res, 404, 'There is nothing at this address.');
    else send(req, res, 404, 'not found');
  };
}

export function errorHandler(logger: Logger): ErrorRequestHandler {
  return function handleError(err: unknown, req, res, _next) {
    let status: number;
    let message: string;
    if (err instanceof GatewayError) {
      status = err.status;
      message = err.message;
      if (err.operator) logger.warn({ reason: err.reason, path: req.path, detail: err.logMessage }, 'request failed');
    } else {
      // Express and body-parser errors carry a status; their messages are safe to show below 500.
      const foreign = err as { status?: unknown; message?: string };
      status = typeof foreign.status === 'number' && foreign.status >= 400 && foreign.status < 600 ? foreign.status : 500;
      message = status >= 500 ? 'Internal error (it has been logged).' : (foreign.message ?? 'Bad request');
      if (status >= 500) logger.error({ err, path: req.path }, 'request failed');
    }
    // Part of the answer is already out (a download, a stream): no status can follow, and
    // ending it as if complete would pass a cut-off answer for a whole one.
    if (res.headersSent) return void res.destroy();
    send(req, res, status, message);
  };
}
