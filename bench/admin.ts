/**
 * The admin page with BENCH_SANDBOXES live sandboxes (real gVisor containers, each
 * started by its own user's execute_code over MCP), against a gateway started as main.ts
 * starts it (its own process, so its CPU time is its own):
 *
 * 1. Time to render the sandboxes page (the whole response), and its JSON twin.
 * 2. What the live table costs the gateway: its CPU time over BENCH_WINDOW_S seconds with
 *    no admin page open, then with 1 and with 10 open (socket.io connections watching),
 *    as a share of one core.
 *
 *   node --import tsx bench/admin.ts   (BENCH_SANDBOXES, BENCH_WINDOW_S, BENCH_SAMPLES)
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { io as ioClient, type Socket } from 'socket.io-client';
import { REPO_ROOT } from '../src/paths.js';
import { openStore } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';
import { ensureUser } from '../src/accounts/accounts.js';
import { createToken } from '../src/tokens/tokens.js';
import { createLoginLink } from '../src/auth/login-links.js';
import { startGateway } from '../test/support/mcp.js';
import { freePort } from '../test/support/ports.js';

const SANDBOXES = Number(process.env.BENCH_SANDBOXES ?? 50);
const WINDOW_S = Number(process.env.BENCH_WINDOW_S ?? 30);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 30);

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const row = (label: string, xs: number[]) => console.log(`${label.padEnd(58)} p50 ${pct(xs, 50).toFixed(1).padStart(7)} ms   p95 ${pct(xs, 95).toFixed(1).padStart(7)} ms   (n=${xs.length})`);
const TICK = 100; // USER_HZ on Linux

/** The process's CPU time (user + system), ms. */
function cpuMsOf(pid: number): number {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICK;
}

const cookieFrom = (res: Response) => /sandgate\.sid=[^;]+/.exec(res.headers.getSetCookie().join('\n'))?.[0] ?? '';

async function main(): Promise<void> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-admin-'));
  // The gateway below opens the same SQLite store (SANDGATE_DATABASE_URL is cleared for it).
  const store = await openStore({ dataDir }, MIGRATIONS);
  const tokens: string[] = [];
  for (let i = 0; i < SANDBOXES; i++) tokens.push((await createToken(store.db, { userId: (await ensureUser(store.db, `user${i}`)).id, name: 'bench' })).token);
  const link = (await createLoginLink(store.db, (await ensureUser(store.db, 'root', { isAdmin: true })).id)).secret;
  await store.close();
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: REPO_ROOT,
    env: { ...process.env, SANDGATE_DATA_DIR: dataDir, SANDGATE_DATABASE_URL: '', SANDGATE_PORT: String(port), SANDGATE_LOG_LEVEL: 'warn', SANDGATE_WARM_POOL_SIZE: '0', SANDGATE_UPSTREAM_HOME_DIR: `${dataDir}-homes`, SANDGATE_RATE_LIMIT_BURST: '1000' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const sockets: Socket[] = [];
  try {
    const t0 = Date.now();
    while ((await fetch(`${url}/readyz`).then((r) => r.status).catch(() => 0)) !== 200) {
      if (Date.now() - t0 > 180_000) throw new Error('the gateway did not get ready');
      await new Promise((r) => setTimeout(r, 200));
    }

    // Every user starts their sandbox with a run, a few at a time.
    const started = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (next < tokens.length) {
          const token = tokens[next++]!;
          const client = new Client({ name: 'bench', version: '1' });
          await client.connect(new StreamableHTTPClientTransport(new URL(`${url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${token}` } } }));
          const r = (await client.callTool({ name: 'execute_code', arguments: { language: 'python', code: 'import numpy\nprint(numpy.__version__)' } })) as { isError?: boolean };
          if (r.isError) throw new Error('a run failed');
          await client.close();
        }
      }),
    );
    console.log(`${SANDBOXES} sandboxes started (each with numpy imported) in ${((performance.now() - started) / 1000).toFixed(1)} s`);

    // The admin signs in with the link.
    const linkPage = await fetch(`${url}/login/link/${link}`);
    const csrf0 = /name="_csrf" value="([^"]+)"/.exec(await linkPage.text())?.[1] ?? '';
    const login = await fetch(`${url}/login/link`, { method: 'POST', redirect: 'manual', headers: { cookie: cookieFrom(linkPage), 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ _csrf: csrf0, secret: link }) });
    const cookie = cookieFrom(login);
    const adminHtml = await (await fetch(`${url}/admin`, { headers: { cookie } })).text();
    const csrf = /data-csrf="([^"]+)"/.exec(adminHtml)?.[1] ?? '';
    const rows = (adminHtml.match(/<tr data-container=/g) ?? []).length;
    if (rows !== SANDBOXES) throw new Error(`the page lists ${rows} sandboxes, not ${SANDBOXES}`);

    // 1. Render time.
    const timed = async (p: string) => {
      const t = performance.now();
      const r = await fetch(`${url}${p}`, { headers: { cookie } });
      await r.text();
      if (r.status !== 200) throw new Error(`${p}: ${r.status}`);
      return performance.now() - t;
    };
    for (let i = 0; i < 5; i++) await timed('/admin');
    const page: number[] = [];
    for (let i = 0; i < SAMPLES; i++) page.push(await timed('/admin'));
    row(`sandboxes page with ${SANDBOXES} sandboxes, whole response`, page);
    const api: number[] = [];
    for (let i = 0; i < SAMPLES; i++) api.push(await timed('/admin/api/sandboxes'));
    row('  /admin/api/sandboxes', api);

    // 2. What the live table costs, by number of open admin pages.
    const window = async (viewers: number) => {
      while (sockets.length < viewers) {
        const s = ioClient(url, { transports: ['websocket'], reconnection: false, auth: { csrf }, extraHeaders: { cookie, origin: url } });
        await new Promise<void>((resolve, reject) => {
          s.on('connect_error', reject);
          s.on('connect', () => s.emit('watch-admin', (r: { ok: boolean }) => (r.ok ? resolve() : reject(new Error('refused')))));
        });
        sockets.push(s);
      }
      let updates = 0;
      const count = () => updates++;
      for (const s of sockets) s.on('swap', count);
      await new Promise((r) => setTimeout(r, 3_000));
      const cpu0 = cpuMsOf(child.pid!);
      const t = performance.now();
      await new Promise((r) => setTimeout(r, WINDOW_S * 1000));
      const share = ((cpuMsOf(child.pid!) - cpu0) / (performance.now() - t)) * 100;
      for (const s of sockets) s.off('swap', count);
      return { share, updates };
    };
    const idle = await window(0);
    console.log(`gateway CPU over ${WINDOW_S} s with ${SANDBOXES} idle sandboxes:`);
    console.log(`  no admin page open:   ${idle.share.toFixed(2)} % of one core`);
    for (const n of [1, 10]) {
      const w = await window(n);
      console.log(`  ${String(n).padStart(2)} admin page${n === 1 ? ' ' : 's'} open:   ${w.share.toFixed(2)} % of one core (live table: ${(w.share - idle.share).toFixed(2)} %; ${w.updates} updates received)`);
    }
  } finally {
    for (const s of sockets) s.disconnect();
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    // The gateway leaves user sandboxes for its next start to adopt: a gateway on the same
    // data directory adopts them and stops them all, unmounting every workspace.
    const cleanup = await startGateway({ dataDir, env: { SANDGATE_UPSTREAM_HOME_DIR: `${dataDir}-homes` } });
    await cleanup.close();
  }
}

await main();
