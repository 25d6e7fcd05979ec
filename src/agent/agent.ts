/**
 * The built-in agent as the rest of the gateway uses it: conversations for a user, one
 * turn at a time in each, cancellation, and what is left when the gateway stops (turns
 * cut short by a restart are marked interrupted at the next start, never left running).
 *
 * Each turn acts as the conversation (`via: agent`): its tool calls are audited as such
 * and its personal data lives in the conversation's PII scope, so tokens from one
 * conversation mean nothing in another.
 */
import type { Config } from '../config.js';
import { GatewayError } from '../errors.js';
import type { Caller } from '../auth/caller.js';
import type { Logger } from '../logger.js';
import type { InProcessConnection } from '../mcp/serve.js';
import type { ModelBoundary } from '../pii/boundary.js';
import type { Db } from '../store/store.js';
import type { User } from '../accounts/accounts.js';
import { addMessage, createConversation, getConversation, markInterruptedTurns, updateConversation, type Conversation, type ConversationSource } from './conversations.js';
import type { EventSink } from './events.js';
import { modelTools, runTurn, type ModelTools, type TurnOutcome } from './loop.js';
import { NO_MODELS_MESSAGE, providerLabel, type ModelCatalog, type ModelChoice } from './models.js';
import type { Replica } from '../replicas/leases.js';

/** Longest message a user may send in one turn. */
export const MAX_MESSAGE_CHARS = 200_000;

export class AgentError extends GatewayError {
  override name = 'AgentError';
}

export interface AgentDeps {
  config: Config;
  db: Db;
  logger: Logger;
  boundary: ModelBoundary;
  catalog: ModelCatalog;
  /** An MCP client of the gateway's own tools for `caller` (gateway.connect). */
  connect(caller: Caller): Promise<InProcessConnection>;
  /** The server instructions `caller` would get at connect (skills index included). */
  instructions(caller: Caller): Promise<string>;
  /** A turn begins: the user's sandbox may be needed soon (it is thawed while the model thinks). */
  prepare?(user: User): void;
  /** This gateway among replicas sharing the store: only turns no live replica runs are marked interrupted. */
  replica?: Pick<Replica, 'id' | 'live' | 'leaseMs'>;
}

export class Agent {
  private readonly log: Logger;
  private readonly running = new Map<string, { controller: AbortController; done: Promise<unknown>; userId: number }>();
  /** The tools offered to models: the same for every caller of this gateway, listed once. */
  private tools?: Promise<ModelTools>;
  private closed = false;
  private sweep?: NodeJS.Timeout;

  constructor(private readonly deps: AgentDeps) {
    this.log = deps.logger.child({ module: 'agent' });
  }

  get catalog(): ModelCatalog {
    return this.deps.catalog;
  }

  /**
   * Marks turns a stopped gateway left running as interrupted; returns how many. With
   * replicas, only those of replicas no longer alive, at start and then every few lease
   * times (a replica that died mid-turn leaves its turns to the others to mark).
   */
  async init(): Promise<number> {
    const n = await this.markInterrupted();
    const { replica } = this.deps;
    if (replica) {
      this.sweep = setInterval(() => void this.markInterrupted().catch((e: unknown) => this.log.warn({ err: e }, 'could not mark the turns of stopped replicas')), replica.leaseMs * 5);
      this.sweep.unref();
    }
    return n;
  }

  private async markInterrupted(): Promise<number> {
    const { replica, db } = this.deps;
    const live = replica && (await replica.live()).map((r) => r.id);
    const n = await markInterruptedTurns(db, 'The gateway restarted during this turn, so it ended early. Send a message to go on.', live);
    if (n) this.log.warn({ turns: n }, 'turns interrupted by a restart were marked so');
    return n;
  }

  /** Resolves once no turn runs here, or after `timeoutMs` (a stopping replica lets its turns end). */
  async settle(timeoutMs: number): Promise<void> {
    for (const end = Date.now() + timeoutMs; this.running.size && Date.now() < end; ) await new Promise((r) => setTimeout(r, 50));
  }

  /** The model `user` gets when they name none or one they cannot use; throws when none is available. */
  async modelFor(user: User, wanted?: string): Promise<ModelChoice> {
    const available = await this.deps.catalog.availableTo(user.id);
    if (!available.length) throw new AgentError(NO_MODELS_MESSAGE, { reason: 'no_model', status: 503 });
    if (!wanted) return available.find((c) => c.id === user.defaultModel) ?? available.find((c) => c.id === this.deps.config.defaultModel) ?? available[0]!;
    const choice = available.find((c) => c.id === wanted);
    if (!choice) {
      throw new AgentError(`The model "${wanted}" is not offered to you here; choose one of: ${available.map((c) => c.id).join(', ')}.`, { reason: 'model_not_found', status: 404 });
    }
    return choice;
  }

  async startConversation(user: User, o: { model?: string; source: ConversationSource }): Promise<Conversation> {
    const choice = await this.modelFor(user, o.model);
    return createConversation(this.deps.db, { userId: user.id, model: choice.id, source: o.source });
  }

  async setModel(user: User, conversationId: string, model: string): Promise<void> {
    await getConversation(this.deps.db, user.id, conversationId);
    await updateConversation(this.deps.db, conversationId, { model: (await this.modelFor(user, model)).id });
  }

  /**
   * Adds earlier messages to a new conversation (the history an OpenAI-style client sends
   * with every request), through the PII boundary like any message: the client shows
   * values, the model gets tokens.
   */
  async seed(user: User, conversationId: string, messages: { role: 'user' | 'assistant'; text: string }[]): Promise<void> {
    await getConversation(this.deps.db, user.id, conversationId);
    const caller: Caller = { user, via: { kind: 'agent', conversationId } };
    for (const m of messages) {
      const text = await this.deps.boundary.toModel(caller, m.text);
      await addMessage(this.deps.db, { conversationId, message: m.role === 'user' ? { role: 'user', content: text } : { role: 'assistant', content: [{ type: 'text', text }] } });
    }
  }

  isRunning(conversationId: string): boolean {
    return this.running.has(conversationId);
  }

  /**
   * Runs one turn: `text` from `user` in their conversation, events to `sink`. Resolves
   * when the turn is over however it ended (the outcome says how); rejects only when it
   * cannot start (no such conversation, one already running, no model, bad message).
   * `o.started` is called once the turn has passed those checks and runs (before its
   * first event): what it is told until then is why it could not start.
   */
  async send(
    user: User,
    conversationId: string,
    text: string,
    sink: EventSink,
    o: { signal?: AbortSignal; clientInstructions?: string; started?: () => void } = {},
  ): Promise<TurnOutcome> {
    const closing = () => new AgentError('the gateway is shutting down', { reason: 'busy', status: 503 });
    const busy = () => new AgentError('this conversation is already answering a message: wait for it or stop it', { reason: 'busy', status: 409 });
    if (this.closed) throw closing();
    const conversation = await getConversation(this.deps.db, user.id, conversationId);
    if (typeof text !== 'string' || !text.trim()) throw new AgentError('the message is empty', { reason: 'invalid_request', status: 400 });
    if (text.length > MAX_MESSAGE_CHARS) throw new AgentError(`the message is longer than ${MAX_MESSAGE_CHARS} characters: put large data in a file in your workspace and refer to it`, { reason: 'invalid_request', status: 400 });
    if (this.running.has(conversationId)) throw busy();
    const choice = await this.modelFor(user, conversation.model);
    const lm = await this.deps.catalog.languageModel(choice, user.id);
    this.deps.prepare?.(user);
    if (!lm) throw new AgentError(`No key reaches ${providerLabel(choice.provider)} for you: ${NO_MODELS_MESSAGE}`, { reason: 'no_model', status: 503 });
    // Asked again after the store's answers: another message to this conversation, or the
    // shutdown, may have come in meanwhile. From here to running.set nothing waits.
    if (this.closed) throw closing();
    if (this.running.has(conversationId)) throw busy();

    const controller = new AbortController();
    const onAbort = () => controller.abort('cancel');
    o.signal?.addEventListener('abort', onAbort, { once: true });
    if (o.signal?.aborted) controller.abort('cancel');
    const caller: Caller = { user, via: { kind: 'agent', conversationId } };
    // The tools are reached only when the model calls one: a turn that only talks connects nothing.
    let connection: Promise<InProcessConnection> | undefined;
    const connect = () => (connection ??= this.deps.connect(caller));
    const work = (async () => {
      try {
        const [tools, instructions] = await Promise.all([this.modelTools(connect), this.deps.instructions(caller)]);
        return await runTurn(
          this.deps,
          { conversation, caller, choice, model: lm.model, keyOwner: lm.keyOwner, connection: connect, instructions, text, clientInstructions: o.clientInstructions, sink, signal: controller.signal },
          tools,
        );
      } finally {
        if (connection) await (await connection.catch(() => undefined))?.close().catch(() => {});
      }
    })();
    const entry = { controller, done: work.catch(() => undefined), userId: user.id };
    this.running.set(conversationId, entry);
    o.started?.();
    try {
      return await work;
    } finally {
      o.signal?.removeEventListener('abort', onAbort);
      if (this.running.get(conversationId) === entry) this.running.delete(conversationId);
    }
  }

  /** The tools, listed through the first turn's own connection (an audited tools/list of its caller) and kept. */
  private modelTools(connect: () => Promise<InProcessConnection>): Promise<ModelTools> {
    this.tools ??= connect()
      .then(modelTools)
      .catch((e: unknown) => {
        this.tools = undefined;
        throw e;
      });
    return this.tools;
  }

  /** Stops the running turn of the user's conversation: the model stream and any execution. */
  async cancel(user: User, conversationId: string): Promise<boolean> {
    await getConversation(this.deps.db, user.id, conversationId);
    const r = this.running.get(conversationId);
    if (!r) return false;
    r.controller.abort('cancel');
    return true;
  }

  /** Stops the turn running here in a conversation, if it is `userId`'s (asked by another gateway, which checked the conversation is theirs). */
  cancelTurn(userId: number, conversationId: string): boolean {
    const r = this.running.get(conversationId);
    if (!r || r.userId !== userId) return false;
    r.controller.abort('cancel');
    return true;
  }

  /** Cancels every running turn of a user (an admin disabled or deleted them); how many. */
  cancelUser(userId: number): number {
    let n = 0;
    for (const r of this.running.values()) {
      if (r.userId !== userId) continue;
      r.controller.abort('cancel');
      n++;
    }
    return n;
  }

  /** Stops every running turn (marked interrupted) and waits for them to record it. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.sweep) clearInterval(this.sweep);
    for (const r of this.running.values()) r.controller.abort('shutdown');
    await Promise.all([...this.running.values()].map((r) => r.done));
  }
}
