/**
 * What the MCP endpoint and its auth add to an execution: `execute_code` of `1+1` over
 * MCP (the SDK's client over real HTTP on 2025-11-25, and a bare keep-alive HTTP client on
 * 2025-11-25 and on 2026-07-28) against the
 * same call made directly on the sandbox manager, one client at a time and with 20
 * concurrent clients (one user and sandbox each, since one sandbox runs its executions
 * one after another). Real sandboxes (Docker + runsc), real store, real tokens.
 * The MCP clients run in a child process, as real clients would: their own CPU does not
 * run on the gateway's event loop (on a 2-core host they still share the cores).
 *
 *   node --import tsx bench/mcp-overhead.ts   (BENCH_CLIENTS, BENCH_CALLS, BENCH_SEQUENTIAL_CALLS, BENCH_ROUNDS, BENCH_RATE, BENCH_WARMUP,
 *                                              BENCH_DATABASE=postgres for the store on Postgres)
 *
 * Every mode first makes BENCH_WARMUP calls (default 3000) that are not timed, so the
 * figures are those of a gateway that has been serving for a while: V8 optimises the
 * request path only after some thousands of requests (measured: gateway CPU per paced MCP
 * call falls from ≈2.6 ms in the first 3000 calls to ≈1.5 ms after 15,000), and a
 * gateway in use is long past that. BENCH_WARMUP=0 shows the cold figures.
 *
 * Prints requests/s, p50 and p95 per mode, the host CPU spent per call (all processes,
 * from /proc/stat), and the p50 the MCP + auth layers add. The "gateway time" rows are the
 * gateway's own measure of the same calls (the audit log's duration, from arrival to
 * response), free of the client's and the scheduler's share.
 *
 * The "HTTP only" rows time the same bare client against a server that only reads the
 * POST and answers with the frame the gateway would send: the floor under any MCP server
 * over HTTP on this host, with the same client and loopback. A summary then splits what
 * MCP adds into that round trip and the rest, and, for the back-to-back load, sets the
 * host CPU each path spends per call against what +3 ms would allow.
 * The gateway runs as main.ts composes it by default: with the PII boundary on
 * (SANDGATE_PII_TOKENIZE=true), so results headed to the client are tokenized.
 *
 * Two loads with the concurrent clients:
 * - saturated: each client calls again as soon as its answer is in. The sandboxes alone
 *   keep both cores busy, so the p50 here is mostly queueing for CPU, and every CPU-ms
 *   spent per call anywhere on the host (gateway, and the load generator, which a real
 *   client would not run on the gateway's host) raises it about tenfold. Its req/s is the
 *   capacity of each path.
 *   Part of what it measures is the bench's own arrangement: direct callers hand a
 *   sandbox its next run the moment the last one ends, so a sandbox is always running or
 *   queued for a core, never asleep. Over MCP each sandbox sleeps while its answer goes
 *   to the client and the next call comes back, tens of ms once the cores are saturated,
 *   and a sleeping gVisor sandbox is not free: its sentry's Go runtime wakes about 1,000
 *   times a second (epoll with a 1 ms timeout, futexes), ≈26 ms of CPU per second per
 *   sandbox on these hosts (measured on a bare `sleep` container; `runsc` 20240729 built
 *   with Go 1.22 and with Go 1.26 alike; bench/sandbox.ts reports it). Twenty sleeping
 *   sandboxes take ≈0.5 of the 2 cores: the sentries' CPU per call was measured at
 *   ≈1.3 ms fed back to back and ≈3.3 ms over MCP. A direct caller that waits 1 ms before
 *   each call (sandboxes still never sleep long) stays within ≈1 ms of back to back.
 * - paced: each client starts a call at a fixed interval (or at once when its previous
 *   answer came later): the same offered load for every mode. BENCH_RATE lists the loads
 *   in calls/s for all clients together (default 100 and 200: 5 and 10 calls a second
 *   per client, an agent calling a tool far more often than a model turns around). This
 *   is the latency a client sees at a load the host can carry, where an MCP call's own
 *   cost shows; the waiting sandboxes' cost is paid by both paths here.
 */
import { fork } from 'node:child_process';
import http from 'node:http';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY } from '@modelcontextprotocol/client';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import { startGateway } from '../test/support/mcp.js';
import { startPostgresCluster } from '../test/support/postgres.js';
import { hostBusyMs } from './host.js';

const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 20);
/** Calls in the concurrent measurement (all clients together), and in the sequential one. */
const CALLS = Number(process.env.BENCH_CALLS ?? 1000);
const SEQUENTIAL_CALLS = Number(process.env.BENCH_SEQUENTIAL_CALLS ?? 300);
/** Offered loads of the paced measurements, calls/s for all clients together. */
const RATES = (process.env.BENCH_RATE ?? `${CLIENTS * 5},${CLIENTS * 10}`).split(',').map(Number);
/** Modes alternate this many times. */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
/** Untimed calls per mode before the timed rounds. */
const WARMUP = Number(process.env.BENCH_WARMUP ?? 3000);
const ARGS = { language: 'python', code: '1+1' } as const;

interface Stats {
  mode: string;
  clients: string;
  calls: number;
  rps: number;
  p50: number;
  p95: number;
  /** Host CPU (all processes, all cores) per call, ms. */
  cpu: number;
}

/** One mode's timings; `cpuMs` is what the whole host spent meanwhile. */
interface Timed {
  times: number[];
  wallMs: number;
  cpuMs: number;
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Runs `clients` loops of `calls` calls each and times every call. With `intervalMs`,
 * client c starts its i-th call at c·intervalMs/clients + i·intervalMs (or as soon as
 * its previous call returned, if that was later); without, at once.
 */
async function timeCalls(clients: number, calls: number, once: (client: number) => Promise<void>, intervalMs?: number): Promise<Timed> {
  const times: number[] = [];
  const busy = hostBusyMs();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      for (let i = 0; i < calls; i++) {
        if (intervalMs) {
          const due = t0 + (c * intervalMs) / clients + i * intervalMs - performance.now();
          if (due > 0) await sleep(due);
        }
        const s = performance.now();
        await once(c);
        times.push(performance.now() - s);
      }
    }),
  );
  return { times, wallMs: performance.now() - t0, cpuMs: hostBusyMs() - busy };
}

function stats(mode: string, clients: string, r: Timed): Stats {
  const times = [...r.times].sort((a, b) => a - b);
  return { mode, clients, calls: times.length, rps: times.length / (r.wallMs / 1000), p50: pct(times, 50), p95: pct(times, 95), cpu: r.cpuMs / times.length };
}

/**
 * The floor under any HTTP transport: a server that does nothing but read the POST and
 * answer it as the gateway does (the same SSE frame of a `tools/call` result, the id
 * echoed), with no MCP, no authentication and no sandbox. Timing it with the same client
 * gives the round trip's own share of an MCP call on this host.
 */
async function startNoopServer(): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      const { id } = JSON.parse(body) as { id: number };
      const result = { result: { content: [{ type: 'text', text: '[result] 2\n[python · exit 0 · 1 ms]' }] }, jsonrpc: '2.0', id };
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache, no-transform' });
      res.end(`event: message\ndata: ${JSON.stringify(result)}\n\n`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/mcp`,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** The revision a 2026 client speaks: each request carries it in its `_meta` envelope and headers. */
const MODERN = '2026-07-28';

/**
 * A bare MCP client: one keep-alive connection, one JSON-RPC POST per call, on
 * 2025-11-25 (stateless Streamable HTTP) or on 2026-07-28 (no handshake; every request
 * carries its version, client info and capabilities, and the Mcp-Method / Mcp-Name headers).
 */
function rawCaller(url: string, token: string, era: 'legacy' | 'modern' = 'legacy') {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1, noDelay: true } as http.AgentOptions);
  const u = new URL(url);
  let id = 0;
  const once = (): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      const params =
        era === 'modern'
          ? {
              name: 'execute_code',
              arguments: ARGS,
              _meta: { [PROTOCOL_VERSION_META_KEY]: MODERN, [CLIENT_INFO_META_KEY]: { name: 'bench', version: '1' }, [CLIENT_CAPABILITIES_META_KEY]: {} },
            }
          : { name: 'execute_code', arguments: ARGS };
      const body = JSON.stringify({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params });
      const req = http.request(
        {
          agent,
          host: u.hostname,
          port: u.port,
          path: u.pathname,
          method: 'POST',
          headers: {
            authorization: `Bearer ${token}`,
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            'mcp-protocol-version': era === 'modern' ? MODERN : LATEST_PROTOCOL_VERSION,
            ...(era === 'modern' && { 'mcp-method': 'tools/call', 'mcp-name': 'execute_code' }),
            'content-length': Buffer.byteLength(body),
          },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('end', () => (res.statusCode === 200 && text.includes('[result] 2') ? resolve() : reject(new Error(`HTTP ${res.statusCode}: ${text.slice(0, 200)}`))));
        },
      );
      req.on('error', (e: NodeJS.ErrnoException) => {
        // The server may close an idle keep-alive connection just as it is reused: retry on a new one.
        if (req.reusedSocket && e.code === 'ECONNRESET') once().then(resolve, reject);
        else reject(e);
      });
      req.end(body);
    });
  return once;
}

/**
 * CPU the SDK's own handler takes per call: `createMcpHandler` serving a 2025 stateless
 * `tools/call` of a tool that does nothing, from a web Request, with no HTTP,
 * authentication, audit or sandbox. Part of the floor under any server built on it; run
 * in a fresh process (`sdkFloor`), its best case.
 */
async function sdkHandlerCpuMs(calls = 20_000): Promise<number> {
  const handler = createMcpHandler(() => {
    const server = new McpServer({ name: 'floor', version: '1' });
    server.registerTool('execute_code', { description: 'Run code', inputSchema: z.object({ language: z.string(), code: z.string() }) }, () => ({
      content: [{ type: 'text', text: '[result] 2' }],
    }));
    return server;
  });
  const body = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'execute_code', arguments: ARGS } };
  const headers = { host: '127.0.0.1', 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': LATEST_PROTOCOL_VERSION };
  const once = async () => {
    const response = await handler.fetch(new Request('http://127.0.0.1/mcp', { method: 'POST', headers, body: JSON.stringify(body) }), { parsedBody: body });
    if (!(await response.text()).includes('[result] 2')) throw new Error('the SDK handler did not answer the call');
  };
  for (let i = 0; i < calls; i++) await once(); // warm-up
  const before = process.cpuUsage();
  for (let i = 0; i < calls; i++) await once();
  const used = process.cpuUsage(before);
  await handler.close();
  return (used.user + used.system) / 1000 / calls;
}

type ClientKind = 'sdk' | 'raw' | 'raw26' | 'noop';

async function sdkCallers(url: string, tokens: string[]): Promise<{ call: (c: number) => Promise<void>; close: () => Promise<void> }> {
  const clients = await Promise.all(
    tokens.map(async (t) => {
      const client = new Client({ name: 'bench', version: '1' });
      await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${t}` } } }));
      return client;
    }),
  );
  return {
    call: async (c) => {
      const r = (await clients[c]!.callTool({ name: 'execute_code', arguments: ARGS })) as { content: { text?: string }[] };
      if (!r.content[0]?.text?.includes('[result] 2')) throw new Error(`unexpected result ${JSON.stringify(r)}`);
    },
    close: async () => {
      await Promise.all(clients.map((c) => c.close()));
    },
  };
}

interface LoadJob {
  kind: ClientKind;
  clients: number;
  calls: number;
  intervalMs?: number;
}

/**
 * The load generator (child process): connects one client per token, then runs the jobs
 * the parent sends and answers each with its timings.
 */
async function loadGenerator(): Promise<void> {
  const { url, noopUrl, tokens } = JSON.parse(process.env.BENCH_LOAD!) as { url: string; noopUrl: string; tokens: string[] };
  const sdk = await sdkCallers(url, tokens);
  const raws = tokens.map((t) => rawCaller(url, t));
  const raws26 = tokens.map((t) => rawCaller(url, t, 'modern'));
  const noops = tokens.map((t) => rawCaller(noopUrl, t));
  const callers: Record<ClientKind, (c: number) => Promise<void>> = { sdk: sdk.call, raw: (c) => raws[c]!(), raw26: (c) => raws26[c]!(), noop: (c) => noops[c]!() };
  for (const kind of ['sdk', 'raw', 'raw26', 'noop'] as const) await timeCalls(Math.min(tokens.length, 4), 10, callers[kind]); // warm-up
  process.on('message', (job: LoadJob | 'exit') => {
    if (job === 'exit') return void sdk.close().then(() => process.exit(0));
    timeCalls(job.clients, job.calls, callers[job.kind], job.intervalMs).then(
      (r) => process.send!(r),
      (e: Error) => process.send!({ error: e.message }),
    );
  });
  process.send!('ready');
}

/** Starts the load generator; `run` hands it one job at a time. */
async function startLoadGenerator(url: string, noopUrl: string, tokens: string[]) {
  const child = fork(fileURLToPath(import.meta.url), [], { env: { ...process.env, BENCH_LOAD: JSON.stringify({ url, noopUrl, tokens }) }, execArgv: ['--import', 'tsx'] });
  let waiting: { resolve: (m: unknown) => void; reject: (e: Error) => void } | undefined;
  child.on('message', (m) => {
    const error = (m as { error?: string }).error;
    if (error) waiting?.reject(new Error(`load generator: ${error}`));
    else waiting?.resolve(m);
  });
  child.on('exit', (code) => waiting?.reject(new Error(`load generator exited with ${code}`)));
  const next = () => new Promise<unknown>((resolve, reject) => (waiting = { resolve, reject }));
  await next();
  return {
    run: async (job: LoadJob) => {
      const p = next();
      child.send(job);
      return (await p) as Timed;
    },
    stop: () => child.send('exit'),
  };
}

/** Adds one round's timings to a mode's total. */
function add(into: Map<string, Timed>, key: string, r: Timed): void {
  const acc = into.get(key) ?? { times: [], wallMs: 0, cpuMs: 0 };
  acc.times.push(...r.times);
  acc.wallMs += r.wallMs;
  acc.cpuMs += r.cpuMs;
  into.set(key, acc);
}

async function main(): Promise<void> {
  // BENCH_DATABASE=postgres: the store on a throw-away Postgres cluster on loopback, with
  // its default durability (fsync, synchronous commit), instead of the SQLite file.
  const cluster = process.env.BENCH_DATABASE === 'postgres' ? await startPostgresCluster({ durable: true }) : undefined;
  const database: Record<string, string> = cluster ? { SANDGATE_DATABASE_URL: await cluster.createDatabase() } : {};
  process.stderr.write(`store: ${cluster ? 'Postgres' : 'SQLite'}\n`);
  const gw = await startGateway({
    env: { SANDGATE_LOG_LEVEL: 'silent', SANDGATE_RATE_LIMIT_PER_MIN: '1000000', SANDGATE_RATE_LIMIT_BURST: '1000000', ...database },
    // As main.ts serves it: SANDGATE_PII_TOKENIZE is on unless set to false.
    pii: process.env.SANDGATE_PII_TOKENIZE !== 'false',
  });
  try {
    const owners: SandboxOwner[] = [];
    const tokens: string[] = [];
    for (let i = 0; i < CLIENTS; i++) {
      tokens.push(await gw.tokenFor(`bench${i}`, 'bench'));
      owners.push(await gw.harness.user(`bench${i}`));
    }
    process.stderr.write(`starting ${CLIENTS} sandboxes…\n`);
    await Promise.all(owners.map((o) => gw.harness.manager.execute(o, ARGS)));
    const direct = async (c: number) => {
      const r = await gw.harness.manager.execute(owners[c]!, ARGS);
      if (r.result !== '2') throw new Error(`unexpected result ${r.result}`);
    };
    await timeCalls(Math.min(CLIENTS, 4), 10, direct); // warm-up
    const noop = await startNoopServer();
    const load = await startLoadGenerator(gw.mcpUrl, noop.url, tokens);

    const local = tokens.map((t) => rawCaller(gw.mcpUrl, t));
    const inProcess = (c: number) => local[c]!();
    await timeCalls(Math.min(CLIENTS, 4), 10, inProcess); // warm-up

    // Warm-up: the whole request path of every mode, back to back, untimed.
    if (WARMUP > 0) {
      process.stderr.write(`warming up: ${WARMUP} calls per mode…\n`);
      const perClient = Math.ceil(WARMUP / CLIENTS);
      await timeCalls(CLIENTS, perClient, direct);
      for (const kind of ['raw', 'raw26', 'sdk'] as const) await load.run({ kind, clients: CLIENTS, calls: perClient });
      await timeCalls(CLIENTS, perClient, inProcess);
    }

    // The gateway's own view of each MCP call: the audit log's duration, from arrival
    // (before authentication) to the response being sent.
    const db = gw.harness.store.db;
    let lastAuditId = (await db.selectFrom('audit_log').select((eb) => eb.fn.coalesce(eb.fn.max('id'), eb.lit(0)).as('id')).executeTakeFirstOrThrow()).id;
    const gatewayTimes = async (): Promise<Timed> => {
      const rows = await db.selectFrom('audit_log').select(['id', 'duration_ms']).where('id', '>', lastAuditId).where('method', '=', 'tools/call').orderBy('id').execute();
      if (rows.length) lastAuditId = rows[rows.length - 1]!.id;
      return { times: rows.map((r) => r.duration_ms), wallMs: 0, cpuMs: NaN };
    };


    // Modes alternate in short rounds, so a noisy neighbour slows them all alike.
    const loads: { label: string; clients: number; total: number; intervalMs?: number }[] = [
      { label: '1', clients: 1, total: SEQUENTIAL_CALLS },
      { label: String(CLIENTS), clients: CLIENTS, total: CALLS },
      ...RATES.map((rate) => ({ label: `${CLIENTS} @${rate}/s`, clients: CLIENTS, total: CALLS, intervalMs: (CLIENTS / rate) * 1000 })),
    ];
    const totals = new Map<string, Timed>();
    for (let round = 0; round < ROUNDS; round++) {
      for (const { label, clients, total, intervalMs: every } of loads) {
        // Totals across clients and rounds: each client makes its share per round.
        const calls = Math.ceil(total / clients / ROUNDS);
        add(totals, `direct|${label}`, await timeCalls(clients, calls, direct, every));
        await gatewayTimes();
        add(totals, `raw|${label}`, await load.run({ kind: 'raw', clients, calls, intervalMs: every }));
        add(totals, `gw-raw|${label}`, await gatewayTimes());
        add(totals, `raw26|${label}`, await load.run({ kind: 'raw26', clients, calls, intervalMs: every }));
        add(totals, `gw-raw26|${label}`, await gatewayTimes());
        add(totals, `sdk|${label}`, await load.run({ kind: 'sdk', clients, calls, intervalMs: every }));
        add(totals, `gw-sdk|${label}`, await gatewayTimes());
        add(totals, `local|${label}`, await timeCalls(clients, calls, inProcess, every));
        add(totals, `noop|${label}`, await load.run({ kind: 'noop', clients, calls, intervalMs: every }));
      }
    }
    load.stop();
    await noop.close();
    const sdkCpu = await sdkFloor();
    const names: Record<string, string> = {
      direct: 'direct manager.execute',
      raw: 'MCP 2025, bare HTTP',
      'gw-raw': '  gateway time (audit)',
      raw26: 'MCP 2026, bare HTTP',
      'gw-raw26': '  gateway time (audit)',
      sdk: 'MCP 2025, SDK client',
      'gw-sdk': '  gateway time (audit)',
      local: 'MCP, in-process client',
      noop: 'HTTP only, no-op server',
    };
    const results: Stats[] = loads.flatMap(({ label }) =>
      Object.keys(names).map((k) => {
        const st = stats(names[k]!, label, totals.get(`${k}|${label}`)!);
        return k.startsWith('gw-') ? { ...st, rps: NaN, cpu: NaN } : st;
      }),
    );

    const f = (n: number) => n.toFixed(2).padStart(8);
    console.log(`\nexecute_code of 1+1 (python), one user and sandbox per client; times in ms`);
    console.log(`PII boundary ${gw.pii ? 'on' : 'off'}; ${CLIENTS} @N/s: ${CLIENTS} clients paced to N calls/s in all; gateway warmed with ${WARMUP} calls per mode\n`);
    console.log(`host CPU/call: what the whole host (gateway, clients, sandboxes idle or not) spent per call meanwhile\n`);
    console.log(`${'mode'.padEnd(24)} ${'clients'.padStart(9)} ${'calls'.padStart(6)} ${'req/s'.padStart(8)} ${'p50'.padStart(8)} ${'p95'.padStart(8)} ${'CPU/call'.padStart(8)}  p50 over direct`);
    const signed = (n: number) => `${n >= 0 ? '+' : ''}${n.toFixed(2)}`;
    const dash = (n: number) => (Number.isNaN(n) ? '       -' : f(n));
    for (const r of results) {
      const base = results.find((b) => b.mode.startsWith('direct') && b.clients === r.clients)!;
      const over = r === base || r.mode === names.noop ? '' : signed(r.p50 - base.p50);
      console.log(`${r.mode.padEnd(24)} ${r.clients.padStart(9)} ${String(r.calls).padStart(6)} ${dash(r.rps)} ${f(r.p50)} ${f(r.p95)} ${dash(r.cpu)}  ${over}`);
    }

    // What is left of the added p50 once the HTTP round trip itself is taken out.
    const at = (k: string, label: string) => results.find((r) => r.mode === names[k] && r.clients === label)!;
    console.log(`\nThe HTTP round trip's share of what MCP adds (bare 2025 client, p50s in ms):`);
    console.log(`${'clients'.padStart(9)} ${'MCP over direct'.padStart(16)} ${'no-op HTTP'.padStart(11)} ${'the rest'.padStart(9)} ${'gateway, own measure'.padStart(21)}`);
    for (const { label } of loads) {
      const added = at('raw', label).p50 - at('direct', label).p50;
      const http1 = at('noop', label).p50;
      console.log(`${label.padStart(9)} ${signed(added).padStart(16)} ${http1.toFixed(2).padStart(11)} ${signed(added - http1).padStart(9)} ${signed(at('gw-raw', label).p50 - at('direct', label).p50).padStart(21)}`);
    }
    // Back to back, the cores are the bottleneck: p50 ≈ clients × host CPU per call ÷ cores.
    const cores = os.availableParallelism();
    const sat = String(CLIENTS);
    const budget = (3 * cores) / CLIENTS;
    const d = at('direct', sat).cpu;
    console.log(
      `\n${CLIENTS} clients back to back on ${cores} cores: p50 ≈ ${CLIENTS} × host CPU per call ÷ ${cores}, so +3 ms allows ${budget.toFixed(2)} ms more host CPU per call than a direct call.\n` +
        `Measured per call: direct ${d.toFixed(2)} ms; MCP 2025 bare ${at('raw', sat).cpu.toFixed(2)} (${signed(at('raw', sat).cpu - d)}); ` +
        `MCP 2026 bare ${at('raw26', sat).cpu.toFixed(2)} (${signed(at('raw26', sat).cpu - d)}).\n` +
        `Floors: the no-op HTTP round trip ${at('noop', sat).cpu.toFixed(2)} ms of host CPU per call (both ends, and the idle sandboxes' share), ` +
        `the SDK's handler alone ${sdkCpu.toFixed(2)} ms: ${(at('noop', sat).cpu + sdkCpu).toFixed(2)} before authentication, the audit log, the tool or the sandbox.`,
    );
  } finally {
    await gw.close();
    await cluster?.stop();
  }
}

/** `sdkHandlerCpuMs` in a child process of its own. */
function sdkFloor(): Promise<number> {
  const child = fork(fileURLToPath(import.meta.url), [], { env: { ...process.env, BENCH_SDK_FLOOR: '1' }, execArgv: ['--import', 'tsx'] });
  return new Promise((resolve, reject) => {
    child.once('message', (ms) => resolve(ms as number));
    child.once('exit', (code) => reject(new Error(`the SDK floor process exited with ${code}`)));
  });
}

if (process.env.BENCH_LOAD) await loadGenerator();
else if (process.env.BENCH_SDK_FLOOR) process.send!(await sdkHandlerCpuMs(), () => process.exit(0));
else await main();
