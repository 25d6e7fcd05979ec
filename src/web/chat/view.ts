/**
 * What the chat templates (views/web/chat) are given: the user's conversation list with
 * titles as they read them (the store keeps the model's side), and a conversation's
 * transcript with the turn still running, if any.
 */
import type { Agent } from '../../agent/agent.js';
import { getConversation, listConversations, turnsOf } from '../../agent/conversations.js';
import type { ModelBoundary } from '../../pii/boundary.js';
import type { Db } from '../../store/store.js';
import type { User } from '../../accounts/accounts.js';
import { titleFor, transcript } from './transcript.js';

export interface ChatViewDeps {
  db: Db;
  agent: Agent;
  boundary: ModelBoundary;
}

/** Conversation titles as their user reads them. */
export async function conversationList(deps: ChatViewDeps, user: User) {
  return Promise.all((await listConversations(deps.db, user.id, { source: 'web' })).map(async (c) => ({ ...c, title: await titleFor(deps.boundary, user, c) })));
}

/** A conversation's turns as its user reads them, and the one still running. */
export async function conversationTurns(deps: ChatViewDeps, user: User, id: string) {
  const conversation = await getConversation(deps.db, user.id, id);
  const turns = await transcript(deps.db, deps.boundary, user, conversation);
  const running = (await turnsOf(deps.db, conversation.id)).find((t) => t.status === 'running' && deps.agent.isRunning(conversation.id));
  return { conversation, turns, runningTurn: running?.id ?? null };
}

/** The chat page with no conversation open: the list and the model a new one starts with. */
export async function chatIndexView(deps: ChatViewDeps, user: User) {
  const models = await deps.agent.catalog.availableTo(user.id);
  return {
    title: 'Chat',
    models,
    defaultModel: models.find((m) => m.id === user.defaultModel)?.id ?? (await deps.agent.catalog.defaultFor(user.id))?.id,
    conversations: await conversationList(deps, user),
    conversation: undefined,
    turns: [],
    runningTurn: null,
  };
}

/** The chat page with conversation `id` open. */
export async function conversationView(deps: ChatViewDeps, user: User, id: string) {
  const { conversation, turns, runningTurn } = await conversationTurns(deps, user, id);
  const conversations = await conversationList(deps, user);
  return {
    title: conversations.find((c) => c.id === conversation.id)?.title || 'New conversation',
    models: await deps.agent.catalog.availableTo(user.id),
    conversations,
    conversation,
    turns,
    runningTurn,
  };
}
