/**
 * The runner protocol: newline-delimited JSON over the container's attached stdio.
 * The gateway writes requests to the runner's stdin; the runner writes events to its
 * stdout (and diagnostics, never protocol, to its stderr). sandbox/runner/runner.py is
 * the other side; sandbox/runner/PROTOCOL.md describes the same messages.
 *
 * Ordering: for one execution id, `stdout`/`stderr` events come in the order the
 * process wrote them, then exactly one `done`. Events of different executions may
 * interleave. `ready` is the first line the runner writes.
 */

export type Language = 'python' | 'typescript' | 'javascript' | 'bash';
export const LANGUAGES: readonly Language[] = ['python', 'typescript', 'javascript', 'bash'];

export interface ExecRequest {
  op: 'exec';
  id: string;
  language: Language;
  code: string;
  timeoutMs: number;
  /** Bytes kept per stream; the rest is counted and dropped. */
  outputLimit: number;
  /** The complete environment for the process (the runner adds nothing secret). */
  env: Record<string, string>;
  /** Deno permission flags, computed by the gateway from the effective policy. */
  denoFlags: string[];
  /**
   * File-system narrowing below what the container mounts, for every language: the
   * runner runs the process in its own user+mount namespace where `readOnly` paths
   * are remounted read-only and `hidden` paths are covered by an empty tmpfs, then
   * nests one more namespace so the code cannot undo either.
   */
  fs?: { readOnly: string[]; hidden: string[] };
  /**
   * Nothing outside the sandbox wrote to /workspace since the previous execution
   * ended, so the runner may take that execution's closing scan as this one's starting
   * point instead of walking the workspace again (one walk fewer per execution).
   */
  reuseSnapshot?: boolean;
}

export interface PingRequest { op: 'ping'; id: string }
export interface PreloadRequest { op: 'preload'; id: string; modules: string[] }
export interface CancelRequest { op: 'cancel'; id: string; target: string }
/** Answer to a `call` event raised by code inside the sandbox. */
export interface CallResultRequest {
  op: 'call_result';
  id: string;
  ok: boolean;
  result?: unknown;
  error?: string;
}

export type RunnerRequest = ExecRequest | PingRequest | PreloadRequest | CancelRequest | CallResultRequest;

export interface FileChange {
  /** Path relative to /workspace. */
  path: string;
  size: number;
  change: 'created' | 'modified' | 'deleted';
}

export interface ExecDone {
  type: 'done';
  id: string;
  exitCode: number | null;
  durationMs: number;
  /** Python: repr of the value of a final expression, when there is one. */
  result?: string | null;
  timedOut: boolean;
  /** The process was killed (timeout, cancel, or out of memory). */
  killed: boolean;
  /** The Python interpreter had to be restarted: variables are gone. */
  restarted: boolean;
  /** Bytes dropped past outputLimit, per stream. */
  truncated: { stdout: number; stderr: number };
  files: FileChange[];
  /** A human-readable reason when the runner, not the code, ended the execution. */
  notice?: string;
  /** Python exception of the user's code, when it raised. */
  error?: { name: string; message: string; traceback: string };
}

export type RunnerEvent =
  | { type: 'ready'; pid: number; versions: Record<string, string> }
  | { type: 'stdout' | 'stderr'; id: string; data: string }
  | ExecDone
  | { type: 'pong'; id: string }
  | { type: 'preloaded'; id: string; modules: string[]; ms: number; error?: string }
  /** Code inside the sandbox asks the gateway for something (e.g. an upstream tool call). */
  | { type: 'call'; id: string; execId: string; method: string; params: unknown }
  | { type: 'log'; level: 'info' | 'warn' | 'error'; message: string };
