/**
 * The landing page (views/home/index.html) and the static files (static/). Until the
 * web app exists, the page says where the MCP endpoint is and how to get a token.
 */
import fs from 'node:fs';
import path from 'node:path';
import express, { Router } from 'express';
import { STATIC_DIR, VIEWS_DIR } from '../paths.js';

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export function homeRoutes(publicUrl: string): Router {
  const template = fs.readFileSync(path.join(VIEWS_DIR, 'home/index.html'), 'utf8');
  const page = template.replaceAll('{{mcpUrl}}', escapeHtml(`${publicUrl}/mcp`));
  const router = Router();
  router.get('/', (_req, res) => {
    res.type('html').send(page);
  });
  router.use('/static', express.static(STATIC_DIR, { fallthrough: false, index: false }));
  return router;
}
