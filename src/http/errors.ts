/**
 * The HTTP boundary of the error tree (src/errors.ts): one handler for every route's
 * errors and one for paths nothing answered. A browser asking for a page gets a page; an
 * API client (the MCP endpoint, the health checks, anything asking for JSON) gets
 * `{"error": message}`. A GatewayError's own status and message are used; anything else
 * is an internal error: logged with its stack, answered 500 without detail. Express 5
 * brings a route's rejected promise here as it does a thrown error.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { ErrorRequestHandler, Request, RequestHandler, Response } from 'express';
import { GatewayError } from '../errors.js';
import type { Logger } from '../logger.js';
import { VIEWS_DIR } from '../paths.js';

const API_PATHS = /^\/(mcp|v1|api|healthz|readyz)(\/|$)/i;
const TITLES: Record<number, string> = { 400: 'Bad request', 401: 'Sign-in needed', 403: 'Not allowed', 404: 'Not found', 413: 'Too large', 429: 'Too many requests', 507: 'Workspace full' };

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** Whether the request is a browser's for a page (not an API call). */
export function wantsPage(req: Request): boolean {
  if (API_PATHS.test(req.path)) return false;
  return req.accepts(['json', 'html']) === 'html';
}

let template: string | undefined;
function page(status: number, message: string): string {
  template ??= fs.readFileSync(path.join(VIEWS_DIR, 'errors/error.html'), 'utf8');
  const title = TITLES[status] ?? (status >= 500 ? 'Something went wrong' : 'Cannot do that');
  return template.replaceAll('{{title}}', escapeHtml(title)).replaceAll('{{message}}', escapeHtml(message));
}

function send(req: Request, res: Response, status: number, message: string): void {
  // An htmx request swaps the answer into the page: a notice, not a whole page.
  if (req.get('HX-Request')) return void res.status(status).type('html').send(`<div class="notice error" role="alert">${escapeHtml(message)}</div>`);
  if (wantsPage(req)) res.status(status).type('html').send(page(status, message));
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
