/**
 * A conversation as its user reads it, rebuilt from the store: each turn's message, the
 * answer (Markdown), every tool call with its code and result and the files it changed,
 * and how the turn ended. The store keeps the model's side; every text passes the PII
 * boundary back here, in the conversation's scope, so the user sees their own values.
 *
 * Answers are rendered once, from the model's side, the first time they are shown (at
 * the end of their turn, for a page watching it), and kept (setMessageHtml); a page load
 * only puts the values back. They go back into the text of the HTML only: a link's
 * destination or an image's source stays as the model wrote it, so a model that builds
 * `https://elsewhere/?q=[EMAIL_1]` sends no one's address anywhere.
 *
 * Everything is shown within bounds: tool arguments as bounded-json.ts formats them, and
 * results up to MAX_RESULT_SHOWN characters.
 */
import crypto from 'node:crypto';
import type { ModelMessage } from 'ai';
import { messagesOf, setMessageHtml, turnsOf, type Conversation, type StoredMessage, type Turn } from '../../agent/conversations.js';
import { forUser } from '../../agent/display.js';
import type { FileChange } from '../../agent/events.js';
import { MAX_TOOL_INPUT_CHARS, MAX_TOOL_INPUT_DEPTH } from '../../agent/tool-input.js';
import { jsonExtent, prettyJson } from '../../bounded-json.js';
import type { Caller } from '../../auth/caller.js';
import type { ModelBoundary } from '../../pii/boundary.js';
import { tokenRegex } from '../../pii/token-format.js';
import type { Db } from '../../store/store.js';
import type { User } from '../../accounts/accounts.js';
import { renderMarkdownFor, replaceInText } from '../markdown.js';

/** A tool result is shown this long; the model had all of it. */
const MAX_RESULT_SHOWN = 20_000;
/** Tool arguments (other than code) are shown this long, and this deep. */
const MAX_INPUT_SHOWN = 20_000;
const MAX_INPUT_DEPTH_SHOWN = 16;
/** The form of stored answer HTML; HTML stored in another form is rendered again. */
const RENDERED_FORM = 1;

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

/** The HTML of a message's text parts: as kept, or rendered now and kept. */
async function answerHtml(db: Db, user: User, m: StoredMessage, texts: string[]): Promise<string[]> {
  if (m.html) {
    try {
      const kept = JSON.parse(m.html) as { v?: unknown; parts?: unknown };
      if (kept.v === RENDERED_FORM && Array.isArray(kept.parts) && kept.parts.length === texts.length) return kept.parts as string[];
    } catch {
      /* rendered again below */
    }
  }
  const parts: string[] = [];
  let lasting = true;
  for (const t of texts) {
    const r = await renderMarkdownFor(t, { owner: user.id });
    parts.push(r.html);
    lasting &&= r.lasting;
  }
  // Plain text shown for a passing reason (a busy formatter) is formatted again at the next load.
  if (lasting) await setMessageHtml(db, m.id, JSON.stringify({ v: RENDERED_FORM, parts }));
  return parts;
}

/** How a tool call's arguments are shown: code as code, anything else as bounded JSON. */
async function shownInput(boundary: ModelBoundary, caller: Caller, toolName: string, stored: unknown): Promise<{ language: string; code: string } | { input: string }> {
  // What a gateway before these bounds kept may be of any size: measured before it is walked.
  if (jsonExtent(stored, { maxDepth: MAX_TOOL_INPUT_DEPTH, maxChars: MAX_TOOL_INPUT_CHARS }).over) {
    return { input: `(These arguments are not shown: they are over ${MAX_TOOL_INPUT_CHARS} characters or nested more than ${MAX_TOOL_INPUT_DEPTH} levels deep.)` };
  }
  const input = (await showDeep(boundary, caller, stored)) as Record<string, unknown>;
  if (toolName === 'execute_code' && typeof input?.code === 'string') return { language: String(input.language ?? ''), code: input.code };
  const pretty = prettyJson(input, { maxDepth: MAX_INPUT_DEPTH_SHOWN, maxChars: MAX_INPUT_SHOWN });
  const notes = [
    pretty.deeper ? `… marks what is nested more than ${MAX_INPUT_DEPTH_SHOWN} levels deep` : '',
    pretty.longer ? `cut: only the first ${MAX_INPUT_SHOWN} characters are shown` : '',
  ].filter(Boolean);
  return { input: notes.length ? `${pretty.text}${pretty.longer ? '…' : ''}\n(${notes.join('; ')})` : pretty.text };
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
  // Messages first: every turn a message names is then among the turns read after them.
  const messages = await messagesOf(db, conversation.id);
  const turns = new Map((await turnsOf(db, conversation.id)).map((t) => [t.id, t]));
  const views: TurnView[] = [];
  const tools = new Map<string, Extract<TranscriptItem, { kind: 'tool' }>>();
  let current: TurnView | undefined;
  for (const m of messages) {
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
      const shownText = (p: (typeof parts)[number]): p is Extract<(typeof parts)[number], { type: 'text' }> => p.type === 'text' && p.text.trim() !== '';
      const texts = parts.filter(shownText).map((p) => p.text);
      const html = texts.length ? await answerHtml(db, user, m, texts) : [];
      let t = 0;
      for (const p of parts) {
        if (shownText(p)) current.items.push({ kind: 'text', html: await replaceInText(html[t++]!, tokenRegex(), show) });
        if (p.type === 'tool-call') {
          const item: Extract<TranscriptItem, { kind: 'tool' }> = {
            kind: 'tool',
            id: p.toolCallId,
            key: toolKey(p.toolCallId),
            name: p.toolName,
            files: [],
            ...(await shownInput(boundary, caller, p.toolName, p.input)),
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
        // Cut before the values go back (a token is shorter than its value), then to what is shown.
        const text = await show(r.text.length > MAX_RESULT_SHOWN * 2 ? r.text.slice(0, MAX_RESULT_SHOWN * 2) : r.text);
        item.result = { text: text.length > MAX_RESULT_SHOWN ? `${text.slice(0, MAX_RESULT_SHOWN)}…` : text, isError: r.isError };
        item.files = (m.files?.[p.toolCallId] ?? []).map((f) => ({ ...f, image: isImage(f.path) }));
      }
    }
  }
  return views;
}
