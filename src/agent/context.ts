/**
 * Keeping a conversation inside the model's context window (SANDGATE_AGENT_CONTEXT_TOKENS).
 * What goes first is old tool output (results of earlier rounds, then long arguments of
 * earlier calls), oldest first, each replaced by a short note that says what was there
 * and how to get it back; the messages the user wrote are never dropped or cut. When
 * the user's own messages alone do not fit, the turn says so instead of sending less.
 */
import type { ModelMessage } from 'ai';

/** Tokens of a text, estimated: 3 characters a token (code and JSON run denser than prose). */
export function estimateTokens(chars: number): number {
  return Math.ceil(chars / 3);
}

/** Characters of a trimmed result kept, to remind the model what it was. */
const KEPT_HEAD = 300;
/** Tool arguments longer than this may be cut in old calls. */
const LONG_INPUT = 2000;

const size = (m: ModelMessage) => JSON.stringify(m).length;

function trimmedNote(chars: number, head: string): string {
  return `[earlier output trimmed to keep the conversation within the model's context: ${chars} characters; it began: ${JSON.stringify(head)}. Run the code again or read the file if you need it]`;
}

function outputText(output: unknown): string {
  const o = output as { type?: string; value?: unknown };
  return typeof o?.value === 'string' ? o.value : JSON.stringify(o?.value ?? output);
}

function cutLongStrings(value: unknown): unknown {
  if (typeof value === 'string') return value.length > LONG_INPUT ? `${value.slice(0, KEPT_HEAD)}… [${value.length - KEPT_HEAD} more characters trimmed from this earlier call]` : value;
  if (Array.isArray(value)) return value.map(cutLongStrings);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, cutLongStrings(v)]));
  return value;
}

export interface Fitted {
  messages: ModelMessage[];
  /** Parts trimmed to fit. */
  trimmed: number;
  /** Estimated tokens of what is sent. */
  tokens: number;
  fits: boolean;
}

/**
 * The messages to send so that they, with `fixedChars` of system prompt and tool
 * definitions, fit `budgetTokens`. Messages from index `keepFrom` on (the round in
 * progress) are kept whole. The stored conversation is not changed.
 */
export function fitToContext(history: ModelMessage[], fixedChars: number, budgetTokens: number, keepFrom: number): Fitted {
  const sizes = history.map(size);
  let total = fixedChars + sizes.reduce((a, b) => a + b, 0);
  if (estimateTokens(total) <= budgetTokens) return { messages: history, trimmed: 0, tokens: estimateTokens(total), fits: true };
  const messages = [...history];
  let trimmed = 0;
  const replace = (i: number, m: ModelMessage) => {
    const s = size(m);
    total += s - sizes[i]!;
    sizes[i] = s;
    messages[i] = m;
  };
  // First pass: old tool results, oldest first.
  for (let i = 0; i < keepFrom && estimateTokens(total) > budgetTokens; i++) {
    const m = messages[i]!;
    if (m.role !== 'tool') continue;
    const content = m.content.map((part) => {
      if (part.type !== 'tool-result') return part;
      const text = outputText(part.output);
      if (text.length <= KEPT_HEAD * 2) return part;
      trimmed++;
      return { ...part, output: { type: 'text' as const, value: trimmedNote(text.length, text.slice(0, KEPT_HEAD)) } };
    });
    replace(i, { ...m, content });
  }
  // Second pass: long arguments of old calls (code, file contents).
  for (let i = 0; i < keepFrom && estimateTokens(total) > budgetTokens; i++) {
    const m = messages[i]!;
    if (m.role !== 'assistant' || typeof m.content === 'string') continue;
    let changed = false;
    const content = m.content.map((part) => {
      if (part.type !== 'tool-call') return part;
      const input = cutLongStrings(part.input);
      if (JSON.stringify(input) === JSON.stringify(part.input)) return part;
      changed = true;
      trimmed++;
      return { ...part, input };
    });
    if (changed) replace(i, { ...m, content });
  }
  const tokens = estimateTokens(total);
  return { messages, trimmed, tokens, fits: tokens <= budgetTokens };
}
