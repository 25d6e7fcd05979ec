import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import request from 'supertest';
import { afterAll, describe, expect, it } from 'vitest';
import { createApp } from './app.js';
import { configFor } from './config.js';
import { createLogger } from './logger.js';
import { openTestStore } from '../test/support/store.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-app-'));
const config = configFor({ SANDGATE_DATA_DIR: dir });
const store = await openTestStore(dir);
const logger = createLogger('silent');
afterAll(() => store.close());

describe('app', () => {
  it('answers /healthz without any dependency', async () => {
    const app = createApp({ config, store, logger });
    const res = await request(app).get('/healthz');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'ok' });
  });

  it('/readyz is 503 naming the failing check, 200 when all pass', async () => {
    let dockerUp = false;
    const app = createApp({
      config,
      store,
      logger,
      readiness: { docker: async () => ({ ok: dockerUp, detail: dockerUp ? 'up' : 'Docker is not reachable' }) },
    });
    const down = await request(app).get('/readyz');
    expect(down.status).toBe(503);
    expect(down.body.checks.docker).toEqual({ ok: false, detail: 'Docker is not reachable' });
    expect(down.body.checks.store.ok).toBe(true);
    dockerUp = true;
    const up = await request(app).get('/readyz');
    expect(up.status).toBe(200);
    expect(up.body.status).toBe('ready');
  });

  it('/readyz is 503 when the store does not answer', async () => {
    const away = { ...store, ping: async () => Promise.reject(new Error('connection to db.internal.example (10.0.0.7) refused for role sandgate')) };
    const res = await request(createApp({ config, store: away, logger })).get('/readyz');
    expect(res.status).toBe(503);
    // The driver's message names hosts and roles: not for an unauthenticated answer.
    expect(res.body.checks.store).toEqual({ ok: false, detail: `the ${store.dialect === 'postgres' ? 'Postgres' : 'SQLite'} database does not answer (the gateway's log says why)` });
  });

  it('a check that throws is reported, not fatal', async () => {
    const app = createApp({ config, store, logger, readiness: { image: async () => { throw new Error('inspect failed'); } } });
    const res = await request(app).get('/readyz');
    expect(res.status).toBe(503);
    expect(res.body.checks.image).toEqual({ ok: false, detail: 'inspect failed' });
  });

  it('serves static files, and nothing outside their folder', async () => {
    const app = createApp({ config, store, logger });
    const css = await request(app).get('/static/sandgate.css');
    expect(css.status).toBe(200);
    expect(css.type).toBe('text/css');
    const climb = await request(app).get('/static/../package.json');
    expect(climb.status).toBe(403);
    expect(climb.text).not.toContain('"dependencies"');
    expect((await request(app).get('/static/nope.css')).status).toBe(404);
    // A file asked for as a folder: what the file server says of it names the path on disk, which the answer must not.
    const asFolder = await request(app).get('/static/sandgate.css/');
    expect(asFolder.status).toBe(404);
    expect(asFolder.text).not.toMatch(/ENOTDIR|static\/sandgate\.css/);
  });

  it('unknown routes are JSON 404s', async () => {
    const res = await request(createApp({ config, store, logger })).get('/nope');
    expect(res.status).toBe(404);
    expect(res.body.error).toBe('not found');
  });
});
