/**
 * The internal hop: a run asked of a gateway that does not hold the user's sandbox is
 * sent to the replica that does, and its output streams back as it comes.
 *
 * The sender signs each request for that replica only (src/replicas/hop-auth.ts); the
 * holder runs it only while it holds the user's lease, and never sends it on (a holder
 * that lost the lease meanwhile says so, and the sender asks the store again). The
 * answer is a stream of JSON lines: output chunks, then the result or an error.
 * Everything in it is checked as a sandbox's own word is (protocol.ts): the holder is
 * another process, and a stream that breaks off mid-run is reported to the caller as an
 * interrupted run, never as a result it did not give.
 *
 * The wire format lives here, on both ends: `sendRun` for the sender, `serveRun` for the
 * holder (src/http/internal.ts gives it the HTTP request). `askReplica` is the same hop
 * for a question with a short JSON answer: stop a sandbox it holds, list what it holds.
 * Runs go on a channel kept open to each holder (hop-channel.ts, the same answer lines
 * in frames); `sendRun` is for a holder of an earlier release, which has none.
 */
import { request, type Dispatcher } from 'undici';
import { HOP_HEADER, type HopSigner } from '../replicas/hop-auth.js';
import { GatewayError } from '../errors.js';
import { SANDBOX_ERROR_REASONS, SandboxError, type SandboxErrorReason } from './errors.js';
import { PermissionError, type GrantName, type Permissions } from './permissions.js';
import { checkedDone, LANGUAGES, type Language } from './protocol.js';
import type { ExecuteOptions, ExecuteResult, SandboxOwner } from './types.js';

/**
 * Where the hop's endpoints are, under a replica's internal URL: a run, a stop, the list
 * of what it holds. Bodies both ways are sealed (HopSigner.sealRequest, sealAnswer).
 */
export const HOP_RUN_PATH = '/internal/v2/run';
export const HOP_STOP_PATH = '/internal/v2/stop';
export const HOP_LIST_PATH = '/internal/v2/sandboxes';
/** Asks a replica to remove its workspace store's copies of deleted users' workspaces now (the list is in the database). */
export const HOP_DELETIONS_PATH = '/internal/v2/workspace-deletions';
/** Asks a replica for the store probe another left in its workspaces folder (WorkspaceStore.probes). */
export const HOP_STORE_PROBE_PATH = '/internal/v2/store-probe';
/**
 * The same endpoints as replicas of earlier releases send to them, bodies in clear (signed
 * all the same): served so that a rolling upgrade loses no run. Never sent to.
 */
export const HOP_V1_PATHS = { run: '/internal/v1/run', stop: '/internal/v1/stop', list: '/internal/v1/sandboxes' } as const;

/** A run, as one replica asks it of another. */
export interface HopRun {
  owner: SandboxOwner;
  language: Language;
  code: string;
  timeoutSec?: number;
  reset?: boolean;
  permissions?: Partial<Permissions>;
}

/** One line of the holder's answer. */
export type HopLine =
  | { t: 'out'; s: 'stdout' | 'stderr'; d: string }
  /** Still waiting or running: sent every WAIT_EVERY_MS while nothing else is. */
  | { t: 'wait' }
  | { t: 'done'; r: ExecuteResult }
  | { t: 'error'; name: string; reason: string; message: string; grant?: string };

/** The replica a run is sent to. */
export interface HopTarget {
  id: string;
  internalUrl: string;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The run a hop request asks for, checked; undefined when the body is not one. */
export function parseHopRun(v: unknown): HopRun | undefined {
  if (!isObject(v) || !isObject(v.owner)) return undefined;
  const { userId, name } = v.owner;
  if (typeof userId !== 'number' || !Number.isSafeInteger(userId) || userId <= 0 || typeof name !== 'string' || name.length > 200) return undefined;
  if (typeof v.language !== 'string' || !LANGUAGES.includes(v.language as Language) || typeof v.code !== 'string') return undefined;
  if (v.timeoutSec !== undefined && typeof v.timeoutSec !== 'number') return undefined;
  if (v.reset !== undefined && typeof v.reset !== 'boolean') return undefined;
  if (v.permissions !== undefined && !isObject(v.permissions)) return undefined;
  return {
    owner: { userId, name },
    language: v.language as Language,
    code: v.code,
    ...(v.timeoutSec !== undefined && { timeoutSec: v.timeoutSec }),
    ...(v.reset !== undefined && { reset: v.reset }),
    ...(v.permissions !== undefined && { permissions: v.permissions as Partial<Permissions> }),
  };
}

/**
 * Runs `run` through `executeHere` (the holder's own execution, which never forwards)
 * and gives the answer's lines to `send` (which writes them to the wire, sealed). Output
 * streams as it comes; the last line is the result, or the error that refused the run.
 * `signal` aborts when the sender goes.
 */
export async function serveRun(
  executeHere: (owner: SandboxOwner, opts: ExecuteOptions) => Promise<ExecuteResult>,
  run: HopRun,
  signal: AbortSignal,
  send: (line: HopLine) => void,
): Promise<void> {
  // While the run waits its turn or runs quietly, the sender hears that the holder is there.
  const alive = setInterval(() => send({ t: 'wait' }), WAIT_EVERY_MS);
  try {
    const r = await executeHere(run.owner, {
      language: run.language,
      code: run.code,
      timeoutSec: run.timeoutSec,
      reset: run.reset,
      permissions: run.permissions,
      signal,
      onOutput: (s, d) => send({ t: 'out', s, d }),
    });
    send({ t: 'done', r });
  } catch (e) {
    if (e instanceof GatewayError) {
      send({ t: 'error', name: e.name, reason: e.reason, message: e.message, ...(e instanceof PermissionError && { grant: e.grant }) });
    } else {
      send({ t: 'error', name: 'Error', reason: 'internal', message: 'the gateway holding the sandbox failed to run the code' });
      throw e;
    }
  } finally {
    clearInterval(alive);
  }
}

export interface SendRunOptions {
  signer: HopSigner;
  /** This replica's id (the sender). */
  selfId: string;
  /** Seconds the run may take on the holder: the hop waits that long, and a little more. */
  timeoutSec: number;
  /** Per-stream output the holder keeps (its limit): more from it is not taken. */
  outputLimitBytes: number;
}

/** The holder no longer holds the sandbox (or cannot take runs now): ask the store again. */
export class HopRefused extends SandboxError {
  constructor(message: string) {
    super(message, 'held_elsewhere');
  }
}

/** How often a holder says it is still there while a run waits or runs quietly. */
const WAIT_EVERY_MS = 5_000;
/** How long a sender waits without a line from the holder before it takes the holder as gone. */
const SILENCE_MS = 20_000;

/** The holder's answer was refused here: a setting differs between the gateways (their keys), or the run is too large to send. Not retried. */
export class HopFailed extends SandboxError {
  constructor(message: string) {
    super(message, 'start_failed');
  }
}

/**
 * Sends a run to the replica holding the owner's sandbox and returns its result, with
 * output passed to `opts.onOutput` as it streams. Errors the holder refused the run with
 * are thrown as theirs (a HopRefused when it no longer holds the sandbox); a holder that
 * cannot be reached is a HopRefused too (nothing ran). A stream that ends before the
 * result is an interrupted run: a result saying so, with the output that came.
 */
export async function sendRun(target: HopTarget, owner: SandboxOwner, opts: ExecuteOptions, o: SendRunOptions): Promise<ExecuteResult> {
  const body = o.signer.sealRequest(
    HOP_RUN_PATH,
    JSON.stringify({ owner: { userId: owner.userId, name: owner.name }, language: opts.language, code: opts.code, timeoutSec: o.timeoutSec, reset: opts.reset, permissions: opts.permissions } satisfies HopRun),
  );
  const { header, nonce } = o.signer.signRequest(o.selfId, target.id, HOP_RUN_PATH, body);
  let lines = 0;
  // The run may wait its turn on the holder for long (other runs of the user before it): the
  // holder is given up on only when it has been silent for SILENCE_MS, not after a deadline.
  const silent = new AbortController();
  let silence = setTimeout(() => silent.abort(), SILENCE_MS);
  const heard = () => {
    clearTimeout(silence);
    silence = setTimeout(() => silent.abort(), SILENCE_MS);
  };
  const signal = opts.signal ? AbortSignal.any([opts.signal, silent.signal]) : silent.signal;
  // A line holds an output chunk, or the result with every output kept (JSON may write a
  // byte as six, and base64 four bytes as three more).
  const maxLine = 16 * (o.outputLimitBytes + 8192) + 256 * 1024;
  const answer = new HopAnswer(opts, o.outputLimitBytes);
  const interrupted = (why: string) => answer.interrupted(why);

  // undici's own request, not fetch: on the hot path of every hopped run, without the
  // WHATWG streams fetch wraps each answer in (measured: bench/hop.ts).
  let res: Dispatcher.ResponseData;
  try {
    res = await request(new URL(HOP_RUN_PATH, target.internalUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream', [HOP_HEADER]: header },
      body,
      signal,
    });
  } catch (e) {
    clearTimeout(silence);
    if (opts.signal?.aborted) throw new SandboxError('the run was cancelled before the gateway holding the sandbox answered', 'busy');
    throw new HopRefused(`${owner.name}'s sandbox is held by another gateway of this installation, which cannot be reached now: try again in a few seconds (${target.id}: ${(e as Error).message})`);
  }
  const chunks = res.body[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  if (res.statusCode !== 200) {
    clearTimeout(silence);
    // A peer that never ends its refusal holds nothing: 5 s for its first 4 KiB.
    const text = await Promise.race([boundedBodyText(chunks, 4096), new Promise<string>((r) => setTimeout(() => r(''), 5000).unref())]);
    res.body.destroy();
    // A credential refused, or a run too large to send: a difference between the gateways, not a change of holder.
    if (res.statusCode === 401 || res.statusCode === 400 || res.statusCode === 413) {
      throw new HopFailed(`the gateways of this installation could not pass the run between them (HTTP ${res.statusCode} from ${target.id}: ${text.slice(0, 300)}); is replicas.key the same on every gateway?`);
    }
    // A replica of an earlier release, before the sealed hop: asked again through the store until it hands the sandbox over.
    if (res.statusCode === 404) throw new HopRefused(`the gateway holding ${owner.name}'s sandbox (${target.id}) runs an earlier release of sandgate, which cannot take this run: try again once it is upgraded or has handed the sandbox over`);
    throw new HopRefused(`the gateway holding ${owner.name}'s sandbox refused the run (${target.id}: HTTP ${res.statusCode}${text ? `: ${text.slice(0, 300)}` : ''}); try again`);
  }

  const decoder = new TextDecoder();
  let buffered = '';
  let ended = false;
  try {
    for (;;) {
      const { done, value } = await chunks.next();
      if (done) break;
      heard();
      buffered += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        const answer = take(line);
        if (answer) {
          // The holder ends its answer with this line: reading the end lets the connection serve the next hop.
          const end = await Promise.race([chunks.next(), new Promise<undefined>((r) => setTimeout(() => r(undefined), 100).unref())]);
          ended = !!end?.done;
          return answer;
        }
      }
      if (buffered.length > maxLine) return interrupted('sent a line longer than the hop allows, so it was cut off,');
    }
  } catch (e) {
    // The holder's refusal, read from its answer.
    if (e instanceof GatewayError) throw e;
    if (opts.signal?.aborted) return { ...interrupted('was told to cancel the run, and the connection closed'), notice: 'The run was cancelled.' };
    if (silent.signal.aborted) return interrupted(`was silent for ${SILENCE_MS / 1000} s`);
    return interrupted(`went away (${(e as Error).message})`);
  } finally {
    clearTimeout(silence);
    // An answer not read to its end leaves its connection unusable: it is closed.
    if (!ended) res.body.destroy();
  }
  return interrupted('went away');

  /** One line: output taken (within the limit), or the answer. */
  function take(line: string): ExecuteResult | undefined {
    let v: unknown;
    try {
      v = JSON.parse(o.signer.openAnswer(nonce, lines++, line));
    } catch {
      return interrupted('sent something that is not the hop’s answer (or not sealed with this installation’s key)');
    }
    return answer.take(v);
  }
}

/**
 * What a sender makes of the lines of a holder's answer, whichever way they came (an
 * HTTP answer, or a run channel: hop-channel.ts): output kept within the limit and passed
 * on as it comes, then the result; the holder's refusal thrown as this gateway's own
 * error; anything else, or an answer that stops, an interrupted run.
 */
export class HopAnswer {
  private readonly started = performance.now();
  private readonly output = { stdout: [] as string[], stderr: [] as string[] };
  private readonly kept = { stdout: 0, stderr: 0 };
  private readonly dropped = { stdout: 0, stderr: 0 };

  constructor(
    private readonly opts: Pick<ExecuteOptions, 'language' | 'onOutput'>,
    /** Per-stream output taken (this gateway's limit): more is counted as dropped. */
    private readonly outputLimitBytes: number,
  ) {}

  /** The run as far as it came, when the holder `why` before it answered. */
  interrupted(why: string): ExecuteResult {
    return {
      exitCode: null,
      durationMs: performance.now() - this.started,
      timedOut: false,
      killed: true,
      restarted: false,
      truncated: this.dropped,
      files: [],
      notice: `The gateway of this installation running this code ${why} before it answered. Whether the code ran to its end is not known: look at /workspace before running it again. Python variables may be lost.`,
      stdout: this.output.stdout.join(''),
      stderr: this.output.stderr.join(''),
      language: this.opts.language,
    };
  }

  /** One line, opened and parsed: undefined for output or a wait; the result; or the holder's refusal, thrown. */
  take(v: unknown): ExecuteResult | undefined {
    if (!isObject(v)) return this.interrupted('sent something that is not the hop’s answer');
    if (v.t === 'out' && (v.s === 'stdout' || v.s === 'stderr') && typeof v.d === 'string') {
      const bytes = Buffer.byteLength(v.d);
      if (this.kept[v.s] + bytes > this.outputLimitBytes) {
        this.dropped[v.s] += bytes;
        return undefined;
      }
      this.kept[v.s] += bytes;
      this.output[v.s].push(v.d);
      this.opts.onOutput?.(v.s, v.d);
      return undefined;
    }
    if (v.t === 'wait') return undefined;
    if (v.t === 'done' && isObject(v.r)) {
      const done = checkedDone(v.r, 'hop')!;
      const { type: _type, id: _id, ...rest } = done;
      const text = (s: unknown) => (typeof s === 'string' ? s.slice(0, this.outputLimitBytes + 8192) : '');
      return { ...rest, stdout: text(v.r.stdout), stderr: text(v.r.stderr), language: this.opts.language };
    }
    if (v.t === 'error' && typeof v.message === 'string') throw remoteError(v);
    return this.interrupted('sent something that is not the hop’s answer');
  }
}

/** The error a holder refused a run with, as this gateway's own (bounded, and of a known kind). */
function remoteError(v: Record<string, unknown>): GatewayError {
  const message = String(v.message).slice(0, 2000);
  if (v.name === 'PermissionError' && typeof v.grant === 'string') return new PermissionError(message, v.grant as GrantName);
  if (v.reason === 'held_elsewhere') return new HopRefused(message);
  if (typeof v.reason === 'string' && (SANDBOX_ERROR_REASONS as readonly string[]).includes(v.reason)) return new SandboxError(message, v.reason as SandboxErrorReason);
  return new SandboxError(`the gateway holding the sandbox could not run the code: ${message}`, 'runner_died');
}

export interface AskOptions {
  signer: HopSigner;
  selfId: string;
  /** Default 5 s. */
  timeoutMs?: number;
  /** Largest answer taken. Default 4 MiB. */
  maxBytes?: number;
}

/**
 * Asks another replica's `path` with `request` (signed for it) and returns its JSON
 * answer, unchecked: the caller checks it. A replica that cannot be reached, answers
 * other than 200, or sends more than `maxBytes` or no JSON, is a HopRefused.
 */
export async function askReplica(target: HopTarget, path: string, request: object, o: AskOptions): Promise<unknown> {
  const body = o.signer.sealRequest(path, JSON.stringify(request));
  const { header, nonce } = o.signer.signRequest(o.selfId, target.id, path, body);
  const maxBytes = o.maxBytes ?? 4 * 1024 * 1024;
  try {
    const res = await fetch(new URL(path, target.internalUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream', [HOP_HEADER]: header },
      body: new Uint8Array(body),
      signal: AbortSignal.timeout(o.timeoutMs ?? 5000),
      redirect: 'error',
    });
    const chunks: Uint8Array[] = [];
    let size = 0;
    const reader = res.body?.getReader();
    for (;;) {
      const r = reader ? await reader.read() : { done: true as const, value: undefined };
      if (r.done) break;
      size += r.value.length;
      if (size > maxBytes) {
        await reader!.cancel();
        throw new Error(`answered more than ${maxBytes} bytes`);
      }
      chunks.push(r.value);
    }
    const text = Buffer.concat(chunks).toString('utf8');
    if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${text.slice(0, 300)}`);
    return JSON.parse(o.signer.openAnswer(nonce, 0, text.trim())) as unknown;
  } catch (e) {
    if (e instanceof HopRefused) throw e;
    throw new HopRefused(`the gateway ${target.id} did not answer (${(e as Error).message}): try again in a few seconds`);
  }
}

/**
 * Whether this gateway's replica key is the one the live replicas `others` use: each is
 * asked what it holds, and an answer that opens proves the key is shared both ways.
 * 'differs' when one refused the request's credential (its key is another, or its clock
 * is off by more than the hop allows); 'unknown' when none answered (none reachable, or
 * all of an earlier release). Stops at the first that answers.
 */
export async function replicaKeyAgrees(others: readonly HopTarget[], o: AskOptions): Promise<{ result: 'agrees' | 'unknown' } | { result: 'differs'; replica: string }> {
  for (const target of others) {
    try {
      await askReplica(target, HOP_LIST_PATH, { stats: false }, { ...o, timeoutMs: o.timeoutMs ?? 3000 });
      return { result: 'agrees' };
    } catch (e) {
      if (e instanceof HopRefused && /\bHTTP 401\b|does not open/.test(e.message)) return { result: 'differs', replica: target.id };
    }
  }
  return { result: 'unknown' };
}

/**
 * Whether the replicas `others`, on this one's workspace store by its id (`store`), see
 * this folder: each is asked for the probe `word` written for `selfId`
 * (WorkspaceStore.probes), read through its own folder, again and again for `withinMs`
 * while a shared folder may show a new file late. 'shared' when every one that answered
 * found it; 'differs' when one kept answering without it (or with another): the two
 * folders are not one (copied from the other host's); 'unknown' when none answered.
 * `answered` names those whose word counted: one that did not answer, or answered for
 * another store (it moved meanwhile) or without probes (it cannot tell), is not among them.
 */
export async function storeShared(
  others: readonly HopTarget[],
  word: string,
  o: AskOptions & { store: string; withinMs?: number },
): Promise<{ result: 'shared' | 'unknown'; answered: string[] } | { result: 'differs'; replica: string }> {
  const end = Date.now() + (o.withinMs ?? 10_000);
  const found = new Set<string>();
  for (;;) {
    const answered: string[] = [];
    let missing: string | undefined;
    for (const target of others) {
      if (found.has(target.id)) {
        answered.push(target.id);
        continue;
      }
      try {
        const a = (await askReplica(target, HOP_STORE_PROBE_PATH, { replica: o.selfId }, { ...o, timeoutMs: o.timeoutMs ?? 3000 })) as { store?: unknown; probe?: unknown; probes?: unknown };
        // Another store by now, or none that keeps probes: nothing to tell from this one.
        if (a?.store !== o.store || a.probes === false) continue;
        answered.push(target.id);
        if (a.probe === word) found.add(target.id);
        else missing ??= target.id;
      } catch {
        /* no answer: nothing to tell from this one */
      }
    }
    if (!answered.length) return { result: 'unknown', answered };
    if (!missing) return { result: 'shared', answered };
    if (Date.now() >= end) return { result: 'differs', replica: missing };
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** At most `max` bytes read from an answer's chunks, as text. */
async function boundedBodyText(chunks: AsyncIterator<Buffer>, max: number): Promise<string> {
  const got: Buffer[] = [];
  let size = 0;
  try {
    while (size < max) {
      const r = await chunks.next();
      if (r.done) break;
      got.push(r.value);
      size += r.value.length;
    }
  } catch {
    /* what came is enough */
  }
  return Buffer.concat(got).toString('utf8').slice(0, max);
}
