/**
 * An OpenAI-compatible API that runs the whole agent: `POST /v1/chat/completions`
 * (streamed or not) and `GET /v1/models`, authenticated by a personal API token, so any
 * OpenAI client or chat front end (Open WebUI, LibreChat) can use sandgate as a model
 * that works in the user's own sandbox.
 *
 * The client sends the whole history with every request. A request whose earlier
 * messages are the history an API conversation was last answered with continues that
 * conversation, storing only its new message (api-history.ts); any other starts a new
 * conversation, its history stored through the PII boundary. The last user message runs
 * a turn, and the answer streams back with the tool activity written into it in a
 * readable form. Before anything is stored, the user's store quota must have room for it
 * (SANDGATE_STORE_QUOTA_MB); every request takes one from the user's request budget,
 * shared with their other tokens and pages (SANDGATE_RATE_LIMIT_PER_MIN).
 *
 * Errors use OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
 */
import express, { type ErrorRequestHandler, type Request, type RequestHandler, type Response } from 'express';
import { z } from 'zod';
import type { Agent } from '../agent/agent.js';
import { HistoryDigests, type ClientMessage } from '../agent/api-history.js';
import { setClientDigest, takeApiConversation, type Conversation } from '../agent/conversations.js';
import type { AgentEvent } from '../agent/events.js';
import { recordAudit, callerColumns } from '../audit/audit.js';
import type { Config } from '../config.js';
import { GatewayError } from '../errors.js';
import type { Logger } from '../logger.js';
import { budgetSpentMessage, MemoryRateLimiter, userBudgetKey, type RateLimiter } from '../limits/rate-limit.js';
import { reserveStoreRoom, StoreQuotaExceeded } from '../limits/store-quota.js';
import type { Db } from '../store/store.js';
import { bearerAuth, callerOf, type Refusal } from '../auth/bearer.js';
import { hostAndOriginValidation } from './host-origin.js';

/** Largest request body: a long history, not files. */
const MAX_BODY = '8mb';
/** A tool result is shown this long in the answer; the model got all of it. */
const MAX_RESULT_IN_ANSWER = 1500;

export interface OpenAiApiDeps {
  config: Config;
  db: Db;
  logger: Logger;
  agent: Agent;
  /**
   * The users' request budget, shared with /mcp and the web pages (the gateway passes its
   * one limiter); defaults to one of this API's own, from SANDGATE_RATE_LIMIT_PER_MIN / _BURST.
   */
  rateLimiter?: RateLimiter;
}

type ErrorType = 'invalid_request_error' | 'authentication_error' | 'not_found_error' | 'rate_limit_error' | 'insufficient_quota' | 'api_error' | 'server_error';

function errorBody(message: string, type: ErrorType, code: string | null = null, param: string | null = null) {
  return { error: { message, type, param, code } };
}

function sendError(res: Response, status: number, message: string, type: ErrorType, code: string | null = null, param: string | null = null): void {
  res.status(status).json(errorBody(message, type, code, param));
}

const refuse: Refusal = (res, message, reason) => void res.json(errorBody(message, 'authentication_error', reason === 'missing' ? 'missing_api_key' : 'invalid_api_key'));

const contentPart = z.object({ type: z.string(), text: z.string().optional() }).passthrough();
const chatMessage = z
  .object({
    role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
    content: z.union([z.string(), z.array(contentPart), z.null()]).optional(),
  })
  .passthrough();
const chatRequest = z
  .object({
    model: z.string().min(1).max(200),
    messages: z.array(chatMessage).min(1).max(2000),
    stream: z.boolean().optional(),
    stream_options: z.object({ include_usage: z.boolean().optional() }).passthrough().nullish(),
  })
  .passthrough();

/** The text of a message's content; throws for what the agent cannot take (images, audio). */
function textOf(content: z.infer<typeof chatMessage>['content']): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  const other = content.find((p) => p.type !== 'text');
  if (other) throw new GatewayError(`message content of type "${other.type}" is not supported: send text (put files in your workspace and name them)`, { reason: 'invalid_request', status: 400 });
  return content.map((p) => p.text ?? '').join('');
}

const fence = (text: string) => {
  const longest = Math.max(2, ...[...text.matchAll(/`{3,}/g)].map((m) => m[0].length));
  return '`'.repeat(longest + 1);
};

/** Inline code whatever the text holds: a backtick in it cannot end the span and let the rest (with values put back) render as links or images. */
const codeSpan = (text: string) => {
  const ticks = '`'.repeat(Math.max(0, ...[...text.matchAll(/`+/g)].map((m) => m[0].length)) + 1);
  return `${ticks} ${text} ${ticks}`;
};

/** Tool activity as Markdown a chat front end shows. */
function activityText(e: AgentEvent): string | undefined {
  switch (e.type) {
    case 'tool_call': {
      const input = (e.input ?? {}) as { language?: string; code?: string };
      if (e.name === 'execute_code' && typeof input.code === 'string') {
        const f = fence(input.code);
        return `\n\n**Running ${input.language ?? 'code'} in the sandbox:**\n${f}${input.language ?? ''}\n${input.code}\n${f}\n`;
      }
      return `\n\n**Calling ${codeSpan(e.name)}** ${codeSpan(JSON.stringify(e.input).slice(0, 300))}\n`;
    }
    case 'tool_result': {
      const text = e.text.length > MAX_RESULT_IN_ANSWER ? `${e.text.slice(0, MAX_RESULT_IN_ANSWER)}…` : e.text;
      const f = fence(text);
      return `${e.isError ? '**The tool reported an error:**\n' : ''}${f}text\n${text}\n${f}\n\n`;
    }
    case 'files':
      return `Files: ${e.files.map((f) => `\`${f.path}\``).join(', ')}\n\n`;
    case 'error':
      return `\n\n**${e.message}**\n`;
    case 'done':
      return e.message && e.reason !== 'failed' ? `\n\n_${e.message}_\n` : undefined;
    default:
      return undefined;
  }
}

/** The messages of a client's history the agent keeps: user and assistant text. Tool and function messages belong to client-side tools, which the agent does not run. */
function agentHistory(messages: readonly { role: string; text: string }[]): ClientMessage[] {
  return messages.filter((m): m is ClientMessage => (m.role === 'user' || m.role === 'assistant') && m.text.trim() !== '');
}

const FINISH: Record<string, 'stop' | 'length'> = { complete: 'stop', cancelled: 'stop', failed: 'stop', max_rounds: 'length', token_budget: 'length', context_full: 'length' };

/** The API's handlers and the checks before them, placed by the route table (src/routes.ts). */
export interface OpenAiApi {
  /** Host and Origin, then the bearer token (refused in OpenAI's shape). */
  checks: RequestHandler[];
  /** One request from the user's budget; before the body is parsed, so a refused request costs no 8 MB parse. */
  rateLimit: RequestHandler;
  /** The JSON body, up to MAX_BODY. */
  body: RequestHandler;
  /** GET /v1/models */
  models: RequestHandler;
  /** POST /v1/chat/completions */
  completions: RequestHandler;
  /** Any other path under /v1: a 404 in OpenAI's shape. */
  unknownRoute: RequestHandler;
  /** Bodies that are not JSON and failures under /v1/, in OpenAI's shape (other paths' errors pass on). */
  errors: ErrorRequestHandler;
}

export function openAiApi(deps: OpenAiApiDeps): OpenAiApi {
  const { agent } = deps;
  const log = deps.logger.child({ module: 'openai-api' });
  const limiter = deps.rateLimiter ?? new MemoryRateLimiter({ perMinute: deps.config.rateLimitPerMin, burst: deps.config.rateLimitBurst });
  const digests = new HistoryDigests(deps.config.dataDir);
  const checks = [...hostAndOriginValidation(deps.config), bearerAuth(deps, { refuse, auditKind: 'agent', what: 'API' })];

  // Before the body is parsed: a refused request costs no 8 MB parse.
  const rateLimit: RequestHandler = async function rateLimitPerUser(req, res, next) {
    const caller = callerOf(req);
    const d = await limiter.take(userBudgetKey(caller.user.id));
    if (d.ok) return next();
    res.set('Retry-After', String(d.retryAfterSec));
    sendError(res, 429, budgetSpentMessage(limiter, caller.user.name, d), 'rate_limit_error', 'rate_limit_exceeded');
  };

  const models: RequestHandler = async (req, res) => {
    const caller = callerOf(req);
    res.json({ object: 'list', data: (await agent.catalog.availableTo(caller.user.id)).map((c) => ({ id: c.id, object: 'model', created: 0, owned_by: 'sandgate' })) });
  };

  const completions: RequestHandler = async (req: Request, res: Response) => {
    const started = performance.now();
    const token = callerOf(req);
    const user = token.user;
    const parsed = chatRequest.safeParse(req.body);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      return sendError(res, 400, `Invalid request: ${issue.path.join('.') || 'body'}: ${issue.message}`, 'invalid_request_error', 'invalid_request', issue.path.join('.') || null);
    }
    const body = parsed.data;
    // The agent runs its own tools; a client's own would be dropped without a word: refused, saying so.
    const own = (['tools', 'functions'] as const).find((k) => Array.isArray(body[k]) && (body[k] as unknown[]).length > 0);
    if (own) {
      return sendError(
        res,
        400,
        `This endpoint runs its own tools (code in your sandbox, your files, the upstream MCP tools connected to your account) and does not call a client's: send the request without "${own}". To give the agent a tool of yours, connect it as an upstream MCP server (docs/upstream-servers.md); to call sandgate's tools from your own agent, use /mcp.`,
        'invalid_request_error',
        'unsupported_parameter',
        own,
      );
    }
    let history: ClientMessage[];
    let instructions: string;
    let last: string;
    try {
      const msgs = body.messages.map((m) => ({ role: m.role, text: textOf(m.content) }));
      const final = msgs.at(-1)!;
      if (final.role !== 'user' || !final.text.trim()) return sendError(res, 400, 'The last message must be a non-empty user message.', 'invalid_request_error', 'invalid_request', 'messages');
      last = final.text;
      instructions = msgs
        .filter((m) => m.role === 'system' || m.role === 'developer')
        .map((m) => m.text)
        .join('\n\n');
      history = agentHistory(msgs.slice(0, -1));
    } catch (e) {
      return sendError(res, 400, (e as Error).message, 'invalid_request_error', 'invalid_request', 'messages');
    }

    // Written before the answer ends, so the request is in the audit once its client has the answer; a failed write is logged only.
    const audit = async (outcome: 'ok' | 'error', errorClass?: string) => {
      try {
        await recordAudit(deps.db, { ...callerColumns(token), kind: 'agent', method: 'chat/completions', durationMs: performance.now() - started, outcome, errorClass: errorClass ?? null });
      } catch (err) {
        log.error({ err }, 'could not write an audit entry');
      }
    };

    let conversation: Conversation;
    try {
      // No model at all comes back as no_model: answered below as no_model_configured.
      const model = (await agent.modelFor(user, body.model)).id;
      const priorDigest = history.length ? digests.of(user.id, history) : undefined;
      const continued = priorDigest ? await takeApiConversation(deps.db, user.id, priorDigest) : undefined;
      const incoming = Buffer.byteLength(last) + (continued ? 0 : history.reduce((n, m) => n + Buffer.byteLength(m.text), 0));
      try {
        const release = await reserveStoreRoom(deps.db, deps.config, user.id, incoming);
        // The client may have gone while the store answered: 'close' is then already past.
        if (res.destroyed) release();
        else res.on('close', release);
      } catch (e) {
        // Refused: the conversation stays as it was, to be continued once there is room.
        if (continued) await setClientDigest(deps.db, continued.id, priorDigest!);
        throw e;
      }
      if (continued) {
        if (continued.model !== model) await agent.setModel(user, continued.id, model);
        conversation = { ...continued, model };
      } else {
        conversation = await agent.startConversation(user, { model, source: 'api' });
        await agent.seed(user, conversation.id, history);
      }
    } catch (e) {
      if (e instanceof StoreQuotaExceeded) {
        await audit('error', e.reason);
        return sendError(res, 403, e.message, 'insufficient_quota', e.reason);
      }
      const g = e instanceof GatewayError ? e : undefined;
      if (g?.reason === 'model_not_found') return sendError(res, 404, g.message, 'not_found_error', 'model_not_found', 'model');
      if (g?.reason === 'no_model') return sendError(res, 503, g.message, 'server_error', 'no_model_configured');
      throw e;
    }
    /**
     * Once the client has the answer: the history it now holds is the one that continues this
     * conversation. Recorded before the answer ends, so the client's next request finds it; a
     * failure costs only the continuation (that request starts a new conversation).
     */
    const answered = async (content: string) => {
      try {
        await setClientDigest(deps.db, conversation.id, digests.of(user.id, agentHistory([...history, { role: 'user', text: last }, { role: 'assistant', text: content }])));
      } catch (err) {
        log.error({ err }, 'could not record the history a client was answered with');
      }
    };
    const id = `chatcmpl-${conversation.id}`;
    const created = Math.floor(Date.now() / 1000);
    const controller = new AbortController();
    // A client that goes away stops the turn (and its execution).
    res.on('close', () => {
      if (!res.writableFinished) controller.abort();
    });

    if (body.stream) {
      res.status(200).set({ 'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-cache', Connection: 'keep-alive', 'X-Accel-Buffering': 'no' });
      res.flushHeaders();
      const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
        res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: conversation.model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`);
      chunk({ role: 'assistant', content: '' });
      let error: { code: string; message: string } | undefined;
      let content = '';
      let outcome;
      try {
        outcome = await agent.send(
          user,
          conversation.id,
          last,
          (e) => {
            if (e.type === 'error') error = e;
            const text = e.type === 'text' ? e.delta : activityText(e);
            if (text && !res.writableEnded) {
              content += text;
              chunk({ content: text });
            }
          },
          { signal: controller.signal, clientInstructions: instructions || undefined },
        );
      } catch (e) {
        log.error({ err: e }, 'agent turn could not run');
        const g = e instanceof GatewayError ? e : undefined;
        res.write(`data: ${JSON.stringify(errorBody(g?.message ?? 'The gateway could not run this request; its log says why.', 'server_error', g?.reason ?? 'internal'))}\n\n`);
        await audit('error', 'internal');
        res.end('data: [DONE]\n\n');
        return;
      }
      if (res.writableEnded || res.destroyed) return await audit('error', 'aborted');
      if (error && outcome.reason === 'failed') res.write(`data: ${JSON.stringify(errorBody(error.message, 'api_error', error.code))}\n\n`);
      chunk({}, FINISH[outcome.reason] ?? 'stop');
      if (body.stream_options?.include_usage) {
        res.write(
          `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: conversation.model, choices: [], usage: { prompt_tokens: outcome.usage.inputTokens, completion_tokens: outcome.usage.outputTokens, total_tokens: outcome.usage.inputTokens + outcome.usage.outputTokens } })}\n\n`,
        );
      }
      await answered(content);
      await audit(outcome.reason === 'failed' ? 'error' : 'ok', outcome.reason === 'failed' ? error?.code : undefined);
      res.end('data: [DONE]\n\n');
      return;
    }

    let content = '';
    let error: { code: string; message: string } | undefined;
    const outcome = await agent.send(
      user,
      conversation.id,
      last,
      (e) => {
        if (e.type === 'error') error = e;
        content += e.type === 'text' ? e.delta : (activityText(e) ?? '');
      },
      { signal: controller.signal, clientInstructions: instructions || undefined },
    );
    if (res.destroyed) return await audit('error', 'aborted');
    if (outcome.reason === 'failed' && error) {
      await audit('error', error.code);
      const status = error.code === 'provider_rate_limited' ? 429 : error.code === 'provider_timeout' ? 504 : error.code === 'store_unavailable' ? 503 : 502;
      return sendError(res, status, error.message, status === 429 ? 'rate_limit_error' : 'api_error', error.code);
    }
    await audit('ok');
    await answered(content);
    res.json({
      id,
      object: 'chat.completion',
      created,
      model: conversation.model,
      choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: FINISH[outcome.reason] ?? 'stop' }],
      usage: { prompt_tokens: outcome.usage.inputTokens, completion_tokens: outcome.usage.outputTokens, total_tokens: outcome.usage.inputTokens + outcome.usage.outputTokens },
    });
  };

  // Anything else under /v1, and bodies that are not JSON, in OpenAI's shape too.
  const unknownRoute: RequestHandler = (req, res) => sendError(res, 404, `Unknown API route ${req.method} ${req.path}: this gateway serves GET /v1/models and POST /v1/chat/completions.`, 'not_found_error', 'unknown_route');
  const badBody: ErrorRequestHandler = (err: { type?: string; status?: number; expose?: boolean; message?: string }, req, res, next) => {
    if (!req.path.startsWith('/v1/')) return next(err);
    if (err.type === 'entity.parse.failed') return sendError(res, 400, 'The body is not valid JSON.', 'invalid_request_error', 'invalid_json');
    if (err.type === 'entity.too.large') return sendError(res, 413, `The request body is larger than ${MAX_BODY}.`, 'invalid_request_error', 'body_too_large');
    // The client's own mistake: an address not percent-encoded correctly, a body cut short, in an unknown charset or encoding.
    if (typeof err.status === 'number' && err.status >= 400 && err.status < 500) {
      if (res.headersSent) return void res.end();
      return sendError(res, err.status, `The request could not be read${err.expose && err.message ? `: ${err.message}` : ''}.`, 'invalid_request_error', 'invalid_request');
    }
    log.error({ err }, 'API request failed');
    if (res.headersSent) return void res.end();
    sendError(res, 500, 'The gateway failed to answer this request; its log says why.', 'server_error', 'internal');
  };
  return { checks, rateLimit, body: express.json({ limit: MAX_BODY }), models, completions, unknownRoute, errors: badBody };
}
