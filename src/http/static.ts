/** The static files (static/), mounted at /static: css, icons and the page script, read-only, nothing outside the folder. */
import express, { type RequestHandler } from 'express';
import { STATIC_DIR } from '../paths.js';

export function staticFiles(): RequestHandler {
  return express.static(STATIC_DIR, { fallthrough: false, index: false, maxAge: '1h' });
}
