/**
 * The client side of host/workspace_helper.py: one confined helper process per workspace,
 * started on first use and ended after a while without requests, through which every
 * file operation of the gateway on that workspace goes (see workspace_helper.py for the
 * confinement: its own namespaces, chrooted into the workspace, the sandbox's uid with no
 * capability). The gateway itself never opens a path inside a workspace.
 *
 * Requests are pipelined: written at once, answered in order. One that must start by a
 * deadline (another host's file operation, whose sender gives up after a while) is held
 * here instead, with every request after it, until those before it are answered: it is
 * written only while it can still start in time, and otherwise refused with nothing done,
 * as soon as its time is up. What comes back is read
 * with the same suspicion as anything from a sandbox's side: a reply header longer than
 * MAX_REPLY_HEADER, a payload larger than asked for, or anything not in the wire format
 * ends the helper (pending requests fail with a clear error; the next one starts a fresh
 * helper).
 */
import { spawn } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { GatewayError } from '../errors.js';
import { HOST_PYTHON } from '../host/python.js';
import { WORKSPACE_HELPER } from '../paths.js';

/** Longest reply header taken (the helper keeps a listing under 2 MiB). */
const MAX_REPLY_HEADER = 4 * 1024 * 1024;
/** Largest payload a reply may carry (the helper's own read limit). */
const MAX_REPLY_BYTES = 16 * 1024 * 1024;
/** How long one request may take before the helper is ended. */
const REQUEST_TIMEOUT_MS = 30_000;
/** How long a helper with nothing to do stays. */
const IDLE_MS = 30_000;

export interface HelperReply {
  ok: boolean;
  code?: string;
  message?: string;
  [key: string]: unknown;
}

/** The helper's process as the client sees it: a local child, or one in a pod reached through the API server. */
export interface HelperProcess {
  readonly stdin: Writable;
  readonly stdout: Readable;
  readonly stderr: Readable;
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  kill(signal?: NodeJS.Signals): boolean;
  on(event: 'exit', listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  on(event: 'error', listener: (e: Error) => void): this;
  once(event: 'exit', listener: () => void): this;
}

export interface HelperOptions {
  /** The workspace's host path (a mount point or directory the gateway made), or what `launch` knows it by. */
  root: string;
  /** Starts the helper elsewhere (a pod on a cluster); by default a confined local process. */
  launch?: () => HelperProcess;
  /** The sandbox user's ids; the helper acts as this user (when the gateway is root). */
  uid: number;
  gid: number;
  idleMs?: number;
  onDiagnostic?: (message: string) => void;
}

interface Pending {
  resolve: (r: { reply: HelperReply; data?: Buffer }) => void;
  reject: (e: Error) => void;
}

/** A request not written to the helper yet. */
interface Held extends Pending {
  header: Record<string, unknown>;
  data?: Buffer;
  /** Epoch ms after which it is not started (Infinity: no deadline). */
  startBy: number;
  /** Refuses it at `startBy` if it is still held then. */
  deadline?: NodeJS.Timeout;
}

/** What a request refused for its deadline says: nothing was done. */
export const TOO_LATE_MESSAGE = 'the gateway on the host of these files was too slow to start this file operation, so it did nothing: try again';

/** Raised when the helper itself failed (not a refused request): its message is for users. */
export class HelperError extends GatewayError {
  override name = 'HelperError';
  constructor(message: string) {
    super(message, { reason: 'workspace_unavailable', status: 503 });
  }
}

/** What a Workspace asks of its helper: one request (a header, a payload), one reply. A helper elsewhere (remote-workspace.ts) answers the same. */
export interface HelperRequests {
  request(header: Record<string, unknown>, data?: Buffer): Promise<{ reply: HelperReply; data?: Buffer }>;
}

export class WorkspaceHelper implements HelperRequests {
  private child?: HelperProcess;
  private readonly queue: Pending[] = [];
  /** Requests waiting here for those before them (see the top of this file), in order. */
  private readonly held: Held[] = [];
  /** Bytes received and not yet taken, as the chunks they came in (joined once, when whole). */
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** The header whose payload is still arriving. */
  private header?: HelperReply;
  private ready = false;
  private idle?: NodeJS.Timeout;
  private timer?: NodeJS.Timeout;
  private stderrTail = '';
  private closed = false;

  constructor(private readonly opts: HelperOptions) {}

  /**
   * Sends one request (with `data` as its payload) and resolves with the reply. With
   * `startBy` (epoch ms), it is refused with nothing done (a HelperError saying so), at
   * that time, when the requests before it are not answered by then.
   */
  request(header: Record<string, unknown>, data?: Buffer, startBy = Infinity): Promise<{ reply: HelperReply; data?: Buffer }> {
    if (this.closed) return Promise.reject(new HelperError('the workspace is being released'));
    clearTimeout(this.idle);
    return new Promise((resolve, reject) => {
      const r: Held = { header, data, startBy, resolve, reject };
      if (!(this.held.length || (startBy !== Infinity && this.queue.length))) return this.write(r);
      this.held.push(r);
      // Refused when its time is up, not when the requests before it are answered: its
      // sender gave up on it by then, and what it holds (a slot of its user's) is free again.
      if (startBy !== Infinity) r.deadline = setTimeout(() => this.tooLate(r), Math.max(0, startBy - Date.now()) + 1).unref();
    });
  }

  private tooLate(r: Held): void {
    const i = this.held.indexOf(r);
    if (i < 0) return;
    this.held.splice(i, 1);
    r.reject(new HelperError(TOO_LATE_MESSAGE));
    // Those it held back may go now.
    this.release();
  }

  private write(r: Held): void {
    clearTimeout(r.deadline);
    const child = this.child ?? this.start();
    this.queue.push({ resolve: r.resolve, reject: r.reject });
    if (this.queue.length === 1) this.armTimer();
    const line = JSON.stringify(r.data ? { ...r.header, bytes: r.data.length } : r.header) + '\n';
    child.stdin.write(line);
    if (r.data?.length) child.stdin.write(r.data);
  }

  /** Writes the held requests that may go now: up to one with a deadline, which goes only once the helper has nothing before it. */
  private release(): void {
    while (this.held.length) {
      const r = this.held[0]!;
      if (r.startBy !== Infinity && this.queue.length) return;
      this.held.shift();
      clearTimeout(r.deadline);
      if (Date.now() > r.startBy) r.reject(new HelperError(TOO_LATE_MESSAGE));
      else this.write(r);
    }
  }

  /** Ends the helper (pending requests fail); a later request starts a new one unless `final`. */
  async close(final = false): Promise<void> {
    if (final) this.closed = true;
    const child = this.child;
    if (!child) return;
    this.end('the workspace helper was closed');
    await new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
  }

  private start(): HelperProcess {
    const child = this.opts.launch ? this.opts.launch() : this.spawnLocal();
    this.child = child;
    this.ready = false;
    this.chunks = [];
    this.buffered = 0;
    this.header = undefined;
    this.stderrTail = '';
    child.stdout.on('data', (chunk: Buffer) => this.receive(child, chunk));
    child.stderr.on('data', (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-2000);
    });
    child.stdin.on('error', () => {});
    child.on('error', (e) => this.end(`the workspace helper could not start (${e.message})`, child));
    child.on('exit', (code, signal) => {
      const why = this.stderrTail.trim().split('\n').at(-1);
      this.end(`the workspace helper ended (${signal ?? `exit ${code}`}${why ? `: ${why}` : ''})`, child);
    });
    return child;
  }

  /** The helper as a local process, in namespaces of its own (host/workspace_helper.py confines itself further). */
  private spawnLocal(): HelperProcess {
    const root = process.getuid?.() === 0;
    const args = [
      ...(root ? [] : ['--user', '--map-root-user']),
      '--pid',
      '--fork',
      '--kill-child',
      '--net',
      '--ipc',
      '--',
      HOST_PYTHON,
      '-I',
      '-S',
      WORKSPACE_HELPER,
      this.opts.root,
      String(root ? this.opts.uid : -1),
      String(root ? this.opts.gid : -1),
    ];
    return spawn('unshare', args, { stdio: ['pipe', 'pipe', 'pipe'], env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LANG: 'C.UTF-8' } });
  }

  /**
   * Takes what the helper wrote. A header is searched for its newline only in the chunk
   * that just came (never the whole buffer again), and chunks are joined once a header or
   * payload is whole: reading costs time linear in what arrives.
   */
  private receive(child: HelperProcess, chunk: Buffer): void {
    if (child !== this.child) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    for (;;) {
      if (!this.header) {
        const last = this.chunks[this.chunks.length - 1]!;
        const nlInLast = last.indexOf(0x0a);
        if (nlInLast < 0) {
          if (this.buffered > MAX_REPLY_HEADER) return this.broken('a reply header too long');
          return;
        }
        const all = this.take(this.buffered);
        const nl = all.length - last.length + nlInLast;
        let header: HelperReply;
        try {
          header = JSON.parse(all.subarray(0, nl).toString('utf8')) as HelperReply;
          if (typeof header !== 'object' || header === null || typeof header.ok !== 'boolean') throw new Error('not a reply');
        } catch {
          return this.broken('a reply that is not in the wire format');
        }
        this.put(all.subarray(nl + 1));
        const bytes = header.bytes ?? 0;
        if (typeof bytes !== 'number' || !Number.isSafeInteger(bytes) || bytes < 0 || bytes > MAX_REPLY_BYTES) return this.broken('a reply payload of a bad size');
        this.header = header;
      }
      const header = this.header;
      const bytes = (header.bytes as number | undefined) ?? 0;
      if (this.buffered < bytes) return;
      const all = this.take(this.buffered);
      const data = bytes ? Buffer.from(all.subarray(0, bytes)) : undefined;
      this.put(all.subarray(bytes));
      this.header = undefined;
      this.settle(header, data);
      if (!this.buffered) return;
    }
  }

  /** All buffered bytes, joined (the chunks are then empty). */
  private take(n: number): Buffer {
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, n);
    this.chunks = [];
    this.buffered = 0;
    return all;
  }

  private put(rest: Buffer): void {
    if (rest.length) {
      this.chunks = [rest];
      this.buffered = rest.length;
    }
  }

  private settle(reply: HelperReply, data?: Buffer): void {
    if (!this.ready) {
      if (!reply.ok) return this.broken(`${reply.message ?? 'it could not confine itself'}`);
      this.ready = true;
      return;
    }
    const p = this.queue.shift();
    if (!p) return this.broken('a reply nobody asked for');
    clearTimeout(this.timer);
    this.release();
    if (this.queue.length) this.armTimer();
    else this.idle = setTimeout(() => void this.close(), this.opts.idleMs ?? IDLE_MS).unref();
    p.resolve({ reply, data });
  }

  private armTimer(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.broken(`no answer within ${REQUEST_TIMEOUT_MS / 1000} s`), REQUEST_TIMEOUT_MS);
    this.timer.unref();
  }

  private broken(why: string): void {
    this.opts.onDiagnostic?.(`workspace helper for ${this.opts.root}: ${why}`);
    this.child?.kill('SIGKILL');
    this.end(`the workspace helper failed (${why})`);
  }

  /** Fails every pending request and forgets the child (when it is still the current one). */
  private end(why: string, child = this.child): void {
    if (child !== this.child || !child) return;
    this.child = undefined;
    clearTimeout(this.timer);
    clearTimeout(this.idle);
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    const err = new HelperError(`The workspace could not be reached: ${why}. Try again.`);
    // Those held here were never written: nothing of them was done either.
    for (const h of this.held) clearTimeout(h.deadline);
    for (const p of [...this.queue.splice(0), ...this.held.splice(0)]) p.reject(err);
  }
}
