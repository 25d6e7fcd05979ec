/**
 * Local stand-ins for the model providers, speaking each one's real streaming wire
 * format, so the real client libraries (the AI SDK's provider packages) can be pointed
 * at them by base URL:
 *
 * - OpenAI chat completions (`POST /v1/chat/completions`, SSE `data:` chunks, `[DONE]`),
 *   which any OpenAI-compatible server (Ollama, vLLM) speaks too;
 * - Anthropic messages (`POST /v1/messages`, SSE with `event:` names);
 * - Google Gemini (`POST /v1beta/models/<model>:streamGenerateContent?alt=sse`).
 *
 * A script decides each reply from what the client sent (normalised: the last user text
 * and the last tool result, whatever the provider's shape) and may answer with an HTTP
 * error instead. Every raw request body is kept, for tests of what reached a provider.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export type ProviderKind = 'openai' | 'anthropic' | 'gemini';

export interface ScriptedToolCall {
  name: string;
  /** An object, or a raw string sent as the arguments text as it is (for malformed JSON). */
  args: Record<string, unknown> | string;
}

export interface ScriptedReply {
  /** Text, in the chunks it is streamed in. */
  text?: string[];
  toolCalls?: ScriptedToolCall[];
  usage?: { input: number; output: number };
  /** Answer with this HTTP status and body instead (e.g. 429 with retry-after). */
  status?: number;
  headers?: Record<string, string>;
  body?: string;
  /** Milliseconds to wait between chunks. */
  delayMs?: number;
}

export interface StandinRequest {
  provider: ProviderKind;
  model: string;
  /** The raw JSON body, as received. */
  raw: string;
  body: Record<string, unknown>;
  /** The text of the last user message that is not a tool result. */
  lastUserText: string;
  /** The text of the newest tool result, if the last message carries one. */
  lastToolResult?: string;
  /** Tool results in the conversation so far. */
  toolResults: number;
  /** Names of the tools offered. */
  tools: string[];
  /** Index of this request among all the stand-in received (0-based), kept or not. */
  n: number;
  headers: http.IncomingHttpHeaders;
  /** performance.now() when the body was in, when each text chunk was written, and when the reply ended. */
  timing: { received: number; text: number[]; ended?: number };
}

export type Script = (req: StandinRequest) => ScriptedReply | Promise<ScriptedReply>;

export interface Standin {
  provider: ProviderKind;
  /** What the provider package takes as `baseURL`. */
  baseURL: string;
  url: string;
  requests: StandinRequest[];
  setScript(script: Script): void;
  close(): Promise<void>;
}

const textOf = (content: unknown): string => {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((c: { type?: string; text?: string; content?: unknown }) => (typeof c === 'string' ? c : (c.text ?? (c.content !== undefined ? textOf(c.content) : ''))))
      .join('');
  }
  if (content && typeof content === 'object') return JSON.stringify(content);
  return '';
};

function normalise(provider: ProviderKind, body: Record<string, unknown>): Pick<StandinRequest, 'lastUserText' | 'lastToolResult' | 'toolResults' | 'tools'> {
  let lastUserText = '';
  let lastToolResult: string | undefined;
  let toolResults = 0;
  let tools: string[] = [];
  if (provider === 'openai') {
    const messages = (body.messages ?? []) as { role: string; content: unknown }[];
    for (const m of messages) {
      if (m.role === 'user') lastUserText = textOf(m.content);
      if (m.role === 'tool') toolResults++;
    }
    const last = messages.at(-1);
    if (last?.role === 'tool') lastToolResult = textOf(last.content);
    tools = ((body.tools ?? []) as { function: { name: string } }[]).map((t) => t.function.name);
  } else if (provider === 'anthropic') {
    const messages = (body.messages ?? []) as { role: string; content: unknown }[];
    for (const m of messages) {
      if (m.role !== 'user') continue;
      const blocks = Array.isArray(m.content) ? (m.content as { type: string; content?: unknown; text?: string }[]) : [{ type: 'text', text: String(m.content) }];
      const results = blocks.filter((b) => b.type === 'tool_result');
      toolResults += results.length;
      if (results.length) lastToolResult = textOf(results.at(-1)!.content);
      else {
        lastUserText = textOf(blocks);
        lastToolResult = undefined;
      }
    }
    const last = messages.at(-1);
    if (!(Array.isArray(last?.content) && (last.content as { type: string }[]).some((b) => b.type === 'tool_result'))) lastToolResult = undefined;
    tools = ((body.tools ?? []) as { name: string }[]).map((t) => t.name);
  } else {
    const contents = (body.contents ?? []) as { role: string; parts: { text?: string; functionResponse?: { response: unknown } }[] }[];
    for (const c of contents) {
      if (c.role !== 'user') continue;
      const responses = c.parts.filter((p) => p.functionResponse);
      toolResults += responses.length;
      if (responses.length) lastToolResult = textOf((responses.at(-1)!.functionResponse!.response as { content?: unknown }).content ?? responses.at(-1)!.functionResponse!.response);
      else {
        lastUserText = c.parts.map((p) => p.text ?? '').join('');
        lastToolResult = undefined;
      }
    }
    const last = contents.at(-1);
    if (!last?.parts.some((p) => p.functionResponse)) lastToolResult = undefined;
    tools = ((body.tools ?? []) as { functionDeclarations?: { name: string }[] }[]).flatMap((t) => (t.functionDeclarations ?? []).map((f) => f.name));
  }
  return { lastUserText, lastToolResult, toolResults, tools };
}

const argsText = (a: ScriptedToolCall['args']) => (typeof a === 'string' ? a : JSON.stringify(a));

/** The SSE events of one reply, in the provider's format; `text` marks those that carry a text chunk. */
function* events(provider: ProviderKind, model: string, r: ScriptedReply, n: number): Generator<string | { text: string }> {
  const usage = r.usage ?? { input: 100, output: 20 };
  const text = r.text ?? [];
  const calls = r.toolCalls ?? [];
  if (provider === 'openai') {
    const id = `chatcmpl-${n}`;
    const chunk = (delta: unknown, finish: string | null = null, extra: Record<string, unknown> = {}) =>
      `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta, finish_reason: finish }], ...extra })}\n\n`;
    yield chunk({ role: 'assistant', content: '' });
    for (const t of text) yield { text: chunk({ content: t }) };
    for (const [i, c] of calls.entries()) {
      const args = argsText(c.args);
      yield chunk({ tool_calls: [{ index: i, id: `call_${n}_${i}`, type: 'function', function: { name: c.name, arguments: '' } }] });
      // Arguments in two pieces, as real servers stream them.
      const half = Math.floor(args.length / 2);
      yield chunk({ tool_calls: [{ index: i, function: { arguments: args.slice(0, half) } }] });
      yield chunk({ tool_calls: [{ index: i, function: { arguments: args.slice(half) } }] });
    }
    yield chunk({}, calls.length ? 'tool_calls' : 'stop');
    yield `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model, choices: [], usage: { prompt_tokens: usage.input, completion_tokens: usage.output, total_tokens: usage.input + usage.output } })}\n\n`;
    yield 'data: [DONE]\n\n';
  } else if (provider === 'anthropic') {
    const ev = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
    yield ev('message_start', {
      message: { id: `msg_${n}`, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: usage.input, output_tokens: 1 } },
    });
    let index = 0;
    if (text.length) {
      yield ev('content_block_start', { index, content_block: { type: 'text', text: '' } });
      for (const t of text) yield { text: ev('content_block_delta', { index, delta: { type: 'text_delta', text: t } }) };
      yield ev('content_block_stop', { index });
      index++;
    }
    for (const [i, c] of calls.entries()) {
      const args = argsText(c.args);
      yield ev('content_block_start', { index, content_block: { type: 'tool_use', id: `toolu_${n}_${i}`, name: c.name, input: {} } });
      const half = Math.floor(args.length / 2);
      yield ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: args.slice(0, half) } });
      yield ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: args.slice(half) } });
      yield ev('content_block_stop', { index });
      index++;
    }
    yield ev('message_delta', { delta: { stop_reason: calls.length ? 'tool_use' : 'end_turn', stop_sequence: null }, usage: { output_tokens: usage.output } });
    yield ev('message_stop', {});
  } else {
    const data = (parts: unknown[], finishReason?: string, withUsage = false) =>
      `data: ${JSON.stringify({
        candidates: [{ content: { role: 'model', parts }, index: 0, ...(finishReason ? { finishReason } : {}) }],
        ...(withUsage ? { usageMetadata: { promptTokenCount: usage.input, candidatesTokenCount: usage.output, totalTokenCount: usage.input + usage.output } } : {}),
        modelVersion: model,
      })}\n\n`;
    for (const t of text) yield { text: data([{ text: t }]) };
    // Gemini sends a function call whole, never in pieces; its arguments are an object.
    const parts = calls.map((c) => ({ functionCall: { name: c.name, args: typeof c.args === 'string' ? { raw: c.args } : c.args } }));
    yield data(parts.length ? parts : [{ text: '' }], 'STOP', true);
  }
}

export async function startStandin(provider: ProviderKind, script: Script = () => ({ text: ['ok'] }), opts: { keep?: boolean } = {}): Promise<Standin> {
  const requests: StandinRequest[] = [];
  const keep = opts.keep ?? true;
  let count = 0;
  let current = script;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const raw = Buffer.concat(chunks).toString('utf8');
        const url = new URL(req.url ?? '/', 'http://x');
        const expected =
          provider === 'openai' ? url.pathname === '/v1/chat/completions' : provider === 'anthropic' ? url.pathname === '/v1/messages' : /^\/v1beta\/models\/[^/]+:streamGenerateContent$/.test(url.pathname);
        if (req.method !== 'POST' || !expected) {
          res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: `no route ${req.method} ${url.pathname}` } }));
          return;
        }
        let body: Record<string, unknown>;
        try {
          body = JSON.parse(raw) as Record<string, unknown>;
        } catch {
          res.writeHead(400).end('{"error":{"message":"bad json"}}');
          return;
        }
        const model = provider === 'gemini' ? decodeURIComponent(url.pathname.split('/models/')[1]!.split(':')[0]!) : String(body.model);
        const sreq: StandinRequest = { provider, model, raw, body, ...normalise(provider, body), n: count++, headers: req.headers, timing: { received: performance.now(), text: [] } };
        if (keep) requests.push(sreq);
        let reply: ScriptedReply;
        try {
          reply = await current(sreq);
        } catch (e) {
          reply = { status: 500, body: JSON.stringify({ error: { message: (e as Error).message } }) };
        }
        if (reply.status && reply.status !== 200) {
          res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers }).end(reply.body ?? JSON.stringify({ error: { type: 'error', message: `status ${reply.status}` } }));
          return;
        }
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
        for (const e of events(provider, model, reply, sreq.n)) {
          if (res.destroyed) return;
          if (typeof e === 'string') res.write(e);
          else {
            res.write(e.text);
            sreq.timing.text.push(performance.now());
          }
          if (reply.delayMs) await new Promise((r) => setTimeout(r, reply.delayMs));
        }
        res.end();
        sreq.timing.ended = performance.now();
      })();
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    provider,
    url,
    baseURL: provider === 'gemini' ? `${url}/v1beta` : `${url}/v1`,
    requests,
    setScript(s) {
      current = s;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
