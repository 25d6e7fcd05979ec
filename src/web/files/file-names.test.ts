/**
 * File names that are not UTF-8 in the web app, in Chromium against the real gateway,
 * real sandboxes and a stand-in OpenAI model. Code may write any bytes as a name; such a
 * file is listed (each stray byte shown as U+FFFD), opened, previewed, downloaded,
 * renamed and deleted like any other, and a chat turn that made one shows it.
 */
import fs from 'node:fs';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureUser, type User } from '../../accounts/accounts.js';
import { WorkspaceError } from '../../sandboxes/workspace.js';
import { createLoginLink } from '../../auth/login-links.js';
import { startGateway, type Gateway } from '../../../test/support/mcp.js';
import { startStandin, type Standin } from '../../../test/support/model-standins.js';

const CHROMIUM = process.env.SANDGATE_CHROMIUM ?? '/usr/bin/chromium';

/** Writes /workspace/chat\xff.txt: one byte of its name is not UTF-8. */
const CHAT_CODE = "open(b'/workspace/chat\\xff.txt', 'wb').write(b'made in the chat')\nprint('written')";

let model: Standin;
let gw: Gateway;
let browser: Browser;
let nadia: User;

beforeAll(async () => {
  model = await startStandin('openai', (req) => {
    if (req.lastToolResult === undefined) return { text: ['Writing it.'], toolCalls: [{ name: 'execute_code', args: { language: 'python', code: CHAT_CODE } }] };
    return { text: ['The file is written.'] };
  });
  gw = await startGateway({ env: { SANDGATE_OPENAI_API_KEY: 'sk-team', SANDGATE_OPENAI_BASE_URL: model.baseURL, SANDGATE_MODELS: 'openai:gpt-test' } });
  nadia = await ensureUser(gw.gateway.store.db, 'nadia');
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  await model?.close();
});

/** A browser signed in as nadia by a one-time link; every page error and dialog is kept (confirms are accepted). */
async function signedIn(): Promise<{ context: BrowserContext; page: Page; seen: { errors: string[]; dialogs: string[] } }> {
  const context = await browser.newContext({ acceptDownloads: true });
  const page = await context.newPage();
  const seen = { errors: [] as string[], dialogs: [] as string[] };
  page.on('pageerror', (e) => seen.errors.push(e.message));
  page.on('dialog', (d) => {
    seen.dialogs.push(d.message());
    void (d.type() === 'confirm' ? d.accept() : d.dismiss());
  });
  await page.goto(`${gw.url}/login/link/${(await createLoginLink(gw.gateway.store.db, nadia.id)).secret}`);
  await page.click('button[type=submit]');
  await page.waitForURL(`${gw.url}/chat`);
  return { context, page, seen };
}

const workspace = () => gw.gateway.manager.openWorkspace({ userId: nadia.id, name: nadia.name });

async function exists(p: string): Promise<boolean> {
  try {
    await (await workspace()).stat(p);
    return true;
  } catch (e) {
    if (e instanceof WorkspaceError && e.code === 'ENOENT') return false;
    throw e;
  }
}

describe('file names that are not UTF-8 in the file browser', () => {
  it('lists, opens, previews, downloads, renames and deletes them, and works inside such a folder', async () => {
    const run = await gw.gateway.manager.execute(
      { userId: nadia.id, name: nadia.name },
      {
        language: 'python',
        code: [
          'import os',
          "open(b'/workspace/bad\\xff.txt', 'wb').write(b'bytes in the name')",
          "os.mkdir(b'/workspace/d\\xfe')",
          "open(b'/workspace/d\\xfe/t\\xfa.csv', 'wb').write(b'a,b\\n1,2\\n')",
          "print('made')",
        ].join('\n'),
      },
    );
    expect(run.stdout).toContain('made');
    // Inside the gateway, each stray byte is its lone surrogate (as the workspace helper reports it).
    expect((await (await workspace()).list('', { recursive: true })).map((e) => e.path).sort()).toEqual(['bad\udcff.txt', 'd\udcfe', 'd\udcfe/t\udcfa.csv']);

    const { context, page, seen } = await signedIn();
    await page.goto(`${gw.url}/files`);
    await page.waitForSelector('body[data-live-state=connected]');
    expect(await page.locator('.entries .name').allInnerTexts()).toEqual(['d\ufffd', 'bad\ufffd.txt']);
    expect(await page.locator('.entries .file a').getAttribute('href')).toBe('/files?path=bad%FF.txt');

    // Previewed from the tree, and downloaded with its bytes.
    await page.locator('.entries .name', { hasText: 'bad' }).click();
    await page.waitForSelector('#preview pre.text');
    expect(await page.locator('#preview h1.path').innerText()).toBe('bad\ufffd.txt');
    expect(await page.locator('#preview pre.text').innerText()).toBe('bytes in the name');
    const download = page.waitForEvent('download');
    await page.click('#preview a:has-text("Download")');
    expect(fs.readFileSync((await (await download).path())!, 'utf8')).toBe('bytes in the name');
    const raw = await context.request.get(`${gw.url}/files/raw?path=bad%FF.txt&download=1`);
    expect(raw.status()).toBe(200);
    expect(raw.headers()['content-disposition']).toBe(`attachment; filename="bad_.txt"; filename*=UTF-8''bad%EF%BF%BD.txt`);

    // Opened by its address, as the link in the tree names it.
    expect((await page.goto(`${gw.url}/files?path=bad%FF.txt`))?.status()).toBe(200);
    expect(await page.locator('#preview pre.text').innerText()).toBe('bytes in the name');

    // The folder: opened, its CSV shown as a table, a folder made and a file uploaded in it, the CSV deleted.
    await page.goto(`${gw.url}/files`);
    await page.waitForSelector('body[data-live-state=connected]');
    await page.locator('.entries .dir a').click();
    await page.waitForSelector('.entries .name >> text=t\ufffd.csv');
    expect(await page.locator('.crumbs li').allInnerTexts()).toEqual(['workspace', 'd\ufffd']);
    expect(await page.locator('.folder-title').innerText()).toBe('/workspace/d\ufffd');
    await page.locator('.entries .name', { hasText: '.csv' }).click();
    await page.waitForSelector('#table table');
    expect(await page.locator('#table thead th').allInnerTexts()).toEqual(['#', 'a', 'b']);
    await page.fill('#mkdir-name', 'sub');
    await page.click('.mkdir button[type=submit]');
    await page.waitForSelector('.entries .name >> text=sub');
    expect(await exists('d\udcfe/sub')).toBe(true);
    await page.setInputFiles('#upload-file', { name: 'up.txt', mimeType: 'text/plain', buffer: Buffer.from('uploaded') });
    await page.click('#upload button[type=submit]');
    await page.waitForSelector('.entries .name >> text=up.txt');
    expect((await (await workspace()).read('d\udcfe/up.txt')).data.toString()).toBe('uploaded');
    await page.click('#preview button.danger');
    await page.waitForSelector('#preview >> text=Deleted d\ufffd/t\ufffd.csv');
    expect(await exists('d\udcfe/t\udcfa.csv')).toBe(false);
    await page.locator('.entries .name >> text=t\ufffd.csv').waitFor({ state: 'detached', timeout: 10_000 });

    // Renamed to a name of its own.
    await page.goto(`${gw.url}/files?path=bad%FF.txt`);
    expect(await page.inputValue('#rename-to')).toBe('bad\ufffd.txt');
    await page.fill('#rename-to', 'good.txt');
    await page.click('.rename button[type=submit]');
    await page.waitForSelector('#preview h1.path >> text=good.txt');
    expect(await exists('good.txt')).toBe(true);
    expect(await exists('bad\udcff.txt')).toBe(false);
    expect(seen).toEqual({ errors: [], dialogs: ['Delete d\ufffd/t\ufffd.csv? This cannot be undone.'] });
    await context.close();
  });

  it('answers a malformed or missing name as a user error, never 500', async () => {
    const { context } = await signedIn();
    const get = async (p: string) => (await context.request.get(`${gw.url}${p}`)).status();
    expect(await get('/files/preview?path=%zz')).toBe(400);
    expect(await get('/files/raw?path=bad%FE%FE.txt')).toBe(404);
    expect(await get('/files/tree?dir=nowhere%FF')).toBe(404);
    expect(await get('/files?path=%E0%80')).toBe(200);
    await context.close();
  });
});

describe('a chat turn that writes such a file', () => {
  it('shows the file in the turn, live and after a reload, and its link opens it', async () => {
    const { context, page, seen } = await signedIn();
    await page.click('text=New conversation');
    await page.waitForURL(/\/c\/[^/]+$/);
    await page.waitForSelector('body[data-live-state=watching]');
    await page.fill('#message', 'write a file with a strange name');
    await page.keyboard.press('Enter');
    const chip = page.locator('.turn .files-inline a.file-chip');
    await chip.waitFor({ timeout: 60_000 });
    expect(await chip.innerText()).toBe('chat\ufffd.txt');
    expect(await chip.getAttribute('href')).toBe('/files?path=chat%FF.txt');
    await page.waitForSelector('#composer-actions button.primary', { timeout: 60_000 });
    expect(await page.locator('.turn .md').last().innerText()).toContain('The file is written.');

    const reloaded = await page.reload();
    expect(reloaded?.status()).toBe(200);
    expect(await page.locator('.turn .files-inline a.file-chip').innerText()).toBe('chat\ufffd.txt');
    await page.click('.turn .files-inline a.file-chip');
    await page.waitForSelector('#preview pre.text');
    expect(await page.locator('#preview pre.text').innerText()).toBe('made in the chat');
    expect(seen).toEqual({ errors: [], dialogs: [] });
    await context.close();
  });
});
