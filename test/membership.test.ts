/// <reference lib="dom" />
/**
 * Membership on a GitHub install, end to end: the real gateway and sandboxes, the
 * stand-in GitHub Enterprise (OAuth web flow and REST API, accounts with numeric ids
 * that can be renamed), sign-in in Chromium. A member GitHub no longer lists loses
 * access everywhere at the re-check (tokens on /v1 and /mcp, the admin API, every live
 * page, their sandbox run) and gets it back by signing in once re-admitted; admin rights
 * follow the settings; GitHub not answering is waited out for one interval, then 503;
 * accounts follow GitHub's account id, not its login.
 */
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { io as ioClient, type Socket } from 'socket.io-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listConversations } from '../src/agent/conversations.js';
import { queryAudit } from '../src/audit/audit.js';
import { ensureUser, findUser } from '../src/accounts/accounts.js';
import { listTokens } from '../src/tokens/tokens.js';
import { startGitHubStandin, type GitHubStandin } from './support/github-standin.js';
import { rawRequest, startGateway, type Gateway } from './support/mcp.js';
import { startStandin, type Standin } from './support/model-standins.js';
import { until } from './support/until.js';
import { signInWithGitHub as signInWithGitHubAt } from './support/github-sign-in.js';

const CHROMIUM = process.env.SANDGATE_CHROMIUM ?? '/usr/bin/chromium';
/** SANDGATE_AUTH_RECHECK_SEC in these tests. */
const RECHECK_MS = 2_000;

let github: GitHubStandin;
let model: Standin;
let gw: Gateway;
let browser: Browser;

function env(extra: Record<string, string> = {}): Record<string, string> {
  return {
    ...github.settings(),
    SANDGATE_ALLOWED_TEAMS: 'acme/dev',
    SANDGATE_ADMINS: 'erin,gus',
    SANDGATE_AUTH_RECHECK_SEC: String(RECHECK_MS / 1000),
    SANDGATE_OPENAI_API_KEY: 'sk-team',
    SANDGATE_OPENAI_BASE_URL: model.baseURL,
    SANDGATE_MODELS: 'openai:gpt-test',
    ...extra,
  };
}

const team = () => github.teams.get('acme/dev')!;

beforeAll(async () => {
  github = await startGitHubStandin();
  github.teams.set('acme/dev', new Set());
  model = await startStandin('openai', (req) => ({ text: ['You said: ', req.lastUserText.slice(0, 40)] }));
  gw = await startGateway({ env: env() });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  await model?.close();
  await github?.close();
});

/** The GitHub web flow as a person does it; where the browser lands (the chat, or the sign-in page with a message). */
const signInWithGitHub = (page: Page, login: string, base = gw.url) => signInWithGitHubAt(page, github, login, base);

async function signedInAs(login: string, base = gw.url): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext();
  const page = await context.newPage();
  expect(await signInWithGitHub(page, login, base)).toBe('/chat');
  return { context, page };
}

const cookieOf = async (context: BrowserContext) => `sandgate.sid=${(await context.cookies()).find((c) => c.name === 'sandgate.sid')!.value}`;
const csrfOf = (page: Page) => page.evaluate(() => document.body.dataset.csrf ?? '');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function v1(token: string, path: '/v1/models' | '/v1/chat/completions', base = gw.url): Promise<{ status: number; text: string }> {
  const r = await fetch(`${base}${path}`, {
    method: path === '/v1/models' ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    ...(path === '/v1/models' ? {} : { body: JSON.stringify({ model: 'openai:gpt-test', messages: [{ role: 'user', content: 'hello' }] }) }),
  });
  return { status: r.status, text: await r.text() };
}

const mcp = (token: string, body: unknown = { jsonrpc: '2.0', id: 1, method: 'tools/list' }) =>
  rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${token}`, 'mcp-protocol-version': '2025-06-18' }, body });

/** A socket.io connection as a page of that session makes it, counting the live swaps it hears. */
async function liveSocket(cookie: string, csrf: string, base = gw.url): Promise<{ socket: Socket; swaps: () => number; disconnected: Promise<string> }> {
  let swaps = 0;
  const socket = ioClient(base, { transports: ['websocket'], reconnection: false, auth: { csrf }, extraHeaders: { cookie, origin: base } });
  socket.on('swap', () => swaps++);
  const disconnected = new Promise<string>((resolve) => socket.on('disconnect', (reason) => resolve(String(reason))));
  await new Promise<void>((resolve, reject) => {
    socket.on('connect', () => resolve());
    socket.on('connect_error', reject);
  });
  return { socket, swaps: () => swaps, disconnected };
}

/** Whether a new live connection with this session is let in. */
const canConnect = (cookie: string, csrf: string) =>
  new Promise<string>((resolve) => {
    const s = ioClient(gw.url, { transports: ['websocket'], reconnection: false, auth: { csrf }, extraHeaders: { cookie, origin: gw.url } });
    s.on('connect', () => (s.disconnect(), resolve('connected')));
    s.on('connect_error', (e) => (s.disconnect(), resolve(`refused: ${e.message}`)));
  });

describe('a member removed from the allowed team', () => {
  it('loses their tokens (/v1 and /mcp), every session, every live page and their sandbox run at the re-check; signing in once re-admitted restores the same tokens', async () => {
    team().add('dave');
    const one = await signedInAs('dave');
    const two = await signedInAs('dave');
    const dave = (await findUser(gw.gateway.store.db, 'dave'))!;
    const token = await gw.tokenFor('dave', 'laptop');
    expect((await v1(token, '/v1/models')).status).toBe(200);
    expect((await mcp(token)).status).toBe(200);
    for (const s of [one, two]) {
      await s.page.goto(`${gw.url}/files`);
      await s.page.waitForSelector('body[data-live-state=connected]');
    }
    // A run of theirs that would go on for five minutes.
    const run = mcp(token, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'execute_code', arguments: { language: 'bash', code: 'echo started; sleep 300', timeout_seconds: 300 } } });
    const deadline = Date.now() + 60_000;
    while (!(await gw.gateway.manager.list()).some((s) => s.userId === dave.id && s.run) && Date.now() < deadline) await sleep(100);

    team().delete('dave');
    const removedAt = Date.now();
    // No request of theirs is needed: the open pages are put to the check, and lose it everywhere.
    for (const s of [one, two]) await s.page.waitForSelector('body[data-live-state=disconnected]', { timeout: RECHECK_MS + 10_000 });
    const ran = await run;
    expect(Date.now() - removedAt).toBeLessThan(30_000);
    expect(JSON.stringify(ran.messages[0])).toMatch(/killed when your access to this gateway ended/);

    const models = await v1(token, '/v1/models');
    expect(models.status).toBe(401);
    expect(models.text).toMatch(/removed from the allow-list/);
    const chat = await v1(token, '/v1/chat/completions');
    expect(chat.status).toBe(401);
    expect(chat.text).toMatch(/removed from the allow-list/);
    const overMcp = await mcp(token);
    expect(overMcp.status).toBe(401);
    expect(overMcp.headers['www-authenticate']).toMatch(/error="invalid_token"/);
    expect(JSON.stringify(overMcp.messages[0])).toMatch(/removed from the allow-list/);
    for (const s of [one, two]) {
      const page = await s.context.request.get(`${gw.url}/chat`, { maxRedirects: 0 });
      expect(page.status()).toBe(303);
      expect(page.headers().location).toBe('/login');
    }
    // Suspended, not revoked: the token is still theirs.
    expect((await listTokens(gw.gateway.store.db, { userId: dave.id })).map((t) => t.name)).toEqual(['laptop']);
    expect((await queryAudit(gw.gateway.store.db, { userId: dave.id, kind: 'web' })).map((e) => [e.method, e.outcome])).toContainEqual(['membership/removed', 'denied']);
    // Admins see that, and why, on the users page and in its JSON.
    team().add('gus');
    const admin = await signedInAs('gus');
    const listed = ((await (await admin.context.request.get(`${gw.url}/admin/api/users`)).json()) as { users: { name: string; lostAccess: string | null }[] }).users;
    expect(listed.find((u) => u.name === 'dave')?.lostAccess).toMatch(/allow-list/);
    expect(listed.find((u) => u.name === 'gus')?.lostAccess).toBeNull();
    expect(await (await admin.context.request.get(`${gw.url}/admin/users`)).text()).toMatch(/<tr data-user="dave">\s*<td>dave <span class="badge danger" title="[^"]*">lost access<\/span><\/td>/);
    await admin.context.close();

    // Back in the team, the token waits for a GitHub sign-in; after it, it works again.
    team().add('dave');
    await sleep(RECHECK_MS + 200);
    expect((await v1(token, '/v1/models')).status).toBe(401);
    const back = await signedInAs('dave');
    expect((await v1(token, '/v1/models')).status).toBe(200);
    expect((await mcp(token)).status).toBe(200);
    await Promise.all([one.context.close(), two.context.close(), back.context.close()]);
  });

  it('as an admin, loses the admin API and the live admin table at the re-check, with no request of theirs', async () => {
    team().add('erin');
    const { context, page } = await signedInAs('erin');
    const token = await gw.tokenFor('erin', 'script');
    expect((await fetch(`${gw.url}/admin/api/users`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    await page.goto(`${gw.url}/admin`);
    await page.waitForSelector('body[data-live-state=watching]');
    const cookie = await cookieOf(context);
    const csrf = await csrfOf(page);
    const raw = await liveSocket(cookie, csrf);
    expect(await raw.socket.emitWithAck('watch-admin')).toEqual({ ok: true });
    await until(() => raw.swaps() > 0, 10_000);

    team().delete('erin');
    await page.waitForSelector('body[data-live-state=disconnected]', { timeout: RECHECK_MS + 10_000 });
    await raw.disconnected;
    const heard = raw.swaps();
    await sleep(3_000);
    expect(raw.swaps()).toBe(heard);
    expect(await canConnect(cookie, csrf)).toMatch(/^refused/);
    const api = await fetch(`${gw.url}/admin/api/users`, { headers: { authorization: `Bearer ${token}` } });
    expect(api.status).toBe(401);
    expect((await fetch(`${gw.url}/admin/api/users`, { headers: { cookie } })).status).toBe(401);
    expect((await findUser(gw.gateway.store.db, 'erin'))!.isAdmin).toBe(false);
    await context.close();
  });
});

describe('admin rights', () => {
  it('follow SANDGATE_ADMINS as it is when the gateway starts, not a flag stored earlier', async () => {
    const first = await startGateway({ env: env(), noStart: true });
    let second: Gateway | undefined;
    try {
      team().add('gus');
      const { context } = await signedInAs('gus', first.url);
      const cookie = await cookieOf(context);
      await context.close();
      const token = await first.tokenFor('gus', 'script');
      const users = (g: Gateway, headers: Record<string, string>) => fetch(`${g.url}/admin/api/users`, { headers });
      expect((await users(first, { authorization: `Bearer ${token}` })).status).toBe(200);
      expect((await users(first, { cookie })).status).toBe(200);
      await first.close({ keepData: true });

      second = await startGateway({ env: env({ SANDGATE_ADMINS: 'erin' }), dataDir: first.dataDir, noStart: true });
      expect((await users(second, { authorization: `Bearer ${token}` })).status).toBe(403);
      expect((await users(second, { cookie })).status).toBe(403);
      // Still a member: everything else of theirs works.
      expect((await v1(token, '/v1/models', second.url)).status).toBe(200);
      expect((await findUser(second.gateway.store.db, 'gus'))!.isAdmin).toBe(false);
    } finally {
      await second?.close();
      if (!second) await first.close().catch(() => undefined);
    }
  });
});

describe('when GitHub does not answer', () => {
  it('keeps the last yes for one more interval, then answers 503 until GitHub answers again; nobody is suspended for it', async () => {
    team().add('hal');
    const { context } = await signedInAs('hal');
    const cookie = await cookieOf(context);
    const signedInAt = Date.now();
    await context.close();
    const token = await gw.tokenFor('hal', 'laptop');
    github.down = true;
    try {
      await sleep(signedInAt + RECHECK_MS + 300 - Date.now());
      expect((await v1(token, '/v1/models')).status).toBe(200);
      expect((await fetch(`${gw.url}/chat`, { headers: { cookie }, redirect: 'manual' })).status).toBe(200);
      await sleep(signedInAt + 2 * RECHECK_MS + 300 - Date.now());
      const models = await v1(token, '/v1/models');
      expect(models.status).toBe(503);
      expect(models.text).toMatch(/GitHub could not confirm/);
      expect((await mcp(token)).status).toBe(503);
      const page = await fetch(`${gw.url}/chat`, { headers: { cookie }, redirect: 'manual' });
      expect(page.status).toBe(503);
    } finally {
      github.down = false;
    }
    const end = Date.now() + 15_000;
    let status = 0;
    while (Date.now() < end && (status = (await v1(token, '/v1/models')).status) !== 200) await sleep(250);
    expect(status).toBe(200);
    expect((await fetch(`${gw.url}/chat`, { headers: { cookie }, redirect: 'manual' })).status).toBe(200);
    expect((await findUser(gw.gateway.store.db, 'hal'))!.suspendedAt).toBeNull();
  });
});

describe('accounts follow GitHub’s account id, not its login', () => {
  it('follows a rename; a newcomer who registers the freed login is refused, audited, and sees nothing of the account', async () => {
    team().add('ivy');
    const ivy = await signedInAs('ivy');
    await ivy.page.click('text=New conversation');
    await ivy.page.waitForURL(/\/c\/[^/]+$/);
    const conversation = new URL(ivy.page.url()).pathname.split('/').pop()!;
    await ivy.context.close();
    const account = (await findUser(gw.gateway.store.db, 'ivy'))!;
    const token = await gw.tokenFor('ivy', 'laptop');

    github.rename('ivy', 'ivy-renamed');
    const newcomerId = github.register('ivy');
    team().add('ivy');
    const refused = async () => {
      const context = await browser.newContext();
      const page = await context.newPage();
      expect(await signInWithGitHub(page, 'ivy')).toBe('/login');
      expect(await page.locator('[role=alert]').innerText()).toMatch(/belongs to another GitHub account/);
      await page.goto(`${gw.url}/chat`);
      expect(new URL(page.url()).pathname).toBe('/login');
      const c = await context.request.get(`${gw.url}/c/${conversation}`, { maxRedirects: 0 });
      expect(c.status()).toBe(303);
      await context.close();
    };
    // While the account here still has the old login, and after it has followed the rename.
    await refused();
    const renamed = await signedInAs('ivy-renamed');
    expect(await renamed.page.locator('.who').innerText()).toBe('ivy-renamed');
    expect(await renamed.page.locator(`#conv-link-${conversation}`).count()).toBe(1);
    await renamed.context.close();
    expect((await findUser(gw.gateway.store.db, 'ivy-renamed'))!.id).toBe(account.id);
    expect(await findUser(gw.gateway.store.db, 'ivy')).toBeUndefined();
    await refused();
    expect(await findUser(gw.gateway.store.db, 'ivy')).toBeUndefined();
    expect((await listConversations(gw.gateway.store.db, account.id)).map((c) => c.id)).toContain(conversation);
    const audit = (await queryAudit(gw.gateway.store.db, { userId: account.id, kind: 'web' })).map((e) => [e.method, e.outcome]);
    expect(audit.filter(([m]) => m === 'sign_in/login_recycled')).toEqual([
      ['sign_in/login_recycled', 'denied'],
      ['sign_in/login_recycled', 'denied'],
    ]);
    expect(audit).toContainEqual(['sign_in/renamed', 'ok']);
    expect((await findUser(gw.gateway.store.db, 'ivy-renamed'))!.githubId).toBe(github.idOf('ivy-renamed'));
    expect(newcomerId).not.toBe(github.idOf('ivy-renamed'));
    // The token is the account's, under its new name.
    expect((await v1(token, '/v1/models')).status).toBe(200);
  });

  it('refuses a rename into a login another user here holds, at sign-in and at the re-check', async () => {
    const kim = await ensureUser(gw.gateway.store.db, 'kim');
    team().add('jay');
    const { context } = await signedInAs('jay');
    await context.close();
    const jay = (await findUser(gw.gateway.store.db, 'jay'))!;
    const token = await gw.tokenFor('jay', 'laptop');
    github.rename('jay', 'kim');
    await sleep(RECHECK_MS + 200);
    const models = await v1(token, '/v1/models');
    expect(models.status).toBe(401);
    expect(models.text).toMatch(/renamed to kim/);
    const other = await browser.newContext();
    const page = await other.newPage();
    expect(await signInWithGitHub(page, 'kim')).toBe('/login');
    expect(await page.locator('[role=alert]').innerText()).toMatch(/belongs to another account/);
    await other.close();
    expect(await findUser(gw.gateway.store.db, 'kim')).toMatchObject({ id: kim.id, githubId: null });
    expect((await findUser(gw.gateway.store.db, 'jay'))!.id).toBe(jay.id);
    expect((await queryAudit(gw.gateway.store.db, { userId: jay.id, kind: 'web' })).map((e) => [e.method, e.targetUserId])).toContainEqual(['sign_in/login_taken', kim.id]);
  });

  it('refuses a token made with the CLI for someone who never signed in with GitHub, until they do', async () => {
    await ensureUser(gw.gateway.store.db, 'lee');
    const token = await gw.tokenFor('lee', 'cli');
    const before = await v1(token, '/v1/models');
    expect(before.status).toBe(401);
    expect(before.text).toMatch(/sign in with GitHub/);
    expect((await mcp(token)).status).toBe(401);
    // Admins see which accounts the next sign-in with their login will bind.
    team().add('gus');
    const admin = await signedInAs('gus');
    const unbound = async () =>
      ((await (await admin.context.request.get(`${gw.url}/admin/api/users`)).json()) as { users: { name: string; unbound: boolean }[] }).users.find((u) => u.name === 'lee')?.unbound;
    expect(await unbound()).toBe(true);
    expect(await (await admin.context.request.get(`${gw.url}/admin/users`)).text()).toMatch(/<td>lee <span class="badge"[^>]*>not bound to GitHub yet<\/span>/);
    team().add('lee');
    const { context } = await signedInAs('lee');
    await context.close();
    const lee = (await findUser(gw.gateway.store.db, 'lee'))!;
    expect(lee.githubId).toBe(github.idOf('lee'));
    expect(await unbound()).toBe(false);
    // Binding an account that already held something is on the record.
    expect((await queryAudit(gw.gateway.store.db, { userId: lee.id, kind: 'web' })).map((e) => [e.method, e.outcome])).toContainEqual(['sign_in/bound', 'ok']);
    await admin.context.close();
    expect((await v1(token, '/v1/models')).status).toBe(200);
  });
});
