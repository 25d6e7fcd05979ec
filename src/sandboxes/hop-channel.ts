/**
 * The internal hop's run channel: one WebSocket from a replica to each replica it sends
 * runs to, kept open and carrying many runs at once, so that a hopped run costs one frame
 * each way instead of an HTTP exchange (bench/hop.ts measures both).
 *
 * The channel is opened with the hop's credential (src/replicas/hop-auth.ts) for
 * HOP_CHANNEL_PATH with an empty body: the holder checks it as it checks a run sent over
 * HTTP (its MAC, that it is for this replica, its time, a nonce never seen), and refuses
 * the upgrade otherwise. Every frame after is sealed to the channel's nonce, its
 * direction and its place: one read off the wire cannot be replayed, reordered, sent the
 * other way or onto another channel, and a frame that does not open ends the channel.
 *
 * Frames, as JSON once opened:
 *   sender → holder   { k: 'run', id, run: HopRun }   { k: 'cancel', id }
 *   holder → sender   { id, line: HopLine }            (remote.ts's answer lines)
 *
 * A channel that closes ends every run on it as the HTTP hop ends a run whose answer
 * breaks off: interrupted, with the output that came; a holder silent for SILENCE_MS
 * (it says `wait` every few seconds per run) is taken as gone. A replica of an earlier
 * release answers the upgrade 404: its runs go over HTTP (remote.ts's `sendRun`).
 *
 * The wire format lives here, on both ends: `HopChannels` for the sender, `serveChannel`
 * for the holder (src/http/internal.ts gives it the upgraded connection).
 */
import WebSocket from 'ws';
import { HOP_HEADER, type ChannelSeal, type HopSigner } from '../replicas/hop-auth.js';
import { GatewayError } from '../errors.js';
import type { Logger } from '../logger.js';
import { SandboxError } from './errors.js';
import { HopAnswer, HopFailed, HopRefused, parseHopRun, serveRun, type HopLine, type HopRun, type HopTarget } from './remote.js';
import { MAX_CODE_BYTES } from './run.js';
import type { ExecuteOptions, ExecuteResult, SandboxOwner } from './types.js';

export const HOP_CHANNEL_PATH = '/internal/v3/channel';

/** How long a sender waits without a frame for a run from the holder before it takes the holder as gone. */
const SILENCE_MS = 20_000;
/** An idle channel is pinged this often; one that missed two pongs is closed. */
const PING_EVERY_MS = 10_000;
/** How long opening a channel may take before the holder is taken as unreachable. */
const OPEN_TIMEOUT_MS = 5_000;
/** How long a holder that answered the upgrade 404 (an earlier release) gets its runs over HTTP before a channel is tried again. */
const HTTP_ONLY_MS = 60_000;

/**
 * The largest frame a holder takes: a run, whose code is JSON (where a byte may take six).
 * A larger run is refused by its sender, for itself alone: a frame past this ends the channel.
 */
export const MAX_RUN_FRAME_BYTES = MAX_CODE_BYTES * 6 + 64 * 1024;

/**
 * The largest frame a sender takes: an output chunk, or a result with every output kept
 * (JSON may write a byte as six). A holder never sends more: a result that would be
 * larger loses its list of changed files, and failing that the run ends in an error of
 * its own, not the channel (which carries other users' runs).
 */
export const maxAnswerFrameBytes = (outputLimitBytes: number): number => 16 * (outputLimitBytes + 8192) + 256 * 1024;

type SenderFrame = { k: 'run'; id: number; run: HopRun } | { k: 'cancel'; id: number };

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const toBuffer = (data: WebSocket.RawData): Buffer => (Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data));

/** A run sent on a channel and not answered yet. */
interface Pending {
  answer: HopAnswer;
  /** The holder said it has the run (its first frame for it): from then on, a channel that closes interrupts it. */
  taken: boolean;
  /** Ends the run with a result. */
  finish(result: ExecuteResult): void;
  /** Ends the run with the holder's refusal. */
  fail(e: Error): void;
  /** A frame for it came: the holder is there. */
  heard(): void;
}

/** The sender's end of one channel, to one holder. */
class SenderChannel {
  private sent = 0;
  private received = 0;
  private nextId = 1;
  private readonly runs = new Map<number, Pending>();
  private closedWhy: string | undefined;
  private readonly pinger: NodeJS.Timeout;

  constructor(
    private readonly ws: WebSocket,
    private readonly seal: ChannelSeal,
    onClose: () => void,
    private readonly silenceMs = SILENCE_MS,
  ) {
    let unanswered = 0;
    ws.on('pong', () => (unanswered = 0));
    this.pinger = setInterval(() => {
      if (++unanswered > 2) return this.close('stopped answering on its channel');
      ws.ping();
    }, PING_EVERY_MS).unref();
    ws.on('message', (data) => this.onFrame(toBuffer(data)));
    ws.on('close', () => {
      this.close('went away (its channel closed)', false);
      onClose();
    });
    ws.on('error', () => this.close('went away (its channel failed)', false));
  }

  get open(): boolean {
    return this.closedWhy === undefined && this.ws.readyState === WebSocket.OPEN;
  }

  /** Sends the run and returns its answer; HopRefused when the channel closed before it was sent (nothing ran). */
  run(hop: HopRun, opts: ExecuteOptions, outputLimitBytes: number): Promise<ExecuteResult> {
    if (!this.open) return Promise.reject(new HopRefused(`the channel to the gateway holding ${hop.owner.name}'s sandbox closed: try again`));
    const id = this.nextId++;
    const answer = new HopAnswer(opts, outputLimitBytes);
    return new Promise<ExecuteResult>((resolve, reject) => {
      let silence: NodeJS.Timeout;
      const done = () => {
        clearTimeout(silence);
        this.runs.delete(id);
        opts.signal?.removeEventListener('abort', cancelled);
      };
      const pending: Pending = {
        answer,
        taken: false,
        finish: (r) => {
          done();
          resolve(r);
        },
        fail: (e) => {
          done();
          reject(e);
        },
        heard: () => {
          clearTimeout(silence);
          // A holder silent this long has stopped (its loop stuck, its host gone): every run on the channel is.
          silence = setTimeout(() => this.close(`was silent for ${this.silenceMs / 1000} s`), this.silenceMs).unref();
        },
      };
      const cancelled = () => {
        this.send({ k: 'cancel', id });
        pending.finish({ ...answer.interrupted('was told to cancel the run'), notice: 'The run was cancelled.' });
      };
      if (opts.signal?.aborted) return reject(new SandboxError('the run was cancelled before it was sent to the gateway holding the sandbox', 'busy'));
      const frame = this.seal.seal('sender', this.sent, JSON.stringify({ k: 'run', id, run: hop } satisfies SenderFrame));
      // Too large for the holder to take: refused here, for this run alone.
      if (frame.length > MAX_RUN_FRAME_BYTES) return reject(new SandboxError(`the code is too large to send to the gateway holding the sandbox (at most ${MAX_CODE_BYTES} bytes)`, 'invalid_request'));
      this.sent++;
      opts.signal?.addEventListener('abort', cancelled, { once: true });
      this.runs.set(id, pending);
      pending.heard();
      this.ws.send(frame);
    });
  }

  /**
   * Ends the channel and every run on it, as interrupted: the holder `why`. A run the
   * holder never said it took is asked again through the store, but only when the
   * connection itself ended (`gaveUp` false: the holder says it took a run in the same turn
   * it reads it, so what it wrote before it went arrives before the end): a channel given
   * up on here (silent, unanswered pings, a frame that does not open) may have carried the
   * run to a holder that runs it still, so that run is interrupted too, never sent twice.
   */
  close(why: string, gaveUp = true): void {
    if (this.closedWhy !== undefined) return;
    this.closedWhy = why;
    clearInterval(this.pinger);
    for (const p of [...this.runs.values()]) {
      if (p.taken || gaveUp) p.finish(p.answer.interrupted(why));
      else p.fail(new HopRefused(`the gateway holding the sandbox ${why} before it took the run: try again`));
    }
    this.runs.clear();
    this.ws.terminate();
  }

  private send(frame: SenderFrame): void {
    if (this.ws.readyState !== WebSocket.OPEN) return;
    this.ws.send(this.seal.seal('sender', this.sent++, JSON.stringify(frame)));
  }

  private onFrame(data: Buffer): void {
    let v: unknown;
    try {
      v = JSON.parse(this.seal.open('holder', this.received++, data));
    } catch {
      return this.close('sent something that is not the hop’s answer (or not sealed with this installation’s key)');
    }
    if (!isObject(v) || typeof v.id !== 'number') return this.close('sent something that is not the hop’s answer');
    const p = this.runs.get(v.id);
    // A line for a run cancelled here meanwhile.
    if (!p) return;
    p.taken = true;
    p.heard();
    let result: ExecuteResult | undefined;
    try {
      result = p.answer.take(v.line);
    } catch (e) {
      // The holder's refusal, read from its answer.
      return p.fail(e instanceof GatewayError ? e : new SandboxError('the gateway holding the sandbox could not run the code', 'runner_died'));
    }
    if (result) p.finish(result);
  }
}

/**
 * The sender's channels, one per holder, opened on first use and kept while they work.
 * `run` is undefined for a holder that takes no channel (an earlier release): its runs
 * go over HTTP.
 */
export class HopChannels {
  private readonly channels = new Map<string, Promise<SenderChannel | { httpUntil: number }>>();
  private closed = false;

  constructor(
    private readonly o: {
      signer: HopSigner;
      /** This replica's id (the sender). */
      selfId: string;
      /** Per-stream output this gateway keeps: a frame holds at most a chunk or a result with that much. */
      outputLimitBytes: number;
      /** How long a holder may say nothing of a run before the channel is given up on; default SILENCE_MS. */
      silenceMs?: number;
    },
  ) {}

  /**
   * The run's result from `target` over its channel, with output passed to
   * `opts.onOutput` as it streams; errors as `sendRun` throws them (HopRefused when the
   * holder cannot be reached or no longer holds the sandbox: nothing ran). Undefined when
   * the holder takes no channel.
   */
  async run(target: HopTarget, owner: SandboxOwner, opts: ExecuteOptions, timeoutSec: number): Promise<ExecuteResult | undefined> {
    const channel = await this.channelTo(target, owner);
    if (!(channel instanceof SenderChannel)) return undefined;
    if (opts.signal?.aborted) throw new SandboxError('the run was cancelled before it was sent to the gateway holding the sandbox', 'busy');
    const hop: HopRun = {
      owner: { userId: owner.userId, name: owner.name },
      language: opts.language,
      code: opts.code,
      timeoutSec,
      ...(opts.reset !== undefined && { reset: opts.reset }),
      ...(opts.permissions !== undefined && { permissions: opts.permissions }),
    };
    return channel.run(hop, opts, this.o.outputLimitBytes);
  }

  /** Closes every channel: runs on them end as interrupted. */
  close(): void {
    this.closed = true;
    for (const c of this.channels.values()) void c.then((ch) => ch instanceof SenderChannel && ch.close('is shutting down'), () => undefined);
    this.channels.clear();
  }

  private async channelTo(target: HopTarget, owner: SandboxOwner): Promise<SenderChannel | { httpUntil: number }> {
    if (this.closed) throw new SandboxError('the gateway is shutting down', 'busy');
    const key = `${target.id} ${target.internalUrl}`;
    const existing = this.channels.get(key);
    if (existing) {
      const channel = await existing.catch(() => undefined);
      if (channel instanceof SenderChannel && channel.open) return channel;
      if (channel && !(channel instanceof SenderChannel) && channel.httpUntil > Date.now()) return channel;
      if (this.channels.get(key) === existing) this.channels.delete(key);
    }
    // Another run may have begun opening one meanwhile: one channel per holder.
    let opening = this.channels.get(key);
    if (!opening) {
      const forget = () => {
        if (this.channels.get(key) === opening) this.channels.delete(key);
      };
      opening = this.open(target, owner, forget);
      this.channels.set(key, opening);
      // A failed opening is not kept: the next run tries again.
      opening.catch(forget);
    }
    return opening;
  }

  private open(target: HopTarget, owner: SandboxOwner, onClose: () => void): Promise<SenderChannel | { httpUntil: number }> {
    const { header, nonce } = this.o.signer.signRequest(this.o.selfId, target.id, HOP_CHANNEL_PATH, '');
    const url = new URL(HOP_CHANNEL_PATH, target.internalUrl);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    return new Promise((resolve, reject) => {
      const maxPayload = maxAnswerFrameBytes(this.o.outputLimitBytes);
      const ws = new WebSocket(url, { headers: { [HOP_HEADER]: header }, perMessageDeflate: false, handshakeTimeout: OPEN_TIMEOUT_MS, followRedirects: false, maxPayload });
      const unreachable = (why: string) =>
        new HopRefused(`${owner.name}'s sandbox is held by another gateway of this installation, which cannot be reached now: try again in a few seconds (${target.id}: ${why})`);
      ws.once('open', () => resolve(new SenderChannel(ws, this.o.signer.channel(nonce), onClose, this.o.silenceMs)));
      ws.once('unexpected-response', (_req, res) => {
        res.resume();
        ws.terminate();
        const status = res.statusCode ?? 0;
        // A replica of an earlier release, before the channel: its runs go over HTTP.
        if (status === 404) return resolve({ httpUntil: Date.now() + HTTP_ONLY_MS });
        // A credential refused: a difference between the gateways, not a change of holder.
        if (status === 401 || status === 400) {
          return reject(new HopFailed(`the gateways of this installation could not pass the run between them (HTTP ${status} from ${target.id}); is replicas.key the same on every gateway?`));
        }
        reject(unreachable(`HTTP ${status}`));
      });
      ws.once('error', (e) => reject(unreachable(e.message)));
    });
  }
}

/** What the holder's end of a channel needs. */
export interface ChannelEndDeps {
  signer: HopSigner;
  /** The holder's own execution, which never forwards. */
  executeHere: (owner: SandboxOwner, opts: ExecuteOptions) => Promise<ExecuteResult>;
  log: Logger;
  /** Runs under way on every channel of this holder: a stopping gateway waits for them as for requests. */
  underway: Set<AbortController>;
  /** Per-stream output the gateways keep: what a sender takes in a frame follows from it (`maxAnswerFrameBytes`). */
  outputLimitBytes: number;
}

/**
 * The holder's end of a channel whose opening credential held (`nonce` is its): runs
 * each frame asks for, streams each run's lines back, and aborts a run its sender
 * cancels or when the channel closes. A frame that does not open, or is not one, ends
 * the channel; so does a sender that stops answering pings.
 */
export function serveChannel(ws: WebSocket, nonce: string, deps: ChannelEndDeps): void {
  const { executeHere, log, underway } = deps;
  const seal = deps.signer.channel(nonce);
  const maxFrame = maxAnswerFrameBytes(deps.outputLimitBytes);
  let sent = 0;
  let received = 0;
  const runs = new Map<number, AbortController>();
  const sealed = (id: number, line: HopLine) => seal.seal('holder', sent, JSON.stringify({ id, line }));
  const send = (id: number, line: HopLine) => {
    if (ws.readyState !== WebSocket.OPEN) return;
    let frame = sealed(id, line);
    // Larger than the sender takes (a result listing thousands of long file names): the list
    // goes first, then the run ends in an error of its own. Never the channel: it carries other users' runs.
    if (frame.length > maxFrame && line.t === 'done') {
      frame = sealed(id, { t: 'done', r: { ...line.r, files: [], notice: [line.r.notice, 'The list of files the run changed was too long to pass between the gateways.'].filter(Boolean).join(' ') } });
    }
    if (frame.length > maxFrame) frame = sealed(id, { t: 'error', name: 'SandboxError', reason: 'runner_died', message: 'the run’s answer was too large to pass between the gateways of this installation' });
    sent++;
    ws.send(frame);
  };
  const end = (why: string) => {
    log.warn({ err: why }, 'a run channel from another replica was closed');
    ws.terminate();
  };
  // A sender that went without a word (its host lost, the network cut one way) ends the channel and its runs here.
  let unanswered = 0;
  ws.on('pong', () => (unanswered = 0));
  const pinger = setInterval(() => {
    if (++unanswered > 2) return end('the sending replica stopped answering');
    ws.ping();
  }, PING_EVERY_MS).unref();
  ws.on('message', (data) => {
    let f: unknown;
    try {
      f = JSON.parse(seal.open('sender', received++, toBuffer(data)));
    } catch {
      return end('a frame that does not open with this installation’s key, or out of its place');
    }
    if (!isObject(f) || typeof f.id !== 'number' || !Number.isSafeInteger(f.id)) return end('not a channel frame');
    const id = f.id;
    if (f.k === 'cancel') return runs.get(id)?.abort();
    if (f.k !== 'run' || runs.has(id)) return end('not a channel frame');
    const run = parseHopRun(f.run);
    if (!run) return send(id, { t: 'error', name: 'SandboxError', reason: 'invalid_request', message: 'not a run' });
    const gone = new AbortController();
    runs.set(id, gone);
    underway.add(gone);
    serveRun(executeHere, run, gone.signal, (line) => send(id, line))
      // Its error line is sent: the run's answer ends whole, and the log has the rest.
      .catch((e: unknown) => log.error({ err: e, user: run.owner.name }, 'a run sent by another replica failed'))
      .finally(() => {
        runs.delete(id);
        underway.delete(gone);
      });
    // The run is taken: said before it can reach the sandbox (that takes reading the account
    // from the store first), so a channel that closes after this line interrupts it, and
    // one that closes before it sends the run elsewhere. Sent after the run began, so the
    // write does not hold it up.
    send(id, { t: 'wait' });
  });
  ws.on('close', () => {
    clearInterval(pinger);
    for (const r of runs.values()) r.abort();
    runs.clear();
  });
  ws.on('error', () => undefined);
}
