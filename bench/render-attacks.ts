/**
 * The gateway's event loop while one member attacks what it formats and renders, against
 * a gateway started as main.ts starts it (its own process, so its memory and its event
 * loop are its own), with a stand-in OpenAI model scripted as a hostile one. Meanwhile a
 * prober (a thread of its own here) asks GET /healthz every BENCH_PROBE_MS; what it waits
 * is what every other member would wait. For each attack: the worst and p99 /healthz
 * latency, how many probes, the gateway's own event-loop delay (Node's histogram, read
 * inside the gateway by bench/loop-delay.mjs: how long its loop was held, apart from the
 * network and the prober), and the gateway's peak resident memory.
 *
 * 0. For reference: no attack at all, and an ordinary turn and page loads (the first turn
 *    of a fresh gateway loads what turns need, and is measured as a warm-up).
 * 1. Two readers previewing a deeply nested JSON file (and a wide one) at once.
 * 2. A model's tool call with ~200 KB of nested arrays in an argument the tool lacks
 *    (3,000 deep around 97,000 numbers; and 99,000 deep), then loads of the conversation.
 * 3. A model's 4 MB answer of Markdown brackets (`[`, and `![`), then loads of the
 *    conversation.
 *
 * Each attack runs BENCH_REPEAT times; a row gives the worst and the p99 over all of them.
 * The machine's load average is printed with each row: the probe measures CPU starvation
 * too, so compare a row with the idle one taken under the same load.
 *
 *   node --import tsx bench/render-attacks.ts   (BENCH_PROBE_MS, BENCH_LOADS, BENCH_REPEAT, BENCH_GATEWAY_DIR)
 *
 * BENCH_GATEWAY_DIR runs the gateway (and its store helpers) from another checkout, e.g.
 * an earlier version exported with `git archive`, to compare.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { REPO_ROOT } from '../src/paths.js';
import { startStandin, type ScriptedReply } from '../test/support/model-standins.js';
import { freePort } from '../test/support/ports.js';

const PROBE_MS = Number(process.env.BENCH_PROBE_MS ?? 10);
const LOADS = Number(process.env.BENCH_LOADS ?? 10);
const REPEAT = Number(process.env.BENCH_REPEAT ?? 3);
const GATEWAY_DIR = path.resolve(process.env.BENCH_GATEWAY_DIR ?? REPO_ROOT);

const FOUR_MB = 4 * 1024 * 1024;
/** 204 KB: 2,000 levels around 100,000 numbers. JSON.stringify(v, null, 2) makes 400 MB of it. */
const DEEP_JSON = `${'['.repeat(2000)}${'0,'.repeat(99_999)}0${']'.repeat(2000)}`;
/** 200 KB, 60 levels around 100,000 numbers: indented, 12 MB. */
const WIDE_JSON = `${'['.repeat(60)}${'0,'.repeat(99_999)}0${']'.repeat(60)}`;
const ARGS: Record<string, string> = {
  'nested-wide': `{"language":"python","code":"print(1)","extra":${'['.repeat(3000)}${'0,'.repeat(96_999)}0${']'.repeat(3000)}}`,
  'nested-deep': `{"language":"python","code":"print(1)","extra":${'['.repeat(99_000)}${']'.repeat(99_000)}}`,
};
const ANSWERS: Record<string, string[]> = {
  brackets: Array.from({ length: 64 }, () => '['.repeat(FOUR_MB / 64)),
  images: Array.from({ length: 64 }, () => '!['.repeat(FOUR_MB / 128)),
};

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const mb = (b: number) => `${(b / 1024 / 1024).toFixed(0)} MB`;

function rssOf(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** The prober: its own thread and event loop, so that what it measures is the gateway's. */
const PROBER = `
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
let running = false;
let times = [];
const probe = () => {
  if (!running) return;
  const t0 = performance.now();
  const again = () => setTimeout(probe, workerData.every);
  http.get(workerData.url + '/healthz', { agent }, (res) => {
    res.resume();
    res.on('end', () => { times.push(performance.now() - t0); again(); });
  }).on('error', again);
};
parentPort.on('message', (m) => {
  if (m === 'start') { times = []; running = true; probe(); }
  else { running = false; setTimeout(() => parentPort.postMessage(times), 50); }
});
`;

interface Session {
  cookie: string;
  csrf: string;
}

const cookieFrom = (res: Response) => /sandgate\.sid=[^;]+/.exec(res.headers.getSetCookie().join('\n'))?.[0] ?? '';

async function signIn(url: string, secret: string): Promise<Session> {
  const page = await fetch(`${url}/login/link/${secret}`);
  const csrf0 = /name="_csrf" value="([^"]+)"/.exec(await page.text())?.[1] ?? '';
  const login = await fetch(`${url}/login/link`, { method: 'POST', redirect: 'manual', headers: { cookie: cookieFrom(page), 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ _csrf: csrf0, secret }) });
  if (login.headers.get('location') !== '/chat') throw new Error(`sign-in failed: ${login.status}`);
  const cookie = cookieFrom(login);
  const chat = await (await fetch(`${url}/chat`, { headers: { cookie } })).text();
  return { cookie, csrf: /data-csrf="([^"]+)"/.exec(chat)?.[1] ?? '' };
}

async function newConversation(url: string, s: Session): Promise<string> {
  const made = await fetch(`${url}/chat/new`, { method: 'POST', redirect: 'manual', headers: { cookie: s.cookie, 'content-type': 'application/x-www-form-urlencoded', 'x-csrf-token': s.csrf }, body: 'model=openai%3Ahostile' });
  const id = /^\/c\/(.+)$/.exec(made.headers.get('location') ?? '')?.[1];
  if (!id) throw new Error(`no conversation: ${made.status}`);
  return id;
}

/** Sends a message and waits for its turn to end (the transcript shows no running turn). */
async function turn(url: string, s: Session, id: string, text: string): Promise<void> {
  const r = await fetch(`${url}/c/${id}/send`, { method: 'POST', headers: { cookie: s.cookie, 'content-type': 'application/x-www-form-urlencoded', 'x-csrf-token': s.csrf, 'hx-request': 'true' }, body: new URLSearchParams({ text }) });
  if (r.status !== 204) throw new Error(`send: ${r.status} ${await r.text()}`);
  const deadline = Date.now() + 300_000;
  while (Date.now() < deadline) {
    await new Promise((res) => setTimeout(res, 200));
    const html = await (await fetch(`${url}/c/${id}/transcript`, { headers: { cookie: s.cookie } })).text();
    if (html.includes('class="turn"') && !html.includes('class="working"')) return;
  }
  throw new Error('the turn did not end');
}

async function get(url: string, s: Session, p: string): Promise<{ status: number; bytes: number }> {
  const r = await fetch(`${url}${p}`, { headers: { cookie: s.cookie } });
  const body = await r.arrayBuffer();
  return { status: r.status, bytes: body.byteLength };
}

async function main(): Promise<void> {
  const standin = await startStandin(
    'openai',
    (r): ScriptedReply => {
      const [what] = r.lastUserText.split(' ');
      if (r.lastToolResult !== undefined) return { text: [`The tool said: ${r.lastToolResult.slice(0, 300)}`] };
      if (what && ARGS[what]) return { toolCalls: [{ name: 'execute_code', args: ARGS[what]! }] };
      if (what && ANSWERS[what]) return { text: ANSWERS[what]! };
      return { text: ['ok'] };
    },
    { keep: false },
  );

  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-render-'));
  const storeModule = (await import(path.join(GATEWAY_DIR, 'src/store/store.ts'))) as typeof import('../src/store/store.js');
  const { MIGRATIONS } = (await import(path.join(GATEWAY_DIR, 'src/migrations.ts'))) as typeof import('../src/migrations.js');
  const { ensureUser } = (await import(path.join(GATEWAY_DIR, 'src/accounts/accounts.ts'))) as typeof import('../src/accounts/accounts.js');
  const { createLoginLink } = (await import(path.join(GATEWAY_DIR, 'src/auth/login-links.ts'))) as typeof import('../src/auth/login-links.js');
  const { createToken } = (await import(path.join(GATEWAY_DIR, 'src/tokens/tokens.ts'))) as typeof import('../src/tokens/tokens.js');
  // An earlier checkout's store opened synchronously from its directory; this one's opens
  // asynchronously from its options. Awaiting serves both (a plain value awaits as itself).
  const legacy = !('serializable' in storeModule);
  const open = storeModule.openStore as (where: unknown, migrations: typeof MIGRATIONS) => ReturnType<typeof storeModule.openStore>;
  // The gateway below opens the same SQLite store (SANDGATE_DATABASE_URL is cleared for it).
  const store = await open(legacy ? dataDir : { dataDir }, MIGRATIONS);
  const user = await ensureUser(store.db, 'mallory');
  const secrets = [(await createLoginLink(store.db, user.id)).secret, (await createLoginLink(store.db, user.id)).secret];
  const token = (await createToken(store.db, { userId: user.id, name: 'bench' })).token;
  await store.close();

  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = spawn(process.execPath, ['--import', path.join(REPO_ROOT, 'bench/loop-delay.mjs'), '--import', 'tsx', 'src/main.ts'], {
    cwd: GATEWAY_DIR,
    env: {
      ...process.env,
      SANDGATE_DATA_DIR: dataDir,
      SANDGATE_DATABASE_URL: '',
      SANDGATE_PORT: String(port),
      SANDGATE_PUBLIC_URL: url,
      SANDGATE_LOG_LEVEL: 'warn',
      SANDGATE_WARM_POOL_SIZE: '0',
      SANDGATE_OPENAI_API_KEY: 'sk-bench',
      SANDGATE_OPENAI_BASE_URL: standin.baseURL,
      SANDGATE_MODELS: 'openai:hostile',
      SANDGATE_RATE_LIMIT_PER_MIN: '1000000',
      SANDGATE_RATE_LIMIT_BURST: '100000',
      SANDGATE_UPSTREAM_HOME_DIR: `${dataDir}-homes`,
    },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const loopDelay = async (): Promise<{ max: number; p99: number }> => {
    const reply = new Promise<{ max: number; p99: number }>((resolve) => child.once('message', (m: { loopDelay: { max: number; p99: number } }) => resolve(m.loopDelay)));
    child.send('loop-delay:stop');
    return reply;
  };
  const prober = new Worker(PROBER, { eval: true, workerData: { url, every: PROBE_MS } });
  try {
    const t0 = Date.now();
    while ((await fetch(`${url}/readyz`).then((r) => r.status).catch(() => 0)) !== 200) {
      if (Date.now() - t0 > 120_000) throw new Error('the gateway did not get ready');
      await new Promise((r) => setTimeout(r, 200));
    }
    const [alice, reader2] = [await signIn(url, secrets[0]!), await signIn(url, secrets[1]!)];
    const client = new Client({ name: 'bench', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${url}/mcp`), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
    for (const [p, content] of [
      ['deep.json', DEEP_JSON],
      ['wide.json', WIDE_JSON],
    ] as const) {
      const r = (await client.callTool({ name: 'write_file', arguments: { path: p, content } })) as { isError?: boolean };
      if (r.isError) throw new Error(`write_file ${p} failed`);
    }
    await client.close();

    console.log(`GET /healthz every ${PROBE_MS} ms from another thread while one member attacks; gateway from ${GATEWAY_DIR}`);
    console.log(`each attack ${REPEAT} times; load: the machine's 1-minute load average after it (${os.cpus().length} CPUs)`);
    console.log(`${''.padEnd(66)} ${'/healthz latency'.padEnd(26)} ${'gateway loop delay'.padEnd(19)}`);
    console.log(`${'attack'.padEnd(66)} ${'worst'.padStart(9)} ${'p99'.padStart(9)} ${'probes'.padStart(6)} ${'worst'.padStart(9)} ${'p99'.padStart(9)} ${'peak RSS'.padStart(8)} ${'load'.padStart(5)}   what it got`);
    /** Runs `attack` (`times` times, each on a fresh `setup()`) under the prober; prints one row. */
    const measure = async <S>(label: string, setup: () => Promise<S>, attack: (s: S) => Promise<string>, times = REPEAT) => {
      let peak = rssOf(child.pid!);
      const sampler = setInterval(() => (peak = Math.max(peak, rssOf(child.pid!))), 20);
      const xs: number[] = [];
      let loopMax = 0;
      let loopP99 = 0;
      let got = '';
      for (let i = 0; i < times; i++) {
        const state = await setup();
        const probed = new Promise<number[]>((resolve) => prober.once('message', resolve));
        prober.postMessage('start');
        child.send('loop-delay:start');
        await new Promise((r) => setTimeout(r, 200));
        try {
          got = await attack(state);
        } catch (e) {
          got = `failed: ${(e as Error).message}`;
        }
        await new Promise((r) => setTimeout(r, 200));
        prober.postMessage('stop');
        const delay = await loopDelay();
        loopMax = Math.max(loopMax, delay.max);
        loopP99 = Math.max(loopP99, delay.p99);
        xs.push(...(await probed));
      }
      clearInterval(sampler);
      const load = os.loadavg()[0]!.toFixed(1);
      const ms = (x: number) => `${x.toFixed(1).padStart(6)} ms`;
      console.log(`${label.padEnd(66)} ${ms(pct(xs, 100))} ${ms(pct(xs, 99))} ${String(xs.length).padStart(6)} ${ms(loopMax)} ${ms(loopP99)} ${mb(peak).padStart(7)} ${load.padStart(5)}   ${got}`);
    };
    const none = async () => undefined;
    const loads = async (id: string) => {
      let max = 0;
      for (let i = 0; i < LOADS; i++) {
        const r = await get(url, alice, `/c/${id}`);
        if (r.status !== 200) return `HTTP ${r.status}`;
        max = Math.max(max, r.bytes);
      }
      return `pages of ${max} bytes at most`;
    };

    await measure('idle (no attack), 2 s', none, async () => {
      await new Promise((r) => setTimeout(r, 2000));
      return '';
    });
    const ordinary = await newConversation(url, alice);
    await measure('warm-up: the first ordinary turn of this gateway', none, async () => (await turn(url, alice, ordinary, 'hello'), 'turn ended'), 1);
    await measure('an ordinary turn', none, async () => (await turn(url, alice, ordinary, 'hello again'), 'turn ended'));
    await measure(`  ${LOADS} loads of that conversation`, none, () => loads(ordinary));
    for (const [file, what] of [
      ['deep.json', '204 KB, 2,000 deep'],
      ['wide.json', '200 KB, 60 deep, 100,000 items'],
    ]) {
      await measure(`preview of ${file} (${what}), 2 readers x ${LOADS} at once`, none, async () => {
        const sizes = await Promise.all(
          [alice, reader2].map(async (s) => {
            const out: number[] = [];
            for (let i = 0; i < LOADS; i++) out.push((await get(url, s, `/files/preview?path=${file}`)).bytes);
            return out;
          }),
        );
        return `answers of ${Math.max(...sizes.flat())} bytes at most`;
      });
    }
    for (const what of Object.keys(ARGS)) {
      const ids: string[] = [];
      await measure(
        `tool call with ~200 KB ${what === 'nested-deep' ? '99,000 deep' : '3,000 deep around 97,000 numbers'}: the turn`,
        () => newConversation(url, alice),
        async (id) => (ids.push(id), await turn(url, alice, id, `${what} please`), 'turn ended'),
      );
      await measure(`  then ${LOADS} loads of that conversation`, async () => ids.shift()!, loads);
    }
    for (const what of Object.keys(ANSWERS)) {
      const ids: string[] = [];
      await measure(
        `4 MB answer of ${what === 'brackets' ? '"["' : '"!["'}: the turn`,
        () => newConversation(url, alice),
        async (id) => (ids.push(id), await turn(url, alice, id, `${what} please`), 'turn ended'),
      );
      await measure(`  then ${LOADS} loads of that conversation`, async () => ids.shift()!, loads);
    }
  } finally {
    await prober.terminate();
    child.disconnect();
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    await standin.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
    fs.rmSync(`${dataDir}-homes`, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
