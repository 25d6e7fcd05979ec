/**
 * The web app's figures, against a gateway started as main.ts starts it (its own process,
 * so its memory is its own), with a stand-in OpenAI model that streams text:
 *
 * 1. Server time to first byte of the chat page (a conversation of BENCH_TURNS turns),
 *    and of the other pages, from a signed-in client on loopback.
 * 2. JavaScript each page loads (its <script src> files, uncompressed).
 * 3. In Chromium: from the stand-in writing a streamed token to that token being in the
 *    page's DOM (a MutationObserver on the transcript), both on this machine's clock.
 * 4. BENCH_BROWSERS signed-in users' socket.io connections, each watching its own
 *    conversation, all streaming a turn of BENCH_CHUNKS chunks at once: events dropped,
 *    the latency a chunk gains between the stand-in and the client, and the gateway's
 *    resident memory.
 *
 *   node --import tsx bench/web.ts   (BENCH_TURNS, BENCH_BROWSERS, BENCH_CHUNKS, BENCH_CHUNK_MS, BENCH_SAMPLES)
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { io as ioClient, type Socket } from 'socket.io-client';
import { REPO_ROOT } from '../src/paths.js';
import { openStore } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';
import { ensureUser } from '../src/accounts/accounts.js';
import { createLoginLink } from '../src/auth/login-links.js';
import { startStandin } from '../test/support/model-standins.js';
import { freePort } from '../test/support/ports.js';

const TURNS = Number(process.env.BENCH_TURNS ?? 20);
const BROWSERS = Number(process.env.BENCH_BROWSERS ?? 50);
const CHUNKS = Number(process.env.BENCH_CHUNKS ?? 100);
const CHUNK_MS = Number(process.env.BENCH_CHUNK_MS ?? 20);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 300);
const CHROMIUM = process.env.SANDGATE_CHROMIUM ?? '/usr/bin/chromium';

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const f = (x: number) => (x < 10 ? x.toFixed(2) : x.toFixed(1));
const row = (label: string, xs: number[], unit = 'ms') => console.log(`${label.padEnd(58)} p50 ${f(pct(xs, 50)).padStart(7)} ${unit}   p95 ${f(pct(xs, 95)).padStart(7)} ${unit}   (n=${xs.length})`);
const mb = (b: number) => `${(b / 1024 / 1024).toFixed(0)} MB`;
/** Wall-clock milliseconds with sub-millisecond precision, comparable between processes. */
const now = () => performance.timeOrigin + performance.now();

function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

/** One signed-in client: its cookie, its CSRF token, and a conversation of its own. */
interface Client {
  cookie: string;
  csrf: string;
  conversation: string;
}

const cookieFrom = (res: Response) => /sandgate\.sid=[^;]+/.exec(res.headers.getSetCookie().join('\n'))?.[0] ?? '';

async function signIn(url: string, secret: string): Promise<Client> {
  const page = await fetch(`${url}/login/link/${secret}`);
  let cookie = cookieFrom(page);
  const csrf0 = /name="_csrf" value="([^"]+)"/.exec(await page.text())?.[1] ?? '';
  const login = await fetch(`${url}/login/link`, { method: 'POST', redirect: 'manual', headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ _csrf: csrf0, secret }) });
  if (login.headers.get('location') !== '/chat') throw new Error(`sign-in failed: ${login.status} ${login.headers.get('location')}`);
  cookie = cookieFrom(login);
  const chat = await (await fetch(`${url}/chat`, { headers: { cookie } })).text();
  const csrf = /data-csrf="([^"]+)"/.exec(chat)?.[1] ?? '';
  const made = await fetch(`${url}/chat/new`, { method: 'POST', redirect: 'manual', headers: { cookie, 'content-type': 'application/x-www-form-urlencoded', 'x-csrf-token': csrf }, body: 'model=openai%3Abench' });
  const conversation = /^\/c\/(.+)$/.exec(made.headers.get('location') ?? '')?.[1];
  if (!conversation) throw new Error(`no conversation: ${made.status}`);
  return { cookie, csrf, conversation };
}

async function send(url: string, c: Client, text: string): Promise<void> {
  const r = await fetch(`${url}/c/${c.conversation}/send`, { method: 'POST', headers: { cookie: c.cookie, 'content-type': 'application/x-www-form-urlencoded', 'x-csrf-token': c.csrf, 'hx-request': 'true' }, body: new URLSearchParams({ text }) });
  if (r.status !== 204) throw new Error(`send: ${r.status} ${await r.text()}`);
}

/** Time to the response's first byte, ms. */
function ttfb(url: string, cookie: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.get(url, { headers: { cookie, accept: 'text/html' } }, (res) => {
      res.once('data', () => {
        const t = performance.now() - t0;
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve(t) : reject(new Error(`${url}: ${res.statusCode}`))));
      });
    });
    req.on('error', reject);
  });
}

async function main(): Promise<void> {
  // The stand-in: a turn's text is named by the message; each chunk carries its index.
  const sentAt = new Map<string, number[]>();
  const standin = await startStandin('openai', () => ({ text: ['ok'] }), { keep: false });
  standin.setScript((r) => {
    const m = /^(stream|dom) (\S+)/.exec(r.lastUserText);
    if (!m) return { text: ['A short answer with **some** markdown, `code` and a list:\n\n- one\n- two\n'] };
    const times: number[] = [];
    sentAt.set(r.lastUserText, times);
    r.timing.text = times;
    const n = m[1] === 'dom' ? 50 : CHUNKS;
    return { text: Array.from({ length: n }, (_, i) => `${m[1] === 'dom' ? 'w' : 'c'}${i} `), delayMs: CHUNK_MS };
  });

  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-web-'));
  // The gateway below opens the same SQLite store (SANDGATE_DATABASE_URL is cleared for it).
  const store = await openStore({ dataDir }, MIGRATIONS);
  const secrets: string[] = [];
  for (let i = 0; i < BROWSERS + 2; i++) secrets.push((await createLoginLink(store.db, (await ensureUser(store.db, `user${i}`)).id)).secret);
  await store.close();
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      SANDGATE_DATA_DIR: dataDir,
      SANDGATE_DATABASE_URL: '',
      SANDGATE_PORT: String(port),
      SANDGATE_LOG_LEVEL: 'warn',
      SANDGATE_WARM_POOL_SIZE: '0',
      SANDGATE_OPENAI_API_KEY: 'sk-bench',
      SANDGATE_OPENAI_BASE_URL: standin.baseURL,
      SANDGATE_MODELS: 'openai:bench',
      SANDGATE_UPSTREAM_HOME_DIR: `${dataDir}-homes`,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  try {
    const t0 = Date.now();
    while ((await fetch(`${url}/readyz`).then((r) => r.status).catch(() => 0)) !== 200) {
      if (Date.now() - t0 > 120_000) throw new Error('the gateway did not get ready');
      await new Promise((r) => setTimeout(r, 200));
    }
    const clients: Client[] = [];
    for (const s of secrets) clients.push(await signIn(url, s));
    const [reader, viewer, ...streamers] = clients as [Client, Client, ...Client[]];

    // 1. Time to first byte.
    for (let i = 0; i < TURNS; i++) {
      await send(url, reader, `question ${i}`);
      for (let k = 0; k < 200; k++) {
        const html = await (await fetch(`${url}/c/${reader.conversation}/transcript`, { headers: { cookie: reader.cookie } })).text();
        if ((html.match(/class="turn"/g) ?? []).length > i && !html.includes('class="working"')) break;
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    const pages: [string, string][] = [
      [`chat page, a conversation of ${TURNS} turns (/c/:id)`, `/c/${reader.conversation}`],
      ['conversation list (/chat)', '/chat'],
      ['files (/files)', '/files'],
      ['tokens (/tokens)', '/tokens'],
      ['settings (/settings)', '/settings'],
    ];
    console.log(`time to first byte, signed in, ${SAMPLES} requests each after 20 warm-up:`);
    for (const [label, p] of pages) {
      for (let i = 0; i < 20; i++) await ttfb(`${url}${p}`, reader.cookie);
      const xs: number[] = [];
      for (let i = 0; i < SAMPLES; i++) xs.push(await ttfb(`${url}${p}`, reader.cookie));
      row(`  ${label}`, xs);
    }

    // 2. JavaScript per page.
    console.log('JavaScript loaded per page (uncompressed):');
    const sizes = new Map<string, number>();
    for (const [label, p] of pages) {
      const html = await (await fetch(`${url}${p}`, { headers: { cookie: reader.cookie } })).text();
      const inline = (html.match(/<script(?![^>]*\bsrc=)[^>]*>/g) ?? []).length;
      let total = 0;
      const names: string[] = [];
      for (const [, src] of html.matchAll(/<script[^>]*\bsrc="([^"]+)"/g)) {
        if (!sizes.has(src!)) sizes.set(src!, (await (await fetch(`${url}${src}`)).arrayBuffer()).byteLength);
        total += sizes.get(src!)!;
        names.push(`${path.basename(src!)} ${(sizes.get(src!)! / 1024).toFixed(1)}`);
      }
      console.log(`  ${label.padEnd(56)} ${(total / 1024).toFixed(1).padStart(6)} KB  (${names.join(' + ')} KB; inline scripts: ${inline})`);
    }

    // 3. Token to DOM in Chromium.
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    try {
      const context = await browser.newContext();
      await context.addCookies([{ name: 'sandgate.sid', value: viewer.cookie.split('=')[1]!, domain: '127.0.0.1', path: '/', httpOnly: true, sameSite: 'Lax' }]);
      const page = await context.newPage();
      await page.goto(`${url}/c/${viewer.conversation}`);
      await page.waitForSelector('body[data-live-state=watching]');
      const added: number[] = [];
      for (let turn = 0; turn < 6; turn++) {
        // A string, not a function: tsx would name the inner functions with a helper the page lacks.
        await page.evaluate(`(() => {
          window.__seen = {};
          if (window.__obs) window.__obs.disconnect();
          const t = document.getElementById('transcript');
          window.__obs = new MutationObserver(() => {
            const at = performance.timeOrigin + performance.now();
            for (const m of (t.lastElementChild?.textContent ?? '').matchAll(/w(\\d+) /g)) window.__seen[m[1]] ??= at;
          });
          window.__obs.observe(t, { subtree: true, childList: true, characterData: true });
        })()`);
        const message = `dom ${turn}-${Date.now()}`;
        await page.fill('#message', message);
        await page.keyboard.press('Enter');
        await page.waitForFunction(() => Object.keys((window as unknown as { __seen: Record<string, number> }).__seen).length >= 50, undefined, { timeout: 30_000 });
        const seen = await page.evaluate(() => (window as unknown as { __seen: Record<string, number> }).__seen);
        const sent = sentAt.get(message)!;
        // The stand-in's clock is this process's performance.now(); the page's, its own: both from the wall clock.
        if (turn > 0) for (let i = 0; i < 50; i++) added.push(seen[i]! - (performance.timeOrigin + sent[i]!));
        await page.waitForSelector('#composer-actions button.primary');
      }
      row('streamed token: stand-in wrote it -> in Chromium\'s DOM', added);
    } finally {
      await browser.close();
    }

    // 4. Many browsers' live connections streaming at once.
    const sockets: Socket[] = [];
    const got: Map<number, number>[] = streamers.map(() => new Map());
    const done: boolean[] = streamers.map(() => false);
    await Promise.all(
      streamers.map(
        (c, i) =>
          new Promise<void>((resolve, reject) => {
            const s = ioClient(url, { transports: ['websocket'], reconnection: false, auth: { csrf: c.csrf }, extraHeaders: { cookie: c.cookie, origin: url } });
            sockets.push(s);
            s.on('connect_error', reject);
            s.on('swap', (m: { html: string; fallback?: { html: string }; target: string; swap: string }) => {
              const at = now();
              for (const x of `${m.html}`.matchAll(/c(\d+) /g)) if (!got[i]!.has(Number(x[1]))) got[i]!.set(Number(x[1]), at);
              if (m.target.startsWith('#turn-') && m.swap === 'outerHTML') done[i] = true;
            });
            s.on('connect', () => s.emit('watch', c.conversation, (r: { ok: boolean }) => (r.ok ? resolve() : reject(new Error('watch refused')))));
          }),
      ),
    );
    const idle = rssOf(child.pid!);
    let peak = idle;
    const sampler = setInterval(() => (peak = Math.max(peak, rssOf(child.pid!))), 50);
    const started = performance.now();
    const messages = streamers.map((_, i) => `stream ${i}-${Date.now()}`);
    await Promise.all(streamers.map((c, i) => send(url, c, messages[i]!)));
    const deadline = Date.now() + 120_000;
    while (done.some((d) => !d) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const elapsed = performance.now() - started;
    clearInterval(sampler);
    let dropped = 0;
    const lat: number[] = [];
    streamers.forEach((_, i) => {
      const sent = sentAt.get(messages[i]!) ?? [];
      for (let k = 0; k < CHUNKS; k++) {
        const at = got[i]!.get(k);
        if (at === undefined) dropped++;
        else if (sent[k] !== undefined) lat.push(at - (performance.timeOrigin + sent[k]!));
      }
    });
    for (const s of sockets) s.disconnect();
    console.log(
      `${streamers.length} signed-in users' socket.io connections, each streaming a turn of ${CHUNKS} chunks (one each ${CHUNK_MS} ms): ` +
        `${dropped} of ${streamers.length * CHUNKS} chunk events dropped, ${done.filter(Boolean).length} turns shown whole, all in ${(elapsed / 1000).toFixed(1)} s`,
    );
    row('  added latency per chunk (stand-in -> socket.io client)', lat);
    console.log(`  gateway resident memory: ${mb(idle)} with the connections open, ${mb(peak)} at the peak of streaming`);
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    await standin.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
    fs.rmSync(`${dataDir}-homes`, { recursive: true, force: true });
  }
}

await main();
