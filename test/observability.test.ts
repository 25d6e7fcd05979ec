/**
 * What an operator sees, on the real gateway: Prometheus metrics (src/telemetry/metrics.ts)
 * behind the admin gate or on a listener of their own, never public; the Grafana
 * dashboard's queries name only metrics that exist; and OpenTelemetry traces sent to an
 * OTLP/HTTP stand-in, continuing the `traceparent` a client sends in an HTTP header or in
 * an MCP request's `_meta`, with the tool call, the sandbox run and the model round as
 * spans beneath.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureUser } from '../src/accounts/accounts.js';
import { createToken } from '../src/tokens/tokens.js';
import { startGatewayProcess, type GatewayProcess } from './support/gateway-process.js';
import { startGateway, type Gateway } from './support/mcp.js';
import { startStandin, type Standin } from './support/model-standins.js';
import { freePort } from './support/ports.js';
import { rawRequest } from './support/raw-request.js';
import { eventually } from './support/until.js';

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: { key: string; value: Record<string, unknown> }[];
}

/** An OTLP/HTTP traces receiver: keeps every span posted to /v1/traces (JSON, as the exporter sends it). */
async function startCollector(): Promise<{ url: string; spans: OtlpSpan[]; close(): Promise<void> }> {
  const spans: OtlpSpan[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      if (req.url === '/v1/traces' && req.headers['content-type']?.startsWith('application/json') && req.headers['x-collector-key'] === 'k1') {
        const doc = JSON.parse(body) as { resourceSpans: { scopeSpans: { spans: OtlpSpan[] }[] }[] };
        for (const rs of doc.resourceSpans) for (const ss of rs.scopeSpans) spans.push(...ss.spans);
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } else res.writeHead(400).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`,
    spans,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

const attr = (s: OtlpSpan, key: string) => {
  const v = s.attributes.find((a) => a.key === key)?.value;
  return v ? Object.values(v)[0] : undefined;
};

/** The value of a sample line (`name{labels} value`) whose labels include all of `labels`; 0 when absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = m[2] ?? '';
    if (Object.entries(labels).every(([k, v]) => have.includes(`${k}="${v}"`))) total += Number(m[3]);
  }
  return total;
}

const MCP_HEADERS = (token: string, extra: Record<string, string> = {}) => ({
  authorization: `Bearer ${token}`,
  'mcp-protocol-version': '2026-07-28',
  'mcp-method': 'tools/call',
  'mcp-name': 'execute_code',
  ...extra,
});

const callBody = (id: number, code: string, meta: Record<string, unknown> = {}) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: {
    name: 'execute_code',
    arguments: { language: 'python', code },
    _meta: {
      'io.modelcontextprotocol/protocolVersion': '2026-07-28',
      'io.modelcontextprotocol/clientInfo': { name: 'sandgate-test', version: '1' },
      'io.modelcontextprotocol/clientCapabilities': {},
      ...meta,
    },
  },
});

describe('metrics and traces', () => {
  let collector: Awaited<ReturnType<typeof startCollector>>;
  let model: Standin;
  let gw: Gateway;
  let admin: string;
  let member: string;

  beforeAll(async () => {
    collector = await startCollector();
    model = await startStandin('anthropic', () => ({ text: ['Hello ', 'there.'], usage: { input: 40, output: 3 } }));
    gw = await startGateway({
      env: {
        SANDGATE_TRACES_URL: collector.url,
        SANDGATE_TRACES_HEADERS: 'x-collector-key=k1',
        SANDGATE_ANTHROPIC_API_KEY: 'sk-team',
        SANDGATE_ANTHROPIC_BASE_URL: model.baseURL,
        SANDGATE_MODELS: 'anthropic:claude-test',
      },
    });
    const a = await ensureUser(gw.gateway.store.db, 'metrics-admin', { isAdmin: true });
    admin = (await createToken(gw.gateway.store.db, { userId: a.id, name: 'prometheus' })).token;
    member = await gw.tokenFor('metrics-member');
  }, 120_000);

  afterAll(async () => {
    await gw?.close();
    await model?.close();
    await collector?.close();
  });

  const scrape = async (token?: string) => {
    const r = await fetch(`${gw.url}/admin/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {}, redirect: 'manual' });
    return { status: r.status, type: r.headers.get('content-type') ?? '', text: await r.text() };
  };

  it("serves the metrics to an admin's token only", async () => {
    const ok = await scrape(admin);
    expect(ok.status).toBe(200);
    expect(ok.type).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(ok.text).toMatch(/^# HELP sandgate_executions_total /m);
    expect(ok.text).toMatch(/^process_resident_memory_bytes \d+/m);
    for (const refused of [await scrape(member), await scrape(), await scrape('sgp_not-a-token')]) {
      expect(refused.status).not.toBe(200);
      expect(refused.text).not.toMatch(/sandgate_|process_/);
    }
    expect((await scrape(member)).status).toBe(403);
    // Not on the public port's /metrics either.
    expect((await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${admin}` } })).status).toBe(404);
  });

  it('counts runs, requests, queries, sandboxes and model rounds, and traces them under the client\'s trace', async () => {
    const before = (await scrape(admin)).text;
    // A run whose HTTP request continues the client's trace.
    const trace1 = '0af7651916cd43dd8448eb211c80319c';
    const parent1 = 'b7ad6b7169203331';
    const r1 = await rawRequest(gw.mcpUrl, { headers: MCP_HEADERS(member, { traceparent: `00-${trace1}-${parent1}-01` }), body: callBody(1, 'print(6 * 7)') });
    expect(JSON.stringify(r1.messages[0])).toContain('42');
    // One whose MCP request carries the trace in its _meta (no header).
    const trace2 = '4bf92f3577b34da6a3ce929d0e0e4736';
    const parent2 = '00f067aa0ba902b7';
    const r2 = await rawRequest(gw.mcpUrl, { headers: MCP_HEADERS(member), body: callBody(2, 'print(1 / 0)', { traceparent: `00-${trace2}-${parent2}-01` }) });
    expect(r2.status).toBe(200);
    // A /v1 turn with the stand-in model.
    const chat = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${member}`, 'content-type': 'application/json', traceparent: `00-${trace1}-${parent1}-01` },
      body: JSON.stringify({ model: 'anthropic:claude-test', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(chat.status).toBe(200);
    await chat.text();

    const after = (await scrape(admin)).text;
    const grew = (name: string, labels: Record<string, string> = {}) => sample(after, name, labels) - sample(before, name, labels);
    expect(grew('sandgate_executions_total', { language: 'python', outcome: 'ok' })).toBe(1);
    expect(grew('sandgate_executions_total', { language: 'python', outcome: 'error' })).toBe(1);
    expect(grew('sandgate_execution_duration_seconds_count', { language: 'python' })).toBe(2);
    expect(grew('sandgate_http_requests_total', { method: 'POST', route: '/mcp', status: '200' })).toBe(2);
    expect(grew('sandgate_http_requests_total', { method: 'POST', route: '/v1/chat/completions', status: '200' })).toBe(1);
    expect(grew('sandgate_http_requests_total', { route: '/admin/metrics', status: '200' })).toBeGreaterThanOrEqual(1);
    expect(grew('sandgate_db_query_duration_seconds_count', { dialect: gw.gateway.store.dialect, statement: 'select' })).toBeGreaterThan(0);
    expect(grew('sandgate_model_rounds_total', { provider: 'anthropic', outcome: 'ok' })).toBe(1);
    expect(grew('sandgate_model_tokens_total', { provider: 'anthropic', direction: 'input' })).toBe(40);
    expect(grew('sandgate_model_tokens_total', { provider: 'anthropic', direction: 'output' })).toBe(3);
    // The member's sandbox: one, idle (or frozen) now; and a start of some kind for it.
    expect(sample(after, 'sandgate_sandboxes', { state: 'idle' }) + sample(after, 'sandgate_sandboxes', { state: 'frozen' })).toBeGreaterThanOrEqual(1);
    expect(sample(after, 'sandgate_sandboxes', { state: 'running' })).toBe(0);
    expect(grew('sandgate_sandbox_starts_total')).toBeGreaterThanOrEqual(1);
    // A path nobody routes is one label, whatever the path.
    await fetch(`${gw.url}/no/such/${Math.random()}`);
    expect(sample((await scrape(admin)).text, 'sandgate_http_requests_total', { route: 'unmatched', status: '404' })).toBeGreaterThanOrEqual(1);
    expect((await scrape(admin)).text).not.toMatch(/route="\/no\/such/);

    // The spans reach the collector (batched every second).
    const named = (trace: string, re: RegExp) => collector.spans.filter((s) => s.traceId === trace && re.test(s.name));
    await eventually(async () => named(trace1, /^sandbox\.run$/).length >= 1 && named(trace2, /^sandbox\.run$/).length >= 1 && named(trace1, /^chat claude-test$/).length >= 1, 15_000);
    // Header: the server span is the client's span's child; the tool call its child; the run the tool call's.
    const server = named(trace1, /^POST \/mcp$/)[0]!;
    expect(server.parentSpanId).toBe(parent1);
    expect(server.kind).toBe(2); // SERVER
    expect(attr(server, 'http.response.status_code')).toBe(200);
    const call = named(trace1, /^tools\/call execute_code$/)[0]!;
    expect(call.parentSpanId).toBe(server.spanId);
    const run = named(trace1, /^sandbox\.run$/)[0]!;
    expect(run.parentSpanId).toBe(call.spanId);
    expect(attr(run, 'sandgate.language')).toBe('python');
    // _meta: the tool call continues the trace it names, and the run is beneath it.
    const call2 = named(trace2, /^tools\/call execute_code$/)[0]!;
    expect(call2.parentSpanId).toBe(parent2);
    expect(named(trace2, /^sandbox\.run$/)[0]!.parentSpanId).toBe(call2.spanId);
    // The model round of the /v1 request, beneath its server span, with the tokens used.
    const v1 = named(trace1, /^POST \/v1\/chat\/completions$/)[0]!;
    const round = named(trace1, /^chat claude-test$/)[0]!;
    expect(round.parentSpanId).toBe(v1.spanId);
    expect(attr(round, 'gen_ai.provider.name')).toBe('anthropic');
    expect(Number(attr(round, 'gen_ai.usage.input_tokens'))).toBe(40);
    // Never the code, its output or a message's text.
    expect(JSON.stringify(collector.spans)).not.toMatch(/6 \* 7|1 \/ 0|Hello there/);
  }, 120_000);

  it('a malformed traceparent, in the header or in _meta, starts no trace of its own and breaks nothing', async () => {
    const valid = { trace: '5bf92f3577b34da6a3ce929d0e0e4736', span: '10f067aa0ba902b7' };
    const header = [
      '00-zzzz',
      `00-${'0'.repeat(32)}-${valid.span}-01`,
      `00-${valid.trace}-${'0'.repeat(16)}-01`,
      `ff-${valid.trace}-${valid.span}-01`,
      `00-${valid.trace.toUpperCase()}-${valid.span.toUpperCase()}-01`,
      `00-${valid.trace}-${valid.span}-01, 00-${valid.trace}-${valid.span}-01`,
      'x'.repeat(8000),
    ];
    const seen = collector.spans.length;
    for (const [i, tp] of header.entries()) {
      const r = await rawRequest(gw.mcpUrl, { headers: MCP_HEADERS(member, { traceparent: tp, tracestate: `a=${'b'.repeat(5000)}` }), body: callBody(100 + i, 'print(6 * 7)') });
      expect(r.status).toBe(200);
      expect(JSON.stringify(r.messages[0])).toContain('42');
    }
    // Each request a server span of a trace of its own, with no parent: nothing of the header was taken.
    const fresh = () => collector.spans.slice(seen).filter((s) => s.name === 'POST /mcp');
    await eventually(async () => fresh().length >= header.length, 15_000);
    for (const s of fresh()) {
      expect(s.parentSpanId ?? '').toBe('');
      expect(s.traceId).toMatch(/^[0-9a-f]{32}$/);
      expect(s.traceId).not.toBe(valid.trace);
      expect(s.traceId).not.toBe('0'.repeat(32));
    }
    // In _meta (with a good header): the tool call's parent is the request's server span, not what _meta named.
    const junk: unknown[] = [42, { traceparent: `00-${valid.trace}-${valid.span}-01` }, [`00-${valid.trace}-${valid.span}-01`], 'garbage', `00-${valid.trace}-${valid.span}`];
    for (const [i, tp] of junk.entries()) {
      const trace = crypto.randomBytes(16).toString('hex');
      const r = await rawRequest(gw.mcpUrl, {
        headers: MCP_HEADERS(member, { traceparent: `00-${trace}-b7ad6b7169203331-01` }),
        body: callBody(200 + i, 'print(6 * 7)', { traceparent: tp, tracestate: { x: 1 } }),
      });
      expect(JSON.stringify(r.messages[0])).toContain('42');
      const inTrace = (re: RegExp) => collector.spans.filter((s) => s.traceId === trace && re.test(s.name));
      await eventually(async () => inTrace(/^tools\/call execute_code$/).length === 1 && inTrace(/^POST \/mcp$/).length === 1, 15_000);
      expect(inTrace(/^tools\/call execute_code$/)[0]!.parentSpanId).toBe(inTrace(/^POST \/mcp$/)[0]!.spanId);
    }
    expect(collector.spans.some((s) => s.traceId === valid.trace || s.parentSpanId === valid.span)).toBe(false);
  }, 120_000);

  it("has a Grafana dashboard whose queries name only metrics that exist", async () => {
    const dashboard = JSON.parse(fs.readFileSync(path.join(import.meta.dirname, '../deploy/grafana/sandgate.json'), 'utf8')) as { panels: { targets?: { expr: string }[] }[]; templating: { list: { query: string }[] } };
    const exprs = [...dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr)), ...dashboard.templating.list.map((v) => v.query)];
    expect(exprs.length).toBeGreaterThan(20);
    const exposition = (await scrape(admin)).text;
    const defined = new Set([...exposition.matchAll(/^# TYPE (\S+) (\w+)/gm)].flatMap(([, name, type]) => (type === 'histogram' ? [`${name}_bucket`, `${name}_sum`, `${name}_count`] : [name!])));
    const used = new Set(exprs.flatMap((e) => [...e.matchAll(/\b((?:sandgate|process|nodejs)_[a-z0-9_]+)/g)].map((m) => m[1]!)));
    expect(used.size).toBeGreaterThan(15);
    for (const name of used) expect(defined.has(name), `${name} is not a metric the gateway serves`).toBe(true);
    // And every sandgate metric is on the dashboard.
    for (const name of [...exposition.matchAll(/^# TYPE (sandgate_\S+) (\w+)/gm)].map((m) => m[1]!)) {
      expect([...used].some((u) => u === name || u.startsWith(`${name}_`)), `${name} is on no panel`).toBe(true);
    }
  });
});

describe('the metrics listener', () => {
  let g: GatewayProcess | undefined;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-metrics-'));
  afterAll(async () => {
    g?.child.kill('SIGTERM');
    await g?.exited;
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('serves GET /metrics on its own address and nothing else; the public port does not', async () => {
    const port = await freePort();
    g = startGatewayProcess({ SANDGATE_DATA_DIR: dataDir, SANDGATE_PORT: '0', SANDGATE_WARM_POOL_SIZE: '0', SANDGATE_METRICS_LISTEN: `127.0.0.1:${port}` });
    const url = await g.ready();
    const m = await fetch(`http://127.0.0.1:${port}/metrics`);
    expect(m.status).toBe(200);
    const text = await m.text();
    expect(text).toMatch(/^# TYPE sandgate_sandboxes gauge/m);
    expect(text).toMatch(/^sandgate_sandboxes\{state="pooled"\} 0/m);
    expect(text).toMatch(/^nodejs_active_handles_total \d+/m);
    for (const p of ['/', '/admin', '/metrics/x', '/mcp']) expect((await fetch(`http://127.0.0.1:${port}${p}`)).status).toBe(404);
    expect((await fetch(`http://127.0.0.1:${port}/metrics`, { method: 'POST' })).status).toBe(404);
    expect((await fetch(`${url}/metrics`)).status).toBe(404);
    const admin = await fetch(`${url}/admin/metrics`, { redirect: 'manual' });
    expect(admin.status).not.toBe(200);
    expect(await admin.text()).not.toMatch(/sandgate_/);
  }, 180_000);
});
