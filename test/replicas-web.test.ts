/// <reference lib="dom" />
/**
 * Two gateway processes on one Postgres and one sandbox host, behind Debian's HAProxy with
 * the shipped configuration (round robin, no stickiness), as clients meet them: a token
 * revoked or a user disabled on one replica is refused by the other at once; a one-time
 * sign-in link signs in once whichever replicas it is fired at; a 2025 MCP client whose
 * requests alternate between the replicas keeps one Python kernel; /v1 streams end whole
 * on either replica; and a browser whose live channel is on one replica sees the output of
 * a chat turn that the other runs. Every request goes through HAProxy unless it is sent
 * straight to a replica on purpose.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import OpenAI from 'openai';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { User } from '../src/accounts/accounts.js';
import { createLoginLink } from '../src/auth/login-links.js';
import { MIGRATIONS } from '../src/migrations.js';
import { openStore, type Store } from '../src/store/store.js';
import { executeRaw, killAndClean, startGatewayProcess, usersWithTokens, type GatewayProcess } from './support/gateway-process.js';
import { startHaproxy, type Haproxy } from './support/haproxy.js';
import type { Gateway } from './support/mcp.js';
import { startStandin, type Standin } from './support/model-standins.js';
import { freePort } from './support/ports.js';
import { testDatabaseUrl } from './support/postgres.js';
import { until } from './support/until.js';
import { webSession } from './support/web-session.js';

const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';
const CHROMIUM = process.env.SANDGATE_CHROMIUM ?? '/usr/bin/chromium';
const MODEL = 'openai:gpt-test';
const TICKS = 4;
const TICK_CODE = ['import time', `for i in range(${TICKS}):`, "    print(f'tick {i}', flush=True)", '    time.sleep(1)'].join('\n');

/** What HAProxy's httplog says of each request: the backend and server that answered it, and the request line. */
function served(log: string): { backend: string; server: string; method: string; path: string }[] {
  return [...log.matchAll(/ (\w+)\/(g\d) .*"(\w+) (\S+) HTTP\/[\d.]+"/g)].map((m) => ({ backend: m[1]!, server: m[2]!, method: m[3]!, path: m[4]! }));
}

/** An MCP 2026-07-28 `execute_code` call with its HTTP status, for refusals (a 401 has no result). */
async function mcpRun(url: string, token: string, code: string): Promise<{ status: number; challenge: string; text: string }> {
  const r = await executeRaw(url, token, code);
  const msg = r.messages[0] as { result?: { content: { text: string }[] }; error?: { message: string } } | undefined;
  return { status: r.status, challenge: String(r.headers['www-authenticate'] ?? ''), text: msg?.result?.content.map((c) => c.text).join('\n') ?? msg?.error?.message ?? r.text };
}

/** A browser's cookie jar, as far as these tests need one. */
class Jar {
  private readonly cookies = new Map<string, string>();
  header(): string {
    return [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  }
  keep(r: Response): Response {
    for (const c of r.headers.getSetCookie()) {
      const pair = c.split(';')[0]!;
      const eq = pair.indexOf('=');
      this.cookies.set(pair.slice(0, eq), pair.slice(eq + 1));
    }
    return r;
  }
}

/** A sign-in link's page opened at `base`: its form's CSRF token and the session holding it; undefined when the page was refused. */
async function linkForm(base: string, secret: string): Promise<{ jar: Jar; csrf: string } | undefined> {
  const jar = new Jar();
  const r = jar.keep(await fetch(`${base}/login/link/${secret}`, { redirect: 'manual' }));
  if (r.status !== 200) return undefined;
  const csrf = /name="_csrf" value="([^"]+)"/.exec(await r.text())?.[1];
  if (!csrf) throw new Error('the sign-in link page has no CSRF field');
  return { jar, csrf };
}

/** The link's form posted at `base`: where the answer sends the browser (/chat when it signed in). */
async function useLink(base: string, form: { jar: Jar; csrf: string }, secret: string): Promise<string> {
  const r = form.jar.keep(
    await fetch(`${base}/login/link`, {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: form.jar.header() },
      body: new URLSearchParams({ _csrf: form.csrf, secret }).toString(),
    }),
  );
  return r.headers.get('location') ?? `status ${r.status}`;
}

describe.skipIf(!onPostgres)('two replicas behind HAProxy: refusals, sign-in links, MCP sessions, /v1 streams and live pages', () => {
  let dataDir = '';
  let databaseUrl = '';
  let store: Store | undefined;
  let model: Standin | undefined;
  let lb: Haproxy | undefined;
  let browser: Browser | undefined;
  const gateways: GatewayProcess[] = [];
  let a: GatewayProcess;
  let b: GatewayProcess;
  /** Straight to each replica, past the load balancer. */
  let urlA = '';
  let urlB = '';
  let lbPort = 0;
  let portA = 0;
  let portB = 0;
  /** Every gateway's settings, but its port. */
  let env: (port: number) => Record<string, string> = () => ({});

  /** A web session signed in straight at a replica (webSession takes a Gateway for its URL and store only). */
  const sessionAt = (url: string, user: User) => webSession({ url, gateway: { store } } as unknown as Gateway, user);

  beforeAll(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-replicas-web-'));
    databaseUrl = await testDatabaseUrl();
    model = await startStandin('openai', (req) => {
      const sum = /^sum to (\d+)/.exec(req.lastUserText);
      if (sum) {
        if (req.lastToolResult === undefined) return { text: ['Computing. '], toolCalls: [{ name: 'execute_code', args: { language: 'python', code: `print(f'TOTAL={sum(range(1, ${sum[1]} + 1))}')` } }] };
        return { text: ['The sum ', `is ${/TOTAL=(\d+)/.exec(req.lastToolResult)?.[1] ?? 'unknown'}.`] };
      }
      if (req.lastUserText.startsWith('sleep')) {
        if (req.lastToolResult === undefined) return { toolCalls: [{ name: 'execute_code', args: { language: 'python', code: "import time\nprint('sleeping', flush=True)\ntime.sleep(120)" } }] };
        return { text: ['Woke up.'] };
      }
      if (req.lastUserText.startsWith('tick')) {
        if (req.lastToolResult === undefined) return { toolCalls: [{ name: 'execute_code', args: { language: 'python', code: TICK_CODE } }] };
        return { text: [`Counted ${(req.lastToolResult.match(/tick \d/g) ?? []).length} ticks.`] };
      }
      return { text: ['You said: ', req.lastUserText.slice(0, 40)] };
    });
    // The load balancer's port first: both replicas must know it as their public URL (Host and Origin are checked against it).
    [lbPort, portA, portB] = [await freePort(), await freePort(), await freePort()];
    env = (port: number) => ({
      SANDGATE_DATA_DIR: dataDir,
      SANDGATE_DATABASE_URL: databaseUrl,
      SANDGATE_PORT: String(port),
      SANDGATE_PUBLIC_URL: `http://127.0.0.1:${lbPort}`,
      // No warm pool: each user's sandbox is started by the replica that first runs their code, and its log says so.
      SANDGATE_WARM_POOL_SIZE: '0',
      SANDGATE_RATE_LIMIT_PER_MIN: '100000',
      SANDGATE_RATE_LIMIT_BURST: '10000',
      SANDGATE_OPENAI_API_KEY: 'sk-team',
      SANDGATE_OPENAI_BASE_URL: model!.baseURL,
      SANDGATE_MODELS: MODEL,
    });
    a = startGatewayProcess(env(portA));
    b = startGatewayProcess(env(portB));
    gateways.push(a, b);
    await Promise.all([a.ready(), b.ready()]);
    urlA = `http://127.0.0.1:${portA}`;
    urlB = `http://127.0.0.1:${portB}`;
    lb = await startHaproxy([portA, portB], { port: lbPort, log: true });
    store = await openStore({ dataDir, databaseUrl }, MIGRATIONS);
  }, 300_000);

  afterAll(async () => {
    await browser?.close();
    await lb?.stop();
    await store?.close();
    await killAndClean(gateways, dataDir);
    await model?.close();
  });

  it('refuses at B, at its next request, a token revoked on A’s tokens page and a user disabled on A’s admin page', async () => {
    const [ann, dora] = await usersWithTokens(databaseUrl, ['ann', 'dora']);
    const [root] = await usersWithTokens(databaseUrl, ['root'], { isAdmin: true });

    const before = await mcpRun(urlB, ann!.token, '6 * 7');
    expect(before.status).toBe(200);
    expect(before.text).toContain('[result] 42');
    const annAtA = await sessionAt(urlA, ann!.user);
    const page = await (await annAtA.get('/tokens', { htmx: false })).text();
    const tokenId = /hx-post="\/tokens\/(\d+)\/revoke"/.exec(page)?.[1];
    expect(tokenId).toBeDefined();
    const revoked = await annAtA.post(`/tokens/${tokenId}/revoke`);
    expect(revoked.status).toBe(200);
    expect(await revoked.text()).toContain('revoked');
    const after = await mcpRun(urlB, ann!.token, '6 * 7');
    expect(after.status, after.text).toBe(401);
    expect(after.challenge).toMatch(/error="invalid_token".*revoked/);
    expect(after.text).not.toContain('[result]');

    // Dora runs code through B (B then holds her sandbox) and has a page open at B.
    const ran = await mcpRun(urlB, dora!.token, "open('/workspace/d.txt', 'w').write('x')");
    expect(ran.status, ran.text).toBe(200);
    expect(b.output()).toMatch(/"owner":"dora"[^\n]*"msg":"sandbox started"/);
    const doraAtB = await sessionAt(urlB, dora!.user);
    expect((await doraAtB.get('/chat', { htmx: false })).status).toBe(200);
    const rootAtA = await sessionAt(urlA, root!.user);
    const disabled = await rootAtA.post(`/admin/users/${dora!.user.id}/disable`);
    expect(disabled.status).toBe(200);
    expect(await disabled.text()).toContain('dora is disabled');
    const refused = await mcpRun(urlB, dora!.token, '1');
    expect(refused.status, refused.text).toBe(401);
    expect(refused.challenge).toMatch(/The account is disabled/);
    // Her page at B is signed out, and the sandbox B held was stopped at A's word.
    const chat = await doraAtB.get('/chat', { htmx: false });
    expect(chat.status).toBe(303);
    expect(chat.headers.get('location')).toBe('/login');
    expect(b.output()).toMatch(/"user":"dora"[^\n]*"msg":"stopping sandbox"/);
  });

  it('does not start a gateway whose replica key is not the one the running replicas share, and says which file to copy', async () => {
    const stranger = startGatewayProcess({ ...env(await freePort()), SANDGATE_REPLICA_KEY: crypto.randomBytes(32).toString('base64') });
    gateways.push(stranger);
    expect(await stranger.exited).toBe(2);
    expect(stranger.output()).toMatch(/the replica key of this gateway is not the one of the gateway \S+ already running on this database[^\n]*copy replicas\.key/);
    // The same key (the data directory's): it starts, and leaves.
    const friend = startGatewayProcess(env(await freePort()));
    gateways.push(friend);
    await friend.ready();
    expect(friend.output()).not.toContain('no other replica answered');
    friend.child.kill('SIGTERM');
    expect(await friend.exited).toBe(0);
  });

  it('signs in once with a one-time link, whether it is used on A then B or on both at the same moment', async () => {
    const [{ user: lena }] = await usersWithTokens(databaseUrl, ['lena']);
    const signIns = () => (a.output() + b.output()).match(/"user":"lena"[^\n]*"msg":"signed in"/g)?.length ?? 0;

    const { secret } = await createLoginLink(store!.db, lena.id);
    // Both pages opened while the link was unused: each holds a form that would sign in.
    const [formA, formB] = [await linkForm(urlA, secret), await linkForm(urlB, secret)];
    if (!formA || !formB) throw new Error('an unused link was refused its form');
    expect(await useLink(urlA, formA, secret)).toBe('/chat');
    expect(await useLink(urlB, formB, secret)).toBe('/login?why=link');
    // B no longer offers the link's form, and the session made on A lets its browser in at B.
    expect(await linkForm(urlB, secret)).toBeUndefined();
    expect((await fetch(`${urlB}/chat`, { headers: { cookie: formA.jar.header() }, redirect: 'manual' })).status).toBe(200);
    expect((await fetch(`${urlB}/chat`, { headers: { cookie: formB.jar.header() }, redirect: 'manual' })).status).toBe(303);

    const ROUNDS = 6;
    for (let round = 0; round < ROUNDS; round++) {
      const fresh = (await createLoginLink(store!.db, lena.id)).secret;
      const [atA, atB] = await Promise.all([linkForm(urlA, fresh), linkForm(urlB, fresh)]);
      if (!atA || !atB) throw new Error(`round ${round}: an unused link was refused its form`);
      const landed = await Promise.all([useLink(urlA, atA, fresh), useLink(urlB, atB, fresh)]);
      expect(landed.filter((l) => l === '/chat'), `round ${round}: ${landed.join(', ')}`).toHaveLength(1);
      expect(landed.filter((l) => l === '/login?why=link'), `round ${round}: ${landed.join(', ')}`).toHaveLength(1);
    }
    await until(() => signIns() === ROUNDS + 1, 5000).catch(() => undefined);
    expect(signIns()).toBe(ROUNDS + 1);
  });

  it('keeps one Python kernel for a 2025 MCP client whose requests HAProxy alternates between the replicas', async () => {
    const [{ user, token }] = await usersWithTokens(databaseUrl, ['mia']);
    const mark = lb!.output().length;
    const client = new Client({ name: 'replicas-web', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${lb!.url}/mcp`), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
    try {
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('execute_code');
      const RUNS = 10;
      for (let i = 1; i <= RUNS; i++) {
        const r = (await client.callTool({ name: 'execute_code', arguments: { language: 'python', code: i === 1 ? 'x = 1\nx' : 'x += 1\nx' } })) as CallToolResult;
        const text = r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
        expect(r.isError, text).toBeFalsy();
        expect(text).toContain(`[result] ${i}`);
      }
      const last = (await client.callTool({ name: 'execute_code', arguments: { language: 'python', code: 'x' } })) as CallToolResult;
      expect(last.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n')).toContain(`[result] ${RUNS}`);

      // Both replicas served this client's requests.
      const mcpLines = () => served(lb!.output().slice(mark)).filter((s) => s.method === 'POST' && s.path === '/mcp');
      await until(() => mcpLines().length >= RUNS + 3, 5000).catch(() => undefined);
      const mcp = mcpLines();
      expect(mcp.length).toBeGreaterThanOrEqual(RUNS + 3);
      expect(new Set(mcp.map((s) => s.server))).toEqual(new Set(['g1', 'g2']));
      // And the store audited each run once, as the client made it.
      const runs = async () =>
        (await store!.db.selectFrom('audit_log').select(['outcome']).where('user_id', '=', user.id).where('kind', '=', 'mcp').where('tool', '=', 'execute_code').execute()).map((r) => r.outcome);
      await vi.waitUntil(async () => (await runs()).length >= RUNS + 1, { timeout: 5000, interval: 100 });
      expect(await runs()).toEqual(Array.from({ length: RUNS + 1 }, () => 'ok'));
    } finally {
      await client.close();
    }
  });

  it('streams /v1 chat completions through HAProxy to their end, from either replica', async () => {
    const [{ token }] = await usersWithTokens(databaseUrl, ['vic']);
    const mark = lb!.output().length;
    const client = new OpenAI({ baseURL: `${lb!.url}/v1`, apiKey: token, maxRetries: 0 });
    const ask = async (n: number) => {
      const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `sum to ${n}` }], stream: true });
      let content = '';
      let chunks = 0;
      let finish: string | null = null;
      for await (const chunk of stream) {
        chunks++;
        content += chunk.choices[0]?.delta.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      return { n, content, chunks, finish };
    };
    const ns = [10, 25, 50, 100, 250, 1000];
    // Two clients at a time, each asking in turn.
    const answers = (await Promise.all([0, 1].map(async (k) => {
      const mine = [];
      for (const n of ns.filter((_, i) => i % 2 === k)) mine.push(await ask(n));
      return mine;
    }))).flat();
    expect(answers).toHaveLength(ns.length);
    for (const { n, content, chunks, finish } of answers) {
      const total = (n * (n + 1)) / 2;
      expect(content).toContain(`TOTAL=${total}`);
      expect(content.endsWith(`The sum is ${total}.`), content).toBe(true);
      expect(finish).toBe('stop');
      expect(chunks).toBeGreaterThan(3);
    }
    const v1Lines = () => served(lb!.output().slice(mark)).filter((s) => s.path === '/v1/chat/completions');
    // HAProxy writes a request's line once its answer has ended: the last one may come a moment after the client read it.
    await until(() => v1Lines().length >= ns.length, 5000).catch(() => undefined);
    const v1 = v1Lines();
    expect(v1).toHaveLength(ns.length);
    expect(new Set(v1.map((s) => s.server))).toEqual(new Set(['g1', 'g2']));
  });

  it('stops a chat turn that B runs when the Stop reaches A, and only for the conversation’s owner', async () => {
    const [{ user: sam }, { user: eve }] = await usersWithTokens(databaseUrl, ['sam', 'eve']);
    const atB = await sessionAt(urlB, sam);
    const created = await atB.post('/chat/new', {});
    const conversation = /\/c\/([^/]+)$/.exec(created.headers.get('location') ?? '')?.[1];
    expect(conversation, `POST /chat/new answered ${created.status}`).toBeDefined();
    const status = async () => (await store!.db.selectFrom('turns').select('status').where('conversation_id', '=', conversation!).executeTakeFirst())?.status;
    expect((await atB.post(`/c/${conversation}/send`, { text: 'sleep a while' })).status).toBe(204);
    // B runs the turn, and its code has started.
    await vi.waitUntil(async () => (await status()) === 'running' && /"owner":"sam"[^\n]*"msg":"sandbox started"/.test(b.output()), { timeout: 60_000, interval: 100 });

    // Another user's Stop for it, at A: refused, and the turn runs on.
    const eveAtA = await sessionAt(urlA, eve);
    expect((await eveAtA.post(`/c/${conversation}/stop`)).status).toBe(404);
    await new Promise((r) => setTimeout(r, 1500));
    expect(await status()).toBe('running');

    // The owner's Stop, sent straight to A, which does not run the turn: B stops it, long before its sleep ends.
    const atA = await sessionAt(urlA, sam);
    expect((await atA.post(`/c/${conversation}/stop`)).status).toBe(204);
    await vi.waitUntil(async () => (await status()) !== 'running', { timeout: 20_000, interval: 100 });
    expect(await status()).toBe('cancelled');
  });

  it('shows a browser whose live channel is on A the streamed output of a chat turn B runs', async () => {
    // The same public URL, now with the live channel pinned to A and every page request to B.
    await lb!.stop();
    lb = undefined;
    lb = await startHaproxy([portA, portB], { port: lbPort, log: true, pin: { prefix: '/socket.io/', port: portA } });
    const [{ user: wen }] = await usersWithTokens(databaseUrl, ['wen']);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));

    await page.goto(`${lb.url}/login/link/${(await createLoginLink(store!.db, wen.id)).secret}`);
    await page.click('button[type=submit]');
    await page.waitForURL(/\/chat$/);
    await page.click('text=New conversation');
    await page.waitForURL(/\/c\/[^/]+$/);
    const conversation = new URL(page.url()).pathname.split('/').pop()!;
    await page.waitForSelector('body[data-live-state=watching]');

    await page.fill('#message', 'tick four times');
    await page.keyboard.press('Enter');
    // The first line arrives while the code still runs (the later ones a second apart), then the rest, then the answer.
    await page.waitForFunction(() => document.querySelector('.turn pre.output')?.textContent?.includes('tick 0'), undefined, { timeout: 60_000 });
    expect(await page.locator('.turn pre.output').first().innerText()).not.toContain(`tick ${TICKS - 1}`);
    await page.waitForFunction((last) => document.querySelector('.turn pre.output')?.textContent?.includes(last), `tick ${TICKS - 1}`, { timeout: 30_000 });
    await page.waitForFunction((answer) => document.querySelector('.turn .md')?.textContent?.includes(answer), `Counted ${TICKS} ticks.`, { timeout: 30_000 });
    expect(errors).toEqual([]);
    // Closing the page ends its WebSocket, whose log line HAProxy writes when the tunnel closes.
    await context.close();

    await until(() => served(lb!.output()).some((s) => s.path.startsWith('/socket.io/')), 10_000).catch(() => undefined);
    const log = served(lb.output());
    const live = log.filter((s) => s.path.startsWith('/socket.io/'));
    expect(live.length).toBeGreaterThan(0);
    expect(new Set(live.map((s) => `${s.backend}/${s.server}`))).toEqual(new Set(['pinned/g1']));
    const send = log.filter((s) => s.method === 'POST' && s.path === `/c/${conversation}/send`);
    expect(send.map((s) => `${s.backend}/${s.server}`)).toEqual(['replicas/g2']);
    // B ran the turn's code: it started wen's sandbox; A never did.
    expect(b.output()).toMatch(/"owner":"wen"[^\n]*"msg":"sandbox started"/);
    expect(a.output()).not.toContain('"owner":"wen"');
  });
});
