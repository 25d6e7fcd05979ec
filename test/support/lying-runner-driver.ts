/**
 * A SandboxDriver whose runner does not keep the protocol: what a runner that had been
 * subverted could send, which the real runner (tested against hostile code in
 * test/hostile-gateway.test.ts) cannot be made to send. The runner is a script answering
 * the gateway's NDJSON requests over a pair of streams, read by the real RunnerConnection,
 * so the manager under test sees exactly the bytes a container would produce.
 */
import crypto from 'node:crypto';
import { PassThrough } from 'node:stream';
import { RunnerConnection } from '../../src/sandboxes/runner-connection.js';
import type { RunnerEvent } from '../../src/sandboxes/protocol.js';
import type { SandboxDriver, SandboxHandle, SandboxInfo, SandboxSpec, SandboxStats } from '../../src/sandboxes/types.js';

/** How the runner answers an exec: it writes lines (raw, no newline needed) to the gateway. */
export type LyingScript = (exec: { id: string; code: string }, write: (line: string | object) => void) => void | Promise<void>;

class LyingSandbox implements SandboxHandle {
  readonly id = crypto.randomBytes(8).toString('hex');
  readonly createdAt = Date.now();
  readonly connection: RunnerConnection;
  /** Every request the gateway sent, in order. */
  readonly received: { op: string; id: string; [k: string]: unknown }[] = [];
  private readonly toGateway = new PassThrough();

  constructor(script: LyingScript) {
    const fromGateway = new PassThrough();
    this.connection = new RunnerConnection(fromGateway, this.toGateway);
    let buffer = '';
    fromGateway.setEncoding('utf8');
    fromGateway.on('data', (chunk: string) => {
      buffer += chunk;
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const req = JSON.parse(buffer.slice(0, nl)) as { op: string; id: string; code?: string };
        buffer = buffer.slice(nl + 1);
        this.received.push(req);
        if (req.op === 'exec') void script({ id: req.id, code: req.code ?? '' }, (line) => this.write(line));
        if (req.op === 'ping') this.write({ type: 'pong', id: req.id });
      }
    });
  }

  write(line: string | object): void {
    if (!this.toGateway.writableEnded) this.toGateway.write(typeof line === 'string' ? line : `${JSON.stringify(line)}\n`);
  }

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
  stop(): void {
    this.toGateway.end();
  }
  async stats(): Promise<SandboxStats> {
    return { cpuPercent: 0, memoryBytes: 0, memoryLimitBytes: 0, pids: 1 };
  }
}

export class LyingRunnerDriver implements SandboxDriver {
  readonly name = 'lying-runner';
  readonly live = new Map<string, LyingSandbox>();
  readonly stopped: string[] = [];

  constructor(private readonly script: LyingScript) {}

  async start(_spec: SandboxSpec): Promise<SandboxHandle> {
    const sb = new LyingSandbox(this.script);
    this.live.set(sb.id, sb);
    return sb;
  }
  async attach(): Promise<SandboxHandle | undefined> {
    return undefined;
  }
  async stop(id: string): Promise<void> {
    this.stopped.push(id);
    this.live.get(id)?.stop();
    this.live.delete(id);
  }
  async list(): Promise<SandboxInfo[]> {
    return [];
  }
}
