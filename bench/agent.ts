/**
 * What the built-in agent adds around a model, against a stand-in provider that answers
 * at once (test/support/model-standins.ts, OpenAI's streaming format, the real AI SDK
 * provider package pointed at it):
 *
 * 1. The loop's overhead per model round trip: a turn's wall time minus the stand-in's
 *    own time serving each request and minus each tool call's time (from the tool_call
 *    event to the tool_result event), divided by the rounds. Text-only turns (one round)
 *    and turns of five rounds that call `list_files`.
 * 2. Time to first token: from the stand-in writing its first text chunk to the agent's
 *    sink receiving it, and to an `openai` client streaming /v1/chat/completions
 *    receiving it.
 * 3. 50 conversations streaming through /v1/chat/completions at once, from a gateway
 *    started as main.ts starts it (its own process, so its memory is its own): errors,
 *    the latency each streamed chunk gains between the stand-in writing it and the
 *    client reading it (p50/p95), and the gateway's resident memory.
 *
 * The gateway runs with the PII boundary on (the default): every user message and
 * streamed piece passes it.
 *
 *   node --import tsx bench/agent.ts   (BENCH_TURNS, BENCH_CONCURRENT, BENCH_CHUNKS, BENCH_CHUNK_MS)
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import type { AgentEvent } from '../src/agent/events.js';
import { openStore } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';
import { ensureUser, type User } from '../src/accounts/accounts.js';
import { createToken } from '../src/tokens/tokens.js';
import { REPO_ROOT } from '../src/paths.js';
import { startGateway } from '../test/support/mcp.js';
import { startStandin, type StandinRequest } from '../test/support/model-standins.js';
import { freePort } from '../test/support/ports.js';

const TURNS = Number(process.env.BENCH_TURNS ?? 200);
const CONCURRENT = Number(process.env.BENCH_CONCURRENT ?? 50);
const CHUNKS = Number(process.env.BENCH_CHUNKS ?? 100);
const CHUNK_MS = Number(process.env.BENCH_CHUNK_MS ?? 20);

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const f = (x: number) => (x < 10 ? x.toFixed(2) : x.toFixed(1));
const row = (label: string, xs: number[], unit = 'ms') => console.log(`${label.padEnd(58)} p50 ${f(pct(xs, 50)).padStart(7)} ${unit}   p95 ${f(pct(xs, 95)).padStart(7)} ${unit}   (n=${xs.length})`);

async function loopOverhead(): Promise<void> {
  const standin = await startStandin('openai', () => ({ text: ['ok'] }), { keep: false });
  const seen = new Map<string, StandinRequest[]>();
  let script: (r: StandinRequest) => { text?: string[]; toolCalls?: { name: string; args: Record<string, unknown> }[] } = () => ({ text: ['ok'] });
  standin.setScript((r) => {
    const list = seen.get(r.lastUserText) ?? [];
    list.push(r);
    seen.set(r.lastUserText, list);
    return script(r);
  });
  const gw = await startGateway({
    pii: true,
    env: { SANDGATE_OPENAI_API_KEY: 'sk-bench', SANDGATE_OPENAI_BASE_URL: standin.baseURL, SANDGATE_MODELS: 'openai:bench', SANDGATE_AGENT_MAX_ROUNDS: '10', SANDGATE_RATE_LIMIT_PER_MIN: '1000000', SANDGATE_RATE_LIMIT_BURST: '100000' },
  });
  try {
    const user: User = await ensureUser(gw.gateway.store.db, 'bench');
    const agent = gw.gateway.agent;
    let seq = 0;
    const turn = async (rounds: number) => {
      const message = `turn ${++seq}`;
      script = (r) => (r.toolResults < rounds - 1 ? { toolCalls: [{ name: 'list_files', args: {} }] } : { text: ['Here ', 'is ', 'the ', 'answer.'] });
      const conv = await agent.startConversation(user, { model: 'openai:bench', source: 'web' });
      const events: { at: number; e: AgentEvent }[] = [];
      const t0 = performance.now();
      const outcome = await agent.send(user, conv.id, message, (e) => events.push({ at: performance.now(), e }));
      const wall = performance.now() - t0;
      if (outcome.reason !== 'complete' || outcome.rounds !== rounds) throw new Error(`turn ended ${outcome.reason} after ${outcome.rounds} rounds`);
      const reqs = seen.get(message)!;
      seen.delete(message);
      const provider = reqs.reduce((a, r) => a + (r.timing.ended! - r.timing.received), 0);
      let tools = 0;
      for (const { at, e } of events) {
        if (e.type === 'tool_call') tools -= at;
        if (e.type === 'tool_result') tools += at;
      }
      const firstText = events.find((x) => x.e.type === 'text')!.at;
      const lastReq = reqs.at(-1)!;
      return { perRound: (wall - provider - tools) / rounds, ttft: firstText - lastReq.timing.text[0]! };
    };
    for (let i = 0; i < 30; i++) await turn(i % 2 ? 1 : 3);
    const one: number[] = [];
    const five: number[] = [];
    const ttft: number[] = [];
    for (let i = 0; i < TURNS; i++) {
      const a = await turn(1);
      one.push(a.perRound);
      ttft.push(a.ttft);
    }
    for (let i = 0; i < TURNS / 4; i++) five.push((await turn(5)).perRound);
    row('loop overhead per round trip, text-only turns', one);
    row('loop overhead per round trip, 5-round turns with list_files', five);
    row('first token: stand-in writes it -> agent sink', ttft);

    // The same through /v1 with the openai client, over HTTP.
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: await gw.tokenFor('bench', 'api'), maxRetries: 0 });
    script = () => ({ text: ['Here ', 'is ', 'the ', 'answer.'] });
    const viaApi: number[] = [];
    for (let i = 0; i < TURNS / 2 + 20; i++) {
      const message = `api ${i}`;
      const stream = await client.chat.completions.create({ model: 'openai:bench', messages: [{ role: 'user', content: message }], stream: true });
      let first: number | undefined;
      for await (const chunk of stream) if (first === undefined && chunk.choices[0]?.delta.content) first = performance.now();
      const req = seen.get(message)![0]!;
      seen.delete(message);
      if (i >= 20) viaApi.push(first! - req.timing.text[0]!);
    }
    row('first token: stand-in writes it -> openai client via /v1', viaApi);
  } finally {
    await gw.close();
    await standin.close();
  }
}

function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

async function concurrentStreams(): Promise<void> {
  const standin = await startStandin('openai', () => ({ text: ['ok'] }), { keep: false });
  const sentAt = new Map<string, number[]>();
  standin.setScript((r) => {
    const times: number[] = [];
    sentAt.set(r.lastUserText, times);
    // The stand-in's record of when it wrote each chunk is pushed as it writes.
    r.timing.text = times;
    return { text: Array.from({ length: CHUNKS }, (_, i) => `c${i} `), delayMs: CHUNK_MS };
  });
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-agent-'));
  // The gateway below opens the same SQLite store (SANDGATE_DATABASE_URL is cleared for it).
  const store = await openStore({ dataDir }, MIGRATIONS);
  const tokens: string[] = [];
  for (let i = 0; i < 10; i++) tokens.push((await createToken(store.db, { userId: (await ensureUser(store.db, `user${i}`)).id, name: 'bench' })).token);
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
      SANDGATE_RATE_LIMIT_BURST: '1000',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  try {
    const t0 = Date.now();
    while ((await fetch(`${url}/readyz`).then((r) => r.status).catch(() => 0)) !== 200) {
      if (Date.now() - t0 > 120_000) throw new Error('the gateway did not get ready');
      await new Promise((r) => setTimeout(r, 200));
    }
    const stream = async (i: number) => {
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: tokens[i % tokens.length]!, maxRetries: 0 });
      const message = `conversation ${i} of ${Date.now()}`;
      const got: number[] = [];
      const s = await client.chat.completions.create({ model: 'openai:bench', messages: [{ role: 'user', content: message }], stream: true });
      for await (const chunk of s) {
        const m = /^c(\d+) $/.exec(chunk.choices[0]?.delta.content ?? '');
        if (m) got[Number(m[1])] = performance.now();
      }
      const sent = sentAt.get(message) ?? [];
      sentAt.delete(message);
      if (got.filter((x) => x !== undefined).length !== CHUNKS) throw new Error(`conversation ${i}: ${got.length} of ${CHUNKS} chunks arrived`);
      return got.map((at, k) => at - sent[k]!);
    };
    // Warm up the gateway's paths first.
    await Promise.all(Array.from({ length: 5 }, (_, i) => stream(i)));
    const idle = rssOf(child.pid!);
    let peak = idle;
    const sampler = setInterval(() => (peak = Math.max(peak, rssOf(child.pid!))), 50);
    const started = performance.now();
    const results = await Promise.allSettled(Array.from({ length: CONCURRENT }, (_, i) => stream(100 + i)));
    const elapsed = performance.now() - started;
    clearInterval(sampler);
    const errors = results.filter((r) => r.status === 'rejected');
    const added = results.flatMap((r) => (r.status === 'fulfilled' ? r.value : []));
    console.log(`${CONCURRENT} concurrent streams via /v1 (${CHUNKS} chunks, one each ${CHUNK_MS} ms): ${errors.length} errors, all done in ${(elapsed / 1000).toFixed(1)} s`);
    for (const e of errors.slice(0, 3)) console.log(`  error: ${(e as PromiseRejectedResult).reason}`);
    row('added latency per streamed chunk (stand-in -> client)', added);
    console.log(`gateway resident memory: ${(idle / 2 ** 20).toFixed(0)} MB before, ${(peak / 2 ** 20).toFixed(0)} MB peak with ${CONCURRENT} streams`);
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    await standin.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
    fs.rmSync(`${dataDir}-homes`, { recursive: true, force: true });
  }
}

console.log(`sandgate agent bench, ${new Date().toISOString()}`);
await loopOverhead();
await concurrentStreams();
