/// <reference lib="dom" />
/// <reference lib="dom.iterable" />
/**
 * The web app in a real browser (Debian's Chromium through playwright-core) against the
 * real gateway, real sandboxes, the stand-in GitHub Enterprise (OAuth web flow and REST
 * API) and a stand-in OpenAI model. Each page is photographed at laptop and phone width
 * into test-artifacts/screenshots/.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { io as ioClient } from 'socket.io-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listTokens } from '../src/tokens/tokens.js';
import { findUser, ensureUser } from '../src/accounts/accounts.js';
import { createLoginLink } from '../src/auth/login-links.js';
import { startGitHubStandin, type GitHubStandin } from './support/github-standin.js';
import { startGateway, type Gateway } from './support/mcp.js';
import { startStandin, type Standin } from './support/model-standins.js';
import { signInWithGitHub as signInWithGitHubAt } from './support/github-sign-in.js';

const SHOTS = path.resolve('test-artifacts/screenshots');
const VIEWPORTS = { laptop: { width: 1280, height: 800 }, phone: { width: 390, height: 844 } } as const;
const CHROMIUM = process.env.SANDGATE_CHROMIUM ?? '/usr/bin/chromium';

let github: GitHubStandin;
let model: Standin;
let gw: Gateway;
let browser: Browser;
/** A page of another origin on the same site (127.0.0.1, another port), as a cross-origin attacker has. */
let evil: { url: string; html: string; close(): Promise<void> };

const PLOT_CODE = [
  'import os',
  'import matplotlib',
  "matplotlib.use('Agg')",
  'import matplotlib.pyplot as plt',
  'values = [3, 5, 10, 14]',
  "print('mean =', sum(values) / len(values))",
  'plt.plot(values)',
  "os.makedirs('/workspace/figures', exist_ok=True)",
  "plt.savefig('/workspace/figures/trend.png')",
].join('\n');

/** What a model that tries to inject markup into the page writes. */
const HOSTILE_TEXT = ' <script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> and **that is all**.';

function env(extra: Record<string, string> = {}): Record<string, string> {
  return {
    ...github.settings(),
    SANDGATE_ALLOWED_USERS: 'alice',
    SANDGATE_ALLOWED_TEAMS: 'acme/dev',
    SANDGATE_ADMINS: 'alice',
    SANDGATE_AUTH_RECHECK_SEC: '2',
    SANDGATE_OPENAI_API_KEY: 'sk-team',
    SANDGATE_OPENAI_BASE_URL: model.baseURL,
    SANDGATE_MODELS: 'openai:gpt-test',
    ...extra,
  };
}

beforeAll(async () => {
  fs.mkdirSync(SHOTS, { recursive: true });
  github = await startGitHubStandin();
  github.teams.set('acme/dev', new Set(['bob', 'carol']));
  model = await startStandin('openai', (req) => {
    if (req.lastUserText.startsWith('plot')) {
      if (req.lastToolResult === undefined) return { text: ['Plotting it.'], toolCalls: [{ name: 'execute_code', args: { language: 'python', code: PLOT_CODE } }] };
      const mean = /mean = ([\d.]+)/.exec(req.lastToolResult)?.[1] ?? 'unknown';
      return { text: [`The mean is ${mean}.`, HOSTILE_TEXT] };
    }
    if (req.lastUserText.startsWith('sleep')) {
      if (req.lastToolResult === undefined) return { toolCalls: [{ name: 'execute_code', args: { language: 'bash', code: 'echo $$ > /workspace/sleeper.pid; echo started; sleep 300' } }] };
      return { text: ['Stopped early.'] };
    }
    return { text: ['You said: ', req.lastUserText.slice(0, 40)] };
  });
  gw = await startGateway({ env: env() });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  evil = await startEvilSite();
});

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  await evil?.close();
  await model?.close();
  await github?.close();
});

async function newContext(viewport: keyof typeof VIEWPORTS = 'laptop'): Promise<BrowserContext> {
  return browser.newContext({ viewport: VIEWPORTS[viewport] });
}

/** Any dialog a page opens is a failure unless a test expects one (script from a file or a model would open alert()). */
function watchPage(page: Page, accept = false): { dialogs: string[]; errors: string[] } {
  const seen = { dialogs: [] as string[], errors: [] as string[] };
  page.on('dialog', (d) => {
    seen.dialogs.push(`${d.type()}: ${d.message()}`);
    void (accept && d.type() === 'confirm' ? d.accept() : d.dismiss());
  });
  page.on('pageerror', (e) => seen.errors.push(e.message));
  return seen;
}

/** The GitHub web flow as a person does it; where the browser lands (the chat, or the sign-in page with a message). */
const signInWithGitHub = (page: Page, login: string, base = gw.url) => signInWithGitHubAt(page, github, login, base);

async function signedInAs(login: string, viewport: keyof typeof VIEWPORTS = 'laptop'): Promise<{ context: BrowserContext; page: Page }> {
  const context = await newContext(viewport);
  const page = await context.newPage();
  await signInWithGitHub(page, login);
  expect(new URL(page.url()).pathname).toBe('/chat');
  return { context, page };
}

async function shoot(page: Page, name: string): Promise<void> {
  const width = page.viewportSize()?.width ?? 0;
  await page.screenshot({ path: path.join(SHOTS, `${name}-${width < 600 ? 'phone' : 'laptop'}.png`), fullPage: true });
}

const cookieOf = async (context: BrowserContext) => (await context.cookies()).find((c) => c.name === 'sandgate.sid')?.value;
const csrfOf = (page: Page) => page.evaluate(() => document.body.dataset.csrf ?? '');

/** A conversation made in the page; its id. */
async function newConversation(page: Page): Promise<string> {
  await page.goto(`${gw.url}/chat`);
  await page.click('text=New conversation');
  await page.waitForURL(/\/c\/[^/]+$/);
  await page.waitForSelector('body[data-live-state=watching]');
  return new URL(page.url()).pathname.split('/').pop()!;
}

async function send(page: Page, text: string): Promise<void> {
  await page.fill('#message', text);
  await page.keyboard.press('Enter');
}

describe('signing in with GitHub', () => {
  it('lets in an allowed user and a member of an allowed team, refuses an outsider, and renews the session id at sign-in', async () => {
    const context = await newContext();
    const page = await context.newPage();
    await page.goto(`${gw.url}/auth/github`);
    // The visit to GitHub made a session to hold the OAuth state; signing in must not keep its id.
    const before = await cookieOf(context);
    expect(before).toBeTruthy();
    await signInWithGitHub(page, 'alice');
    expect(new URL(page.url()).pathname).toBe('/chat');
    expect(await page.locator('.who').innerText()).toBe('alice');
    expect(await page.locator('nav >> text=Admin').count()).toBe(1);
    const after = await cookieOf(context);
    expect(after).toBeTruthy();
    expect(after).not.toBe(before);
    const cookie = (await context.cookies()).find((c) => c.name === 'sandgate.sid')!;
    expect(cookie.httpOnly).toBe(true);
    expect(cookie.sameSite).toBe('Lax');
    await context.close();

    const team = await signedInAs('bob');
    expect(await team.page.locator('.who').innerText()).toBe('bob');
    expect(await team.page.locator('nav >> text=Admin').count()).toBe(0);
    expect((await findUser(gw.gateway.store.db, 'bob'))?.githubTeams).toEqual(['acme/dev']);
    await team.context.close();

    const outsider = await newContext();
    const op = await outsider.newPage();
    await signInWithGitHub(op, 'mallory');
    expect(new URL(op.url()).pathname).toBe('/login');
    expect(await op.locator('[role=alert]').innerText()).toMatch(/not allowed|allow-list/i);
    await op.goto(`${gw.url}/chat`);
    expect(new URL(op.url()).pathname).toBe('/login');
    expect(await findUser(gw.gateway.store.db, 'mallory')).toBeUndefined();
    await outsider.close();
  });

  it('uses an OAuth state once, and only in the browser it was made for', async () => {
    const context = await newContext();
    const page = await context.newPage();
    let callback = '';
    page.on('request', (r) => {
      if (r.url().includes('/auth/github/callback')) callback = r.url();
    });
    await signInWithGitHub(page, 'alice');
    expect(callback).toContain('state=');
    // The same callback again, in the browser that used it: the state is spent.
    const again = await context.request.get(callback, { maxRedirects: 0 });
    expect(again.status()).toBe(303);
    expect(again.headers().location).toBe('/login');
    await context.close();
    // In another browser (an attacker replaying a stolen redirect): no state of its own matches.
    const other = await newContext();
    const op = await other.newPage();
    await op.goto(`${gw.url}/auth/github`); // a state of its own, not the one in the URL
    await op.goto(callback);
    expect(new URL(op.url()).pathname).toBe('/login');
    await op.goto(`${gw.url}/chat`);
    expect(new URL(op.url()).pathname).toBe('/login');
    await other.close();
  });

  it('ends the session of a member removed from the team at the first request after the re-check', async () => {
    github.teams.get('acme/dev')!.add('dave');
    const { context, page } = await signedInAs('dave');
    await page.goto(`${gw.url}/files`);
    await page.waitForSelector('body[data-live-state=connected]');
    github.teams.get('acme/dev')!.delete('dave');
    await new Promise((r) => setTimeout(r, 2_200));
    await page.goto(`${gw.url}/tokens`);
    expect(new URL(page.url()).pathname).toBe('/login');
    // Signed out for good: the next visit is not let in either, and the old cookie opens nothing.
    const r = await context.request.get(`${gw.url}/chat`, { maxRedirects: 0 });
    expect(r.status()).toBe(303);
    expect(r.headers().location).toBe('/login');
    await context.close();
  });
});

describe('the one-time sign-in link of a single-user install', () => {
  it('signs in once, renews the session id, and is refused the second time', async () => {
    const local = await startGateway({ noStart: true });
    try {
      const user = await ensureUser(local.gateway.store.db, 'admin', { isAdmin: true });
      const link = `${local.url}/login/link/${(await createLoginLink(local.gateway.store.db, user.id)).secret}`;
      const context = await newContext();
      const page = await context.newPage();
      const sessions = async () => (await local.gateway.store.db.selectFrom('sessions').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n;
      const stored = await sessions();
      await page.goto(`${local.url}/login`);
      expect(await page.locator('main').innerText()).toContain('sandgate users login-link admin');
      // Neither the sign-in page nor a made-up link stores a session (nor sets a cookie).
      await page.goto(`${local.url}/login/link/made-up`);
      await page.waitForURL(/\/login\?why=link$/);
      expect(await page.locator('[role=alert]').innerText()).toMatch(/not valid/);
      expect(await cookieOf(context)).toBeUndefined();
      expect(await sessions()).toBe(stored);
      await page.goto(link);
      const before = await cookieOf(context);
      await page.click('button[type=submit]');
      await page.waitForURL(/\/chat$/);
      expect(await page.locator('.who').innerText()).toBe('admin');
      expect(await cookieOf(context)).not.toBe(before);
      // No model here: the chat says which settings to set.
      expect(await page.locator('.notice').innerText()).toContain('SANDGATE_OPENAI_API_KEY');
      await shoot(page, 'chat-no-model');

      const second = await newContext();
      const p2 = await second.newPage();
      // A used link gets no form: straight to the sign-in page, which says why.
      await p2.goto(link);
      await p2.waitForURL(/\/login\?why=link$/);
      expect(await p2.locator('[role=alert]').innerText()).toMatch(/used already|expired/);
      await second.close();
      await context.close();
    } finally {
      await local.close();
    }
  });
});

describe('chat', () => {
  it('streams an answer whose code makes a plot, shows the plot inline and in the file browser, renders no markup from the model, and survives a reload', async () => {
    for (const viewport of ['laptop', 'phone'] as const) {
      const { context, page } = await signedInAs('alice', viewport);
      const seen = watchPage(page);
      const id = await newConversation(page);
      expect(await page.locator('#conversation-title').textContent()).toBe('New conversation');
      await send(page, `plot the trend (${viewport})`);
      // The first message names the conversation at once: its header, its entry in the list, the window's title.
      const name = `plot the trend (${viewport})`;
      // Three updates, each applied as it arrives: wait for the last before looking.
      await page.waitForFunction((n) => document.getElementById('conversation-title')?.textContent === n && document.title === `${n} · sandgate`, name);
      expect(await page.title()).toBe(`${name} · sandgate`);
      expect(await page.locator(`#conv-link-${id}`).textContent()).toBe(name);
      // Live: the tool call with its code appears, then the plot, then the answer.
      await page.waitForSelector('.turn .tool pre.code', { timeout: 60_000 });
      expect(await page.locator('.turn .tool pre.code').first().innerText()).toContain('plt.savefig');
      const img = page.locator('.turn .files-inline img');
      await img.first().waitFor({ timeout: 60_000 });
      await page.waitForSelector('#composer-actions button.primary', { timeout: 60_000 });
      await page.waitForFunction(() => [...document.querySelectorAll<HTMLImageElement>('.files-inline img')].every((i) => i.complete && i.naturalWidth > 0));
      const answer = await page.locator('.turn .md').last().innerText();
      expect(answer).toContain('The mean is 8.0.');
      // Markdown is rendered; the model's HTML is text.
      expect(await page.locator('.turn .md strong').last().innerText()).toBe('that is all');
      expect(answer).toContain('<script>window.__pwned = 1</script>');
      expect(await page.locator('.turn .md img, .turn .md script').count()).toBe(0);
      expect(await page.evaluate(() => (window as { __pwned?: number }).__pwned)).toBeUndefined();
      await shoot(page, 'chat');

      await page.reload();
      await page.locator('.turn .files-inline img').first().waitFor();
      expect(await page.locator('.turn .md').last().innerText()).toContain('The mean is 8.0.');
      expect(await page.locator('.turn .tool pre.code').first().innerText()).toContain('plt.savefig');

      // The plot in the file browser.
      await page.goto(`${gw.url}/files?dir=figures`);
      await page.click('.entries >> text=trend.png');
      await page.waitForSelector('#preview img.preview-image');
      await page.waitForFunction(() => (document.querySelector<HTMLImageElement>('#preview img.preview-image')?.naturalWidth ?? 0) > 0);
      await shoot(page, 'files-image');
      expect(seen).toEqual({ dialogs: [], errors: [] });
      expect(id).toMatch(/\S/);
      await context.close();
    }
  });

  it("shows a first message full of markup as the conversation's name, as text", async () => {
    const { context, page } = await signedInAs('alice');
    const seen = watchPage(page);
    const id = await newConversation(page);
    // Under the 80 characters a title keeps.
    const hostile = `<img src=x onerror=window.__p=1></title><script>window.__p=2</script> & "q"`;
    await send(page, hostile);
    await page.waitForFunction((n) => document.getElementById('conversation-title')?.textContent === n, hostile);
    // The window's title is the next update (a moment later when it comes from another replica).
    await page.waitForFunction((t) => document.title === t, `${hostile} · sandgate`);
    expect(await page.title()).toBe(`${hostile} · sandgate`);
    expect(await page.locator(`#conv-link-${id}`).textContent()).toBe(hostile);
    expect(await page.locator('#conversation-title *, .conversation-list a *, head img').count()).toBe(0);
    await page.waitForFunction(() => document.querySelector('.turn .md')?.textContent?.includes('You said'));
    expect(await page.evaluate(() => (window as { __p?: number }).__p)).toBeUndefined();
    expect(seen).toEqual({ dialogs: [], errors: [] });
    await context.close();
  });

  it('Shift+Enter starts a new line, Enter sends', async () => {
    const { context, page } = await signedInAs('alice');
    await newConversation(page);
    await page.fill('#message', 'first line');
    await page.keyboard.press('Shift+Enter');
    await page.keyboard.type('second line');
    expect(await page.inputValue('#message')).toBe('first line\nsecond line');
    await page.keyboard.press('Enter');
    await page.waitForSelector('.turn .bubble');
    expect(await page.locator('.turn .bubble').innerText()).toBe('first line\nsecond line');
    await page.waitForFunction(() => document.querySelector('.turn .md')?.textContent?.includes('You said'));
    expect(await page.inputValue('#message')).toBe('');
    await context.close();
  });

  it('stops a long execution: the turn ends and the sandbox process is gone', async () => {
    const { context, page } = await signedInAs('alice');
    await newConversation(page);
    await send(page, 'sleep for a long time');
    await page.waitForFunction(() => document.querySelector('.turn pre.output')?.textContent?.includes('started'), undefined, { timeout: 60_000 });
    await shoot(page, 'chat-running');
    await page.click('#composer-actions button.stop');
    await page.waitForSelector('#composer-actions button.primary', { timeout: 30_000 });
    await page.waitForSelector('.turn-note');
    expect(await page.locator('.turn-note').innerText()).toMatch(/stopped/i);
    const alice = (await findUser(gw.gateway.store.db, 'alice'))!;
    const check = await gw.gateway.manager.execute(
      { userId: alice.id, name: alice.name },
      { language: 'python', code: "import os\npid = int(open('/workspace/sleeper.pid').read())\ntry:\n    os.kill(pid, 0)\n    print('alive')\nexcept ProcessLookupError:\n    print('gone')" },
    );
    expect(check.stdout.trim()).toBe('gone');
    await context.close();
  });
});

describe('the artifact browser', () => {
  it('uploads a CSV with progress and pages through it without loading it whole', async () => {
    const { context, page } = await signedInAs('alice');
    const seen = watchPage(page);
    await page.goto(`${gw.url}/files`);
    await page.waitForSelector('body[data-live-state=connected]');
    const rows = ['id,name,amount', ...Array.from({ length: 250 }, (_, i) => `${i + 1},"item, ${i + 1}",${(i * 1.5).toFixed(1)}`)].join('\n');
    await page.setInputFiles('#upload-file', { name: 'sales.csv', mimeType: 'text/csv', buffer: Buffer.from(rows) });
    await page.click('#upload button[type=submit]');
    await page.waitForSelector('.entries >> text=sales.csv');
    await page.click('.entries >> text=sales.csv');
    await page.waitForSelector('#table table');
    expect(await page.locator('#table thead th').allInnerTexts()).toEqual(['#', 'id', 'name', 'amount']);
    expect(await page.locator('#table tbody tr').count()).toBe(100);
    expect(await page.locator('#table tbody tr').first().innerText()).toContain('item, 1');
    await shoot(page, 'files-table');
    await page.click('text=Next 100 rows');
    await page.waitForFunction(() => document.querySelector('#table tbody tr td')?.textContent === '101');
    await page.click('text=Next 100 rows');
    await page.waitForFunction(() => document.querySelector('#table tbody tr td')?.textContent === '201');
    expect(await page.locator('#table tbody tr').count()).toBe(50);
    expect(await page.locator('#table .pager').innerText()).toContain('End of file');
    // Uploading the same name again keeps the first.
    await page.setInputFiles('#upload-file', { name: 'sales.csv', mimeType: 'text/csv', buffer: Buffer.from('id\n1\n') });
    await page.click('#upload button[type=submit]');
    await page.waitForSelector('.entries >> text=sales (1).csv');
    expect(seen).toEqual({ dialogs: [], errors: [] });
    await context.close();
  });

  it('refuses an upload over the size limit and keeps nothing of it', async () => {
    const small = await startGateway({ noStart: true, env: env({ SANDGATE_UPLOAD_MAX_MB: '1' }) });
    try {
      const context = await newContext();
      const page = await context.newPage();
      await signInWithGitHub(page, 'alice', small.url);
      await page.goto(`${small.url}/files`);
      await page.setInputFiles('#upload-file', { name: 'big.bin', mimeType: 'application/octet-stream', buffer: Buffer.alloc(3 * 1024 * 1024, 7) });
      await page.click('#upload button[type=submit]');
      await page.waitForSelector('#flash >> text=upload limit');
      const alice = (await findUser(small.gateway.store.db, 'alice'))!;
      const w = await small.gateway.manager.openWorkspace({ userId: alice.id, name: 'alice' });
      expect((await w.list('', { limit: 100 })).map((e) => e.path)).not.toContain('big.bin');
      await context.close();
    } finally {
      await small.close();
    }
  });

  it('makes a folder, renames and deletes a file (after confirming), and refreshes when code changes files', async () => {
    const { context, page } = await signedInAs('alice');
    watchPage(page, true);
    await page.goto(`${gw.url}/files`);
    await page.waitForSelector('body[data-live-state=connected]');
    await page.fill('#mkdir-name', 'reports');
    await page.click('.mkdir button[type=submit]');
    await page.waitForSelector('.entries >> text=reports');
    // Code in the sandbox writes a file: the open tree shows it without a reload.
    const alice = (await findUser(gw.gateway.store.db, 'alice'))!;
    await gw.gateway.manager.execute({ userId: alice.id, name: 'alice' }, { language: 'python', code: "open('/workspace/notes.md','w').write('# Notes\\n\\n*written by code*')" });
    await page.waitForSelector('.entries >> text=notes.md', { timeout: 15_000 });
    await page.click('.entries >> text=notes.md');
    await page.waitForSelector('#preview .md h1');
    expect(await page.locator('#preview .md em').innerText()).toBe('written by code');
    await page.fill('#rename-to', 'renamed.md');
    await page.click('.rename button[type=submit]');
    await page.waitForSelector('#preview h1.path >> text=renamed.md');
    await page.waitForSelector('.entries >> text=renamed.md');
    await page.click('#preview button.danger');
    await page.waitForSelector('#preview >> text=Deleted renamed.md');
    await page.locator('.entries >> text=renamed.md').waitFor({ state: 'detached', timeout: 10_000 });
    await context.close();
  });

  it('shows a hostile file name as text and never runs HTML or SVG from the workspace', async () => {
    const { context, page } = await signedInAs('alice');
    const seen = watchPage(page);
    const alice = (await findUser(gw.gateway.store.db, 'alice'))!;
    const w = await gw.gateway.manager.openWorkspace({ userId: alice.id, name: 'alice' });
    const evilName = '<img src=x onerror=alert(1)>.html';
    await w.mkdirs('hostile');
    await w.write(`hostile/${evilName}`, Buffer.from('<script>alert("html"); window.parent.__pwned = 3</script><h1>hello</h1>'));
    await w.write('hostile/pic.svg', Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(\'svg\')"><script>alert("svg")</script></svg>'));
    await w.write('hostile/fake.png', Buffer.from('<script>alert("png")</script>'));
    await page.goto(`${gw.url}/files?dir=hostile`);
    expect(await page.locator('.entries .name').allInnerTexts()).toEqual([evilName, 'fake.png', 'pic.svg']);
    expect(await page.locator('.entries img').count()).toBe(0);
    await page.locator('.entries .name', { hasText: evilName }).click();
    await page.waitForSelector('#preview pre.text');
    expect(await page.locator('#preview h1.path').innerText()).toBe(`hostile/${evilName}`);
    expect(await page.locator('#preview pre.text').innerText()).toContain('<script>');
    await page.locator('.entries .name', { hasText: 'pic.svg' }).click();
    await page.waitForSelector('#preview h1.path >> text=pic.svg');
    expect(await page.locator('#preview pre.text').innerText()).toContain('<svg');
    // The raw route: never inline for what is not a raster image by its bytes, always sandboxed.
    for (const [file, disposition] of [
      [evilName, 'attachment'],
      ['pic.svg', 'attachment'],
      ['fake.png', 'attachment'],
    ] as const) {
      const r = await context.request.get(`${gw.url}/files/raw?path=${encodeURIComponent(`hostile/${file}`)}`);
      expect(r.status()).toBe(200);
      expect(r.headers()['content-type']).toBe('application/octet-stream');
      expect(r.headers()['content-disposition']).toMatch(new RegExp(`^${disposition};`));
      expect(r.headers()['content-security-policy']).toMatch(/^sandbox;/);
      expect(r.headers()['x-content-type-options']).toBe('nosniff');
    }
    // Opened by address in the app's own tab, the HTML is a download: nothing runs.
    const download = page.waitForEvent('download');
    await page.evaluate((u) => void (window.location.href = u), `/files/raw?path=${encodeURIComponent(`hostile/${evilName}`)}`).catch(() => {});
    await download;
    await shoot(page, 'files-hostile');
    expect(await page.evaluate(() => (window as { __pwned?: number }).__pwned)).toBeUndefined();
    expect(seen.dialogs).toEqual([]);
    await context.close();
  });
});

describe('tokens and settings', () => {
  it('creates a token shown once with client configurations, lists it, and revokes it', async () => {
    const { context, page } = await signedInAs('alice');
    watchPage(page, true);
    await page.goto(`${gw.url}/tokens`);
    await page.fill('#token-name', 'laptop');
    await page.selectOption('#token-expiry', '30d');
    await page.click('text=Create token');
    await page.waitForSelector('#new-token');
    const token = await page.locator('#new-token').innerText();
    expect(token).toMatch(/^sgp_/);
    expect(await page.locator('#cfg-claude-code').innerText()).toContain(`${gw.url}/mcp`);
    expect(await page.locator('#cfg-claude-code').innerText()).toContain(token);
    expect(JSON.parse(await page.locator('#cfg-claude-desktop').innerText())).toBeTruthy();
    expect(await page.locator('#cfg-cursor').innerText()).toContain(token);
    expect(await page.locator('#token-list tbody tr').count()).toBe(1);
    await shoot(page, 'tokens-created');
    // It works, and is not shown again.
    const models = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${token}` } });
    expect(models.status).toBe(200);
    await page.reload();
    expect(await page.content()).not.toContain(token);
    expect(await page.locator('#token-list tbody tr').first().innerText()).toContain('laptop');
    await shoot(page, 'tokens');
    await page.click('#token-list button.danger');
    await page.waitForSelector('#token-list td.state.revoked');
    expect((await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(401);
    await context.close();
  });

  it('keeps a provider key write-only and sets the default model', async () => {
    const { context, page } = await signedInAs('alice');
    watchPage(page, true);
    await page.goto(`${gw.url}/settings`);
    await page.fill('#key-openai', 'sk-alice-own-key-123');
    await page.click('#keys form[hx-post="/settings/keys/openai"] button');
    await page.waitForSelector('#keys >> text=Your OpenAI key is saved');
    await page.reload();
    expect(await page.content()).not.toContain('sk-alice-own-key-123');
    expect(await page.locator('#keys').innerText()).toContain('your key is set');
    const alice = (await findUser(gw.gateway.store.db, 'alice'))!;
    const stored = JSON.stringify(await gw.gateway.store.db.selectFrom('provider_keys').selectAll().where('user_id', '=', alice.id).execute());
    expect(stored).not.toContain('sk-alice-own-key-123');
    await page.selectOption('#default-model', 'openai:gpt-test');
    await page.click('form[hx-post="/settings/model"] button');
    await page.waitForSelector('#model-status >> text=Saved');
    await shoot(page, 'settings');
    await page.click('#keys button.danger');
    await page.waitForSelector('#keys >> text=Your OpenAI key is removed');
    await context.close();
  });
});

describe('one user never reaches another', () => {
  it('B cannot read, fetch, change or watch what is A’s, even by guessing ids', async () => {
    const a = await signedInAs('alice');
    const b = await signedInAs('bob');
    const aliceId = await newConversation(a.page);
    const alice = (await findUser(gw.gateway.store.db, 'alice'))!;
    const w = await gw.gateway.manager.openWorkspace({ userId: alice.id, name: 'alice' });
    await w.write('secret-a.txt', Buffer.from('alice only'));
    const aliceToken = await gw.tokenFor('alice', 'a-device');
    const aliceTokenId = (await listTokens(gw.gateway.store.db, { userId: alice.id })).find((t) => t.name === 'a-device')!.id;

    // Pages and partials.
    const bGet = (p: string) => b.context.request.get(`${gw.url}${p}`, { maxRedirects: 0 });
    expect((await bGet(`/c/${aliceId}`)).status()).toBe(404);
    expect((await bGet(`/c/${aliceId}/transcript`)).status()).toBe(404);
    const raw = await bGet('/files/raw?path=secret-a.txt');
    expect(raw.status()).toBe(404);
    expect(await raw.text()).not.toContain('alice only');
    expect(await (await bGet('/files/preview?path=..%2Falice%2Fsecret-a.txt')).text()).not.toContain('alice only');
    expect(await (await bGet('/chat')).text()).not.toContain(aliceId);
    expect(await (await bGet('/tokens')).text()).not.toContain('a-device');

    // State-changing requests with B's own valid CSRF token.
    await b.page.goto(`${gw.url}/settings`);
    const csrf = await csrfOf(b.page);
    const post = (p: string, form: Record<string, string> = {}) => b.context.request.post(`${gw.url}${p}`, { form, headers: { 'x-csrf-token': csrf }, maxRedirects: 0 });
    expect((await post(`/tokens/${aliceTokenId}/revoke`)).status()).toBe(404);
    expect((await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${aliceToken}` } })).status).toBe(200);
    expect((await post(`/c/${aliceId}/send`, { text: 'hi' })).status()).toBe(404);
    expect((await post(`/c/${aliceId}/delete`)).status()).toBe(404);
    expect((await post(`/c/${aliceId}/model`, { model: 'openai:gpt-test' })).status()).toBe(404);
    expect((await post('/files/delete', { path: 'secret-a.txt' })).status()).toBe(404);
    expect((await w.read('secret-a.txt')).data.toString()).toBe('alice only');
    expect((await a.context.request.get(`${gw.url}/c/${aliceId}`)).status()).toBe(200);

    // Settings are B's own: A's key is not B's.
    await a.page.goto(`${gw.url}/settings`);
    await a.page.fill('#key-openai', 'sk-alice-private');
    await a.page.click('#keys form[hx-post="/settings/keys/openai"] button');
    await a.page.waitForSelector('#keys >> text=saved');
    await b.page.goto(`${gw.url}/settings`);
    expect(await b.page.locator('#keys').innerText()).not.toContain('your key is set');

    // The live channel: B's socket cannot watch A's conversation and hears nothing of A's turn.
    await b.page.goto(`${gw.url}/files`);
    await b.page.waitForSelector('body[data-live-state=connected]');
    const bHeard = await b.page.evaluate(async (conv) => {
      const w = window as unknown as { io: (o: unknown) => { on(e: string, f: (...a: unknown[]) => void): void; onAny(f: (...a: unknown[]) => void): void; emit(e: string, ...a: unknown[]): void; disconnect(): void } };
      const s = w.io({ auth: { csrf: document.body.dataset.csrf }, transports: ['websocket'] });
      const heard: string[] = [];
      s.onAny((event: unknown, payload: unknown) => heard.push(`${String(event)} ${JSON.stringify(payload)}`));
      await new Promise((r) => s.on('connect', r));
      const ack = await new Promise((r) => s.emit('watch', conv, r));
      (window as unknown as { __heard: string[]; __ack: unknown }).__heard = heard;
      (window as unknown as { __ack: unknown }).__ack = ack;
      return ack;
    }, aliceId);
    expect(bHeard).toEqual({ ok: false });
    await a.page.goto(`${gw.url}/c/${aliceId}`);
    await a.page.waitForSelector('body[data-live-state=watching]');
    await send(a.page, 'hello from alice');
    await a.page.waitForFunction(() => document.querySelector('.turn .md')?.textContent?.includes('You said'));
    const heard = await b.page.evaluate(() => (window as unknown as { __heard: string[] }).__heard);
    expect(heard.filter((h) => h.includes('hello from alice') || h.startsWith('swap'))).toEqual([]);
    // A's own Delete removes it (turns and messages too).
    const aCsrf = await csrfOf(a.page);
    const deleted = await a.context.request.post(`${gw.url}/c/${aliceId}/delete`, { headers: { 'x-csrf-token': aCsrf }, maxRedirects: 0 });
    expect(deleted.status()).toBe(204);
    expect(deleted.headers()['hx-redirect']).toBe('/chat');
    expect((await a.context.request.get(`${gw.url}/c/${aliceId}`)).status()).toBe(404);
    const left = await gw.gateway.store.db.selectFrom('messages').select((eb) => eb.fn.countAll<number>().as('n')).where('conversation_id', '=', aliceId).executeTakeFirstOrThrow();
    expect(left.n).toBe(0);
    await a.context.close();
    await b.context.close();
  });
});

describe('cross-site requests', () => {
  it('refuses a form post from another origin, a request without the CSRF token, and a socket without it', async () => {
    const { context, page } = await signedInAs('alice');
    const alice = (await findUser(gw.gateway.store.db, 'alice'))!;
    const tokensBefore = (await listTokens(gw.gateway.store.db, { userId: alice.id, includeRevoked: true })).length;
    // A page of another origin on the same site posts a form at the gateway: the browser sends the cookie (SameSite=Lax, same site), not the token.
    evil.html = `<form id="f" method="post" action="${gw.url}/tokens"><input name="name" value="stolen"><input name="expires" value="never"></form><script>document.getElementById('f').submit()</script>`;
    const response = page.waitForResponse((r) => r.url() === `${gw.url}/tokens` && r.request().method() === 'POST');
    await page.goto(evil.url);
    expect((await response).status()).toBe(403);
    expect(await page.locator('body').innerText()).toMatch(/security token/);
    expect((await listTokens(gw.gateway.store.db, { userId: alice.id, includeRevoked: true })).length).toBe(tokensBefore);

    // The same by script, without the token or with another session's.
    const cookie = `sandgate.sid=${await cookieOf(context)}`;
    const noToken = await fetch(`${gw.url}/tokens`, { method: 'POST', headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' }, body: 'name=stolen2&expires=never' });
    expect(noToken.status).toBe(403);
    const other = await signedInAs('bob');
    await other.page.goto(`${gw.url}/settings`);
    const bobsToken = await csrfOf(other.page);
    const wrongToken = await fetch(`${gw.url}/logout/all`, { method: 'POST', headers: { cookie, 'content-type': 'application/x-www-form-urlencoded', 'x-csrf-token': bobsToken }, body: '' });
    expect(wrongToken.status).toBe(403);
    expect((await listTokens(gw.gateway.store.db, { userId: alice.id, includeRevoked: true })).length).toBe(tokensBefore);

    // The socket: without the token, from another origin, without a session.
    await page.goto(`${gw.url}/settings`);
    const csrf = await csrfOf(page);
    const connect = (opts: { csrf?: string; origin?: string; cookie?: string }) =>
      new Promise<string>((resolve) => {
        const s = ioClient(gw.url, { transports: ['websocket'], reconnection: false, auth: opts.csrf ? { csrf: opts.csrf } : {}, extraHeaders: { origin: opts.origin ?? gw.url, ...(opts.cookie ? { cookie: opts.cookie } : {}) } });
        s.on('connect', () => (s.disconnect(), resolve('connected')));
        s.on('connect_error', (e) => (s.disconnect(), resolve(`refused: ${e.message}`)));
      });
    expect(await connect({ csrf, cookie })).toBe('connected');
    expect(await connect({ cookie })).toMatch(/^refused/);
    expect(await connect({ csrf: bobsToken, cookie })).toMatch(/^refused/);
    expect(await connect({ csrf, cookie, origin: evil.url })).toMatch(/^refused/);
    expect(await connect({ csrf })).toMatch(/^refused/);
    await other.context.close();
    await context.close();
  });
});

describe('signing out', () => {
  it('signs out this browser, and every browser of the user', async () => {
    const one = await signedInAs('carol');
    const two = await signedInAs('carol');
    await shoot(one.page, 'chat-empty');
    await one.page.click('text=Sign out');
    await one.page.waitForURL(/\/login\?why=signedout/);
    await one.page.goto(`${gw.url}/chat`);
    expect(new URL(one.page.url()).pathname).toBe('/login');
    await two.page.goto(`${gw.url}/chat`);
    expect(new URL(two.page.url()).pathname).toBe('/chat');

    const three = await signedInAs('carol');
    await two.page.goto(`${gw.url}/settings`);
    await two.page.click('text=Sign out everywhere');
    await two.page.waitForURL(/\/login/);
    await three.page.goto(`${gw.url}/tokens`);
    expect(new URL(three.page.url()).pathname).toBe('/login');
    for (const c of [one, two, three]) await c.context.close();
  });
});

describe('pages at both widths', () => {
  it('has a screenshot of each page at laptop and phone width, and no page loads script inline or from elsewhere', async () => {
    for (const viewport of ['laptop', 'phone'] as const) {
      const context = await newContext(viewport);
      const page = await context.newPage();
      const outside: string[] = [];
      page.on('request', (r) => {
        if (!r.url().startsWith(gw.url) && !r.url().startsWith(github.url)) outside.push(r.url());
      });
      await page.goto(`${gw.url}/login`);
      await shoot(page, 'login');
      await signInWithGitHub(page, 'alice');
      for (const p of ['chat', 'files', 'tokens', 'settings']) {
        const r = await page.goto(`${gw.url}/${p}`);
        const csp = r?.headers()['content-security-policy'] ?? '';
        expect(csp).toContain("script-src 'self'");
        expect(csp).not.toContain('unsafe-inline');
        expect(await page.locator('script:not([src])').count()).toBe(0);
        // Every control has a label.
        const unlabelled = await page.evaluate(() =>
          [...document.querySelectorAll('input:not([type=hidden]), select, textarea')].filter((el) => !(el as HTMLInputElement).labels?.length && !el.getAttribute('aria-label')).map((el) => el.outerHTML),
        );
        expect(unlabelled).toEqual([]);
        await shoot(page, `page-${p}`);
      }
      expect(outside).toEqual([]);
      await context.close();
    }
  });
});

describe('a gateway restart', () => {
  it('keeps the signed-in browser and the conversation with its plot', async () => {
    const { context, page } = await signedInAs('alice');
    const id = await newConversation(page);
    await send(page, 'plot it again');
    await page.waitForSelector('#composer-actions button.primary', { timeout: 60_000 });
    await page.locator('.turn .files-inline img').first().waitFor();
    const dataDir = gw.dataDir;
    await gw.close({ keepData: true });
    gw = await startGateway({ env: env(), dataDir });
    // Cookies belong to the host, not the port: the same browser session reaches the new gateway.
    await page.goto(`${gw.url}/c/${id}`);
    expect(new URL(page.url()).pathname).toBe(`/c/${id}`);
    await page.waitForFunction(() => (document.querySelector<HTMLImageElement>('.files-inline img')?.naturalWidth ?? 0) > 0);
    expect(await page.locator('.turn .md').last().innerText()).toContain('The mean is 8.0.');
    await context.close();
  });
});

async function startEvilSite(): Promise<{ url: string; html: string; close(): Promise<void> }> {
  const site = {
    url: '',
    html: '',
    close: async () => {},
  };
  const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(site.html));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  site.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  site.close = async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return site;
}
