/**
 * The runner protocol: newline-delimited JSON over the container's attached stdio.
 * The gateway writes requests to the runner's stdin; the runner writes events to its
 * stdout (and diagnostics, never protocol, to its stderr). sandbox/runner/sandgate_runner is
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
  /** Start this language's kept state afresh first (python: a new kernel; typescript/javascript: a new Deno host). */
  reset?: boolean;
  /** Record this execution's events until released, for a gateway that claims them later (an MCP task). */
  keep?: boolean;
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

/** The recorded events of a kept execution: `claimed`, then what it sent so far, then the rest as it comes. */
export interface ClaimRequest { op: 'claim'; id: string; target: string }
/** Forget a kept execution's record: its result is stored. */
export interface ReleaseRequest { op: 'release'; id: string; target: string }

/** Egress (PROTOCOL.md, "Egress"): bytes for a connection code opened, the gateway's acknowledgement of bytes it passed on, its end, or an abort. */
export type NetRequest = { op: 'net_data'; id: string; data: string } | { op: 'net_ack'; id: string; bytes: number } | { op: 'net_end' | 'net_close'; id: string };

export type RunnerRequest = ExecRequest | PingRequest | PreloadRequest | CancelRequest | CallResultRequest | ClaimRequest | ReleaseRequest | NetRequest;

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
  /** `separated`: user code runs as another uid than the runner (see sandgate_runner/parent/settings.py). */
  | { type: 'ready'; pid: number; versions: Record<string, string>; separated?: boolean }
  | { type: 'stdout' | 'stderr'; id: string; data: string }
  | ExecDone
  | { type: 'pong'; id: string; separated?: boolean; kept?: KeptRun[]; execs?: string[] }
  | { type: 'claimed'; id: string; target: string; state: 'done' | 'pending' | 'unknown' }
  | { type: 'preloaded'; id: string; modules: string[]; ms: number; error?: string }
  /** Code inside the sandbox asks the gateway for something (e.g. an upstream tool call). */
  | { type: 'call'; id: string; execId: string; method: string; params: unknown }
  | { type: 'log'; level: 'info' | 'warn' | 'error'; message: string }
  /** Egress: code opened a connection to the sandbox's proxy port during `execId`; its bytes, their acknowledgement, its end, its abort. */
  | { type: 'net_open'; id: string; execId: string }
  | { type: 'net_data'; id: string; data: Buffer }
  | { type: 'net_ack'; id: string; bytes: number }
  | { type: 'net_end' | 'net_close'; id: string };

/**
 * Longest file path a runner may report: PATH_MAX. Longer is not a path in /workspace.
 */
const MAX_PATH = 4096;

/**
 * Whether `p` is a path a runner may name in a `done`: relative to /workspace and inside
 * it. No empty, `.` or `..` segment, no leading `/`, no NUL, at most PATH_MAX long; so
 * `file:///workspace/<p>` can never name anything outside the workspace.
 */
export function isWorkspacePath(p: unknown): p is string {
  if (typeof p !== 'string' || !p || p.length > MAX_PATH || p.includes('\0') || p.startsWith('/')) return false;
  return p.split('/').every((seg) => seg !== '' && seg !== '.' && seg !== '..');
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const optionalString = (v: unknown, max: number): string | undefined => (typeof v === 'string' ? (v.length > max ? `${v.slice(0, max)}...` : v) : undefined);

/**
 * A `done` with every field checked and bounded: what the gateway takes of a runner's
 * word. Files that are not workspace paths, and a file list beyond the protocol's 1,000,
 * are dropped; the text fields are cut to the sizes the runner itself keeps to.
 */
export function checkedDone(e: Record<string, unknown>, id: string): ExecDone | undefined {
  const truncated = isObject(e.truncated) ? e.truncated : {};
  const files: FileChange[] = [];
  if (Array.isArray(e.files)) {
    for (const f of e.files.slice(0, 1000)) {
      if (!isObject(f) || !isWorkspacePath(f.path) || !isCount(f.size)) continue;
      if (f.change !== 'created' && f.change !== 'modified' && f.change !== 'deleted') continue;
      files.push({ path: f.path, size: f.size, change: f.change });
    }
  }
  const exitCode = e.exitCode === null || (typeof e.exitCode === 'number' && Number.isSafeInteger(e.exitCode)) ? e.exitCode : null;
  const done: ExecDone = {
    type: 'done',
    id,
    exitCode,
    durationMs: typeof e.durationMs === 'number' && Number.isFinite(e.durationMs) && e.durationMs >= 0 ? e.durationMs : 0,
    timedOut: e.timedOut === true,
    killed: e.killed === true,
    restarted: e.restarted === true,
    truncated: { stdout: isCount(truncated.stdout) ? truncated.stdout : 0, stderr: isCount(truncated.stderr) ? truncated.stderr : 0 },
    files,
  };
  const result = optionalString(e.result, 4200);
  if (result !== undefined) done.result = result;
  const notice = optionalString(e.notice, 4096);
  if (notice !== undefined) done.notice = notice;
  if (isObject(e.error)) {
    done.error = {
      name: optionalString(e.error.name, 200) ?? 'Error',
      message: optionalString(e.error.message, 4096) ?? '',
      traceback: optionalString(e.error.traceback, 16384) ?? '',
    };
  }
  return done;
}

/** A kept execution the runner still holds (`pong.kept`): its id, its language, and whether it ended. */
export interface KeptRun {
  id: string;
  language: Language;
  done: boolean;
}

/** The well-formed entries of a runner's kept list, at most as many as it holds (16). */
function keptRuns(list: unknown[]): KeptRun[] {
  const out: KeptRun[] = [];
  for (const k of list.slice(0, 16)) {
    if (isObject(k) && typeof k.id === 'string' && k.id.length <= 128 && LANGUAGES.includes(k.language as Language)) {
      out.push({ id: k.id, language: k.language as Language, done: k.done === true });
    }
  }
  return out;
}

/** The well-formed ids of a runner's list of executions running or queued (`pong.execs`), at most 64. */
function execIds(list: unknown[]): string[] {
  return list.slice(0, 64).filter((id): id is string => typeof id === 'string' && id.length > 0 && id.length <= 128);
}

/**
 * Checks one parsed line from a runner and returns it as a RunnerEvent, or undefined
 * when it is not one (wrong type, missing or mistyped fields). Everything a sandbox
 * sends is checked here, once, at the boundary.
 */
export function parseRunnerEvent(v: unknown): RunnerEvent | undefined {
  if (!isObject(v) || typeof v.type !== 'string') return undefined;
  const id = typeof v.id === 'string' && v.id.length <= 128 ? v.id : undefined;
  switch (v.type) {
    case 'stdout':
    case 'stderr':
      return id !== undefined && typeof v.data === 'string' ? { type: v.type, id, data: v.data } : undefined;
    case 'done':
      return id !== undefined ? checkedDone(v, id) : undefined;
    case 'pong':
      return id !== undefined
        ? { type: 'pong', id, separated: v.separated === true, ...(Array.isArray(v.kept) ? { kept: keptRuns(v.kept) } : {}), ...(Array.isArray(v.execs) ? { execs: execIds(v.execs) } : {}) }
        : undefined;
    case 'claimed':
      return id !== undefined && typeof v.target === 'string' && (v.state === 'done' || v.state === 'pending' || v.state === 'unknown')
        ? { type: 'claimed', id, target: v.target, state: v.state }
        : undefined;
    case 'preloaded':
      if (id === undefined) return undefined;
      return {
        type: 'preloaded',
        id,
        modules: Array.isArray(v.modules) ? v.modules.filter((m): m is string => typeof m === 'string') : [],
        ms: typeof v.ms === 'number' ? v.ms : 0,
        ...(typeof v.error === 'string' ? { error: v.error.slice(0, 2000) } : {}),
      };
    case 'call':
      if (id === undefined || typeof v.execId !== 'string' || typeof v.method !== 'string') return undefined;
      return { type: 'call', id, execId: v.execId, method: v.method, params: v.params };
    case 'ready': {
      const versions: Record<string, string> = {};
      if (isObject(v.versions)) for (const [k, val] of Object.entries(v.versions)) if (typeof val === 'string') versions[k] = val;
      return { type: 'ready', pid: typeof v.pid === 'number' ? v.pid : 0, versions, separated: v.separated === true };
    }
    case 'net_open':
      return id !== undefined && typeof v.execId === 'string' ? { type: 'net_open', id, execId: v.execId } : undefined;
    case 'net_data':
      // Base64 of at most the runner's read size (32 KiB); anything else is not the protocol.
      return id !== undefined && typeof v.data === 'string' && v.data.length <= 64 * 1024 && /^[A-Za-z0-9+/]*={0,2}$/.test(v.data)
        ? { type: 'net_data', id, data: Buffer.from(v.data, 'base64') }
        : undefined;
    case 'net_ack':
      return id !== undefined && isCount(v.bytes) ? { type: 'net_ack', id, bytes: v.bytes } : undefined;
    case 'net_end':
    case 'net_close':
      return id !== undefined ? { type: v.type, id } : undefined;
    case 'log':
      if (typeof v.message !== 'string') return undefined;
      return { type: 'log', level: v.level === 'warn' || v.level === 'error' ? v.level : 'info', message: v.message.slice(0, 2000) };
    default:
      return undefined;
  }
}
