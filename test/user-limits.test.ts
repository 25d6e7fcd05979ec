/**
 * Limits per user, on the real gateway: one request budget across all of a user's
 * tokens and pages (/mcp, /v1, the web routes that cost work), the cap on active tokens
 * (page and command line), expiries bounded at creation, and token pages that still
 * render, and still revoke, a token whose stored expiry no date can hold.
 */
import crypto from 'node:crypto';
import { sql } from 'kysely';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, type CliContext } from '../src/cli/program.js';
import { createDriver } from '../src/sandboxes/index.js';
import { openStore } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';
import { ensureUser } from '../src/accounts/accounts.js';
import { countTokens, listTokens, tokenState } from '../src/tokens/tokens.js';
import { rawRequest, startGateway, type Gateway } from './support/mcp.js';
import { webSession } from './support/web-session.js';

let gw: Gateway;

beforeAll(async () => {
  // A budget of four at once, refilled at one a minute: nothing refills during a test.
  gw = await startGateway({ noStart: true, env: { SANDGATE_RATE_LIMIT_PER_MIN: '1', SANDGATE_RATE_LIMIT_BURST: '4', SANDGATE_MAX_TOKENS_PER_USER: '3' } });
});

afterAll(async () => {
  await gw?.close();
});

async function cli(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const ctx: CliContext = {
    openStore: () => openStore(gw.harness.config, MIGRATIONS),
    dataDir: gw.dataDir,
    publicUrl: gw.url,
    maxTokensPerUser: gw.harness.config.maxTokensPerUser,
    readSecret: async () => '',
    driver: () => createDriver(gw.harness.config, gw.harness.logger),
    out: (s) => out.push(s),
    err: (s) => err.push(s),
  };
  const code = await runCli(argv, ctx);
  return { code, out: out.join('\n'), err: err.join('\n') };
}

const list = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
const mcp = (token: string) => rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${token}` }, body: list });

describe('one request budget per user', () => {
  it('is shared by all of a user’s tokens and pages; another user keeps theirs', async () => {
    const db = gw.gateway.store.db;
    const wes = await ensureUser(db, 'wes');
    const val = await ensureUser(db, 'val');
    const laptop = await gw.tokenFor('wes', 'laptop');
    const ci = await gw.tokenFor('wes', 'ci');
    const wesWeb = await webSession(gw, wes);
    const valWeb = await webSession(gw, val);

    // Four in all, through two tokens, two endpoints and a page.
    expect((await mcp(laptop)).status).toBe(200);
    expect((await mcp(ci)).status).toBe(200);
    expect((await new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: ci, maxRetries: 0 }).models.list()).data).toEqual([]);
    expect((await wesWeb.get('/files/tree')).status).toBe(200);

    // Spent: every token and every costly page of wes is refused, each in its own shape.
    const refusedMcp = await mcp(laptop);
    expect(refusedMcp.status).toBe(429);
    expect(Number(refusedMcp.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect((refusedMcp.messages[0]!.error as { message: string }).message).toMatch(/Rate limit exceeded for wes: retry after \d+ s\. Each user has one budget across all their tokens and pages/);
    const refusedApi = await new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: laptop, maxRetries: 0 }).models.list().catch((e: unknown) => e);
    expect(refusedApi).toMatchObject({ status: 429, type: 'rate_limit_error', code: 'rate_limit_exceeded' });
    expect((refusedApi as { headers: Headers }).headers.get('retry-after')).toMatch(/^\d+$/);

    const tree = await wesWeb.get('/files/tree');
    expect(tree.status).toBe(429);
    expect(Number(tree.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(await tree.text()).toMatch(/<div class="notice error" role="alert">Rate limit exceeded for wes: retry after \d+ s\..*SANDGATE_RATE_LIMIT_PER_MIN/);
    const preview = await wesWeb.get('/files/preview?path=notes.txt');
    expect(preview.status).toBe(429);
    // A plain link (a download) gets the error page, with the same Retry-After.
    const download = await wesWeb.get('/files/raw?path=notes.txt&download=1', { htmx: false });
    expect(download.status).toBe(429);
    expect(download.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(await download.text()).toContain('Rate limit exceeded for wes');
    expect((await wesWeb.post('/chat/new')).status).toBe(429);

    // Val's budget is untouched by all of that.
    expect((await valWeb.get('/files/tree')).status).toBe(200);
    expect((await mcp(await gw.tokenFor('val', 'phone'))).status).toBe(200);
    // Pages that cost no work stay open to wes.
    expect((await wesWeb.get('/tokens')).status).toBe(200);
  });
});

describe('the cap on active tokens', () => {
  it('holds on the tokens page, which says so and lets one more in after a revoke', async () => {
    const db = gw.gateway.store.db;
    const tia = await ensureUser(db, 'tia');
    const web = await webSession(gw, tia);
    // Two already held, so that the four posts below fit in tia's request budget of four.
    await gw.tokenFor('tia', 'one');
    await gw.tokenFor('tia', 'two');
    expect((await web.post('/tokens', { name: 'three', expires: '30d' })).status).toBe(200);
    const fourth = await web.post('/tokens', { name: 'four', expires: '30d' });
    expect(fourth.status).toBe(400);
    expect(await fourth.text()).toMatch(/already has 3 active tokens, the most one user may hold \(SANDGATE_MAX_TOKENS_PER_USER=3\): revoke a token that is no longer used/);
    expect((await listTokens(db, { userId: tia.id })).filter((t) => tokenState(t) === 'active')).toHaveLength(3);
    expect(await (await web.get('/tokens')).text()).toContain('You may hold up to 3 active tokens.');

    const one = (await listTokens(db, { userId: tia.id })).find((t) => t.name === 'one')!;
    expect((await web.post(`/tokens/${one.id}/revoke`)).status).toBe(200);
    expect((await web.post('/tokens', { name: 'four', expires: '30d' })).status).toBe(200);
  });

  it('holds on the command line too', async () => {
    await ensureUser(gw.gateway.store.db, 'uma');
    for (const name of ['a', 'b', 'c']) expect((await cli('tokens', 'create', '--user', 'uma', '--name', name)).code).toBe(0);
    const r = await cli('tokens', 'create', '--user', 'uma', '--name', 'd');
    expect(r).toMatchObject({ code: 1, out: '' });
    expect(r.err).toMatch(/already has 3 active tokens, the most one user may hold \(SANDGATE_MAX_TOKENS_PER_USER=3\)/);
    expect((await cli('tokens', 'revoke', '--user', 'uma', '--name', 'a')).code).toBe(0);
    expect((await cli('tokens', 'create', '--user', 'uma', '--name', 'd')).code).toBe(0);
  });
});

describe('creating and revoking tokens on the page', () => {
  it('take from the user’s request budget, like any other request that costs work', async () => {
    const db = gw.gateway.store.db;
    const kit = await ensureUser(db, 'kit');
    const web = await webSession(gw, kit);
    const id = async (name: string) => (await listTokens(db, { userId: kit.id })).find((t) => t.name === name)!.id;
    expect((await web.post('/tokens', { name: 'a', expires: '30d' })).status).toBe(200);
    expect((await web.post(`/tokens/${await id('a')}/revoke`)).status).toBe(200);
    expect((await web.post('/tokens', { name: 'b', expires: '30d' })).status).toBe(200);
    expect((await web.post(`/tokens/${await id('b')}/revoke`)).status).toBe(200);

    // Four spent: creating and revoking are both refused, saying when to retry, and nothing changes.
    const create = await web.post('/tokens', { name: 'c', expires: '30d' });
    expect(create.status).toBe(429);
    expect(Number(create.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(await create.text()).toMatch(/Rate limit exceeded for kit: retry after \d+ s\./);
    await gw.tokenFor('kit', 'held');
    const revoke = await web.post(`/tokens/${await id('held')}/revoke`);
    expect(revoke.status).toBe(429);
    expect(revoke.headers.get('retry-after')).toMatch(/^\d+$/);
    expect((await listTokens(db, { userId: kit.id, includeRevoked: true })).map((t) => [t.name, tokenState(t)])).toEqual([
      ['held', 'active'],
      ['b', 'revoked'],
      ['a', 'revoked'],
    ]);
  });
});

describe('token lists stay bounded', () => {
  it('the admin page lists 100 tokens a page, active first, with next and previous; a member sees their active tokens and the 10 latest others', async () => {
    const db = gw.gateway.store.db;
    const pat = await ensureUser(db, 'pat');
    const root = await ensureUser(db, 'root', { isAdmin: true });
    const insert = (name: string, createdAt: number, revokedAt: number | null) =>
      db.insertInto('api_tokens').values({ user_id: pat.id, name, hash: crypto.randomBytes(32), created_at: createdAt, revoked_at: revokedAt }).execute();
    // 150 revoked long ago (older than any other token here), then two active ones made before them all.
    for (let i = 0; i < 150; i++) await insert(`old-${i}`, 2000 + i, 3000 + i);
    await insert('kept-1', 1000, null);
    await insert('kept-2', 1001, null);
    const total = await countTokens(db, { includeRevoked: true });
    expect(total).toBeGreaterThan(150);
    const admin = await webSession(gw, root);
    const rows = (html: string) => [...html.matchAll(/<tr id="admin-token-\d+">\s*<td>([^<]*)<\/td><td>([^<]*)<\/td>.*?<td class="state (\w+)">/gs)].map((m) => ({ user: m[1], name: m[2], state: m[3] }));

    const first = await (await admin.get('/admin/tokens', { htmx: false })).text();
    const firstRows = rows(first);
    expect(firstRows).toHaveLength(100);
    const states = firstRows.map((r) => r.state);
    expect(states.indexOf('revoked') === -1 || states.slice(states.indexOf('revoked')).every((s) => s !== 'active')).toBe(true);
    expect(firstRows.filter((r) => r.user === 'pat' && r.state === 'active').map((r) => r.name)).toEqual(['kept-2', 'kept-1']);
    expect(first).toContain(`Page 1 of ${Math.ceil(total / 100)}`);
    expect(first).toContain('<a href="/admin/tokens?page=2" rel="next">Next</a>');
    expect(first).not.toContain('rel="prev"');

    const last = Math.ceil(total / 100);
    const lastHtml = await (await admin.get(`/admin/tokens?page=${last}`, { htmx: false })).text();
    expect(rows(lastHtml)).toHaveLength(total - (last - 1) * 100);
    expect(lastHtml).toContain(`<a href="/admin/tokens?page=${last - 1}" rel="prev">Previous</a>`);
    expect(lastHtml).not.toContain('rel="next"');
    // The oldest revoked token is on the last page; a page past the end shows the last.
    expect(rows(lastHtml).at(-1)).toEqual({ user: 'pat', name: 'old-0', state: 'revoked' });
    expect(rows(await (await admin.get('/admin/tokens?page=999', { htmx: false })).text())).toEqual(rows(lastHtml));

    const member = await webSession(gw, pat);
    const mine = await (await member.get('/tokens', { htmx: false })).text();
    expect([...mine.matchAll(/<tr id="token-\d+">\s*<td>([^<]*)<\/td>/g)].map((m) => m[1])).toEqual(['kept-2', 'kept-1', ...Array.from({ length: 10 }, (_, i) => `old-${149 - i}`)]);
  });
});

describe('token expiries', () => {
  const absurd = `${'9'.repeat(40)}d`;

  it('an absurd expiry is refused on the page and on the command line, and nothing is stored', async () => {
    const db = gw.gateway.store.db;
    const eve = await ensureUser(db, 'eve');
    const web = await webSession(gw, eve);
    for (const expires of [absurd, '6y', '99999-01-01']) {
      const r = await web.post('/tokens', { name: 'forever', expires });
      expect(r.status, expires).toBe(400);
      expect(await r.text()).toMatch(/is too far ahead: a token may expire at most 5 years ahead; for a token that never expires, choose &quot;never&quot;/);
    }
    expect(await listTokens(db, { userId: eve.id })).toEqual([]);
    expect((await web.get('/tokens')).status).toBe(200);

    for (const expires of [absurd, '2999-01-01']) {
      const r = await cli('tokens', 'create', '--user', 'eve', '--name', 'cli', '--expires', expires);
      expect(r, expires).toMatchObject({ code: 1, out: '', err: expect.stringMatching(/too far ahead: a token may expire at most 5 years ahead/) });
    }
    expect(await listTokens(db, { userId: eve.id })).toEqual([]);
    expect((await web.post('/tokens', { name: 'fine', expires: '365d' })).status).toBe(200);
  });

  it('a stored expiry no date can hold renders as "unknown" on both token pages, in the CLI, and can be revoked', async () => {
    const db = gw.gateway.store.db;
    const ida = await ensureUser(db, 'ida');
    const root = await ensureUser(db, 'root', { isAdmin: true });
    await gw.tokenFor('ida', 'infinite');
    await gw.tokenFor('ida', 'huge');
    await gw.tokenFor('ida', 'text');
    // As an older install may hold them: Infinity (9e999 in SQL), a number past any date, text.
    // SQLite keeps what it is given in any column; this file runs on SQLite only.
    await sql`UPDATE api_tokens SET expires_at = 9e999 WHERE user_id = ${ida.id} AND name = 'infinite'`.execute(db);
    await sql`UPDATE api_tokens SET expires_at = 1e300 WHERE user_id = ${ida.id} AND name = 'huge'`.execute(db);
    await sql`UPDATE api_tokens SET expires_at = 'soon' WHERE user_id = ${ida.id} AND name = 'text'`.execute(db);
    const ids = Object.fromEntries((await listTokens(db, { userId: ida.id })).map((t) => [t.name, t.id]));

    const member = await webSession(gw, ida);
    const admin = await webSession(gw, root);
    const page = await member.get('/tokens', { htmx: false });
    expect(page.status).toBe(200);
    const html = await page.text();
    for (const name of ['infinite', 'huge', 'text']) expect(html).toMatch(new RegExp(`<td>${name}</td>(<td>[^<]*</td>){2}<td>unknown</td>`));
    const adminPage = await admin.get('/admin/tokens', { htmx: false });
    expect(adminPage.status).toBe(200);
    expect((await adminPage.text()).match(/<td>unknown<\/td>/g)).toHaveLength(3);
    const listed = await cli('tokens', 'list', '--user', 'ida');
    expect(listed.code).toBe(0);
    expect(listed.out.match(/\bunknown\b/g)).toHaveLength(3);

    // Revoked by its member, and by an admin.
    const byMember = await member.post(`/tokens/${ids.infinite}/revoke`);
    expect(byMember.status).toBe(200);
    expect(await byMember.text()).toMatch(/<td>infinite<\/td>.*<td class="state revoked">/s);
    const byAdmin = await admin.post(`/admin/tokens/${ids.text}/revoke`);
    expect(byAdmin.status).toBe(200);
    expect((await cli('tokens', 'revoke', String(ids.huge))).code).toBe(0);
    expect((await listTokens(db, { userId: ida.id, includeRevoked: true })).map((t) => tokenState(t))).toEqual(['revoked', 'revoked', 'revoked']);
    expect((await admin.get('/admin/tokens', { htmx: false })).status).toBe(200);
  });
});
