/**
 * The gateway against a fuzzer (fast-check): a real gateway process (src/main.ts, Docker
 * with runsc, the real image, SQLite; a stand-in OpenAI model for the chat), a fuzzing
 * user who sends what a careless or hostile client might, and a bystander who must not
 * notice. Seven properties, each a bounded number of runs:
 *
 *   1. MCP JSON-RPC: requests, notifications, responses and batches with wrong types,
 *      huge ids and unknown methods; `initialize` and the 2026-07-28 envelope with any
 *      client capabilities and protocol version;
 *   2. MCP tools: every tool tools/list names, with arguments fitted to its schema and
 *      bent out of it (file names with `..`, NUL, past 255 bytes, any unicode);
 *   3. HTTP written byte for byte to every door: methods, paths (percent-encoding, `..`,
 *      long), headers (content type and length that lie, accept, authorization, cookie,
 *      origin, host garbage), bodies (/v1/chat/completions' shape too);
 *   4. form posts to the pages' POST routes with a valid session and CSRF token (or not),
 *      any fields, in any encoding; ids of the bystander's conversation and tokens too;
 *   5. the admin pages as an admin: any query, and any form on the admin's actions
 *      (against a user of the property's own, never the bystander);
 *   6. uploads: file names written every way Content-Disposition allows, any bytes,
 *      forms broken the ways forms break;
 *   7. the live channel: socket.io events of any name and payload, and raw engine.io
 *      frames (binary placeholders that point nowhere, broken JSON).
 *
 * Every answer: below 500 (a client's mistake is a 4xx; none of these requests leans on
 * anything that may be down, so no 5xx is allowed), no stack trace or source path in
 * it, no JSON-RPC internal error or tool "internal error", the gateway process alive,
 * nothing logged at error level. After each property the bystander still runs code over
 * MCP, loads a page and their conversation, and keeps their live connection; the
 * gateway ends cleanly on SIGTERM at the end (a connection the fuzzer left behind would
 * hold it). What the fuzzer found is kept below the properties as plain cases too.
 *
 * Bounds: SANDGATE_FUZZ_RUNS runs per property (default 400; the file takes about 55 s
 * on a 2-core machine). The seed is SANDGATE_FUZZ_SEED, or a random one; it is printed
 * when the file starts, and a failure names it with fast-check's path to the
 * counterexample and the command that replays it:
 *
 *   SANDGATE_FUZZ_SEED=<seed> SANDGATE_FUZZ_PATH=<path> npx vitest run --project sqlite test/fuzz.test.ts -t '<property>'
 *
 * (without SANDGATE_FUZZ_PATH, the same seed replays every property's runs in order; the
 * gateway keeps state between runs, so a replay follows the same inputs, not always the
 * same states). After each property a line counts its answers by kind;
 * SANDGATE_FUZZ_VERBOSE=1 adds examples of each, SANDGATE_FUZZ_TRACE=1 prints every HTTP
 * request of property 3 with its status, SANDGATE_FUZZ_LOG_LEVEL=info lets the gateway
 * log more than warnings (its output is shown when it fails to stop).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { io as ioClient, type Socket } from 'socket.io-client';
import { WebSocket } from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureUser, type User } from '../src/accounts/accounts.js';
import { MIGRATIONS } from '../src/migrations.js';
import { REPO_ROOT } from '../src/paths.js';
import { openStore, type Store } from '../src/store/store.js';
import { createToken, findTokenBySecret, listTokens } from '../src/tokens/tokens.js';
import { executeOverMcp, killAndClean, startGatewayProcess, type GatewayProcess } from './support/gateway-process.js';
import { freePort } from './support/ports.js';
import { sendWire, wireBytes, type WireAnswer } from './support/raw-wire.js';
import { startStandin, type Standin } from './support/model-standins.js';
import { webSession, type WebSession } from './support/web-session.js';
import {
  anyText,
  fileName,
  formValue,
  httpRequest,
  mcpHeaders,
  metaEnvelope,
  pct,
  protocolVersion,
  PROTOCOL_VERSIONS,
  rawFrame,
  shortText,
  rpcBody,
  socketEvent,
  toolArguments,
  upload,
  uploadBytes,
  type FormEncoding,
  type ToolInfo,
} from './support/fuzz-inputs.js';

const RUNS = Math.max(1, Number(process.env.SANDGATE_FUZZ_RUNS) || 400);
const SEED = process.env.SANDGATE_FUZZ_SEED ? Number(process.env.SANDGATE_FUZZ_SEED) | 0 : crypto.randomInt(2 ** 31);
const PATH = process.env.SANDGATE_FUZZ_PATH || undefined;
/**
 * A property's whole time, shrinking included: past it, fast-check reports what it has (a
 * failure with its smallest input so far). Far above what the runs take, so it bounds only
 * the shrinking of a failure against a live gateway.
 */
const PROPERTY_MS = 240_000;

console.log(`fuzz: seed ${SEED}, ${RUNS} runs per property (replay: SANDGATE_FUZZ_SEED=${SEED} npx vitest run --project sqlite test/fuzz.test.ts)`);

let model: Standin;
let dataDir = '';
let store: Store;
let gateway: GatewayProcess;
let url = '';
let port = 0;
let fuzzer: User;
let bystander: { user: User; token: string; page: WebSession; conversation: string; socket: Socket; dropped: string[] };
let tools: ToolInfo[] = [];
/** Where the gateway's output was last read for errors. */
let logMark = 0;

beforeAll(async () => {
  model = await startStandin('openai', () => ({ text: ['fine'] }), { keep: false });
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-fuzz-'));
  port = await freePort();
  url = `http://127.0.0.1:${port}`;
  // The database first, shared with the gateway process (SQLite in WAL mode takes both).
  store = await openStore({ dataDir }, MIGRATIONS);
  fuzzer = await ensureUser(store.db, 'fuzzer');
  const by = await ensureUser(store.db, 'bystander');
  gateway = startGatewayProcess({
    TMPDIR: os.tmpdir(),
    SANDGATE_DATA_DIR: dataDir,
    SANDGATE_UPSTREAM_HOME_DIR: `${dataDir}-homes`,
    SANDGATE_HOST: '127.0.0.1',
    SANDGATE_PORT: String(port),
    SANDGATE_PUBLIC_URL: url,
    SANDGATE_WARM_POOL_SIZE: '0',
    SANDGATE_LOG_LEVEL: process.env.SANDGATE_FUZZ_LOG_LEVEL ?? 'warn',
    SANDGATE_PII_TOKENIZE: 'false',
    // The fuzzer's requests must reach the code behind the budget, not stop at it.
    SANDGATE_RATE_LIMIT_PER_MIN: '1000000',
    SANDGATE_RATE_LIMIT_BURST: '100000',
    SANDGATE_UPLOAD_MAX_MB: '1',
    SANDGATE_OPENAI_API_KEY: 'sk-fuzz',
    SANDGATE_OPENAI_BASE_URL: model.baseURL,
    SANDGATE_MODELS: 'openai:gpt-test',
  });
  await gateway.ready();
  const byToken = (await createToken(store.db, { userId: by.id, name: 'laptop' })).token;
  const page = await webSession({ url, db: store.db }, by);
  const created = await page.post('/chat/new', {});
  const conversation = created.headers.get('location')?.split('/').pop() ?? '';
  expect(conversation, 'the bystander has a conversation').toMatch(/\S/);
  const dropped: string[] = [];
  const socket = await liveSocket(page);
  socket.on('disconnect', (why) => dropped.push(why));
  bystander = { user: by, token: byToken, page, conversation, socket, dropped };
  // The bystander's sandbox is up before anything is fuzzed.
  expect(await executeOverMcp(url, byToken, 'print(6 * 7)')).toMatchObject({ ok: true, text: expect.stringContaining('42') });
  tools = await listTools(await fuzzerToken());
  expect(tools.map((t) => t.name).sort()).toEqual(['execute_code', 'list_files', 'read_file', 'search_tools', 'write_file']);
  logMark = gateway.output().length;
});

afterAll(async () => {
  bystander?.socket.disconnect();
  if (gateway) {
    // A clean stop is part of the claim: nothing the fuzzer did keeps the gateway from ending well.
    gateway.child.kill('SIGTERM');
    const code = await gateway.exited;
    await store?.close();
    await killAndClean([gateway], dataDir);
    fs.rmSync(`${dataDir}-homes`, { recursive: true, force: true });
    expect(code, `the gateway's exit; it printed:\n${gateway.output().slice(-3000)}`).toBe(0);
  }
  await model?.close();
});

// ---------------------------------------------------------------- the checks

/** Marks of a stack trace or of the gateway's own source in an answer. */
const TRACES: RegExp[] = [
  /\n\s*at (?:async )?\S+ \((?:\/|node:)[^)]*:\d+:\d+\)/,
  /\n\s*at (?:async )?(?:\/|node:)\S+:\d+:\d+/,
  /node:internal/,
  /node_modules\//,
  // A source file by its path with a position (the sandbox's own programs, `cell-3.ts:1:5`, have no path).
  /(?<!file:\/\/\S*)\/[\w.@-]+\.(?:ts|mts|cts|js|mjs|cjs):\d+:\d+/,
  /\b(?:TypeError|ReferenceError|RangeError|SyntaxError): .*\n\s*at /,
];

/** The gateway process has not exited. */
function expectAlive(): void {
  if (gateway.child.exitCode !== null || gateway.child.signalCode !== null) {
    throw new Error(`the gateway process ended (${gateway.child.exitCode ?? gateway.child.signalCode}); it printed:\n${gateway.output().slice(-4000)}`);
  }
}

/** Lines the gateway logged at error level (pino: 50 and above) since the last look. */
function errorsLogged(): string[] {
  const out = gateway.output();
  const end = out.lastIndexOf('\n', out.length - 1) + 1;
  const lines = out.slice(logMark, end).split('\n');
  logMark = Math.max(logMark, end);
  return lines.filter((l) => /^\{.*"level":(?:5\d|6\d)\b/.test(l));
}

/**
 * What every answer must be: from a live gateway, below 500, with no trace of the
 * gateway's code, and nothing logged at error level for it. `what` says which request.
 */
async function expectSound(what: string, status: number, text: string, settleMs = 10): Promise<void> {
  // What the gateway logged before it answered comes through its output pipe, which this process may read a
  // moment after the answer; read first, so that it counts for this request whatever else fails.
  await new Promise((r) => setTimeout(r, settleMs));
  const errors = errorsLogged();
  const logged = errors.length ? `\nThe gateway logged:\n${errors.join('\n').slice(0, 3000)}` : '';
  expectAlive();
  if (status >= 500) throw new Error(`${what}: answered ${status} to a client's request:\n${text.slice(0, 1500)}${logged}`);
  for (const trace of TRACES) {
    const m = trace.exec(text);
    if (m) throw new Error(`${what}: the answer shows the gateway's internals (${trace}): …${text.slice(Math.max(0, m.index - 300), m.index + 300)}…${logged}`);
  }
  if (text.includes(REPO_ROOT)) throw new Error(`${what}: the answer names the gateway's own directory ${REPO_ROOT}${logged}`);
  if (errors.length) throw new Error(`${what}: the gateway logged an error:${logged}`);
}

/** JSON-RPC messages in an answer, whether it came as JSON or as an SSE stream. */
function rpcMessages(a: WireAnswer): Record<string, unknown>[] {
  const body = a.body.toString('utf8');
  const parse = (s: string): unknown[] => {
    try {
      const j = JSON.parse(s) as unknown;
      return Array.isArray(j) ? j : [j];
    } catch {
      return [];
    }
  };
  if ((a.headers['content-type'] ?? '').startsWith('text/event-stream')) {
    return body
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .flatMap((l) => parse(l.slice(6))) as Record<string, unknown>[];
  }
  return parse(body) as Record<string, unknown>[];
}

/** An MCP answer: sound, and no message in it is an internal error (the JSON-RPC form of a 500) or a tool's. */
async function expectSoundMcp(what: string, a: WireAnswer): Promise<void> {
  await expectSound(what, a.status, a.text);
  for (const m of rpcMessages(a)) {
    const error = m.error as { code?: unknown; message?: unknown } | undefined;
    if (error?.code === -32603) throw new Error(`${what}: a JSON-RPC internal error: ${JSON.stringify(m).slice(0, 1500)}`);
    const result = JSON.stringify(m.result ?? '');
    // How a tool says it failed on the gateway's side (src/mcp/context.ts).
    if (/internal error in the gateway/i.test(result)) throw new Error(`${what}: a tool failed with an internal error: ${result.slice(0, 1500)}`);
  }
}

/**
 * The bystander still works: runs code over MCP, loads the files page and their own
 * conversation, keeps their live connection and watches with it; the gateway is healthy.
 */
async function expectBystanderWorks(): Promise<void> {
  expectAlive();
  const run = await executeOverMcp(url, bystander.token, 'print(6 * 7)');
  expect(run, 'the bystander runs code').toMatchObject({ ok: true, text: expect.stringContaining('42') });
  const files = await bystander.page.get('/files', { htmx: false });
  expect(files.status, 'the bystander loads the files page').toBe(200);
  expect(await files.text()).toContain('<h1');
  expect((await bystander.page.get(`/c/${bystander.conversation}`, { htmx: false })).status, 'the bystander’s conversation is there').toBe(200);
  expect(bystander.dropped, 'the bystander’s live connection was never dropped').toEqual([]);
  expect(await bystander.socket.timeout(5000).emitWithAck('watch', bystander.conversation)).toEqual({ ok: true });
  expect((await fetch(`${url}/healthz`)).status).toBe(200);
  const errors = errorsLogged();
  expect(errors, 'nothing logged at error level').toEqual([]);
}

/** What a property's answers were, counted by kind: printed after it, to show what the runs reached. */
class Tally {
  private readonly counts = new Map<string, number>();
  private readonly examples = new Map<string, string[]>();
  /** `example`: what the answer said, kept (two of each kind) for SANDGATE_FUZZ_VERBOSE. */
  add(kind: string, example?: string): void {
    this.counts.set(kind, (this.counts.get(kind) ?? 0) + 1);
    const kept = this.examples.get(kind) ?? [];
    if (example !== undefined && kept.length < 2) this.examples.set(kind, [...kept, example.slice(0, 300)]);
  }
  /** Each message of an MCP answer: a result, a tool error, or a JSON-RPC error by code. */
  mcp(a: WireAnswer): void {
    const messages = rpcMessages(a);
    if (!messages.length) this.add(`HTTP ${a.status}`, a.body.toString('utf8'));
    for (const m of messages) {
      const error = m.error as { code?: unknown } | undefined;
      this.add(error ? `error ${String(error.code)}` : (m.result as { isError?: boolean } | undefined)?.isError ? 'tool error' : 'result', JSON.stringify(m));
    }
  }
  print(name: string): void {
    console.log(`fuzz ${name}: ${[...this.counts].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ×${n}`).join(', ')}`);
    if (process.env.SANDGATE_FUZZ_VERBOSE) for (const [k, e] of this.examples) console.log(`  ${k}:\n    ${e.join('\n    ')}`);
  }
}

/**
 * Runs `predicate` over `arb` for RUNS runs with the file's seed; a failure says how to
 * replay it (`name` is the test's, for -t).
 */
async function fuzz<T>(name: string, arb: fc.Arbitrary<T>, predicate: (v: T) => Promise<void>, runs = RUNS): Promise<void> {
  // A run that failed is charged with what the gateway logs a moment later too, not the run after it (a shrinking step).
  const charged = async (v: T) => {
    try {
      await predicate(v);
    } catch (e) {
      await new Promise((r) => setTimeout(r, 100));
      errorsLogged();
      throw e;
    }
  };
  try {
    await fc.assert(fc.asyncProperty(arb, charged), { numRuns: runs, seed: SEED, path: PATH, plugins: [fc.interruptAfterTimeLimit(PROPERTY_MS)] });
  } catch (e) {
    const where = /path: "([^"]*)"/.exec((e as Error).message)?.[1];
    (e as Error).message += `\n\nReplay: SANDGATE_FUZZ_SEED=${SEED}${where ? ` SANDGATE_FUZZ_PATH=${where}` : ''} npx vitest run --project sqlite test/fuzz.test.ts -t '${name}'`;
    throw e;
  }
}

// ---------------------------------------------------------------- the fuzzer's means

/** A token for the fuzzer, past the per-user limits that its own form posts (POST /tokens) may have filled. */
async function fuzzerToken(): Promise<string> {
  return (await createToken(store.db, { userId: fuzzer.id, name: `fuzz-${crypto.randomUUID().slice(0, 8)}`, maxActive: 100_000, maxPerDay: 100_000 })).token;
}

async function listTools(token: string): Promise<ToolInfo[]> {
  const a = await mcp(token, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { 'mcp-protocol-version': '2025-06-18' });
  const result = rpcMessages(a)[0]?.result as { tools: ToolInfo[] } | undefined;
  if (!result) throw new Error(`tools/list: HTTP ${a.status} ${a.text.slice(0, 500)}`);
  return result.tools;
}

/** POST /mcp with `token`, the JSON (or raw text) body and these headers as they are. */
function mcp(token: string | undefined, body: unknown, headers: Record<string, string> = {}, raw?: string): Promise<WireAnswer> {
  const bytes = Buffer.from(raw ?? JSON.stringify(body) ?? '', 'utf8');
  const h: [string, string][] = [
    ['host', `127.0.0.1:${port}`],
    ['connection', 'close'],
    ['accept', 'application/json, text/event-stream'],
    ['content-type', 'application/json'],
    ...Object.entries(headers),
    ...(token === undefined ? [] : [['authorization', `Bearer ${token}`] as [string, string]]),
    ['content-length', String(bytes.length)],
  ];
  // The last of a repeated name stands (headers given override the defaults).
  const merged = [...new Map(h.map(([k, v]) => [k.toLowerCase(), v])).entries()];
  return sendWire(port, wireBytes({ method: 'POST', target: '/mcp', headers: merged, body: bytes }), { timeoutMs: 60_000 });
}

/** A page's live connection as a browser opens it: the session's cookie, the page's CSRF token, our origin. */
/** The headers of a signed-in page's htmx POST with `body`, and its CSRF token in a header when given one. */
function pageHeaders(port: number, page: WebSession, contentType: string, body: Buffer, csrf?: string): [string, string][] {
  return [
    ['Host', `127.0.0.1:${port}`],
    ['Connection', 'close'],
    ['Cookie', page.cookie()],
    ['HX-Request', 'true'],
    ['Content-Type', contentType],
    ['Content-Length', String(body.length)],
    ...(csrf === undefined ? [] : [['X-CSRF-Token', csrf] as [string, string]]),
  ];
}

function liveSocket(page: WebSession): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = ioClient(url, { transports: ['websocket'], reconnection: false, auth: { csrf: page.csrf }, extraHeaders: { origin: url, cookie: page.cookie() } });
    s.once('connect', () => resolve(s));
    s.once('connect_error', (e) => reject(new Error(`the live connection was refused: ${e.message}`)));
  });
}

// ---------------------------------------------------------------- the properties

describe('the gateway under a fuzzer', () => {
  it('MCP: JSON-RPC messages and batches, initialize and the 2026-07-28 envelope with any capabilities', { timeout: PROPERTY_MS + 60_000 }, async () => {
    const token = await fuzzerToken();
    const auth = fc.oneof({ weight: 8, arbitrary: fc.constant(token) }, { weight: 1, arbitrary: fc.constantFrom(undefined, '', 'sgp_x', `${token}x`, token.toUpperCase()) });
    const tally = new Tally();
    await fuzz('MCP: JSON-RPC', fc.record({ body: rpcBody(tools), headers: mcpHeaders, auth }), async ({ body, headers, auth }) => {
      // A 2025 batch goes with a 2025 version header (the 2026-07-28 era has no batches).
      const h = 'legacy' in body ? { ...Object.fromEntries(Object.entries(headers).filter(([k]) => !k.startsWith('mcp-'))), 'mcp-protocol-version': '2025-06-18' } : headers;
      const a = 'text' in body ? await mcp(auth, undefined, h, body.text) : await mcp(auth, body.json, h);
      if (a.timedOut) throw new Error('POST /mcp: no answer in 60 s');
      await expectSoundMcp('POST /mcp', a);
      tally.mcp(a);
    });
    tally.print('MCP JSON-RPC');
    await expectBystanderWorks();
  });

  it('MCP: every tool with arguments fitted to its schema and bent out of it', { timeout: PROPERTY_MS + 60_000 }, async () => {
    const token = await fuzzerToken();
    // A call as a client of each era frames it (2026-07-28: its headers and the envelope with any
    // capabilities; 2025: a version header alone), and now and then framed any way at all.
    const era = fc.oneof(
      { weight: 4, arbitrary: metaEnvelope.map((meta) => ({ version: '2026-07-28' as unknown, meta: meta as unknown })) },
      { weight: 4, arbitrary: fc.constantFrom(...PROTOCOL_VERSIONS.slice(1)).map((version) => ({ version: version as unknown, meta: undefined as unknown })) },
      { weight: 1, arbitrary: fc.record({ version: protocolVersion, meta: fc.option(metaEnvelope, { nil: undefined }) }) },
    );
    const call = fc.record({
      tool: fc.constantFrom(...tools).chain((t) => toolArguments(t).map((args) => ({ name: t.name, args }))),
      era,
      id: fc.oneof(fc.integer(), fc.string({ maxLength: 8 })),
    });
    const tally = new Tally();
    await fuzz('MCP: every tool', call, async ({ tool, era: { version, meta }, id }) => {
      const v = typeof version === 'string' ? version : '2025-06-18';
      const headers: Record<string, string> = { 'mcp-protocol-version': v.replace(/[^\x20-\x7e]/g, '') };
      if (v === '2026-07-28') Object.assign(headers, { 'mcp-method': 'tools/call', 'mcp-name': tool.name });
      const params: Record<string, unknown> = { name: tool.name, arguments: tool.args };
      if (meta !== undefined) params._meta = meta;
      const a = await mcp(token, { jsonrpc: '2.0', id, method: 'tools/call', params }, headers);
      if (a.timedOut) throw new Error(`tools/call ${tool.name}: no answer in 60 s`);
      await expectSoundMcp(`tools/call ${tool.name}`, a);
      tally.mcp(a);
      tally.add(tool.name);
    });
    tally.print('MCP tools');
    await expectBystanderWorks();
  });

  it('HTTP: any method, path, headers and body at every door', { timeout: PROPERTY_MS + 60_000 }, async () => {
    const page = await webSession({ url, db: store.db }, fuzzer);
    const ctx = { url, token: await fuzzerToken(), cookie: page.cookie(), csrf: page.csrf };
    const tally = new Tally();
    /** The working credentials again, after a request that may have signed the session out or revoked the token. */
    const renew = async () => {
      const fresh = await webSession({ url, db: store.db }, fuzzer);
      const revoked = (await findTokenBySecret(store.db, ctx.token))?.revokedAt !== null;
      Object.assign(ctx, { token: revoked ? await fuzzerToken() : ctx.token, cookie: fresh.cookie(), csrf: fresh.csrf });
    };
    await fuzz('HTTP', httpRequest(ctx), async (r) => {
      const names = new Set(r.headers.map(([k]) => k.toLowerCase().trim()));
      const headers = [...r.headers];
      if (!names.has('host')) headers.unshift(['Host', `127.0.0.1:${port}`]);
      if (!names.has('connection')) headers.push(['Connection', 'close']);
      if (r.credentials) {
        // As a signed-in page and an API client send them, so that the request reaches the code behind the checks.
        if (!names.has('cookie')) headers.push(['Cookie', ctx.cookie]);
        if (!names.has('x-csrf-token')) headers.push(['X-CSRF-Token', ctx.csrf]);
        if (!names.has('authorization')) headers.push(['Authorization', `Bearer ${ctx.token}`]);
      }
      const n = r.body.length;
      if (!names.has('content-length') && r.length !== 'none') headers.push(['Content-Length', String(r.length === 'short' ? Math.max(0, n - 1) : r.length === 'long' ? n + 10 : n)]);
      // A request whose framing may leave the server waiting for more (a body promised and not sent, chunks, 100-continue):
      // the sending side is closed after a while, as a client that gave up would, and no answer is no failure.
      const open = r.length === 'long' || ['content-length', 'transfer-encoding', 'expect'].some((h) => names.has(h));
      const a = await sendWire(port, wireBytes({ method: r.method, target: r.target, headers, body: r.body }), { head: r.method === 'HEAD', ...(open ? { halfCloseAfterMs: 150, timeoutMs: 5000 } : { timeoutMs: 20_000 }) });
      if (a.timedOut && !open) throw new Error(`${r.method} ${r.target}: no answer in 20 s`);
      if (process.env.SANDGATE_FUZZ_TRACE) console.log(`${r.method} ${r.target.slice(0, 120)} [${r.headers.map(([k]) => k.slice(0, 20)).join(',')}] ${r.length} → ${a.status}${a.timedOut ? ' (no answer)' : ''}`);
      // A request given up on is still being handled, and one whose body's extra bytes Node took for a second
      // request may have been answered by Node's refusal of those first: what it logs comes a moment later.
      await expectSound(`${r.method} ${r.target.slice(0, 200)}`, a.status, a.text, open || r.length !== 'true' ? 50 : 10);
      tally.add(a.timedOut ? 'no answer' : `HTTP ${a.status}`, `${r.method} ${r.target.slice(0, 80)} → ${a.body.toString('utf8')}`);
      if (r.credentials && /^\/(logout|tokens\/|oauth\/revoke)/i.test(r.target)) await renew();
    });
    tally.print('HTTP');
    await expectBystanderWorks();
  });

  it('form posts: the pages’ POST routes with any fields, in any encoding', { timeout: PROPERTY_MS + 60_000 }, async () => {
    let page = await webSession({ url, db: store.db }, fuzzer);
    const own = (await page.post('/chat/new', {})).headers.get('location')?.split('/').pop() ?? 'none';
    const ownTokens = (await listTokens(store.db, { userId: fuzzer.id, includeRevoked: true })).map((t) => String(t.id));
    const byTokens = (await listTokens(store.db, { userId: bystander.user.id, includeRevoked: true })).map((t) => String(t.id));
    const id = fc.oneof(fc.constantFrom(own, bystander.conversation, ...ownTokens, ...byTokens, '0', '-1', '1e3', '__proto__', 'constructor', '%00', '..', 'x'.repeat(300)), anyText.map(pct));
    const provider = fc.oneof(fc.constantFrom('openai', 'anthropic', 'google', 'compatible', '__proto__', 'constructor', ''), anyText.map(pct));
    const ROUTES: [string, string[]][] = [
      ['/chat/new', ['model']],
      ['/c/:id/send', ['text']],
      ['/c/:id/stop', []],
      ['/c/:id/model', ['model']],
      ['/c/:id/delete', []],
      ['/files/mkdir', ['dir', 'name']],
      ['/files/rename', ['path', 'to']],
      ['/files/delete', ['path']],
      ['/tokens', ['name', 'expires']],
      ['/tokens/:id/revoke', []],
      ['/tokens/api-conversations/delete', []],
      ['/settings/model', ['model']],
      ['/settings/keys/:provider', ['key']],
      ['/settings/keys/:provider/delete', []],
      ['/settings/credentials', ['server', 'name', 'value']],
      ['/settings/credentials/delete', ['server', 'name']],
      ['/settings/secrets', ['name', 'host', 'value', 'header', 'port', 'prefix']],
      ['/settings/secrets/delete', ['host', 'name']],
      ['/oauth/authorize', ['request', 'decision']],
      ['/login/link', ['secret']],
      ['/logout', []],
      ['/logout/all', []],
      ['/admin/sandboxes/:id/stop', []],
      ['/admin/users/:id/permissions', ['permissions']],
      ['/admin/users/:id/delete', ['confirm']],
    ];
    const post = fc
      .constantFrom(...ROUTES)
      .chain(([route, fields]) =>
        fc.record({
          route: fc.constant(route),
          path: fc.tuple(id, provider).map(([i, p]) => route.replace(':id', i).replace(':provider', p)),
          query: fc.oneof(fc.constant(''), fc.tuple(fc.constantFrom('dir', 'path'), fileName).map(([k, v]) => `?${k}=${pct(v)}`)),
          fields: fc.tuple(
            fc.record(Object.fromEntries(fields.map((f) => [f, formValue])), { requiredKeys: [] }),
            fc.dictionary(fc.oneof(anyText, fc.constantFrom('_csrf', '__proto__', 'constructor', 'text[]', 'path[0]', 'name[__proto__]')), formValue, { maxKeys: 3 }),
          ),
          encoding: fc.constantFrom<FormEncoding>('urlencoded', 'urlencoded', 'urlencoded', 'multipart', 'json', 'none', 'garbage'),
          csrf: fc.oneof({ weight: 6, arbitrary: fc.constant('header') }, { weight: 1, arbitrary: fc.constantFrom('field', 'none', 'wrong') }),
        }),
      );
    const tally = new Tally();
    await fuzz('form posts', post, async ({ route, path: p, query, fields: [known, extra], encoding, csrf }) => {
      // Signing out ends the session the next runs use: those run on a session of their own.
      const session = route.startsWith('/logout') ? await webSession({ url, db: store.db }, fuzzer) : page;
      const form: [string, string][] = [...Object.entries(extra), ...Object.entries(known as Record<string, string>)];
      if (csrf === 'field') form.push(['_csrf', session.csrf]);
      let body: Buffer;
      let type: string;
      if (encoding === 'urlencoded') [body, type] = [Buffer.from(new URLSearchParams(form).toString()), 'application/x-www-form-urlencoded'];
      else if (encoding === 'json') [body, type] = [Buffer.from(JSON.stringify(Object.fromEntries(form))), 'application/json'];
      else if (encoding === 'multipart') {
        body = Buffer.from(`${form.map(([k, v]) => `--fz\r\nContent-Disposition: form-data; name="${k.replace(/"/g, '%22')}"\r\n\r\n${v}\r\n`).join('')}--fz--\r\n`);
        type = 'multipart/form-data; boundary=fz';
      } else if (encoding === 'garbage') [body, type] = [Buffer.from(form.map(([k, v]) => `${k}=${v}`).join('&')), 'application/x-www-form-urlencoded; charset=utf-7'];
      else [body, type] = [Buffer.alloc(0), 'application/x-www-form-urlencoded'];
      const headers = pageHeaders(port, session, type, body, csrf === 'header' ? session.csrf : csrf === 'wrong' ? bystander.page.csrf : undefined);
      const a = await sendWire(port, wireBytes({ method: 'POST', target: `${p}${query}`, headers, body }), { timeoutMs: 30_000 });
      if (a.timedOut) throw new Error(`POST ${p}: no answer in 30 s`);
      await expectSound(`POST ${p}${query}`, a.status, a.text);
      tally.add(`HTTP ${a.status}`, `${p.slice(0, 60)} ${encoding} csrf:${csrf} → ${a.body.toString('utf8')}`);
      if (route === '/logout/all' && a.status < 400) page = await webSession({ url, db: store.db }, fuzzer);
    });
    tally.print('form posts');
    await expectBystanderWorks();
  });

  it('admin pages: any query, and any form on the admin’s actions, as an admin', { timeout: PROPERTY_MS + 60_000 }, async () => {
    // An admin of its own, acting on a user of its own: an admin may disable or delete anyone, so never the bystander.
    const root = await ensureUser(store.db, 'fuzz-admin', { isAdmin: true });
    const rootToken = (await createToken(store.db, { userId: root.id, name: 'admin-laptop' })).token;
    let page = await webSession({ url, db: store.db }, root);
    const victim = async () => {
      const u = await ensureUser(store.db, 'fuzz-victim');
      const tokens = await listTokens(store.db, { userId: u.id, includeRevoked: true });
      return { user: u, token: tokens[0]?.id ?? (await createToken(store.db, { userId: u.id, name: 'victim' })).record.id };
    };
    let target = await victim();
    const pages = ['/admin', '/admin/sandboxes/rows', '/admin/users', '/admin/tokens', '/admin/audit', '/admin/audit.csv', '/admin/usage', '/admin/upstream', '/admin/network', '/admin/api/sandboxes', '/admin/api/users', '/admin/api/usage'];
    const value = fc.oneof(
      fc.constantFrom('VICTIM_NAME', 'fuzzer', 'mcp', 'web', 'admin', 'token', 'ok', 'error', 'denied', 'execute_code', '2024-01-01', '9999-12-31', '2024-13-45', '1e99', '-1', '0', '99999999999999999999', 'day', 'week', 'month', 'hour', '__proto__', ''),
      fileName,
    );
    const query = fc
      .array(fc.tuple(fc.oneof(fc.constantFrom('user', 'kind', 'tool', 'outcome', 'since', 'until', 'before', 'page', 'period', 'user[]', 'page[a]'), shortText), value), { maxLength: 4 })
      .map((pairs) => (pairs.length ? `?${pairs.map(([k, v]) => `${pct(k)}=${v === 'VICTIM_NAME' ? v : pct(v)}`).join('&')}` : ''));
    const id = fc.oneof({ weight: 4, arbitrary: fc.constant('VICTIM') }, { weight: 1, arbitrary: fc.constantFrom('SELF', '999999', '0', '-1', '1e3', '0x1', 'x', '%00', '9007199254740993') }, { weight: 1, arbitrary: shortText.map(pct) });
    const ACTIONS: [string, string[]][] = [
      ['/admin/sandboxes/:id/stop', []],
      ['/admin/sandboxes/:id/kill', []],
      ['/admin/orphans/remove', []],
      ['/admin/users/:id/disable', []],
      ['/admin/users/:id/enable', []],
      ['/admin/users/:id/permissions', ['permissions']],
      ['/admin/users/:id/delete', ['confirm']],
      ['/admin/tokens/:token/revoke', []],
      ['/admin/upstream/:name/reconnect', []],
    ];
    const permissions = fc.oneof(fc.constantFrom('', '{}', '[]', 'null', '"x"', '{"net": true}', '{"net": ["pypi"]}', '{"read": ["/"]}', '{"write": true, "run": ["sh"]}', '{"__proto__": {"net": true}}', '{'), fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)), formValue);
    const input = fc.oneof(
      { weight: 1, arbitrary: fc.record({ get: fc.constantFrom(...pages), query, bearer: fc.boolean() }) },
      {
        weight: 1,
        arbitrary: fc.record({
          post: fc.constantFrom(...ACTIONS),
          id,
          token: fc.oneof(fc.constant('VICTIM_TOKEN'), fc.constantFrom('999999', 'x', '-1')),
          name: fc.oneof(fc.constantFrom('nope', '__proto__', 'constructor', ''), shortText.map(pct)),
          permissions,
          confirm: fc.oneof(fc.constant('VICTIM_NAME'), formValue),
        }),
      },
    );
    const tally = new Tally();
    await fuzz('admin pages', input, async (run) => {
      const fill = (v: string) => v.replace('VICTIM_TOKEN', String(target.token)).replace('VICTIM_NAME', target.user.name).replace('VICTIM', String(target.user.id)).replace('SELF', String(root.id));
      /** A user id for the address: any that names a user (`0x1`, `%32` and ` 2 ` name users 1 and 2) is the victim's or the admin's own. */
      const userId = (v: string) => {
        const raw = fill(v);
        let decoded = raw;
        try {
          decoded = decodeURIComponent(raw);
        } catch {
          // Not decodable: the route refuses it as it is.
        }
        const n = Number(decoded);
        return Number.isSafeInteger(n) && n > 0 && n !== target.user.id && n !== root.id ? '999999' : raw;
      };
      let a: WireAnswer;
      let what: string;
      const base: [string, string][] = [
        ['Host', `127.0.0.1:${port}`],
        ['Connection', 'close'],
      ];
      if ('get' in run) {
        what = `GET ${run.get}${fill(run.query)}`;
        // The admin's JSON answers scripts with an admin's token too.
        const auth: [string, string][] = run.bearer && run.get.startsWith('/admin/api/') ? [['Authorization', `Bearer ${rootToken}`]] : [['Cookie', page.cookie()]];
        a = await sendWire(port, wireBytes({ method: 'GET', target: `${run.get}${fill(run.query)}`, headers: [...base, ...auth] }), { timeoutMs: 30_000 });
      } else {
        const [route, fields] = run.post;
        const p = route.replace(':id', userId(run.id)).replace(':token', fill(run.token)).replace(':name', run.name);
        const form = new URLSearchParams(fields.map((f) => [f, f === 'permissions' ? run.permissions : fill(run.confirm)]));
        const body = Buffer.from(form.toString());
        what = `POST ${p} ${form.toString().slice(0, 100)}`;
        a = await sendWire(port, wireBytes({ method: 'POST', target: p, headers: [...base, ['Cookie', page.cookie()], ['X-CSRF-Token', page.csrf], ['HX-Request', 'true'], ['Content-Type', 'application/x-www-form-urlencoded'], ['Content-Length', String(body.length)]], body }), { timeoutMs: 30_000 });
        // The user it acted on is deleted: another takes its place for the next runs.
        if (route.endsWith('/delete') && a.status === 200) target = await victim();
      }
      if (a.timedOut) throw new Error(`${what}: no answer in 30 s`);
      await expectSound(what, a.status, a.text);
      tally.add(`HTTP ${a.status}`, `${what.slice(0, 120)} → ${a.body.toString('utf8')}`);
      // The admin disabled themselves through a path the page refuses? Then the next runs would all be refused: a new session says.
      if (a.status === 401 || a.status === 403) page = await webSession({ url, db: store.db }, root);
    });
    tally.print('admin pages');
    await expectBystanderWorks();
  });

  it('uploads: any file name and body, forms broken every way', { timeout: PROPERTY_MS + 60_000 }, async () => {
    const page = await webSession({ url, db: store.db }, fuzzer);
    const input = fc.record({ u: upload, csrf: fc.oneof({ weight: 6, arbitrary: fc.constant('header') }, { weight: 1, arbitrary: fc.constant('none') }) });
    const tally = new Tally();
    await fuzz('uploads', input, async ({ u, csrf }) => {
      const { contentType, body } = uploadBytes(u);
      const target = `/files/upload${u.dirQuery === undefined ? '' : `?dir=${u.dirQuery}`}`;
      const headers = pageHeaders(port, page, contentType, body, csrf === 'header' ? page.csrf : undefined);
      const a = await sendWire(port, wireBytes({ method: 'POST', target, headers, body }), { timeoutMs: 30_000 });
      if (a.timedOut) throw new Error(`POST ${target}: no answer in 30 s`);
      await expectSound(`POST ${target}`, a.status, a.text);
      tally.add(`HTTP ${a.status}`, `${u.cut} ${u.filenameParam.slice(0, 60)} → ${a.body.toString('utf8')}`);
    });
    tally.print('uploads');
    await expectBystanderWorks();
  });

  it('the live channel: any event and payload, raw engine.io frames', { timeout: PROPERTY_MS + 60_000 }, async () => {
    const page = await webSession({ url, db: store.db }, fuzzer);
    const own = (await page.post('/chat/new', {})).headers.get('location')?.split('/').pop() ?? 'none';
    let socket = await liveSocket(page);
    const heard: string[] = [];
    const listen = (s: Socket) => s.onAny((event: unknown, ...args: unknown[]) => heard.push(`${String(event)} ${JSON.stringify(args)}`));
    listen(socket);
    const tally = new Tally();
    const input = fc.oneof(
      { weight: 2, arbitrary: fc.array(socketEvent, { minLength: 1, maxLength: 3 }).map((events) => ({ events })) },
      { weight: 1, arbitrary: fc.record({ auth: fc.oneof(fc.constant(page.csrf), anyText), frames: fc.array(rawFrame, { minLength: 1, maxLength: 4 }) }) },
    );
    await fuzz('the live channel', input, async (run) => {
      heard.length = 0;
      if ('events' in run) {
        // A connection the hub cut off (more than 20 events a second) is opened again, as a page does.
        if (!socket.connected) listen((socket = await liveSocket(page)));
        for (const e of run.events) {
          try {
            // An acknowledgement, if the hub sends one, comes before the answer to the watch below (one connection, in order).
            if (e.ack) socket.emit(e.name, ...e.args, (...reply: unknown[]) => heard.push(`ack ${JSON.stringify(reply)}`));
            else socket.emit(e.name, ...e.args);
          } catch {
            // socket.io's client refuses reserved names itself (connect, disconnect…): nothing was sent.
          }
        }
      } else {
        const said = await rawExchange(page, run.auth, run.frames);
        await expectSound('raw engine.io frames', 200, said.join('\n'));
      }
      // The fuzzer's own watch still works on the connection, or on a new one if the hub cut it off (over 20 events a second).
      let watched = socket.connected ? await socket.timeout(5000).emitWithAck('watch', own).catch((e: Error) => e.message) : 'cut off';
      tally.add(socket.connected ? 'kept' : 'cut off');
      if (!socket.connected) {
        listen((socket = await liveSocket(page)));
        watched = await socket.timeout(5000).emitWithAck('watch', own);
      }
      expect(watched, 'the fuzzer’s own watch').toEqual({ ok: true });
      await expectSound('what the live channel sent', 200, heard.join('\n'));
      tally.add('events' in run ? 'events' : 'raw frames');
    });
    tally.print('live channel');
    socket.disconnect();
    await expectBystanderWorks();
  });
});

describe('what the fuzzer found, kept as plain cases', () => {
  it('an upgrade to a path nobody serves is cut at once, however much body it carries (it held its connection for good, and the stop waited for it)', async () => {
    // The replicas' run channel too: a gateway alone on SQLite has none.
    for (const target of ['/chat', '/mcp', '/socket.io', '/internal/v3/channel']) {
      const body = Buffer.alloc(200_000, 0x61);
      const t0 = performance.now();
      const a = await sendWire(
        port,
        wireBytes({ method: 'POST', target, headers: [['Host', `127.0.0.1:${port}`], ['Connection', 'Upgrade, HTTP2-Settings'], ['Upgrade', 'h2c'], ['Content-Length', String(body.length)]], body }),
        { timeoutMs: 5000 },
      );
      expect([a.status, a.timedOut], target).toEqual([0, false]);
      // socket.io alone ends such a connection after a second, and leaves it open while its body is unread.
      expect(performance.now() - t0, target).toBeLessThan(500);
    }
    await expectBystanderWorks();
  });
});

/**
 * An engine.io websocket opened by hand with the page's cookie: the socket.io connect with
 * `auth` as its CSRF token, then `frames` as they are; what the server sent back within a
 * moment. A server that closes the connection on a bad frame is doing its job.
 */
function rawExchange(page: WebSession, auth: string, frames: (string | Buffer)[]): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const said: string[] = [];
    const ws = new WebSocket(`ws://127.0.0.1:${port}/socket.io/?EIO=4&transport=websocket`, { headers: { cookie: page.cookie(), origin: url } });
    const done = () => {
      clearTimeout(timer);
      ws.terminate();
      resolve(said);
    };
    const timer = setTimeout(done, 3000);
    let sent = false;
    ws.on('message', (data: Buffer, binary: boolean) => {
      const text = binary ? `<binary ${data.length}>` : data.toString('utf8');
      said.push(text);
      // Engine.io's open packet: connect to the main namespace with the token.
      if (text.startsWith('0{')) ws.send(`40${JSON.stringify({ csrf: auth })}`);
      else if (text.startsWith('40') || text.startsWith('44')) {
        if (sent) return;
        sent = true;
        for (const f of frames) ws.send(f);
        setTimeout(done, 150);
      }
    });
    ws.on('close', done);
    ws.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`the engine.io websocket failed: ${e.message}`));
    });
  });
}
