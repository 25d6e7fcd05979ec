/**
 * The chat: the conversation list, a conversation with its transcript, and the actions
 * on it (send, stop, change model, delete). A message starts a turn of the built-in
 * agent in the background and answers at once; everything the turn shows travels over
 * the live channel (src/web/live/hub.ts), in order, to every page watching the
 * conversation. The handlers are placed, with their guards, by the route table
 * (src/routes.ts); the template data comes from ./view.ts.
 */
import type { RequestHandler } from 'express';
import type { Agent } from '../../agent/agent.js';
import { deleteConversationInSteps, getConversation, hasRunningTurn } from '../../agent/conversations.js';
import { GatewayError } from '../../errors.js';
import type { Logger } from '../../logger.js';
import type { ModelBoundary } from '../../pii/boundary.js';
import { conversationScopeRef, dropPiiScope } from '../../pii/scopes.js';
import type { Db } from '../../store/store.js';
import { userOf, type WebSessions } from '../../auth/session-middleware.js';
import type { LiveHub } from '../live/hub.js';
import { renderPage, renderPartial } from '../render.js';
import { chatIndexView, conversationTurns, conversationView } from './view.js';

export interface ChatDeps {
  db: Db;
  logger: Logger;
  agent: Agent;
  boundary: ModelBoundary;
  auth: WebSessions;
  live: LiveHub;
}

export interface ChatPage {
  /** GET /chat */
  index: RequestHandler;
  /** POST /chat/new: a new conversation, then to its page. */
  create: RequestHandler;
  /** GET /c/:id */
  show: RequestHandler;
  /** GET /c/:id/transcript: the transcript alone, for a page that was away from the live channel for a while. */
  transcript: RequestHandler;
  /** POST /c/:id/send: starts a turn; 204 once it has started, or the notice saying why it could not. */
  send: RequestHandler;
  /** POST /c/:id/stop */
  stop: RequestHandler;
  /** POST /c/:id/model */
  setModel: RequestHandler;
  /** POST /c/:id/delete */
  remove: RequestHandler;
}

export function chatPage(deps: ChatDeps): ChatPage {
  const { db, agent, auth } = deps;
  const log = deps.logger.child({ module: 'chat' });

  return {
    index: async (req, res) => {
      const user = userOf(req);
      renderPage(res, 'chat/page', { user, csrf: auth.csrfToken(req) }, await chatIndexView(deps, user));
    },

    create: async (req, res) => {
      const user = userOf(req);
      const model = String((req.body as { model?: unknown }).model ?? '') || undefined;
      const c = await agent.startConversation(user, { model, source: 'web' });
      res.redirect(303, `/c/${c.id}`);
    },

    show: async (req, res) => {
      const user = userOf(req);
      renderPage(res, 'chat/page', { user, csrf: auth.csrfToken(req), live: 'chat' }, await conversationView(deps, user, req.params.id as string));
    },

    transcript: async (req, res) => {
      res.type('html').send(renderPartial('chat/transcript', { ...(await conversationTurns(deps, userOf(req), req.params.id as string)), oob: true }));
    },

    send: async (req, res) => {
      const user = userOf(req);
      const id = req.params.id as string;
      const text = String((req.body as { text?: unknown }).text ?? '');
      await getConversation(db, user.id, id);
      const sink = deps.live.sinkFor(user, id, text);
      // The turn runs on; the answer says it started, or why it could not.
      let answered = false;
      const started = () => {
        if (answered) return;
        answered = true;
        res.status(204).end();
      };
      agent.send(user, id, text, sink, { started }).then(
        () => undefined,
        (e: unknown) => {
          if (answered) return log.warn({ err: e }, 'a turn failed after it started');
          answered = true;
          const message = e instanceof GatewayError ? e.message : 'The message could not be sent; the gateway log says why.';
          if (!(e instanceof GatewayError)) log.error({ err: e }, 'a turn could not start');
          res.status(e instanceof GatewayError ? e.status : 500).type('html').send(renderPartial('notice', { message, error: true }));
        },
      );
    },

    stop: async (req, res) => {
      const user = userOf(req);
      const id = req.params.id as string;
      // The turn runs on the gateway that took its message, which may be another one.
      if (!(await agent.cancel(user, id)) && (await hasRunningTurn(db, id))) deps.live.askOthersToStopTurn(user.id, id);
      res.status(204).end();
    },

    setModel: async (req, res) => {
      await agent.setModel(userOf(req), req.params.id as string, String((req.body as { model?: unknown }).model ?? ''));
      res.status(204).end();
    },

    remove: async (req, res) => {
      const user = userOf(req);
      const id = req.params.id as string;
      await getConversation(db, user.id, id);
      if (!(await agent.cancel(user, id)) && (await hasRunningTurn(db, id))) deps.live.askOthersToStopTurn(user.id, id);
      await deleteConversationInSteps(db, user.id, id);
      // What the model was shown in it is forgotten too.
      await dropPiiScope(db, conversationScopeRef(user.id, id));
      res.set('HX-Redirect', '/chat').status(204).end();
    },
  };
}
