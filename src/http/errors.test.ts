import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { GatewayError } from '../errors.js';
import { createLogger } from '../logger.js';
import { PermissionError } from '../sandboxes/permissions.js';
import { errorHandler, notFound } from './errors.js';

function app() {
  const a = express();
  a.get('/denied', () => {
    throw new PermissionError('Requires read access to "/etc", run again with --allow-read=/etc', 'read');
  });
  a.get('/api/broken', () => {
    throw new GatewayError('the sandbox service is unavailable', { reason: 'docker_unreachable', status: 503 });
  });
  a.get('/bug', () => {
    throw new Error('ECONNREFUSED /var/run/docker.sock at host 10.0.0.3');
  });
  a.use(notFound());
  a.use(errorHandler(createLogger('silent')));
  return a;
}

const page = { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' };

describe('the HTTP boundary of the error tree', () => {
  it('answers API clients in JSON and browsers with a page, for 404s and errors alike', async () => {
    const json = await request(app()).get('/nope');
    expect([json.status, json.body]).toEqual([404, { error: 'not found' }]);
    const html = await request(app()).get('/nope').set(page);
    expect(html.status).toBe(404);
    expect(html.type).toBe('text/html');
    expect(html.text).toContain('<h1>Not found</h1>');
    // API paths stay JSON whatever the client accepts.
    expect((await request(app()).get('/api/nope').set(page)).type).toBe('application/json');
  });

  it('uses a GatewayError\'s status and message, escaped on a page', async () => {
    const json = await request(app()).get('/api/broken');
    expect([json.status, json.body]).toEqual([503, { error: 'the sandbox service is unavailable' }]);
    const html = await request(app()).get('/denied').set(page);
    expect(html.status).toBe(403);
    expect(html.text).toContain('Requires read access to &quot;/etc&quot;');
  });

  it('anything else is a 500 that says nothing about the host', async () => {
    for (const headers of [{}, page]) {
      const r = await request(app()).get('/bug').set(headers);
      expect(r.status).toBe(500);
      expect(r.text).not.toMatch(/ECONNREFUSED|docker|10\.0\.0\.3/);
      expect(r.text).toMatch(/Internal error/);
    }
  });
});
