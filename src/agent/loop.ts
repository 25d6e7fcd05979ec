/**
 * One turn of the built-in agent: the user's message, then model round trips until the
 * model answers without calling a tool, each tool call dispatched to the gateway's own
 * tools through an in-process MCP client (src/mcp/serve.ts: the same server, checks, PII
 * boundary, audit and cancellation as /mcp).
 *
 * What bounds a turn, each ending it with a message that says so: SANDGATE_AGENT_MAX_ROUNDS
 * model round trips, SANDGATE_AGENT_TURN_TOKENS tokens, and SANDGATE_AGENT_CONTEXT_TOKENS
 * of prompt (old tool output is trimmed first; the user's messages are never dropped).
 * What one round may keep is bounded too, whatever the model sends: MAX_ROUND_TEXT_CHARS
 * of answer (the rest is cut, with a note the user and the model read; model-bounds.ts
 * cuts it before the AI SDK holds it, and this loop again), and tool calls checked by
 * tool-input.ts (size, depth, the tool's schema with no extra keys; a call that fails is
 * answered with a tool error and never shown or run).
 * A cancel stops the model stream and the running execution. Provider errors come back
 * retried by the AI SDK (429, 5xx, network; honouring Retry-After) and are then shown in
 * words; malformed, unknown or oversized tool calls go back to the model as tool errors it can fix.
 *
 * Personal data: the user's text passes the PII boundary before it is stored or sent, so
 * the model sees tokens; tool results are tokenized by the tools themselves. What the
 * user is shown (the events) has the values back. The store keeps the model side only.
 */
import type { Span } from '@opentelemetry/api';
import * as metrics from '../telemetry/metrics.js';
import { failed, openSpan, SpanKind } from '../telemetry/traces.js';
import { jsonSchema, streamText, type LanguageModel, type ModelMessage, type ToolSet } from 'ai';
import type { CallToolResult } from '@modelcontextprotocol/client';
import type { Config } from '../config.js';
import type { Caller } from '../auth/caller.js';
import type { Logger } from '../logger.js';
import type { InProcessConnection } from '../mcp/serve.js';
import { decodePathSegment } from '../mcp/uri-path.js';
import type { ModelBoundary } from '../pii/boundary.js';
import type { Db } from '../store/store.js';
import { addMessage, endTurn, messagesOf, startTurn, updateConversation, type Conversation, type TurnStatus, type Usage } from './conversations.js';
import { fitToContext } from './context.js';
import { DisplayStream, forUser } from './display.js';
import type { AgentEvent, DoneReason, EventSink, FileChange } from './events.js';
import type { ModelCatalog, ModelChoice } from './models.js';
import { systemPrompt } from './prompt.js';
import { describeProviderError } from './provider-errors.js';
import { cutTextChars, droppedToolCalls, MAX_ROUND_TEXT_CHARS, withinRoom } from './model-bounds.js';
import { MAX_TOOL_CALLS_PER_ROUND, MAX_TOOL_ID_CHARS, MAX_TOOL_INPUT_CHARS, vetToolCall, type JsonSchema } from './tool-input.js';

/** A tool result shown to the user is cut here (the model gets what the tool returned). */
const MAX_RESULT_SHOWN = 20_000;
/**
 * Longest stretch spent on a model's stream without letting other requests in: parts
 * that arrive together are handed over in one chain of promises, which never returns to
 * the event loop by itself.
 */
const STREAM_YIELD_MS = 10;

export interface TurnDeps {
  config: Config;
  db: Db;
  logger: Logger;
  boundary: ModelBoundary;
  catalog: ModelCatalog;
  /** This gateway among replicas sharing the store: its turns carry its id. */
  replica?: { readonly id: string };
}

export interface TurnInput {
  conversation: Conversation;
  caller: Caller;
  choice: ModelChoice;
  model: LanguageModel;
  keyOwner: 'user' | 'team';
  /** The MCP client of the gateway's tools for this turn, connected at the first tool call. */
  connection: () => Promise<InProcessConnection>;
  /** The gateway's server instructions for this caller (skills index included), as MCP clients get them. */
  instructions: string;
  /** What the user wrote, as they wrote it. */
  text: string;
  /** System text of the application the user writes in (the /v1 API's system messages). */
  clientInstructions?: string;
  sink: EventSink;
  signal: AbortSignal;
}

export interface TurnOutcome {
  turnId: number;
  reason: DoneReason;
  message?: string;
  rounds: number;
  usage: Usage;
}

interface ToolCallPart {
  toolCallId: string;
  toolName: string;
  input: unknown;
  invalid?: boolean;
  error?: unknown;
}

type ToolOutput = { type: 'text'; value: string } | { type: 'error-text'; value: string };

/**
 * Makes a stored history safe to send: every tool call answered by a result (a turn that
 * was interrupted or cancelled may have left calls without one), nothing answering a
 * call that is not there, no empty answer.
 */
export function repairToolPairs(history: ModelMessage[]): ModelMessage[] {
  const out: ModelMessage[] = [];
  for (let i = 0; i < history.length; i++) {
    const m = history[i]!;
    if (m.role === 'tool') continue; // placed with the call it answers, below
    // An empty answer is kept for its usage only: providers refuse empty messages.
    if (m.role === 'assistant' && Array.isArray(m.content) && m.content.length === 0) continue;
    out.push(m);
    if (m.role !== 'assistant' || typeof m.content === 'string') continue;
    const calls = m.content.filter((p) => p.type === 'tool-call');
    if (!calls.length) continue;
    const next = history[i + 1];
    const results = next?.role === 'tool' ? next.content.filter((p) => p.type === 'tool-result') : [];
    const answered = new Map(results.map((r) => [r.toolCallId, r]));
    out.push({
      role: 'tool',
      content: calls.map(
        (c) =>
          answered.get(c.toolCallId) ?? {
            type: 'tool-result' as const,
            toolCallId: c.toolCallId,
            toolName: c.toolName,
            output: { type: 'error-text' as const, value: 'Not run: the turn ended before this call finished.' },
          },
      ),
    });
  }
  return out;
}

/** What a user is shown of a value the model wrote: its tokens back to values, in every string. */
async function forUserDeep(boundary: ModelBoundary, caller: Caller, value: unknown): Promise<unknown> {
  if (typeof value === 'string') return forUser(boundary, caller, value);
  if (Array.isArray(value)) return Promise.all(value.map((v) => forUserDeep(boundary, caller, v)));
  if (value && typeof value === 'object') {
    return Object.fromEntries(await Promise.all(Object.entries(value).map(async ([k, v]) => [k, await forUserDeep(boundary, caller, v)] as const)));
  }
  return value;
}

/** The tools as the model is offered them, their input schemas, and the characters their definitions take in a prompt. */
export interface ModelTools {
  set: ToolSet;
  schemas: ReadonlyMap<string, JsonSchema>;
  chars: number;
}

/** The tools as the model is offered them: name, description and input schema from the server's listing. */
export async function modelTools(connection: InProcessConnection): Promise<ModelTools> {
  const { tools } = await connection.client.listTools();
  const set: ToolSet = {};
  const schemas = new Map<string, JsonSchema>();
  for (const t of tools) {
    set[t.name] = { description: t.description ?? t.title ?? t.name, inputSchema: jsonSchema(t.inputSchema as Parameters<typeof jsonSchema>[0]) };
    schemas.set(t.name, t.inputSchema as JsonSchema);
  }
  return { set, schemas, chars: JSON.stringify(tools.map((t) => [t.name, t.description, t.inputSchema])).length };
}

/** What the user reads when the store fails during a turn. */
const STORE_FAILED_NOTE = 'The gateway could not save this conversation (its database did not answer), so this turn stopped. Try again in a moment.';

/** A read or write of the turn's conversation failed: the turn ends as failed (STORE_FAILED_NOTE). */
class StoreFailure extends Error {
  override name = 'StoreFailure';
}

/** `work` on the store, its failure marked as the store's. */
async function stored<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    throw new StoreFailure('the store failed during a turn', { cause: err });
  }
}

export async function runTurn(deps: TurnDeps, input: TurnInput, modelToolset: ModelTools): Promise<TurnOutcome> {
  const tools = modelToolset.set;
  const { config, db, logger, boundary } = deps;
  const { conversation, caller, choice, sink, signal } = input;
  const emit = (e: AgentEvent) => {
    try {
      sink(e);
    } catch (err) {
      logger.warn({ err }, 'an agent event sink failed');
    }
  };
  const modelText = await boundary.toModel(caller, input.text);
  // Before the turn exists, a failure (the store unreachable) is one of starting: send() rejects.
  const turn = await startTurn(db, conversation.id, choice.id, deps.replica?.id ?? null);
  const usage: Usage = { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 };
  let rounds = 0;

  const finish = async (reason: DoneReason, status: Exclude<TurnStatus, 'running'>, message?: string): Promise<TurnOutcome> => {
    try {
      await endTurn(db, turn.id, status, rounds, message);
    } catch (err) {
      // The turn still ends for its user; the store marks it interrupted at the next start.
      logger.error({ err, turnId: turn.id }, 'could not record how a turn ended');
    }
    emit({ type: 'done', reason, ...(message ? { message } : {}) });
    return { turnId: turn.id, reason, message, rounds, usage };
  };
  const cancelled = () => finish('cancelled', signal.reason === 'shutdown' ? 'interrupted' : 'cancelled', signal.reason === 'shutdown' ? 'The gateway stopped during this turn.' : 'Stopped by you.');

  try {
    // Each write is awaited before the next: the messages are stored in the order they happened.
    // The first message names the conversation, before the turn is announced: the page shows the name at once.
    if (!conversation.title) await stored(updateConversation(db, conversation.id, { title: modelText }));
    emit({ type: 'turn', conversationId: conversation.id, turnId: turn.id, model: choice.id });
    await stored(addMessage(db, { conversationId: conversation.id, turnId: turn.id, message: { role: 'user', content: modelText } }));

    const history = repairToolPairs((await stored(messagesOf(db, conversation.id))).map((m) => m.message));
    const system = systemPrompt(input.instructions, input.clientInstructions && (await boundary.toModel(caller, input.clientInstructions)));
    const fixedChars = system.length + modelToolset.chars;
    let keepFrom = history.length - 1;

    const save = async (message: ModelMessage, roundUsage?: Usage, files?: Record<string, FileChange[]>) => {
      history.push(message);
      await stored(
        addMessage(db, { conversationId: conversation.id, turnId: turn.id, message, files, ...(message.role === 'assistant' ? { model: choice.id, keyOwner: input.keyOwner, usage: roundUsage } : {}) }),
      );
    };

    while (true) {
      if (signal.aborted) return await cancelled();
      const fitted = fitToContext(history, fixedChars, config.agentContextTokens, keepFrom);
      if (!fitted.fits) {
        return await finish(
          'context_full',
          'stopped',
          `This conversation no longer fits the model's context (about ${fitted.tokens} tokens, more than SANDGATE_AGENT_CONTEXT_TOKENS=${config.agentContextTokens}, even with earlier tool output trimmed). Start a new conversation; your files in /workspace stay.`,
        );
      }
      rounds++;
      const display = new DisplayStream(boundary, caller);
      let text = '';
      /** Characters of answer past MAX_ROUND_TEXT_CHARS, neither kept nor shown. */
      let cutChars = 0;
      /** Tool calls past MAX_TOOL_CALLS_PER_ROUND, dropped (model-bounds.ts drops them first). */
      let droppedCalls = 0;
      const calls: ToolCallPart[] = [];
      const roundUsage: Usage = { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 };
      const roundStarted = performance.now();
      const roundSpan = openSpan(`chat ${choice.model}`, {
        kind: SpanKind.CLIENT,
        attributes: { 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': choice.provider, 'gen_ai.request.model': choice.model, 'sandgate.round': rounds },
      })?.span;
      try {
        const result = streamText({
          model: input.model,
          system,
          messages: fitted.messages,
          tools,
          maxRetries: config.agentRetries,
          maxOutputTokens: config.agentMaxOutputTokens,
          abortSignal: signal,
          timeout: { chunkMs: config.agentTimeoutSec * 1000 },
          // Errors arrive as stream parts and are handled below; the default would print them.
          onError: () => {},
        });
        let yielded = performance.now();
        for await (const part of result.fullStream) {
          if (performance.now() - yielded > STREAM_YIELD_MS) {
            await new Promise((resolve) => setImmediate(resolve));
            yielded = performance.now();
          }
          if (part.type === 'text-delta') {
            const piece = withinRoom(part.text, MAX_ROUND_TEXT_CHARS - text.length);
            cutChars += part.text.length - piece.length;
            if (!piece) continue;
            text += piece;
            const shown = await display.push(piece);
            if (shown) emit({ type: 'text', delta: shown });
          } else if (part.type === 'tool-call') {
            const p = part as ToolCallPart & { type: 'tool-call' };
            if (calls.length >= MAX_TOOL_CALLS_PER_ROUND) {
              droppedCalls++;
              continue;
            }
            calls.push({ toolCallId: p.toolCallId.slice(0, MAX_TOOL_ID_CHARS), toolName: p.toolName.slice(0, MAX_TOOL_ID_CHARS), input: p.input, invalid: p.invalid, error: p.error });
          } else if (part.type === 'finish-step') {
            roundUsage.inputTokens += part.usage.inputTokens ?? 0;
            roundUsage.outputTokens += part.usage.outputTokens ?? 0;
            roundUsage.cachedInputTokens += part.usage.inputTokenDetails?.cacheReadTokens ?? 0;
            cutChars += cutTextChars(part.providerMetadata);
            droppedCalls += droppedToolCalls(part.providerMetadata);
          } else if (part.type === 'error') {
            throw part.error;
          } else if (part.type === 'abort') {
            break;
          }
        }
      } catch (err) {
        const tail = await display.end();
        if (tail) emit({ type: 'text', delta: tail });
        if (cutChars) {
          text += cutNote(cutChars);
          emit({ type: 'text', delta: cutNote(cutChars) });
        }
        countRound(choice.provider, signal.aborted ? 'aborted' : 'error', roundStarted, roundUsage, roundSpan);
        if (text) await save({ role: 'assistant', content: [{ type: 'text', text }] }, roundUsage);
        if (signal.aborted) return await cancelled();
        const d = describeProviderError(err, choice, deps.catalog, { timeoutSec: config.agentTimeoutSec, retries: config.agentRetries });
        logger.warn({ provider: choice.provider, model: choice.model, code: d.code, status: (err as { statusCode?: number }).statusCode }, 'model request failed');
        emit({ type: 'error', code: d.code, message: d.message });
        return await finish('failed', 'failed', d.message);
      }
      countRound(choice.provider, 'ok', roundStarted, roundUsage, roundSpan);
      const tail = await display.end();
      if (tail) emit({ type: 'text', delta: tail });
      if (cutChars) {
        text += cutNote(cutChars);
        emit({ type: 'text', delta: cutNote(cutChars) });
      }
      if (droppedCalls) {
        text += droppedNote(droppedCalls);
        emit({ type: 'text', delta: droppedNote(droppedCalls) });
      }
      usage.inputTokens += roundUsage.inputTokens;
      usage.outputTokens += roundUsage.outputTokens;
      usage.cachedInputTokens += roundUsage.cachedInputTokens;
      emit({ type: 'usage', round: rounds, ...roundUsage });

      // Each call is checked before it is kept, shown or run; the round's calls share one allowance of argument characters.
      let allowance = MAX_TOOL_INPUT_CHARS;
      const vetted = calls.map((c) => {
        const v = vetToolCall(c, modelToolset.schemas, allowance);
        allowance -= v.chars;
        return v;
      });
      const content: Exclude<ModelMessage & { role: 'assistant' }, { content: string }>['content'] = [];
      if (text) content.push({ type: 'text', text });
      calls.forEach((c, i) => content.push({ type: 'tool-call', toolCallId: c.toolCallId, toolName: c.toolName, input: vetted[i]!.stored }));
      // An empty answer is not stored (providers refuse empty text blocks); its usage still counts.
      if (content.length) await save({ role: 'assistant', content }, roundUsage);
      else await stored(addMessage(db, { conversationId: conversation.id, turnId: turn.id, message: { role: 'assistant', content: [] }, model: choice.id, keyOwner: input.keyOwner, usage: roundUsage }));
      keepFrom = history.length - 1;

      if (signal.aborted) return await cancelled();
      if (!calls.length) return await finish('complete', 'complete');

      const overBudget = usage.inputTokens + usage.outputTokens > config.agentTurnTokens;
      const lastRound = rounds >= config.agentMaxRounds;
      if (overBudget || lastRound) {
        const why = overBudget
          ? `This turn used ${usage.inputTokens + usage.outputTokens} tokens, more than its budget of ${config.agentTurnTokens} (SANDGATE_AGENT_TURN_TOKENS)`
          : `This turn reached its limit of ${config.agentMaxRounds} model round trips (SANDGATE_AGENT_MAX_ROUNDS)`;
        await save({
          role: 'tool',
          content: calls.map((c) => ({ type: 'tool-result' as const, toolCallId: c.toolCallId, toolName: c.toolName, output: { type: 'error-text' as const, value: `Not run: ${why}.` } })),
        });
        return await finish(overBudget ? 'token_budget' : 'max_rounds', 'stopped', `${why}, so it stopped before running more tools. Send a message to go on.`);
      }

      const results: { type: 'tool-result'; toolCallId: string; toolName: string; output: ToolOutput }[] = [];
      const changed: Record<string, FileChange[]> = {};
      for (const [i, c] of calls.entries()) {
        const refusal = vetted[i]!.refusal;
        const r = signal.aborted
          ? { output: { type: 'error-text' as const, value: 'Not run: the turn was stopped.' } }
          : refusal !== undefined
            ? { output: { type: 'error-text' as const, value: refusal } }
            : await callTool(deps, input, c, emit);
        results.push({ type: 'tool-result', toolCallId: c.toolCallId, toolName: c.toolName, output: r.output });
        if (r.files) changed[c.toolCallId] = r.files;
      }
      await save({ role: 'tool', content: results }, undefined, Object.keys(changed).length ? changed : undefined);
      keepFrom = history.length - 2;
    }
  } catch (err) {
    // Whatever went wrong after the turn began, it ends as failed with a note, never left running.
    const store = err instanceof StoreFailure;
    logger.error({ err: store ? err.cause : err, turnId: turn.id }, store ? 'a turn could not write to the store' : 'a turn failed');
    const note = store ? STORE_FAILED_NOTE : 'This turn failed inside the gateway, so it stopped; the gateway log says why. Send a message to try again.';
    emit({ type: 'error', code: store ? 'store_unavailable' : 'internal', message: note });
    return await finish('failed', 'failed', note);
  }
}

/** What the user and the model read where an answer was cut. */
function cutNote(chars: number): string {
  return `\n\n(This answer was cut here: ${chars} more characters were not kept or shown, as one answer keeps at most ${MAX_ROUND_TEXT_CHARS}.)`;
}

/** What the user and the model read where a round asked for more tool calls than it may make. */
function droppedNote(calls: number): string {
  return `\n\n(${calls} more tool calls of this answer were dropped, neither run nor kept: one round may make at most ${MAX_TOOL_CALLS_PER_ROUND}. Make the others in the next round.)`;
}

/** One tool call, vetted already (tool-input.ts), through the in-process MCP client, with its events; never throws. */
async function callTool(deps: TurnDeps, input: TurnInput, c: ToolCallPart, emit: EventSink): Promise<{ output: ToolOutput; files?: FileChange[] }> {
  const { boundary, config } = deps;
  const { caller, signal } = input;
  emit({ type: 'tool_call', id: c.toolCallId, name: c.toolName, input: await forUserDeep(boundary, caller, c.input) });
  // Progress messages are tokenized like everything the tools send; shown in order, with values.
  let shown = Promise.resolve();
  const onprogress = (p: { message?: string }) => {
    if (!p.message) return;
    const message = p.message;
    shown = shown.then(async () => emit({ type: 'output', id: c.toolCallId, text: await forUser(boundary, caller, message) })).catch(() => {});
  };
  try {
    const connection = await input.connection();
    const result = (await connection.client.callTool(
      { name: c.toolName, arguments: c.input as Record<string, unknown> },
      { signal, onprogress, timeout: (config.execMaxTimeoutSec + 60) * 1000 },
    )) as CallToolResult;
    await shown;
    const text = result.content
      .filter((b) => b.type === 'text')
      .map((b) => (b as { text: string }).text)
      .join('\n');
    const files: FileChange[] = result.content
      .filter((b) => b.type === 'resource_link')
      .map((b) => b as { uri: string; size?: number })
      .filter((b) => b.uri.startsWith('file:///workspace/'))
      .map((b) => ({ path: decodePathSegment(b.uri.slice('file:///workspace/'.length)), ...(b.size !== undefined ? { size: b.size } : {}) }));
    const userText = await forUser(boundary, caller, text);
    emit({ type: 'tool_result', id: c.toolCallId, name: c.toolName, text: userText.length > MAX_RESULT_SHOWN ? `${userText.slice(0, MAX_RESULT_SHOWN)}…` : userText, isError: result.isError === true });
    if (files.length) emit({ type: 'files', id: c.toolCallId, files });
    return { output: { type: result.isError ? 'error-text' : 'text', value: text || '(no output)' }, ...(files.length ? { files } : {}) };
  } catch (err) {
    await shown;
    const value = signal.aborted ? 'Stopped: the user cancelled this turn.' : `The ${c.toolName} call failed: ${(err as Error).message}`;
    emit({ type: 'tool_result', id: c.toolCallId, name: c.toolName, text: value, isError: true });
    return { output: { type: 'error-text', value } };
  }
}

/** A model round in the metrics: its outcome, its time and the tokens the provider reported. */
function countRound(provider: string, outcome: 'ok' | 'error' | 'aborted', started: number, usage: Usage, span?: Span): void {
  if (span) {
    span.setAttributes({ 'gen_ai.usage.input_tokens': usage.inputTokens, 'gen_ai.usage.output_tokens': usage.outputTokens, 'sandgate.outcome': outcome });
    if (outcome === 'error') failed(span, new Error('model request failed'));
    span.end();
  }
  metrics.modelRounds.inc({ provider, outcome });
  metrics.modelRoundSeconds.observe({ provider }, metrics.secondsSince(started));
  if (usage.inputTokens) metrics.modelTokens.inc({ provider, direction: 'input' }, usage.inputTokens);
  if (usage.outputTokens) metrics.modelTokens.inc({ provider, direction: 'output' }, usage.outputTokens);
}
