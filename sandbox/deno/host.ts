/**
 * The Deno host: one long-lived Deno process per sandbox that runs TypeScript and
 * JavaScript executions without starting a process for each (a Deno start costs ~130 ms
 * under gVisor). The runner starts it (sandbox/runner/sandgate_runner/parent/deno_host.py)
 * as the sandbox user with the user's permission ceiling as its own permissions, and
 * speaks to it in JSON lines over one Unix socket connection, to a name it writes to this
 * process's stdin with a key that this process sends first (see deno_host.py). stdout
 * and stderr are the user's output.
 *
 * Each execution runs as a module in a worker whose permissions are exactly that
 * execution's (the ceiling narrowed by the request): Deno enforces them per worker, and
 * a worker cannot be given more than this process has. Workers are kept per permission
 * set, so the globals of one (the cells' top-level names, see cells.ts) are only ever
 * seen by executions with the same permissions: nothing a wider run defined can be
 * called by a narrower one. The least recently used of more than MAX_CONTEXTS is ended.
 *
 * Requests: {op: "exec", id, language, code, env, flags, cwd} and {op: "reset", id}.
 * Replies: {ready: true, deno} first; {id, exitCode, result?, error?, notice?} per exec;
 * {id, refused: message} when the flags ask for more than the host has; {id, reset: true}.
 */
import { compileCell } from './cells.ts';

const MAX_CONTEXTS = 4;
const GRANTS = ['read', 'write', 'net', 'env', 'run', 'sys', 'ffi'] as const;
type Grant = (typeof GRANTS)[number];
type Permissions = Record<Grant, boolean | string[]> & { import: boolean };

const [defaultFlags] = Deno.args;
const encoder = new TextEncoder();
const [channelPath, key] = (await new Response(Deno.stdin.readable).text()).split('\n');
/** Other code may hold the listener's backlog for a moment: try again for a few seconds. */
async function connect(): Promise<Deno.UnixConn> {
  for (let wait = 10; ; wait *= 2) {
    try {
      return await Deno.connect({ transport: 'unix', path: channelPath! });
    } catch (e) {
      if (wait > 2000 || e instanceof Deno.errors.NotFound || e instanceof Deno.errors.NotCapable) throw e;
      await new Promise((r) => setTimeout(r, wait));
    }
  }
}
const channel = await connect();

async function send(bytes: Uint8Array): Promise<void> {
  for (let off = 0; off < bytes.length; ) off += await channel.write(bytes.subarray(off));
}
// The key first: it tells the runner that this connection is the host's.
await send(encoder.encode(key + '\n'));

let sending = Promise.resolve();
/** Replies go out whole and in order; the runner gone, there is nothing left to do. */
function reply(obj: unknown): void {
  const bytes = encoder.encode(JSON.stringify(obj) + '\n');
  sending = sending.then(() => send(bytes)).catch(() => Deno.exit(1));
}

/** Worker permissions from Deno flags (`--allow-read=/a,/b`, `--allow-env`); what is not named is denied. */
function permissionsOf(flags: string[]): Permissions {
  const perms = { import: false } as Permissions;
  for (const g of GRANTS) perms[g] = false;
  for (const flag of flags) {
    const m = /^--allow-([a-z]+)(?:=(.*))?$/s.exec(flag);
    if (!m || !(GRANTS as readonly string[]).includes(m[1]!)) continue;
    perms[m[1] as Grant] = m[2] === undefined ? true : m[2].split(',').filter(Boolean);
  }
  return perms;
}

interface Outcome {
  exitCode: number | null;
  result?: string;
  error?: { name: string; message: string; traceback: string };
  notice?: string;
}

class Context {
  readonly worker: Worker;
  readonly ready: Promise<void>;
  private pending = new Map<string, (o: Outcome) => void>();
  dead = false;
  used = performance.now();

  /** Throws (NotCapable) when `perms` ask for more than this process has. */
  constructor(readonly perms: Permissions) {
    this.worker = new Worker(new URL('./context.js', import.meta.url).href, {
      type: 'module',
      name: 'sandgate',
      deno: { permissions: perms },
    } as WorkerOptions);
    let started: () => void;
    this.ready = new Promise((resolve) => (started = resolve));
    this.worker.onmessage = (e: MessageEvent) => {
      const d = e.data;
      if (d && d.ready === true) return started();
      if (!d || typeof d.id !== 'string') return;
      const done = this.pending.get(d.id);
      if (!done) return;
      this.pending.delete(d.id);
      done({
        exitCode: Number.isInteger(d.exitCode) ? d.exitCode : 1,
        result: typeof d.result === 'string' ? d.result : undefined,
        error: d.error && typeof d.error === 'object' ? d.error : undefined,
      });
    };
    this.worker.onerror = (e: ErrorEvent) => {
      e.preventDefault();
      this.end(`The TypeScript context ended (${e.message}): top-level names of earlier runs with these permissions are gone.`);
      started();
    };
  }

  run(id: string, js: string): Promise<Outcome> {
    this.used = performance.now();
    return new Promise((resolve) => {
      this.pending.set(id, resolve);
      this.worker.postMessage({ id, js });
    });
  }

  end(notice: string): void {
    this.dead = true;
    this.worker.terminate();
    for (const done of this.pending.values()) done({ exitCode: null, notice });
    this.pending.clear();
  }
}

const contexts = new Map<string, Context>();
/** Permission sets whose context was ended to make room for others. */
const evicted = new Set<string>();

function contextFor(perms: Permissions): { ctx: Context; notice?: string } {
  const key = JSON.stringify(perms);
  let ctx = contexts.get(key);
  if (ctx && !ctx.dead) return { ctx };
  let notice: string | undefined;
  if (ctx?.dead) notice = 'Its TypeScript context had ended, so top-level names of earlier runs with these permissions are gone.';
  else if (evicted.delete(key)) {
    notice = `More than ${MAX_CONTEXTS} different permission sets were used since, so top-level names of earlier runs with these permissions are gone.`;
  }
  ctx = new Context(perms);
  contexts.set(key, ctx);
  if (contexts.size > MAX_CONTEXTS) {
    const [oldKey, oldest] = [...contexts.entries()].sort((a, b) => a[1].used - b[1].used)[0]!;
    contexts.delete(oldKey);
    evicted.add(oldKey);
    oldest.end('ended');
  }
  return { ctx, notice };
}

/**
 * The process environment becomes exactly `env`, as for every other execution. It is
 * read back each time (code with env access may have changed it); only what differs is
 * written.
 */
function setEnv(env: Record<string, string>): void {
  const now = Deno.env.toObject();
  for (const name of Object.keys(now)) if (!Object.hasOwn(env, name)) Deno.env.delete(name);
  for (const [name, value] of Object.entries(env)) if (now[name] !== value) Deno.env.set(name, value);
}

let cells = 0;

async function exec(req: Record<string, any>): Promise<void> {
  const id = String(req.id);
  setEnv(req.env ?? {});
  try {
    Deno.chdir(req.cwd ?? '/workspace');
  } catch {
    /* the ceiling does not let the host read it: the cell starts where it is */
  }
  let got: { ctx: Context; notice?: string };
  try {
    got = contextFor(permissionsOf(req.flags ?? []));
  } catch (e) {
    return reply({ id, refused: String((e as Error).message ?? e) });
  }
  let js: string;
  try {
    const language = req.language === 'javascript' ? 'javascript' : 'typescript';
    js = compileCell(String(req.code), language, `cell-${++cells}.${language === 'javascript' ? 'js' : 'ts'}`);
  } catch (e) {
    const message = (e as Error).message;
    Deno.stderr.writeSync(encoder.encode(`error: The code could not be parsed: ${message}\n`));
    return reply({ id, exitCode: 1, error: { name: 'SyntaxError', message, traceback: '' }, notice: got.notice });
  }
  await got.ctx.ready;
  const outcome: Outcome = got.ctx.dead
    ? { exitCode: null, notice: 'The TypeScript context for these permissions could not start.' }
    : await got.ctx.run(id, js);
  reply({ id, ...outcome, notice: [got.notice, outcome.notice].filter(Boolean).join(' ') || undefined });
}

function reset(id: string): void {
  for (const ctx of contexts.values()) ctx.end('reset');
  contexts.clear();
  evicted.clear();
  prewarm();
  reply({ id, reset: true });
}

/** The context of an execution that does not narrow its permissions starts now, not on the first run. */
function prewarm(): void {
  try {
    contextFor(permissionsOf(JSON.parse(defaultFlags ?? '[]')));
  } catch {
    /* flags beyond the host's: the first run says so */
  }
}

prewarm();
reply({ ready: true, deno: Deno.version.deno });

const decoder = new TextDecoder();
let buffered = '';
for await (const chunk of channel.readable) {
  buffered += decoder.decode(chunk, { stream: true });
  let nl: number;
  while ((nl = buffered.indexOf('\n')) >= 0) {
    const line = buffered.slice(0, nl);
    buffered = buffered.slice(nl + 1);
    let req: Record<string, any>;
    try {
      req = JSON.parse(line);
    } catch {
      continue;
    }
    if (req.op === 'exec') await exec(req);
    else if (req.op === 'reset') reset(String(req.id));
  }
}
await sending;
Deno.exit(0);
