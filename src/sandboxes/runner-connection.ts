/**
 * One connection to a runner: frames newline-delimited JSON in both directions over a
 * pair of byte streams (the container's attached stdin and demultiplexed stdout).
 * Driver-independent: a Kubernetes driver would hand it the pod's attach streams.
 */
import type { Readable, Writable } from 'node:stream';
import type { RunnerEvent } from './protocol.js';

/** A line longer than this is not protocol: the runner never writes one. */
const MAX_LINE = 8 * 1024 * 1024;

export class RunnerConnection {
  private listeners = new Set<(e: RunnerEvent) => void>();
  private exitListeners = new Set<(reason: string) => void>();
  private buffer = '';
  private _exited = false;
  private exitReason = '';

  constructor(
    private readonly input: Writable,
    output: Readable,
    private readonly onDiagnostic: (line: string) => void = () => {},
  ) {
    output.setEncoding('utf8');
    output.on('data', (chunk: string) => this.receive(chunk));
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

  private receive(chunk: string): void {
    this.buffer += chunk;
    let nl: number;
    while ((nl = this.buffer.indexOf('\n')) >= 0) {
      const line = this.buffer.slice(0, nl);
      this.buffer = this.buffer.slice(nl + 1);
      if (line.trim()) this.dispatch(line);
    }
    if (this.buffer.length > MAX_LINE) {
      this.onDiagnostic(`dropping ${this.buffer.length} bytes without a newline`);
      this.buffer = '';
    }
  }

  private dispatch(line: string): void {
    let event: RunnerEvent;
    try {
      event = JSON.parse(line) as RunnerEvent;
    } catch {
      this.onDiagnostic(`not protocol: ${line.slice(0, 200)}`);
      return;
    }
    for (const l of [...this.listeners]) {
      try {
        l(event);
      } catch (e) {
        this.onDiagnostic(`event listener failed: ${(e as Error).message}`);
      }
    }
  }

  exit(reason: string): void {
    if (this._exited) return;
    this._exited = true;
    this.exitReason = reason;
    for (const l of [...this.exitListeners]) l(reason);
    this.exitListeners.clear();
    this.listeners.clear();
  }
}
