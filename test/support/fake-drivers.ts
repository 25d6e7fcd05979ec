/**
 * SandboxDrivers named after how they fail, for failure paths the real Docker driver
 * cannot be made to take on demand (JupyterHub's SlowSpawner, NeverSpawner, BadSpawner):
 *
 * - LyingRunnerDriver: its runner breaks the protocol as a subverted one could (floods,
 *   forged `done`s, calls for other executions);
 * - NeverReadyDriver: its sandboxes never say `ready`;
 * - CrashingDriver: its sandboxes die in the middle of a run;
 * - BrokenUntilFixedDriver: the real driver, whose health check fails until `fix()`.
 *
 * The scripted ones answer the gateway's NDJSON requests over a pair of streams read by
 * the real RunnerConnection, so the code under test sees what a container would send.
 * They have no interpreter: they run through the driver conformance suite
 * (test/support/driver-conformance.ts) with those tests listed as gaps.
 */
import crypto from 'node:crypto';
import { PassThrough } from 'node:stream';
import { SandboxError } from '../../src/sandboxes/errors.js';
import { ConnectedSandbox, RunnerConnection } from '../../src/sandboxes/runner-connection.js';
import type { HealthCheck, SandboxDriver, SandboxHandle, SandboxInfo, SandboxOwner, SandboxSpec, SandboxStats } from '../../src/sandboxes/types.js';

/** How a scripted runner answers an exec: it writes lines (raw, or objects as JSON) to the gateway. */
export type RunnerScript = (exec: { id: string; code: string }, write: (line: string | object) => void, sandbox: ScriptedSandbox) => void | Promise<void>;

/** A `done` for `id` with every field as the protocol has it. */
export const doneFor = (id: string, extra: object = {}) => ({
  type: 'done',
  id,
  exitCode: 0,
  durationMs: 1,
  timedOut: false,
  killed: false,
  restarted: false,
  truncated: { stdout: 0, stderr: 0 },
  files: [],
  ...extra,
});

export class ScriptedSandbox extends ConnectedSandbox implements SandboxHandle {
  readonly id = crypto.randomBytes(8).toString('hex');
  readonly createdAt = Date.now();
  readonly connection: RunnerConnection;
  /** Every request the gateway sent, in order. */
  readonly received: { op: string; id: string; [k: string]: unknown }[] = [];
  /** Executions started and not yet answered (for tests of what runs at once). */
  inFlight = 0;
  maxInFlight = 0;
  private readonly toGateway = new PassThrough();

  constructor(
    script: RunnerScript,
    readonly owner?: SandboxOwner,
  ) {
    super();
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
        if (req.op === 'exec') {
          this.inFlight++;
          this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
          void script({ id: req.id, code: req.code ?? '' }, (line) => this.write(line), this);
        }
        if (req.op === 'ping') this.write({ type: 'pong', id: req.id, separated: true });
      }
    });
  }

  write(line: string | object): void {
    if (typeof line === 'object' && (line as { type?: string }).type === 'done') this.inFlight--;
    if (!this.toGateway.writableEnded) this.toGateway.write(typeof line === 'string' ? line : `${JSON.stringify(line)}\n`);
  }

  /** The sandbox dies: its stream ends, as a killed container's does. */
  die(): void {
    this.toGateway.end();
  }

  detach(): void {
    this.toGateway.end();
  }
  async stats(): Promise<SandboxStats> {
    return { cpuPercent: 0, memoryBytes: 1, memoryLimitBytes: 1, pids: 1 };
  }
}

/** A driver whose sandboxes are scripted runners (no container, no interpreter). */
export class ScriptedDriver implements SandboxDriver {
  readonly name: string = 'scripted';
  readonly live = new Map<string, ScriptedSandbox>();
  readonly started: ScriptedSandbox[] = [];
  readonly stopped: string[] = [];

  constructor(protected readonly script: RunnerScript) {}

  async health(): Promise<Record<string, HealthCheck>> {
    return { docker: { ok: true, detail: 'no Docker: scripted sandboxes' }, image: { ok: true, detail: 'none needed' }, runtime: { ok: true, detail: 'scripted' } };
  }
  async start(spec: SandboxSpec): Promise<SandboxHandle> {
    const sb = new ScriptedSandbox(this.script, spec.owner);
    this.live.set(sb.id, sb);
    this.started.push(sb);
    return sb;
  }
  async attach(id: string): Promise<SandboxHandle | undefined> {
    return this.live.get(id);
  }
  async stop(id: string): Promise<void> {
    this.stopped.push(id);
    this.live.get(id)?.die();
    this.live.delete(id);
  }
  async list(): Promise<SandboxInfo[]> {
    return [...this.live.values()].map((sb) => ({ id: sb.id, labels: {}, owner: sb.owner?.name, ownerId: sb.owner?.userId, createdAt: sb.createdAt, running: !sb.exited }));
  }
}

/** Its runner breaks the protocol, as the script says. */
export class LyingRunnerDriver extends ScriptedDriver {
  override readonly name = 'lying-runner';
}

/** Its sandboxes never become ready: start fails after `readyTimeoutMs`, leaving nothing running. */
export class NeverReadyDriver extends ScriptedDriver {
  override readonly name = 'never-ready';
  constructor(private readonly readyTimeoutMs = 200) {
    super(() => {});
  }
  override async start(spec: SandboxSpec): Promise<SandboxHandle> {
    const sb = (await super.start(spec)) as ScriptedSandbox;
    await new Promise((r) => setTimeout(r, this.readyTimeoutMs));
    await this.stop(sb.id);
    throw new SandboxError(`the sandbox did not start: runner did not answer ready within ${this.readyTimeoutMs} ms`, 'start_failed');
  }
}

/**
 * Its sandboxes die in the middle of the run whose code contains `crash`, after some
 * output; every other run answers `done` after `runMs`.
 */
export class CrashingDriver extends ScriptedDriver {
  override readonly name = 'crashing';
  constructor(runMs = 50) {
    super((exec, write, sandbox) => {
      write({ type: 'stdout', id: exec.id, data: `running ${exec.code}\n` });
      if (exec.code.includes('crash')) setTimeout(() => sandbox.die(), runMs);
      else setTimeout(() => write(doneFor(exec.id)), runMs);
    });
  }
}

/** The real driver, but its full health check fails until `fix()` (a runtime being set up). */
export class BrokenUntilFixedDriver implements SandboxDriver {
  readonly name = 'broken-until-fixed';
  fullChecks = 0;
  private fixed = false;
  constructor(private readonly real: SandboxDriver) {}
  fix(): void {
    this.fixed = true;
  }
  async health(opts: { full?: boolean } = {}): Promise<Record<string, HealthCheck>> {
    if (opts.full) this.fullChecks++;
    const checks = await this.real.health(opts);
    if (!this.fixed && opts.full) return { ...checks, runtime: { ok: false, detail: 'runsc is not registered yet' } };
    return checks;
  }
  start(spec: SandboxSpec) {
    return this.real.start(spec);
  }
  attach(id: string) {
    return this.real.attach(id);
  }
  stop(id: string) {
    return this.real.stop(id);
  }
  list() {
    return this.real.list();
  }
}
