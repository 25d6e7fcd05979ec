/**
 * The built-in agent end to end: the real gateway (store, PII vault, sandboxes under
 * gVisor, the tools over an in-process MCP client), the AI SDK's real provider packages
 * pointed at local stand-ins that speak each provider's streaming wire format and are
 * scripted to call tools.
 */
import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { AgentEvent } from '../src/agent/events.js';
import type { TurnOutcome } from '../src/agent/loop.js';
import { messagesOf, turnsOf } from '../src/agent/conversations.js';
import { listAudit } from '../src/audit/audit.js';
import { ensureUser, type User } from '../src/accounts/accounts.js';
import { openStore } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';
import { startGateway, type Gateway } from './support/mcp.js';
import { startStandin, type ProviderKind, type Script, type Standin } from './support/model-standins.js';
import { card, createFakers, person, phone } from './support/pii-corpus-values.js';
import { until } from './support/until.js';

const fk = createFakers(7);
const CUSTOMERS = Array.from({ length: 12 }, (_, i) => {
  const p = person(fk);
  return { name: p.full, email: p.email, phone: phone(fk), amount: 10 + ((i * 37) % 90) + (i % 4) * 0.25 };
});
const CSV = ['name,email,phone,amount', ...CUSTOMERS.map((c) => [c.name, c.email, c.phone, c.amount.toFixed(2)].join(','))].join('\n') + '\n';
const EXPECTED_MEAN = CUSTOMERS.reduce((a, c) => a + c.amount, 0) / CUSTOMERS.length;
const PASTED = { ...person(fk), phone: phone(fk), card: card(fk) };
const RAW_VALUES = [
  ...CUSTOMERS.flatMap((c) => [c.name, c.email, c.phone]),
  PASTED.full,
  PASTED.email,
  PASTED.phone,
  PASTED.card,
];

const ANALYSIS_CODE = [
  'import os',
  'import pandas as pd',
  'import matplotlib.pyplot as plt',
  "df = pd.read_csv('/workspace/orders.csv')",
  'print(df.head(3).to_string())',
  'print(f"MEAN={df.amount.mean():.2f}")',
  "os.makedirs('/workspace/figures', exist_ok=True)",
  "df.amount.plot(kind='hist', title='Order amounts')",
  "plt.savefig('/workspace/figures/amounts.png')",
].join('\n');

/** The model of a full task: analyse the CSV in the sandbox, then cite the figure it printed. */
const analysis: Script = (r) => {
  if (r.lastToolResult === undefined) return { text: ['I will analyse ', 'the file in your sandbox.'], toolCalls: [{ name: 'execute_code', args: { language: 'python', code: ANALYSIS_CODE } }] };
  const mean = /MEAN=([0-9.]+)/.exec(r.lastToolResult)?.[1] ?? 'unknown';
  return { text: ['The mean order ', `amount is ${mean}; `, 'the histogram is in figures/amounts.png.'] };
};

const MODELS: Record<ProviderKind | 'compatible', string> = { openai: 'openai:gpt-test', anthropic: 'anthropic:claude-test', gemini: 'gemini:gemini-test', compatible: 'local:qwen-test' };

let standins: Record<keyof typeof MODELS, Standin>;
let gw: Gateway;
let ana: User;

function env(s: typeof standins, extra: Record<string, string> = {}): Record<string, string> {
  return {
    SANDGATE_OPENAI_API_KEY: 'sk-team-openai',
    SANDGATE_OPENAI_BASE_URL: s.openai.baseURL,
    SANDGATE_ANTHROPIC_API_KEY: 'sk-team-anthropic',
    SANDGATE_ANTHROPIC_BASE_URL: s.anthropic.baseURL,
    SANDGATE_GEMINI_API_KEY: 'team-gemini',
    SANDGATE_GEMINI_BASE_URL: s.gemini.baseURL,
    SANDGATE_COMPATIBLE_BASE_URL: s.compatible.baseURL,
    SANDGATE_MODELS: Object.values(MODELS).join(','),
    SANDGATE_AGENT_MAX_ROUNDS: '4',
    SANDGATE_AGENT_TURN_TOKENS: '5000',
    SANDGATE_AGENT_CONTEXT_TOKENS: '30000',
    SANDGATE_AGENT_RETRIES: '2',
    ...extra,
  };
}

interface Asked {
  conversationId: string;
  events: AgentEvent[];
  outcome: TurnOutcome;
  /** The answer as the user saw it. */
  text: string;
}

async function ask(user: User, model: string, message: string, o: { conversationId?: string; onEvent?: (e: AgentEvent) => void } = {}): Promise<Asked> {
  const agent = gw.gateway.agent;
  const conversationId = o.conversationId ?? (await agent.startConversation(user, { model, source: 'web' })).id;
  const events: AgentEvent[] = [];
  const outcome = await agent.send(user, conversationId, message, (e) => {
    events.push(e);
    o.onEvent?.(e);
  });
  const text = events
    .filter((e): e is Extract<AgentEvent, { type: 'text' }> => e.type === 'text')
    .map((e) => e.delta)
    .join('');
  return { conversationId, events, outcome, text };
}

const rawIn = (s: string) => RAW_VALUES.filter((v) => s.includes(v));

beforeAll(async () => {
  standins = {
    openai: await startStandin('openai', analysis),
    anthropic: await startStandin('anthropic', analysis),
    gemini: await startStandin('gemini', analysis),
    compatible: await startStandin('openai', analysis),
  };
  gw = await startGateway({ pii: true, env: env(standins) });
  ana = await ensureUser(gw.gateway.store.db, 'ana');
  const ws = await gw.gateway.manager.openWorkspace({ userId: ana.id, name: ana.name });
  await ws.write('orders.csv', CSV);
}, 120_000);

afterAll(async () => {
  await gw?.close();
  for (const s of Object.values(standins ?? {})) await s.close();
});

describe('a full task on each provider', () => {
  it.each(Object.entries(MODELS))('%s: the CSV is analysed in the sandbox, a plot appears, the answer cites the computed figure', async (kind, model) => {
    const standin = standins[kind as keyof typeof MODELS];
    standin.setScript(analysis);
    const before = standin.requests.length;
    const ws = await gw.gateway.manager.openWorkspace({ userId: ana.id, name: ana.name });
    await ws.remove('figures/amounts.png').catch(() => {});

    const r = await ask(ana, model, 'What is the mean order amount in orders.csv? Plot the amounts.');
    expect(r.outcome.reason).toBe('complete');
    expect(r.outcome.rounds).toBe(2);
    expect(standin.requests.length - before).toBe(2);

    const call = r.events.find((e) => e.type === 'tool_call') as Extract<AgentEvent, { type: 'tool_call' }>;
    expect(call).toMatchObject({ name: 'execute_code', input: { language: 'python' } });
    const result = r.events.find((e) => e.type === 'tool_result') as Extract<AgentEvent, { type: 'tool_result' }>;
    expect(result.isError).toBe(false);
    // The user sees their own data as it is.
    expect(result.text).toContain(CUSTOMERS[0]!.email);
    const computed = /MEAN=([0-9.]+)/.exec(result.text)![1]!;
    expect(Math.abs(Number(computed) - EXPECTED_MEAN)).toBeLessThan(0.006);
    expect(r.events).toContainEqual({ type: 'files', id: call.id, files: expect.arrayContaining([expect.objectContaining({ path: 'figures/amounts.png' })]) });
    const png = await ws.read('figures/amounts.png');
    expect(png.data.subarray(1, 4).toString()).toBe('PNG');
    expect(r.text).toBe(`I will analyse the file in your sandbox.The mean order amount is ${computed}; the histogram is in figures/amounts.png.`);
    expect(r.events.at(-1)).toEqual({ type: 'done', reason: 'complete' });

    // The provider saw tokens where the file had personal data.
    const second = standin.requests[before + 1]!;
    expect(second.lastToolResult).toMatch(/\[EMAIL_\d+\]/);
    expect(rawIn(standin.requests[before]!.raw)).toEqual([]);
    expect(rawIn(second.raw)).toEqual([]);

    // The store keeps the model's side; each round's usage is counted.
    const stored = await messagesOf(gw.gateway.store.db, r.conversationId);
    expect(stored.map((m) => m.message.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(rawIn(JSON.stringify(stored))).toEqual([]);
    expect(stored.filter((m) => m.message.role === 'assistant').map((m) => [m.model, m.usage.inputTokens, m.usage.outputTokens])).toEqual([
      [model, 100, 20],
      [model, 100, 20],
    ]);
    // The tool call is audited as the conversation's (written once its answer is on its way, so maybe a moment after the turn).
    const audited = async () => (await listAudit(gw.gateway.store.db, ana.id, { limit: 20 })).filter((a) => a.conversationId === r.conversationId && a.method === 'tools/call');
    await vi.waitUntil(async () => (await audited()).length > 0, { timeout: 5000, interval: 50 });
    expect((await audited()).map((a) => [a.via, a.tool, a.outcome])).toEqual([['agent', 'execute_code', 'ok']]);
  });
});

describe('bounds and failures', () => {
  it('a model that calls tools forever is stopped by the round bound, and the turn says so', async () => {
    standins.openai.setScript(() => ({ toolCalls: [{ name: 'execute_code', args: { language: 'python', code: 'print(1)' } }] }));
    const before = standins.openai.requests.length;
    const r = await ask(ana, MODELS.openai, 'loop');
    expect(r.outcome.reason).toBe('max_rounds');
    expect(r.outcome.rounds).toBe(4);
    expect(standins.openai.requests.length - before).toBe(4);
    expect(r.events.filter((e) => e.type === 'tool_result')).toHaveLength(3);
    expect(r.events.at(-1)).toMatchObject({ type: 'done', reason: 'max_rounds', message: expect.stringMatching(/limit of 4 model round trips \(SANDGATE_AGENT_MAX_ROUNDS\)/) });
    const turns = await turnsOf(gw.gateway.store.db, r.conversationId);
    expect(turns.map((t) => [t.status, t.rounds])).toEqual([['stopped', 4]]);
    // The calls the bound stopped are answered in the history, so the conversation can go on.
    standins.openai.setScript(() => ({ text: ['fine'] }));
    const next = await ask(ana, MODELS.openai, 'go on', { conversationId: r.conversationId });
    expect(next.outcome.reason).toBe('complete');
    expect(standins.openai.requests.at(-1)!.raw).toContain('Not run: This turn reached its limit');
  });

  it('a turn over its token budget stops before running more tools', async () => {
    standins.anthropic.setScript(() => ({ usage: { input: 4000, output: 1500 }, toolCalls: [{ name: 'execute_code', args: { language: 'python', code: 'print(2)' } }] }));
    const r = await ask(ana, MODELS.anthropic, 'spend');
    expect(r.outcome.reason).toBe('token_budget');
    expect(r.events.filter((e) => e.type === 'tool_call')).toEqual([]);
    expect(r.outcome.message).toMatch(/used 5500 tokens, more than its budget of 5000 \(SANDGATE_AGENT_TURN_TOKENS\)/);
  });

  it('malformed tool arguments go back to the model as an error it can fix', async () => {
    standins.openai.setScript((req) => {
      if (req.lastToolResult === undefined) return { toolCalls: [{ name: 'execute_code', args: '{"language": "python", "code": "print(' }] };
      if (req.toolResults === 1) return { toolCalls: [{ name: 'no_such_tool', args: {} }] };
      return { text: [`saw: ${req.lastToolResult.slice(0, 40)}`] };
    });
    const before = standins.openai.requests.length;
    const r = await ask(ana, MODELS.openai, 'bad args');
    expect(r.outcome.reason).toBe('complete');
    expect(standins.openai.requests[before + 1]!.lastToolResult).toMatch(/^The arguments of this execute_code call could not be used \(.*JSON/);
    expect(standins.openai.requests[before + 2]!.lastToolResult).toMatch(/^There is no tool named "no_such_tool". The tools are: .*execute_code/);
    expect(r.events.filter((e) => e.type === 'tool_call')).toEqual([]);
  });

  it('a 429 with Retry-After is retried, and the answer arrives', async () => {
    const retried = new Set<string>();
    standins.gemini.setScript((req) => {
      if (retried.has(req.lastUserText)) return { text: ['after the retry'] };
      retried.add(req.lastUserText);
      return { status: 429, headers: { 'retry-after': '0' }, body: JSON.stringify({ error: { code: 429, message: 'Resource exhausted', status: 'RESOURCE_EXHAUSTED' } }) };
    });
    const before = standins.gemini.requests.length;
    const r = await ask(ana, MODELS.gemini, 'retry me');
    expect(r.outcome.reason).toBe('complete');
    expect(r.text).toBe('after the retry');
    expect(standins.gemini.requests.length - before).toBe(2);
  });

  it('a provider that keeps failing ends the turn with words a user understands', async () => {
    standins.anthropic.setScript(() => ({ status: 529, body: JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }) }));
    const r = await ask(ana, MODELS.anthropic, 'overloaded');
    expect(r.outcome.reason).toBe('failed');
    expect(r.events).toContainEqual({ type: 'error', code: 'provider_unavailable', message: 'Anthropic failed (HTTP 529) after 3 attempts. Try again in a moment.' });
    standins.openai.setScript(() => ({ status: 401, body: JSON.stringify({ error: { message: 'Incorrect API key provided', type: 'invalid_request_error' } }) }));
    const denied = await ask(ana, MODELS.openai, 'bad key');
    expect(denied.outcome.message).toMatch(/^OpenAI refused the API key \(HTTP 401\)/);
  });

  it('cancelling mid-execution stops the model turn and ends the sandbox process', async () => {
    standins.compatible.setScript((req) =>
      req.lastToolResult === undefined
        ? { toolCalls: [{ name: 'execute_code', args: { language: 'bash', code: 'echo $$ > /workspace/sleeper.pid; echo started; sleep 300' } }] }
        : { text: ['should not be asked'] },
    );
    const before = standins.compatible.requests.length;
    const agent = gw.gateway.agent;
    const conv = await agent.startConversation(ana, { model: MODELS.compatible, source: 'web' });
    const events: AgentEvent[] = [];
    const turn = agent.send(ana, conv.id, 'sleep', (e) => events.push(e));
    await until(() => events.some((e) => e.type === 'output' && e.text.includes('started')), 30_000);
    expect(await agent.cancel(ana, conv.id)).toBe(true);
    const outcome = await turn;
    expect(outcome.reason).toBe('cancelled');
    expect(standins.compatible.requests.length - before).toBe(1);
    expect((await turnsOf(gw.gateway.store.db, conv.id)).map((t) => [t.status, t.note])).toEqual([['cancelled', 'Stopped by you.']]);
    const owner = { userId: ana.id, name: ana.name };
    const check = await gw.gateway.manager.execute(owner, {
      language: 'python',
      code: "import os\npid = int(open('/workspace/sleeper.pid').read())\ntry:\n    os.kill(pid, 0)\n    print('alive')\nexcept ProcessLookupError:\n    print('gone')",
    });
    expect(check.stdout.trim()).toBe('gone');
  });
});

describe('personal data, end to end', () => {
  it('what the user pastes reaches the provider as tokens, and the user sees values in the answer, even when a token is split across chunks', async () => {
    standins.openai.setScript((req) => {
      const email = /\[EMAIL_\d+\]/.exec(req.lastUserText)![0];
      return { text: [`You gave me ${email.slice(0, 4)}`, `${email.slice(4)} and `, `${/\[PHONE_\d+\]/.exec(req.lastUserText)![0]}.`] };
    });
    const message = `Customer: ${PASTED.full}, ${PASTED.email}, ${PASTED.phone}, card ${PASTED.card}. Write to them.`;
    const r = await ask(ana, MODELS.openai, message);
    expect(rawIn(standins.openai.requests.at(-1)!.raw)).toEqual([]);
    expect(r.text).toBe(`You gave me ${PASTED.email} and ${PASTED.phone}.`);
    const stored = JSON.stringify(await messagesOf(gw.gateway.store.db, r.conversationId));
    expect(rawIn(stored)).toEqual([]);
  });

  it("tokens the model uses in code reach the sandbox as values; another conversation's tokens mean nothing", async () => {
    let token = '';
    standins.anthropic.setScript((req) => {
      if (req.lastToolResult === undefined) {
        token = /\[EMAIL_\d+\]/.exec(req.lastUserText)?.[0] ?? token;
        return { toolCalls: [{ name: 'execute_code', args: { language: 'python', code: `print("${token}".upper())` } }] };
      }
      return { text: ['done'] };
    });
    const first = await ask(ana, MODELS.anthropic, `Shout the address ${PASTED.email}`);
    const call = first.events.find((e) => e.type === 'tool_call') as Extract<AgentEvent, { type: 'tool_call' }>;
    expect((call.input as { code: string }).code).toBe(`print("${PASTED.email}".upper())`);
    const result = first.events.find((e) => e.type === 'tool_result') as Extract<AgentEvent, { type: 'tool_result' }>;
    expect(result.text).toContain(PASTED.email.toUpperCase());
    expect(rawIn(standins.anthropic.requests.at(-1)!.raw)).toEqual([]);

    // The same token text in a new conversation is only text.
    const other = await ask(ana, MODELS.anthropic, 'Shout the address you know');
    const otherResult = other.events.find((e) => e.type === 'tool_result') as Extract<AgentEvent, { type: 'tool_result' }>;
    expect(otherResult.text).toContain(token.toUpperCase());
    expect(otherResult.text).not.toContain(PASTED.email.toUpperCase());
  });

  it('long tool output is trimmed from earlier rounds to keep the prompt inside the context budget', async () => {
    standins.gemini.setScript((req) =>
      req.toolResults < 2 ? { toolCalls: [{ name: 'execute_code', args: { language: 'python', code: "print('x' * 60000)" } }] } : { text: ['trimmed'] },
    );
    const before = standins.gemini.requests.length;
    const r = await ask(ana, MODELS.gemini, 'big output twice');
    expect(r.outcome.reason).toBe('complete');
    const [, second, third] = standins.gemini.requests.slice(before);
    expect(second!.raw).not.toContain('earlier output trimmed');
    expect(third!.raw).toContain("earlier output trimmed to keep the conversation within the model's context");
    expect(third!.raw.length).toBeLessThan(second!.raw.length + 20_000);
  });
});

describe('keys', () => {
  it("a user's own key is used for them and only them", async () => {
    const kim = await ensureUser(gw.gateway.store.db, 'kim');
    await gw.gateway.providerKeys.set(kim.id, 'openai', 'sk-kim-own');
    standins.openai.setScript(() => ({ text: ['hi'] }));
    await ask(kim, MODELS.openai, 'hello');
    expect(standins.openai.requests.at(-1)!.headers.authorization).toBe('Bearer sk-kim-own');
    await ask(ana, MODELS.openai, 'hello');
    expect(standins.openai.requests.at(-1)!.headers.authorization).toBe('Bearer sk-team-openai');
    const rows = await gw.gateway.store.db.selectFrom('provider_keys').select('sealed').execute();
    expect(rows).toHaveLength(1);
    expect(rows.some((r) => r.sealed.includes('sk-kim-own'))).toBe(false);
    expect(fs.statSync(`${gw.dataDir}/provider-keys.key`).mode & 0o777).toBe(0o600);
  });
});

describe('a restart', () => {
  it('keeps conversations; a turn cut short is marked interrupted and the conversation goes on', async () => {
    const s = await startStandin('openai', (req) => ({ text: [`answer to ${req.lastUserText}`] }));
    const extra = { SANDGATE_OPENAI_BASE_URL: s.baseURL, SANDGATE_MODELS: 'openai:gpt-test', SANDGATE_COMPATIBLE_BASE_URL: '' };
    const first = await startGateway({ pii: true, noStart: false, env: env(standins, extra) });
    const dataDir = first.dataDir;
    const user = await ensureUser(first.gateway.store.db, 'rey');
    const conv = await first.gateway.agent.startConversation(user, { model: 'openai:gpt-test', source: 'web' });
    await first.gateway.agent.send(user, conv.id, 'one', () => {});
    // A turn in flight when the gateway stops.
    s.setScript(() => ({ text: ['slow', ' answer', ' never', ' finished'], delayMs: 2000 }));
    const events: AgentEvent[] = [];
    const cut = first.gateway.agent.send(user, conv.id, 'two', (e) => events.push(e));
    await until(() => events.some((e) => e.type === 'text'), 10_000);
    await first.close({ keepData: true });
    await cut;
    // And one a crash left running, in the same database (the data directory's file, or the Postgres database the gateway used).
    const databaseUrl = first.harness.config.databaseUrl;
    const store = await openStore({ dataDir, databaseUrl }, MIGRATIONS);
    await store.db.insertInto('turns').values({ conversation_id: conv.id, model: 'openai:gpt-test', status: 'running', started_at: Date.now() }).execute();
    await store.close();

    s.setScript((req) => ({ text: [`answer to ${req.lastUserText}`] }));
    const second = await startGateway({ pii: true, dataDir, env: { ...env(standins, extra), ...(databaseUrl ? { SANDGATE_DATABASE_URL: databaseUrl } : {}) } });
    try {
      const turns = await turnsOf(second.gateway.store.db, conv.id);
      expect(turns.map((t) => t.status)).toEqual(['complete', 'interrupted', 'interrupted']);
      expect(turns[1]!.note).toBe('The gateway stopped during this turn.');
      expect(turns[2]!.note).toMatch(/^The gateway restarted during this turn/);
      const r = await second.gateway.agent.send(user, conv.id, 'three', () => {});
      expect(r.reason).toBe('complete');
      const sent = s.requests.at(-1)!.body.messages as { role: string; content: unknown }[];
      expect(sent.filter((m) => m.role === 'user').map((m) => m.content)).toEqual(['one', 'two', 'three']);
    } finally {
      await second.close();
      await s.close();
    }
  });
});
