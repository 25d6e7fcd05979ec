/**
 * The chat: the conversation list, a conversation with its transcript, and the actions
 * on it (send, stop, change model, delete). A message starts a turn of the built-in
 * agent in the background and answers at once; everything the turn shows travels over
 * the live channel (live.ts), in order, to every page watching the conversation.
 */
import express, { type Router } from 'express';
import type { Agent } from '../../agent/agent.js';
import type { Config } from '../../config.js';
import { deleteConversationInSteps, getConversation, listConversations, turnsOf } from '../../agent/conversations.js';
import { GatewayError } from '../../errors.js';
import type { RateLimiter } from '../../limits/rate-limit.js';
import type { Logger } from '../../logger.js';
import type { ModelBoundary } from '../../pii/boundary.js';
import { conversationScopeRef, dropPiiScope } from '../../pii/scopes.js';
import type { Db } from '../../store/store.js';
import type { User } from '../../accounts/accounts.js';
import { titleFor, transcript } from './transcript.js';
import { userOf, type WebAuth } from '../sign-in/routes.js';
import { chatStoreRoom, webRateLimit } from '../limits.js';
import type { LiveHub } from '../live/hub.js';
import { renderPage, renderPartial } from '../render.js';

export interface ChatDeps {
  config: Config;
  db: Db;
  logger: Logger;
  agent: Agent;
  boundary: ModelBoundary;
  auth: WebAuth;
  live: LiveHub;
  /** The users' request budget, shared with their tokens: a message takes one. */
  limiter: RateLimiter;
}

const body = express.urlencoded({ extended: false, limit: '1mb' });

export function chatRoutes(deps: ChatDeps): Router {
  const { db, agent, auth, boundary } = deps;
  const log = deps.logger.child({ module: 'chat' });
  const router = express.Router();
  const limited = webRateLimit(deps.limiter);
  const storeRoom = chatStoreRoom(deps);

  /** Conversation titles as their user reads them (the store keeps the model's side). */
  const listFor = async (user: User) =>
    Promise.all(
      listConversations(db, user.id, { source: 'web' }).map(async (c) => ({ ...c, title: await titleFor(boundary, user, c) })),
    );

  router.get('/chat', auth.requireUser, async (req, res) => {
    const user = userOf(req);
    const models = agent.catalog.availableTo(user.id);
    renderPage(res, 'chat', { user, csrf: auth.csrfToken(req) }, {
      title: 'Chat',
      models,
      defaultModel: models.find((m) => m.id === user.defaultModel)?.id ?? agent.catalog.defaultFor(user.id)?.id,
      conversations: await listFor(user),
      conversation: undefined,
      turns: [],
      runningTurn: null,
    });
  });

  router.post('/chat/new', auth.requireUser, body, auth.csrf, limited, (req, res) => {
    const user = userOf(req);
    const model = String((req.body as { model?: unknown }).model ?? '') || undefined;
    const c = agent.startConversation(user, { model, source: 'web' });
    res.redirect(303, `/c/${c.id}`);
  });

  /** A conversation's turns as its user reads them, and the one still running. */
  async function turnsFor(user: User, id: string) {
    const conversation = getConversation(db, user.id, id);
    const turns = await transcript(db, boundary, user, conversation);
    const running = turnsOf(db, conversation.id).find((t) => t.status === 'running' && agent.isRunning(conversation.id));
    return { conversation, turns, runningTurn: running?.id ?? null };
  }

  router.get('/c/:id', auth.requireUser, async (req, res) => {
    const user = userOf(req);
    const { conversation, turns, runningTurn } = await turnsFor(user, req.params.id as string);
    const conversations = await listFor(user);
    renderPage(res, 'chat', { user, csrf: auth.csrfToken(req), live: 'chat' }, {
      title: conversations.find((c) => c.id === conversation.id)?.title || 'New conversation',
      models: agent.catalog.availableTo(user.id),
      conversations,
      conversation,
      turns,
      runningTurn,
    });
  });

  /** The transcript alone, for a page that was away from the live channel for a while. */
  router.get('/c/:id/transcript', auth.requireUser, async (req, res) => {
    res.type('html').send(renderPartial('transcript', { ...(await turnsFor(userOf(req), req.params.id as string)), oob: true }));
  });

  router.post('/c/:id/send', auth.requireUser, body, auth.csrf, limited, storeRoom, (req, res) => {
    const user = userOf(req);
    const id = req.params.id as string;
    const text = String((req.body as { text?: unknown }).text ?? '');
    getConversation(db, user.id, id);
    const sink = deps.live.sinkFor(user, id, text);
    // The turn runs on; its start (or why it cannot) is known at once.
    const turn = agent.send(user, id, text, sink);
    let answered = false;
    turn.then(
      () => undefined,
      (e: unknown) => {
        if (answered) return log.warn({ err: e }, 'a turn failed after it started');
        answered = true;
        const message = e instanceof GatewayError ? e.message : 'The message could not be sent; the gateway log says why.';
        if (!(e instanceof GatewayError)) log.error({ err: e }, 'a turn could not start');
        res.status(e instanceof GatewayError ? e.status : 500).type('html').send(renderPartial('notice', { message, error: true }));
      },
    );
    // send() rejects before it starts a turn or not at all: a tick later, it has started.
    setImmediate(() => {
      if (answered) return;
      answered = true;
      res.status(204).end();
    });
  });

  router.post('/c/:id/stop', auth.requireUser, body, auth.csrf, (req, res) => {
    agent.cancel(userOf(req), req.params.id as string);
    res.status(204).end();
  });

  router.post('/c/:id/model', auth.requireUser, body, auth.csrf, (req, res) => {
    agent.setModel(userOf(req), req.params.id as string, String((req.body as { model?: unknown }).model ?? ''));
    res.status(204).end();
  });

  router.post('/c/:id/delete', auth.requireUser, body, auth.csrf, async (req, res) => {
    const user = userOf(req);
    const id = req.params.id as string;
    getConversation(db, user.id, id);
    agent.cancel(user, id);
    await deleteConversationInSteps(db, user.id, id);
    // What the model was shown in it is forgotten too.
    dropPiiScope(db, conversationScopeRef(user.id, id));
    res.set('HX-Redirect', '/chat').status(204).end();
  });

  return router;
}
