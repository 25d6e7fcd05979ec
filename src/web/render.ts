/**
 * Pages and partials of the web app: Eta templates (views/web) with auto-escaping on, so
 * every value is text unless a template asks for HTML it was handed (Markdown already
 * made safe, other partials). One set of security headers for every page: a strict
 * Content-Security-Policy with no inline script and nothing from other origins.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import { Eta } from 'eta';
import type { RequestHandler, Response } from 'express';
import { VIEWS_DIR } from '../paths.js';
import type { User } from '../accounts/accounts.js';
import { pathQuery, shownPath } from './files/paths.js';

export const views = new Eta({ views: path.join(VIEWS_DIR, 'web'), cache: true, autoEscape: true, autoTrim: false });

/** The page CSP: our own scripts and styles only, images from here (and data: for small icons), sockets to here. */
export const PAGE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ');

export const securityHeaders: RequestHandler = function securityHeaders(_req, res, next) {
  res.set({
    'Content-Security-Policy': PAGE_CSP,
    'X-Content-Type-Options': 'nosniff',
    'X-Frame-Options': 'DENY',
    'Referrer-Policy': 'same-origin',
    'Cross-Origin-Opener-Policy': 'same-origin',
    'Cross-Origin-Resource-Policy': 'same-origin',
  });
  next();
};

export const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export interface PageContext {
  user?: User;
  csrf: string;
  /** Connect the live channel on this page (the value names what it shows: chat, files). */
  live?: string;
}

/**
 * What every template (and every template it includes) has besides its data: a workspace
 * path goes into an address as `it.pathQuery(p)` and onto the page as `it.shownPath(p)`
 * (./file-paths.ts), so that a name that is not UTF-8 is linked by its bytes and shown.
 */
const TEMPLATE_HELPERS = { pathQuery, shownPath };

export function renderPage(res: Response, template: string, ctx: PageContext, data: Record<string, unknown> = {}): void {
  res.set('Cache-Control', 'no-store').type('html').send(views.render(template, { ...TEMPLATE_HELPERS, ...data, ...ctx }));
}

export function renderPartial(template: string, data: Record<string, unknown>): string {
  return views.render(template, { ...TEMPLATE_HELPERS, ...data });
}

const require = createRequire(import.meta.url);
// A Map, so that a name such as `constructor` finds nothing rather than the object's prototype.
const VENDOR = new Map([
  ['htmx.min.js', path.join(path.dirname(require.resolve('htmx.org/package.json')), 'dist/htmx.min.js')],
  ['socket.io.min.js', path.join(path.dirname(require.resolve('socket.io/package.json')), 'client-dist/socket.io.min.js')],
]);

/** GET /vendor/:file: htmx and the socket.io client, from node_modules: never a CDN. */
export const vendorFile: RequestHandler = function vendorFile(req, res, next) {
  const file = VENDOR.get(req.params.file as string);
  if (!file) return next();
  res.sendFile(file, { headers: { 'Content-Type': 'text/javascript; charset=utf-8', 'Cache-Control': 'public, max-age=86400', 'X-Content-Type-Options': 'nosniff' } }, (err?: Error) => {
    // A failure of the connection (the client went, or sent bytes after its request that Node refused, which
    // ends the connection before the file is sent) leaves nothing to answer, and is no error of the gateway's.
    if (err && !res.headersSent && !req.socket.destroyed) next(err);
  });
};
