/// <reference lib="dom" />
/// <reference lib="dom.iterable" />
/**
 * The admin page in Chromium against the real gateway and sandboxes: live sandboxes,
 * stop and kill (and what their users see), disabling a user, the audit log; and every
 * admin route, endpoint and socket event refused to a non-admin, walked from the route
 * table itself.
 */
import fs from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { io as ioClient } from 'socket.io-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { queryAudit } from '../../audit/audit.js';
import { LABEL_GATEWAY } from '../../sandboxes/docker-driver.js';
import { freezeState } from '../../sandboxes/freezer.js';
import { dockerClient, gatewayIdFor } from '../../sandboxes/index.js';
import { runscProcesses, runtimeLeftovers } from '../../sandboxes/runtime-leftovers.js';
import { ensureUser, findUser, type User } from '../../accounts/accounts.js';
import { createLoginLink } from '../../auth/login-links.js';
import { startGateway, type Gateway } from '../../../test/support/mcp.js';
import { startStandin, type Standin } from '../../../test/support/model-standins.js';
import { until } from '../../../test/support/until.js';
import { MEMORY_SERVER, nodeServer } from '../../../test/support/upstream.js';

const SHOTS = path.resolve('test-artifacts/screenshots');
const CHROMIUM = process.env.SANDGATE_CHROMIUM ?? '/usr/bin/chromium';

let model: Standin;
let gw: Gateway;
let browser: Browser;
let root: User;
let ann: User;
let ben: User;

beforeAll(async () => {
  fs.mkdirSync(SHOTS, { recursive: true });
  model = await startStandin('openai', (req) => {
    if (req.lastUserText.startsWith('sleep') && req.lastToolResult === undefined) {
      return { toolCalls: [{ name: 'execute_code', args: { language: 'bash', code: 'echo started; sleep 300' } }] };
    }
    if (req.lastToolResult !== undefined) return { text: ['The run said: ', req.lastToolResult.slice(0, 300)] };
    return { toolCalls: [{ name: 'execute_code', args: { language: 'python', code: "print('fresh', 6 * 7)" } }] };
  });
  gw = await startGateway({
    upstream: { memory: nodeServer(MEMORY_SERVER, [], { env: { MEMORY_FILE_PATH: '${SANDGATE_WORKDIR}/memory.jsonl' }, sandgate: { scope: 'shared', allowUsers: ['ann'] } }) },
    env: { SANDGATE_OPENAI_API_KEY: 'sk-team', SANDGATE_OPENAI_BASE_URL: model.baseURL, SANDGATE_MODELS: 'openai:gpt-test' } });
  const db = gw.gateway.store.db;
  root = await ensureUser(db, 'root', { isAdmin: true });
  ann = await ensureUser(db, 'ann');
  ben = await ensureUser(db, 'ben');
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  await model?.close();
});

async function signIn(user: User, viewport = { width: 1280, height: 800 }): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  page.on('dialog', (d) => void d.accept());
  await page.goto(`${gw.url}/login/link/${(await createLoginLink(gw.gateway.store.db, user.id)).secret}`);
  await page.click('button[type=submit]');
  await page.waitForURL(/\/chat$/);
  return { context, page };
}

const owner = (u: User) => ({ userId: u.id, name: u.name });
const row = (page: Page, user: string) => page.locator(`#sandbox-rows tr[data-user="${user}"]`);

describe('the admin page', () => {
  it('shows users’ sandboxes live, stops one (its user sees why, the next run works) and kills a runaway one', async () => {
    await gw.gateway.manager.execute(owner(ann), { language: 'python', code: 'x = 1' });
    await gw.gateway.manager.execute(owner(ben), { language: 'python', code: 'y = 2' });
    const admin = await signIn(root);
    await admin.page.goto(`${gw.url}/admin`);
    await admin.page.waitForSelector('body[data-live-state=watching]');
    expect(await row(admin.page, 'ann').locator('td').nth(1).innerText()).toMatch(/^idle/);
    expect(await row(admin.page, 'ben').locator('td').nth(1).innerText()).toMatch(/^idle/);
    expect(await admin.page.locator('#runtime').innerText()).toContain('runsc');

    // Ann runs code from the chat: the admin's table shows it without a reload.
    const user = await signIn(ann);
    await user.page.click('text=New conversation');
    await user.page.waitForSelector('body[data-live-state=watching]');
    await user.page.fill('#message', 'sleep a while');
    await user.page.keyboard.press('Enter');
    await user.page.waitForFunction(() => document.querySelector('.turn pre.output')?.textContent?.includes('started'), undefined, { timeout: 60_000 });
    await admin.page.waitForFunction(() => document.querySelector('#sandbox-rows tr[data-user="ann"] td:nth-child(2)')?.textContent?.startsWith('running code'), undefined, { timeout: 10_000 });
    expect(await row(admin.page, 'ann').locator('td').nth(2).innerText()).toMatch(/^bash, \d+ s$/);
    await admin.page.waitForFunction(() => /\d/.test(document.querySelector('#sandbox-rows tr[data-user="ann"] td:nth-child(6)')?.textContent ?? ''));
    await admin.page.screenshot({ path: path.join(SHOTS, 'admin-sandboxes-laptop.png'), fullPage: true });

    await row(admin.page, 'ann').locator('button', { hasText: 'Stop' }).click();
    await admin.page.waitForSelector('#admin-status >> text=Stopped ann’s sandbox');
    await admin.page.waitForFunction(() => !document.querySelector('#sandbox-rows tr[data-user="ann"]'));
    await user.page.waitForSelector('#composer-actions button.primary', { timeout: 30_000 });
    expect(await user.page.locator('.turn').last().innerText()).toContain('stopped by an admin (root)');
    // The next run starts a fresh sandbox.
    await user.page.fill('#message', 'run again');
    await user.page.keyboard.press('Enter');
    await user.page.waitForFunction(() => document.querySelectorAll('.turn')[1]?.textContent?.includes('fresh 42'), undefined, { timeout: 60_000 });

    // A runaway: killed at once.
    const runaway = gw.gateway.manager.execute(owner(ben), { language: 'python', code: 'while True:\n    pass', timeoutSec: 300 });
    await admin.page.waitForFunction(() => document.querySelector('#sandbox-rows tr[data-user="ben"] td:nth-child(2)')?.textContent?.startsWith('running code'), undefined, { timeout: 10_000 });
    const killedAt = Date.now();
    await row(admin.page, 'ben').locator('button', { hasText: 'Kill' }).click();
    const result = await runaway;
    expect(Date.now() - killedAt).toBeLessThan(10_000);
    expect(result.notice).toContain('killed by an admin (root)');
    expect((await gw.gateway.manager.execute(owner(ben), { language: 'python', code: 'print(1)' })).stdout.trim()).toBe('1');

    const actions = (await queryAudit(gw.gateway.store.db, { kind: 'admin' })).map((e) => [e.userId, e.method, e.targetUserId, e.outcome]);
    expect(actions).toContainEqual([root.id, 'sandbox/stop', ann.id, 'ok']);
    expect(actions).toContainEqual([root.id, 'sandbox/kill', ben.id, 'ok']);
    await user.context.close();
    await admin.context.close();
  });

  it('disables a user: their token gets 401 and their browser session ends; enabling gives access back', async () => {
    const token = await gw.tokenFor('ben', 'ben-laptop');
    const benBrowser = await signIn(ben);
    await benBrowser.page.goto(`${gw.url}/files`);
    await benBrowser.page.waitForSelector('body[data-live-state=connected]');
    const admin = await signIn(root);
    await admin.page.goto(`${gw.url}/admin/users`);
    await admin.page.locator('#user-rows tr[data-user="ben"] button', { hasText: 'Disable' }).click();
    await admin.page.waitForSelector('#admin-status >> text=ben is disabled');
    await admin.page.screenshot({ path: path.join(SHOTS, 'admin-users-laptop.png'), fullPage: true });
    const models = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${token}` } });
    expect(models.status).toBe(401);
    expect(JSON.stringify(await models.json())).toContain('disabled');
    // The live page was disconnected, and the next request is a sign-in page.
    await benBrowser.page.waitForSelector('body[data-live-state=disconnected]');
    await benBrowser.page.goto(`${gw.url}/chat`);
    expect(new URL(benBrowser.page.url()).pathname).toBe('/login');
    // A fresh sign-in link does not let them in either.
    await benBrowser.page.goto(`${gw.url}/login/link/${(await createLoginLink(gw.gateway.store.db, ben.id)).secret}`);
    await benBrowser.page.click('button[type=submit]');
    await benBrowser.page.waitForURL(/\/login$/);
    expect(await benBrowser.page.locator('[role=alert]').innerText()).toContain('disabled');
    expect(await findUser(gw.gateway.store.db, 'ben')).toBeTruthy();

    await admin.page.locator('#user-rows tr[data-user="ben"] button', { hasText: 'Enable' }).click();
    await admin.page.waitForSelector('#admin-status >> text=ben is enabled');
    expect((await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    await benBrowser.context.close();
    await admin.context.close();
  });

  it('filters the audit log, pages it and exports it as CSV without argument values', async () => {
    const admin = await signIn(root);
    await admin.page.goto(`${gw.url}/admin/audit`);
    await admin.page.selectOption('#f-kind', 'admin');
    await admin.page.click('.filters button[type=submit]');
    await admin.page.waitForURL(/kind=admin/);
    const kinds = await admin.page.locator('table.audit tbody tr td:nth-child(4)').allInnerTexts();
    expect(kinds.length).toBeGreaterThanOrEqual(4);
    expect(new Set(kinds)).toEqual(new Set(['admin']));
    await admin.page.selectOption('#f-user', 'root');
    await admin.page.fill('#f-tool', 'user/disable');
    await admin.page.click('.filters button[type=submit]');
    await admin.page.waitForURL(/tool=user%2Fdisable/);
    expect(await admin.page.locator('table.audit tbody tr').count()).toBe(1);
    await admin.page.screenshot({ path: path.join(SHOTS, 'admin-audit-laptop.png'), fullPage: true });
    const csv = await (await admin.context.request.get(`${gw.url}/admin/audit.csv?kind=mcp`)).text();
    expect(csv.split('\n')[0]).toBe('id,time,user,via,token,kind,action,tool,target,outcome,error,ms,shape');
    expect(csv).not.toContain('sleep 300');
    await admin.context.close();
  });

  it('shows usage per user and model, and the same as JSON to an admin’s token', async () => {
    const admin = await signIn(root, { width: 390, height: 844 });
    await admin.page.goto(`${gw.url}/admin/usage?period=24h`);
    expect(await admin.page.locator('table.usage').first().innerText()).toContain('ann');
    await admin.page.screenshot({ path: path.join(SHOTS, 'admin-usage-phone.png'), fullPage: true });
    for (const p of ['/admin', '/admin/tokens', '/admin/upstream']) {
      await admin.page.goto(`${gw.url}${p}`);
      await admin.page.screenshot({ path: path.join(SHOTS, `admin-${p.split('/')[2] ?? 'sandboxes'}-phone.png`), fullPage: true });
    }
    await gw.gateway.manager.execute(owner(ben), { language: 'python', code: 'z = 3' });
    const token = await gw.tokenFor('root', 'scripts');
    const usage = (await (await fetch(`${gw.url}/admin/api/usage?period=24h`, { headers: { authorization: `Bearer ${token}` } })).json()) as { executions: { user: string; executions: number; cpuSeconds: number }[]; models: { user: string; model: string }[] };
    const annUse = usage.executions.find((e) => e.user === 'ann')!;
    expect(annUse.executions).toBeGreaterThanOrEqual(2);
    expect(annUse.cpuSeconds).toBeGreaterThan(0);
    expect(usage.models.some((m) => m.user === 'ann' && m.model === 'openai:gpt-test')).toBe(true);
    // A period name is looked up among the periods only, never on the object's prototype.
    for (const period of ['constructor', 'toString', '__proto__', 'nope']) {
      const r = await fetch(`${gw.url}/admin/api/usage?period=${period}`, { headers: { authorization: `Bearer ${token}` } });
      expect([r.status, ((await r.json()) as { period: string }).period], period).toEqual([200, '7d']);
    }
    const sandboxes = (await (await fetch(`${gw.url}/admin/api/sandboxes`, { headers: { authorization: `Bearer ${token}` } })).json()) as { sandboxes: { user: string; memoryBytes: number }[] };
    expect(sandboxes.sandboxes.find((s) => s.user === 'ben')?.memoryBytes).toBeGreaterThan(0);
    const users = (await (await fetch(`${gw.url}/admin/api/users`, { headers: { authorization: `Bearer ${token}` } })).json()) as { users: { name: string }[] };
    expect(users.users.map((u) => u.name)).toEqual(['ann', 'ben', 'root']);
    await admin.context.close();
  });
});

describe('users, tokens and upstream servers', () => {
  it('sets a ceiling within the team’s, revokes any token, deletes a user only after their name is typed, and reconnects an upstream server', async () => {
    const admin = await signIn(root);
    const csrf = await admin.page.evaluate(() => document.body.dataset.csrf ?? '');
    const post = (p: string, form: Record<string, string> = {}) => admin.context.request.post(`${gw.url}${p}`, { form, headers: { 'x-csrf-token': csrf, 'hx-request': 'true' } });
    const carl = await ensureUser(gw.gateway.store.db, 'carl');
    // Beyond the team ceiling (network): refused, naming the grant; within it: kept, and the next run uses it.
    const beyond = await post(`/admin/users/${carl.id}/permissions`, { permissions: '{"read":["/workspace"],"net":true}' });
    expect(beyond.status()).toBe(400);
    expect(await beyond.text()).toMatch(/net/);
    expect((await post(`/admin/users/${carl.id}/permissions`, { permissions: '{"read":["/workspace","/skills","/tools"]}' })).status()).toBe(200);
    const denied = await gw.gateway.manager.execute(owner(carl), { language: 'python', code: "open('/workspace/x','w').write('1')" });
    expect(denied.stderr).toMatch(/Permission|Read-only|denied/i);

    const token = await gw.tokenFor('carl', 'carl-phone');
    await admin.page.goto(`${gw.url}/admin/tokens`);
    await admin.page.locator('#token-rows tr', { hasText: 'carl-phone' }).locator('button', { hasText: 'Revoke' }).click();
    await admin.page.waitForSelector('#token-rows td.state.revoked');
    expect((await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(401);

    expect((await post(`/admin/users/${carl.id}/delete`, { confirm: 'carlx' })).status()).toBe(400);
    expect(await findUser(gw.gateway.store.db, 'carl')).toBeTruthy();
    expect((await post(`/admin/users/${root.id}/delete`, { confirm: 'root' })).status()).toBe(400);
    expect((await post(`/admin/users/${carl.id}/delete`, { confirm: 'carl' })).status()).toBe(200);
    expect(await findUser(gw.gateway.store.db, 'carl')).toBeUndefined();
    expect(await gw.gateway.manager.list()).not.toContainEqual(expect.objectContaining({ user: 'carl' }));

    await gw.upstream.hub.callTool(owner(ann), 'memory', 'read_graph', {});
    await admin.page.goto(`${gw.url}/admin/upstream`);
    const line = admin.page.locator('table.upstream tbody tr', { hasText: 'memory' });
    expect(await line.innerText()).toMatch(/shared\s+ann\s+1 of 1 connected/);
    await line.locator('button', { hasText: 'Reconnect' }).click();
    await admin.page.waitForSelector('#admin-status >> text=Closed 1 connection of memory');
    expect(gw.upstream.hub.status().filter((c) => c.server === 'memory')).toEqual([]);
    await admin.context.close();
  });
});

describe('orphans', () => {
  it('finds a container of this gateway that it does not track and removes it; leaves its users’ sandboxes alone', async () => {
    const docker = dockerClient(gw.gateway.config);
    const stray = await docker.createContainer({ Image: 'sandgate/preflight:busybox', Cmd: ['true'], Labels: { [LABEL_GATEWAY]: gatewayIdFor(gw.gateway.config.dataDir) } });
    try {
      await gw.gateway.manager.execute(owner(ann), { language: 'python', code: 'print(1)' });
      // Young containers may be on their way in: only an older one is an orphan.
      expect((await gw.gateway.manager.orphans()).map((o) => o.id)).not.toContain(stray.id);
      const later = Date.now() + 120_000;
      expect((await gw.gateway.manager.orphans(later)).map((o) => o.id)).toEqual([stray.id]);
      expect(await gw.gateway.manager.removeOrphans(later)).toBe(1);
      expect((await docker.listContainers({ all: true })).map((c) => c.Id)).not.toContain(stray.id);
      expect((await gw.gateway.manager.execute(owner(ann), { language: 'python', code: 'print(2)' })).stdout.trim()).toBe('2');
    } finally {
      await stray.remove({ force: true }).catch(() => {});
    }
  });

  it('sees runsc processes with their containers, and would call one whose container is unknown a leftover', async () => {
    await gw.gateway.manager.execute(owner(ann), { language: 'python', code: 'pass' });
    const live = (await gw.gateway.manager.list()).map((s) => s.containerId);
    expect(live.length).toBeGreaterThan(0);
    const procs = runscProcesses();
    for (const id of live) expect(procs.filter((p) => p.containerId === id).map((p) => p.role).sort()).toEqual(['runsc-gofer', 'runsc-sandbox']);
    const leftovers = await runtimeLeftovers(async () => new Set(live));
    expect(leftovers.filter((p) => live.includes(p.containerId))).toEqual([]);
    const gone = await runtimeLeftovers(async () => new Set());
    expect(gone.map((p) => p.containerId)).toEqual(expect.arrayContaining(live));
  });
});

describe('a non-admin', () => {
  it('shows frozen sandboxes as frozen, and stops and kills them from the page within seconds', async () => {
    const db = gw.gateway.store.db;
    const [cal, dee] = [await ensureUser(db, 'cal'), await ensureUser(db, 'dee')];
    for (const u of [cal, dee]) await gw.gateway.manager.execute(owner(u), { language: 'python', code: 'kept = 1' });
    const ids = (await gw.gateway.manager.list()).filter((s) => s.user === 'cal' || s.user === 'dee').map((s) => s.containerId);
    await until(() => ids.length === 2 && ids.every((id) => freezeState(id) === 'frozen'), 30_000);
    const admin = await signIn(root);
    await admin.page.goto(`${gw.url}/admin`);
    await admin.page.waitForSelector('body[data-live-state=watching]');
    expect(await row(admin.page, 'cal').locator('td').nth(1).innerText()).toMatch(/^idle, frozen/);

    // Within seconds: a frozen container that is not thawed first is never removed.
    await row(admin.page, 'cal').locator('button', { hasText: 'Stop' }).click();
    await admin.page.waitForSelector('#admin-status >> text=Stopped cal’s sandbox', { timeout: 5_000 });
    await row(admin.page, 'dee').locator('button', { hasText: 'Kill' }).click();
    await admin.page.waitForSelector('#admin-status >> text=Killed dee’s sandbox', { timeout: 5_000 });
    const left = new Set((await dockerClient(gw.gateway.config).listContainers({ all: true })).map((c) => c.Id));
    expect(ids.filter((id) => left.has(id))).toEqual([]);
    // Their next runs start fresh sandboxes.
    expect((await gw.gateway.manager.execute(owner(cal), { language: 'python', code: 'print(2)' })).stdout.trim()).toBe('2');
    await admin.context.close();
  });

  it('gets 403 on every admin route (walked from the route table), JSON endpoint and socket event', async () => {
    const routes = adminRouteTable(gw.gateway.app);
    expect(routes.length).toBeGreaterThanOrEqual(15);
    const { context, page } = await signIn(ann);
    await page.goto(`${gw.url}/settings`);
    const csrf = await page.evaluate(() => document.body.dataset.csrf ?? '');
    const token = await gw.tokenFor('ann', 'ann-cli');
    const refused: string[] = [];
    for (const r of routes) {
      const url = `${gw.url}${r.path.replace(/:[a-zA-Z]+/g, String(ben.id))}`;
      const viaSession = r.method === 'GET' ? await context.request.get(url, { maxRedirects: 0 }) : await context.request.post(url, { form: { confirm: 'ben', permissions: '{}' }, headers: { 'x-csrf-token': csrf }, maxRedirects: 0 });
      const viaToken = await fetch(url, { method: r.method, headers: { authorization: `Bearer ${token}` } });
      if (viaSession.status() === 403 && viaToken.status === 403) refused.push(`${r.method} ${r.path}`);
      else throw new Error(`${r.method} ${r.path}: session ${viaSession.status()}, token ${viaToken.status}`);
    }
    expect(refused.length).toBe(routes.length);
    // Nothing happened to ben.
    expect((await findUser(gw.gateway.store.db, 'ben'))?.disabledAt).toBeNull();

    const cookie = (await context.cookies()).find((c) => c.name === 'sandgate.sid')!;
    const answer = await new Promise<unknown>((resolve, reject) => {
      const s = ioClient(gw.url, { transports: ['websocket'], reconnection: false, auth: { csrf }, extraHeaders: { cookie: `sandgate.sid=${cookie.value}`, origin: gw.url } });
      s.on('connect_error', reject);
      s.on('connect', () => s.emit('watch-admin', (r: unknown) => (s.disconnect(), resolve(r))));
    });
    expect(answer).toEqual({ ok: false, status: 403 });
    await context.close();
  });
});

/** Method and path of every admin route, from the gateway's route table itself (src/routes.ts, as the app holds it). */
function adminRouteTable(app: Gateway['gateway']['app']): { method: string; path: string }[] {
  const out: { method: string; path: string }[] = [];
  for (const layer of (app.router as unknown as { stack: { route?: { path: string; methods: Record<string, boolean> } }[] }).stack) {
    if (!layer.route?.path.startsWith('/admin')) continue;
    for (const m of Object.keys(layer.route.methods)) out.push({ method: m.toUpperCase(), path: layer.route.path });
  }
  return out;
}
