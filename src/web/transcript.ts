/**
 * A conversation as its user reads it, rebuilt from the store: each turn's message, the
 * answer (Markdown), every tool call with its code and result and the files it changed,
 * and how the turn ended. The store keeps the model's side; every text passes the PII
 * boundary back here, in the conversation's scope, so the user sees their own values.
 */
import crypto from 'node:crypto';
import type { ModelMessage } from 'ai';
import { messagesOf, turnsOf, type Conversation, type Turn } from '../agent/conversations.js';
import { forUser } from '../agent/display.js';
import type { FileChange } from '../agent/events.js';
import type { Caller } from '../identity/caller.js';
import type { ModelBoundary } from '../pii/boundary.js';
import type { Db } from '../store/store.js';
import type { User } from '../store/users.js';
import { renderMarkdown } from './markdown.js';

/** A tool result is shown this long; the model had all of it. */
const MAX_RESULT_SHOWN = 20_000;

export interface ShownFile extends FileChange {
  /** Shown inline (a raster image the browser can show safely). */
  image: boolean;
}

export type TranscriptItem =
  | { kind: 'text'; html: string }
  | {
      kind: 'tool';
      id: string;
      /** A page-safe id for the call (provider ids can hold anything). */
      key: string;
      name: string;
      language?: string;
      code?: string;
      input?: string;
      result?: { text: string; isError: boolean };
      files: ShownFile[];
    };

export interface TurnView {
  /** Null for history an API client sent along (no turn of its own). */
  id: number | null;
  status: Turn['status'] | 'history';
  note: string | null;
  userText: string;
  items: TranscriptItem[];
}

const IMAGE = /\.(png|jpe?g|gif|webp)$/i;
export const isImage = (path: string) => IMAGE.test(path);

/** A page-safe id for a tool call id, the same wherever it is computed. */
export function toolKey(toolCallId: string): string {
  return crypto.createHash('sha256').update(toolCallId).digest('hex').slice(0, 16);
}

async function showDeep(boundary: ModelBoundary, caller: Caller, value: unknown): Promise<unknown> {
  if (typeof value === 'string') return forUser(boundary, caller, value);
  if (Array.isArray(value)) return Promise.all(value.map((v) => showDeep(boundary, caller, v)));
  if (value && typeof value === 'object') return Object.fromEntries(await Promise.all(Object.entries(value).map(async ([k, v]) => [k, await showDeep(boundary, caller, v)] as const)));
  return value;
}

function resultText(output: unknown): { text: string; isError: boolean } {
  const o = output as { type?: string; value?: unknown };
  const text = typeof o?.value === 'string' ? o.value : JSON.stringify(o?.value ?? '');
  return { text, isError: o?.type === 'error-text' || o?.type === 'error-json' };
}

/** A conversation's title as its user reads it (the store keeps the model's side); '' before its first message. */
export async function titleFor(boundary: ModelBoundary, user: User, conversation: Pick<Conversation, 'id' | 'title'>): Promise<string> {
  return conversation.title ? forUser(boundary, { user, via: { kind: 'agent', conversationId: conversation.id } } satisfies Caller, conversation.title) : '';
}

export async function transcript(db: Db, boundary: ModelBoundary, user: User, conversation: Conversation, only?: number): Promise<TurnView[]> {
  const caller: Caller = { user, via: { kind: 'agent', conversationId: conversation.id } };
  const show = (t: string) => forUser(boundary, caller, t);
  const turns = new Map(turnsOf(db, conversation.id).map((t) => [t.id, t]));
  const views: TurnView[] = [];
  const tools = new Map<string, Extract<TranscriptItem, { kind: 'tool' }>>();
  let current: TurnView | undefined;
  for (const m of messagesOf(db, conversation.id)) {
    if (only !== undefined && m.turnId !== only) continue;
    const msg: ModelMessage = m.message;
    if (msg.role === 'user') {
      const turn = m.turnId !== null ? turns.get(m.turnId) : undefined;
      current = {
        id: turn?.id ?? null,
        status: turn?.status ?? 'history',
        note: turn?.note ?? null,
        userText: await show(typeof msg.content === 'string' ? msg.content : msg.content.map((p) => (p.type === 'text' ? p.text : '')).join('')),
        items: [],
      };
      views.push(current);
      continue;
    }
    if (!current) continue;
    if (msg.role === 'assistant') {
      const parts = typeof msg.content === 'string' ? [{ type: 'text' as const, text: msg.content }] : msg.content;
      for (const p of parts) {
        if (p.type === 'text' && p.text.trim()) current.items.push({ kind: 'text', html: renderMarkdown(await show(p.text)) });
        if (p.type === 'tool-call') {
          const input = (await showDeep(boundary, caller, p.input)) as Record<string, unknown>;
          const item: Extract<TranscriptItem, { kind: 'tool' }> = {
            kind: 'tool',
            id: p.toolCallId,
            key: toolKey(p.toolCallId),
            name: p.toolName,
            files: [],
            ...(p.toolName === 'execute_code' && typeof input?.code === 'string'
              ? { language: String(input.language ?? ''), code: input.code }
              : { input: JSON.stringify(input, null, 2) }),
          };
          tools.set(p.toolCallId, item);
          current.items.push(item);
        }
      }
    } else if (msg.role === 'tool') {
      for (const p of msg.content) {
        if (p.type !== 'tool-result') continue;
        const item = tools.get(p.toolCallId);
        if (!item) continue;
        const r = resultText(p.output);
        const text = await show(r.text);
        item.result = { text: text.length > MAX_RESULT_SHOWN ? `${text.slice(0, MAX_RESULT_SHOWN)}…` : text, isError: r.isError };
        item.files = (m.files?.[p.toolCallId] ?? []).map((f) => ({ ...f, image: isImage(f.path) }));
      }
    }
  }
  return views;
}
