/** The static files (static/): css, icons and the page script, read-only, nothing outside the folder. */
import express, { Router } from 'express';
import { STATIC_DIR } from '../paths.js';

export function staticRoutes(): Router {
  const router = Router();
  router.use('/static', express.static(STATIC_DIR, { fallthrough: false, index: false, maxAge: '1h' }));
  return router;
}
