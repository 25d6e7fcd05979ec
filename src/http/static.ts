/**
 * The static files (static/), mounted at /static: css, icons and the page script,
 * read-only, nothing outside the folder. A file it cannot serve is answered by its status
 * alone: what `send` says of it (`ENOTDIR: not a directory, stat '…'`) names the path on
 * disk.
 */
import express, { type RequestHandler } from 'express';
import { GatewayError } from '../errors.js';
import { STATIC_DIR } from '../paths.js';

export function staticFiles(): RequestHandler {
  const serve = express.static(STATIC_DIR, { fallthrough: false, index: false, maxAge: '1h' });
  return function staticFile(req, res, next) {
    serve(req, res, (err?: unknown) => {
      const status = (err as { status?: unknown } | undefined)?.status;
      if (!err || typeof status !== 'number' || status >= 500) return next(err);
      next(new GatewayError(status === 404 ? 'There is nothing at this address.' : 'This file cannot be served.', { reason: status === 404 ? 'not_found' : 'invalid_request', status }));
    });
  };
}
