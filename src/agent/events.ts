/**
 * What a turn of the agent reports while it runs, through one narrow sink: the web app
 * sends these over socket.io, the /v1 API turns them into chat.completion chunks, tests
 * read them in memory. Everything here is for the user: personal data is shown as it
 * is (they own it), never as the tokens the model saw.
 */

export interface FileChange {
  /** Path under /workspace. */
  path: string;
  size?: number;
}

export type AgentEvent =
  | { type: 'turn'; conversationId: string; turnId: number; model: string }
  /** A piece of the model's answer. */
  | { type: 'text'; delta: string }
  /** The model calls a tool (`input` as the sandbox will get it). */
  | { type: 'tool_call'; id: string; name: string; input: unknown }
  /** Output of a running execution, as it is produced (shortened; the result has all of it). */
  | { type: 'output'; id: string; text: string }
  | { type: 'tool_result'; id: string; name: string; text: string; isError: boolean }
  /** Files an execution created or changed. */
  | { type: 'files'; id: string; files: FileChange[] }
  /** Tokens of one model round trip. */
  | { type: 'usage'; round: number; inputTokens: number; outputTokens: number; cachedInputTokens: number }
  /** A problem the turn reports (and may continue after, e.g. a retry). */
  | { type: 'error'; code: string; message: string }
  /** The turn is over: `reason` says how, `message` (when not a normal end) says it in words. */
  | { type: 'done'; reason: DoneReason; message?: string };

export type DoneReason = 'complete' | 'max_rounds' | 'token_budget' | 'context_full' | 'cancelled' | 'failed';

export type EventSink = (event: AgentEvent) => void;
