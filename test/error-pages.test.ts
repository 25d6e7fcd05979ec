/**
 * What a refused or missing page answers, on the real gateway: a browser asking for a
 * page gets the site's error page (the site layout, the reason, a way back), whether a
 * page refused its visitor (403 on /admin for a member) or nothing is there (404); htmx
 * requests and scripts keep their short answers, and /mcp and /v1 keep their own shapes.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureUser, type User } from '../src/accounts/accounts.js';
import { startGateway, type Gateway } from './support/mcp.js';
import { webSession, type WebSession } from './support/web-session.js';

let gw: Gateway;
let member: User;
let page: WebSession;

beforeAll(async () => {
  gw = await startGateway({ noStart: true });
  member = await ensureUser(gw.gateway.store.db, 'mia');
  page = await webSession(gw, member);
});

afterAll(async () => {
  await gw?.close();
});

/** The marks of the site's error page: the layout, the title, the reason and the way back to the chat. */
async function expectErrorPage(r: Response, status: number, title: string, reason: string): Promise<string> {
  expect(r.status).toBe(status);
  expect(r.headers.get('content-type')).toMatch(/^text\/html/);
  const html = await r.text();
  expect(html).toContain('<link rel="stylesheet" href="/static/sandgate.css">');
  expect(html).toContain('<header class="topbar">');
  expect(html).toContain(`<h1>${title}</h1>`);
  expect(html).toContain(reason);
  expect(html).toContain('href="/chat">Back to the chat</a>');
  expect(r.headers.get('content-security-policy')).toContain("default-src 'none'");
  return html;
}

describe('a page refused or missing, in a browser', () => {
  it('/admin refused to a member is the site’s page with a way back', async () => {
    await expectErrorPage(await page.get('/admin', { htmx: false }), 403, 'Not allowed', 'Only an admin of this gateway may see this page.');
  });

  it('an unknown page under /chat, an unknown conversation and an unknown path are the site’s 404 page', async () => {
    await expectErrorPage(await page.get('/chat/unknown', { htmx: false }), 404, 'Not found', 'There is nothing at this address.');
    await expectErrorPage(await page.get('/c/no-such-conversation', { htmx: false }), 404, 'Not found', '');
    await expectErrorPage(await fetch(`${gw.url}/no/such/page`, { headers: { accept: 'text/html' } }), 404, 'Not found', 'There is nothing at this address.');
  });

  it('leads back to the page it came from when that is one of ours, and never elsewhere', async () => {
    const from = (referer: string) => fetch(`${gw.url}/no/such/page`, { headers: { accept: 'text/html', referer } });
    expect(await expectErrorPage(await from(`${gw.url}/files?dir=a%20b`), 404, 'Not found', '')).toContain('<a class="button" href="/files?dir=a%20b">Back to the previous page</a>');
    expect(await expectErrorPage(await from('https://elsewhere.example/chat'), 404, 'Not found', '')).not.toContain('Back to the previous page');
  });

  it('never leads to a path a browser reads as another site’s address', async () => {
    // Each is a Referer of this gateway whose path, put into an href, is `//evil.example/…` or could become it.
    for (const referer of [`${gw.url}//evil.example/x`, `${gw.url}/\\evil.example/x`, `${gw.url}/files?dir=a\\b`]) {
      const html = await (await fetch(`${gw.url}/no/such/page`, { headers: { accept: 'text/html', referer } })).text();
      expect(html, referer).toContain('<h1>Not found</h1>');
      expect(html, referer).not.toContain('Back to the previous page');
    }
  });

  it('takes the page it came from as ours by the public URL, not by the Host a proxy handed on', async () => {
    const app = gw.gateway.app;
    const notFoundFrom = (host: string, referer: string) => request(app).get('/no/such/page').set({ accept: 'text/html', host, referer });
    expect((await notFoundFrom('gateway.internal:8080', `${gw.url}/files`)).text).toContain('href="/files">Back to the previous page</a>');
    expect((await notFoundFrom('gateway.internal:8080', 'http://gateway.internal:8080/files')).text).not.toContain('Back to the previous page');
  });

  it('/vendor answers its two files and a 404 for any other name, inherited ones such as constructor too', async () => {
    expect((await fetch(`${gw.url}/vendor/htmx.min.js`)).status).toBe(200);
    for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'nope.js']) {
      await expectErrorPage(await fetch(`${gw.url}/vendor/${name}`, { headers: { accept: 'text/html' } }), 404, 'Not found', 'There is nothing at this address.');
    }
  });
});

describe('answers that are not pages stay as they were', () => {
  it('htmx gets the notice or the text it swaps in; a script gets text', async () => {
    const htmx = await page.get('/admin');
    expect([htmx.status, await htmx.text()]).toEqual([403, 'Only an admin of this gateway may see this page.']);
    const missing = await page.get('/chat/unknown');
    expect(missing.status).toBe(404);
    expect(await missing.text()).toMatch(/^<div class="notice error" role="alert">not found<\/div>\s*$/);
  });

  it('/mcp answers JSON, whatever the client accepts', async () => {
    const token = await gw.tokenFor('mia');
    const unknown = await fetch(`${gw.mcpUrl}/nope`, { headers: { authorization: `Bearer ${token}`, accept: 'text/html' } });
    expect([unknown.status, await unknown.json()]).toEqual([404, { error: 'not found' }]);
    const anonymous = await fetch(`${gw.mcpUrl}/nope`, { headers: { accept: 'text/html' } });
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('content-type')).toMatch(/^application\/json/);
    const get = await fetch(gw.mcpUrl, { headers: { authorization: `Bearer ${token}`, accept: 'text/html' } });
    expect(get.status).toBe(405);
    expect(await get.json()).toEqual({ jsonrpc: '2.0', error: { code: -32000, message: expect.stringMatching(/^Method not allowed/) }, id: null });
  });

  it('/v1 answers in OpenAI’s shape, whatever the client accepts', async () => {
    const token = await gw.tokenFor('mia');
    const unknown = await fetch(`${gw.url}/v1/nope`, { headers: { authorization: `Bearer ${token}`, accept: 'text/html' } });
    expect([unknown.status, await unknown.json()]).toEqual([404, { error: { message: 'Unknown API route GET /v1/nope: this gateway serves GET /v1/models and POST /v1/chat/completions.', type: 'not_found_error', param: null, code: 'unknown_route' } }]);
    const bad = await fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'text/html' }, body: '{' });
    expect([bad.status, await bad.json()]).toEqual([400, { error: { message: 'The body is not valid JSON.', type: 'invalid_request_error', param: null, code: 'invalid_json' } }]);
    const bare = await fetch(`${gw.url}/v1`, { headers: { accept: 'text/html' } });
    expect([bare.status, await bare.json()]).toEqual([404, { error: 'not found' }]);
  });
});
