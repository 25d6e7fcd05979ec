/**
 * One connection to a runner: frames newline-delimited JSON in both directions over a
 * pair of byte streams (the container's attached stdin and demultiplexed stdout).
 * Driver-independent: a Kubernetes driver would hand it the pod's attach streams.
 *
 * What arrives is checked before anyone sees it: lines are split as bytes, a line longer
 * than MAX_LINE is dropped while it streams in (never held whole), and every line must
 * parse as JSON and pass `parseRunnerEvent`. The runner never writes anything else, so
 * past MAX_JUNK bytes of lines that fail, the connection is ended as broken (its owner
 * then removes the container): a sandbox cannot make the gateway buffer or parse without
 * bound.
 */
import type { Readable, Writable } from 'node:stream';
import { parseRunnerEvent, type RunnerEvent } from './protocol.js';
import type { SandboxHandle } from './types.js';

/** Longest line taken: above the runner's largest (a `call` with up to 4 MiB of parameters, escaped). */
export const MAX_LINE = 8 * 1024 * 1024;
/** Bytes of lines that are not protocol a connection may send before it is ended. */
export const MAX_JUNK = 1024 * 1024;
const MAX_DIAGNOSTICS = 20;

const NEWLINE = 0x0a;

export class RunnerConnection {
  private listeners = new Set<(e: RunnerEvent) => void>();
  private exitListeners = new Set<(reason: string) => void>();
  /** The line being received, in pieces, and its length so far. */
  private parts: Buffer[] = [];
  private partBytes = 0;
  /** The line being received is over MAX_LINE: drop until its end. */
  private skipping = false;
  private junk = 0;
  /** Diagnostics said so far: past MAX_DIAGNOSTICS, a connection is not worth more log lines. */
  private diagnostics = 0;
  private _exited = false;
  private exitReason = '';

  constructor(
    private readonly input: Writable,
    private readonly output: Readable,
    private readonly onDiagnostic: (line: string) => void = () => {},
  ) {
    output.on('data', (chunk: Buffer | string) => this.receive(typeof chunk === 'string' ? Buffer.from(chunk) : chunk));
    output.on('end', () => this.exit('runner stream ended'));
    output.on('close', () => this.exit('runner stream closed'));
    output.on('error', (e) => this.exit(`runner stream failed: ${e.message}`));
    input.on('error', (e) => this.exit(`runner input failed: ${e.message}`));
  }

  get exited(): boolean {
    return this._exited;
  }

  send(request: object): void {
    if (this._exited) throw new Error(`runner is gone (${this.exitReason})`);
    this.input.write(JSON.stringify(request) + '\n');
  }

  onEvent(listener: (e: RunnerEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  onExit(listener: (reason: string) => void): () => void {
    if (this._exited) {
      queueMicrotask(() => listener(this.exitReason));
      return () => {};
    }
    this.exitListeners.add(listener);
    return () => this.exitListeners.delete(listener);
  }

  /** Resolves with the first event matching `pred`, or rejects on exit / timeout. */
  waitFor<T extends RunnerEvent>(pred: (e: RunnerEvent) => e is T, timeoutMs: number, what: string): Promise<T> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        done();
        reject(new Error(`runner did not answer ${what} within ${timeoutMs} ms`));
      }, timeoutMs);
      const offEvent = this.onEvent((e) => {
        if (pred(e)) {
          done();
          resolve(e);
        }
      });
      const offExit = this.onExit((reason) => {
        done();
        reject(new Error(`runner exited before ${what}: ${reason}`));
      });
      function done() {
        clearTimeout(timer);
        offEvent();
        offExit();
      }
    });
  }

  private receive(chunk: Buffer): void {
    let start = 0;
    while (!this._exited && start < chunk.length) {
      const nl = chunk.indexOf(NEWLINE, start);
      const end = nl < 0 ? chunk.length : nl;
      if (!this.skipping) {
        if (this.partBytes + (end - start) > MAX_LINE) {
          const held = this.partBytes;
          this.skipping = true;
          this.parts = [];
          this.partBytes = 0;
          this.diagnose(`dropping a line longer than ${MAX_LINE} bytes`);
          this.addJunk(held);
        } else if (end > start) {
          this.parts.push(chunk.subarray(start, end));
          this.partBytes += end - start;
        }
      }
      if (this.skipping) this.addJunk(end - start);
      if (nl < 0) return;
      if (this.skipping) this.skipping = false;
      else this.lineEnded();
      start = nl + 1;
    }
  }

  private lineEnded(): void {
    const bytes = this.partBytes;
    const line = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts, bytes);
    this.parts = [];
    this.partBytes = 0;
    if (!bytes) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line.toString('utf8'));
    } catch {
      // The line itself is not logged: it is whatever a sandbox put there.
      if (line.toString('utf8').trim()) this.refuse(`a line that is not JSON (${bytes} bytes)`, bytes);
      return;
    }
    const event = parseRunnerEvent(parsed);
    if (!event) return this.refuse(`a line that is not a runner event (${bytes} bytes, type ${JSON.stringify(String((parsed as { type?: unknown })?.type ?? '')).slice(0, 40)})`, bytes);
    for (const l of [...this.listeners]) {
      try {
        l(event);
      } catch (e) {
        this.onDiagnostic(`event listener failed: ${(e as Error).message}`);
      }
    }
  }

  private refuse(diagnostic: string, bytes: number): void {
    this.diagnose(diagnostic);
    this.addJunk(bytes);
  }

  private diagnose(message: string): void {
    if (++this.diagnostics <= MAX_DIAGNOSTICS) this.onDiagnostic(message);
    else if (this.diagnostics === MAX_DIAGNOSTICS + 1) this.onDiagnostic('further protocol diagnostics of this connection are not logged');
  }

  private addJunk(bytes: number): void {
    this.junk += bytes;
    if (this.junk > MAX_JUNK) {
      this.onDiagnostic(`ending the connection: more than ${MAX_JUNK} bytes that are not protocol`);
      this.exit('the runner broke the protocol (it sent more than 1 MiB that is not protocol)');
    }
  }

  exit(reason: string): void {
    if (this._exited) return;
    this._exited = true;
    this.exitReason = reason;
    this.parts = [];
    // Nothing more is read from a connection that ended (the container is removed next).
    this.output.pause();
    for (const l of [...this.exitListeners]) l(reason);
    this.exitListeners.clear();
    this.listeners.clear();
  }
}

/** The runner half of a SandboxHandle, forwarded to its connection: the same for every driver. */
export abstract class ConnectedSandbox implements Pick<SandboxHandle, 'exited' | 'send' | 'onEvent' | 'onExit'> {
  abstract readonly connection: RunnerConnection;

  get exited(): boolean {
    return this.connection.exited;
  }

  send(request: object): void {
    this.connection.send(request);
  }

  onEvent(listener: (event: RunnerEvent) => void): () => void {
    return this.connection.onEvent(listener);
  }

  onExit(listener: (reason: string) => void): () => void {
    return this.connection.onExit(listener);
  }
}
