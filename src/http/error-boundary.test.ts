import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayError } from '../errors.js';
import { createLogger } from '../logger.js';
import { errorHandler } from './errors.js';

let server: ReturnType<express.Express['listen']>;
let url: string;

beforeAll(async () => {
  const a = express();
  a.get('/api/async-refusal', async () => {
    await new Promise((r) => setTimeout(r, 5));
    throw new GatewayError('the workspace is full', { reason: 'workspace_full', status: 507 });
  });
  a.get('/api/async-bug', async () => {
    await new Promise((r) => setTimeout(r, 5));
    throw new Error('ECONNREFUSED /var/run/docker.sock');
  });
  a.get('/api/half-sent', async (_req, res) => {
    res.status(200).type('application/octet-stream');
    res.write(Buffer.alloc(1024, 1));
    await new Promise((r) => setTimeout(r, 5));
    throw new Error('the rest could not be read');
  });
  a.use(errorHandler(createLogger('silent')));
  server = a.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => {
  server.closeAllConnections();
  server.close();
});

describe('a route whose promise rejects', () => {
  it('is answered by the error handler like a thrown error', async () => {
    const refusal = await fetch(`${url}/api/async-refusal`);
    expect([refusal.status, await refusal.json()]).toEqual([507, { error: 'the workspace is full' }]);
    const bug = await fetch(`${url}/api/async-bug`);
    expect(bug.status).toBe(500);
    expect(await bug.text()).not.toMatch(/docker/);
  });

  it('after part of its answer went out, ends the connection: the client sees a cut answer, not a hang or a whole one', async () => {
    const res = await fetch(`${url}/api/half-sent`, { signal: AbortSignal.timeout(5000) });
    expect(res.status).toBe(200);
    const read = await res.arrayBuffer().then(
      () => 'complete',
      (e: unknown) => ((e as Error).name === 'TimeoutError' ? 'hung' : 'cut'),
    );
    expect(read).toBe('cut');
  });
});
