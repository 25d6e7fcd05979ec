/**
 * SandboxManager: one sandbox per user, and everything about its life, as one object
 * made of parts, each behind the small interface its callers use:
 *
 * - execution.ts (`SandboxExecution`): run code for an owner, open their workspace; the
 *   MCP tools, the chat agent, skills and the files page.
 * - lifecycle.ts (`SandboxLifecycle`): start (from the warm pool when possible), adopt
 *   after a restart, reap, what happens while dockerd is away, shutdown; the gateway.
 * - stops.ts (`SandboxStops`): stop or kill a user's sandbox, stop the idle ones, remove
 *   a workspace; the admin page, and the web app when a member loses access.
 * - idle.ts (`SandboxIdle`): idle sandboxes freeze, frozen ones are kept warm and thawed
 *   before use; the gateway tells it when a chat turn begins.
 * - inspection.ts (`SandboxInspection`): what the admin page and its monitor read.
 *
 * They share held.ts (each user's live sandbox, the starts and stops under way) and
 * usage.ts (what the store learns of use, in batches). Beneath them: run-queue.ts and
 * run.ts (one execution at a time per sandbox), warm-pool.ts, adoption.ts, ceilings.ts,
 * admission.ts (no code runs for an account disabled or suspended), calls.ts (calls from code to the gateway's tools) and records.ts (which container is
 * whose). This object exists for the gateway, which builds and wires it, and for tests
 * and benchmarks that drive every part; everything else takes only a part's interface.
 */
import type { EgressHandler } from './egress-route.js';
import { gatewayIdFor } from './gateway-id.js';
import { Execution, type FilesListener, type ResumeOptions, type SandboxExecution } from './execution.js';
import { Held, type SandboxManagerDeps } from './held.js';
import { Idle, type SandboxIdle } from './idle.js';
import { Inspection, type EverywhereSummary, type Orphan, type PooledSummary, type SandboxInspection, type SandboxSummary } from './inspection.js';
import { Lifecycle, type SandboxLifecycle } from './lifecycle.js';
import type { Live, UserSandbox } from './live.js';
import type { Permissions } from './permissions.js';
import type { RuntimeLeftover } from './runtime-leftovers.js';
import { Stops, type SandboxStops, type StopOptions } from './stops.js';
import type { BridgeHandler, ExecuteOptions, ExecuteResult, SandboxOwner } from './types.js';
import { ExecutionLog } from './usage.js';
import type { Workspace } from './workspace.js';
import type { HelperReply } from './workspace-helper.js';
import type { SandboxCounts } from '../telemetry/metrics.js';

export type { SandboxManagerDeps };

export class SandboxManager implements SandboxExecution, SandboxLifecycle, SandboxStops, SandboxIdle, SandboxInspection {
  private readonly execution: Execution;
  private readonly lifecycle: Lifecycle;
  private readonly stops: Stops;
  private readonly idle: Idle;
  private readonly inspection: Inspection;
  /** What it was built from, and each user's live sandbox: tests that look inside (the driver, a sandbox's timers) read these. */
  private readonly deps: SandboxManagerDeps;
  private readonly users: Held['users'];

  constructor(deps: SandboxManagerDeps) {
    const log = deps.logger.child({ module: 'sandboxes' });
    const part = { ...deps, log };
    const held = new Held();
    this.deps = deps;
    this.users = held.users;
    const executions = new ExecutionLog({ db: deps.db, log });
    // A user's sandbox is acted on only while this gateway holds its lease; a pooled one is its own.
    const mayAct = (live: Live) => {
      const owner = (live as Partial<UserSandbox>).owner;
      return !owner || !deps.replica || deps.replica.holds(owner.userId);
    };
    const idle = (this.idle = new Idle({ config: deps.config, log, held, gatewayId: gatewayIdFor(deps.config.dataDir), mayAct }));
    const stops = (this.stops = new Stops({ ...part, held, idle }));
    const lifecycle = (this.lifecycle = new Lifecycle({ ...part, held, idle, stops, executions }));
    this.execution = new Execution({ ...part, held, idle, lifecycle, executions });
    this.inspection = new Inspection({ ...part, held, executions, pooledLives: () => lifecycle.pool.entries() });
  }

  // Execution
  execute(owner: SandboxOwner, opts: ExecuteOptions): Promise<ExecuteResult> {
    return this.execution.execute(owner, opts);
  }
  executeHere(owner: SandboxOwner, opts: ExecuteOptions): Promise<ExecuteResult> {
    return this.execution.executeHere(owner, opts);
  }
  ceiling(owner: SandboxOwner): Promise<Permissions> {
    return this.execution.ceiling(owner);
  }
  openWorkspace(owner: SandboxOwner): Promise<Workspace> {
    return this.execution.openWorkspace(owner);
  }
  workspaceRequestHere(owner: SandboxOwner, header: Record<string, unknown>, data?: Buffer, startBy?: number): Promise<{ reply: HelperReply; data?: Buffer }> {
    return this.execution.workspaceRequestHere(owner, header, data, startBy);
  }
  onFilesChanged(listener: FilesListener): () => void {
    return this.execution.onFilesChanged(listener);
  }
  resume(owner: SandboxOwner, execId: string, opts: ResumeOptions): Promise<ExecuteResult | undefined> {
    return this.execution.resume(owner, execId, opts);
  }
  release(owner: SandboxOwner, execId: string): void {
    this.execution.release(owner, execId);
  }

  // Lifecycle
  init(opts?: { reapIntervalMs?: number }): Promise<void> {
    return this.lifecycle.init(opts);
  }
  setBridgeHandler(handler: BridgeHandler): void {
    this.lifecycle.setBridgeHandler(handler);
  }
  setEgressHandler(handler: EgressHandler): void {
    this.lifecycle.setEgressHandler(handler);
  }
  reap(now?: number): Promise<void> {
    return this.lifecycle.reap(now);
  }
  fillPool(): void {
    this.lifecycle.fillPool();
  }
  poolReady(timeoutMs?: number): Promise<void> {
    return this.lifecycle.poolReady(timeoutMs);
  }
  get poolSize(): number {
    return this.lifecycle.poolSize;
  }
  handOver(timeoutMs: number): Promise<void> {
    return this.lifecycle.handOver(timeoutMs);
  }
  shutdown(opts?: { stopAll?: boolean; releaseVolumes?: boolean; detachOnly?: boolean }): Promise<void> {
    this.execution.close();
    return this.lifecycle.shutdown(opts);
  }

  // Stops
  stopUser(userId: number, opts?: StopOptions): Promise<boolean> {
    return this.stops.stopUser(userId, opts);
  }
  stopUserHere(userId: number, opts?: StopOptions): Promise<boolean> {
    return this.stops.stopUserHere(userId, opts);
  }
  stopIdle(by?: string): Promise<number> {
    return this.stops.stopIdle(by);
  }
  destroyWorkspaceOf(user: { id: number; workspaceId: string | null }): Promise<void> {
    return this.stops.destroyWorkspaceOf(user);
  }
  removeDeletedElsewhere(user: { workspaceId: string | null }): Promise<{ storesLeft: number | undefined }> {
    return this.stops.removeDeletedElsewhere(user);
  }
  removeDeletedWorkspaces(): Promise<number> {
    return this.stops.removeDeletedWorkspaces();
  }

  // Idle
  prepare(owner: SandboxOwner): void {
    this.idle.prepare(owner);
  }
  thawLeftFrozen(): number {
    return this.idle.thawLeftFrozen();
  }

  // Inspection
  list(opts?: { stats?: boolean }): Promise<SandboxSummary[]> {
    return this.inspection.list(opts);
  }
  pooled(): PooledSummary[] {
    return this.inspection.pooled();
  }
  listEverywhere(opts?: { stats?: boolean }): Promise<EverywhereSummary> {
    return this.inspection.listEverywhere(opts);
  }
  counts(): SandboxCounts {
    return this.inspection.counts();
  }
  startingUsers(): number[] {
    return this.inspection.startingUsers();
  }
  workspaceUsage(workspaceId: string): Promise<{ usedBytes: number; limitBytes: number | null }> {
    return this.inspection.workspaceUsage(workspaceId);
  }
  orphans(now?: number): Promise<Orphan[]> {
    return this.inspection.orphans(now);
  }
  removeOrphans(now?: number): Promise<number> {
    return this.inspection.removeOrphans(now);
  }
  runtimeLeftovers(): Promise<RuntimeLeftover[]> {
    return this.inspection.runtimeLeftovers();
  }
  flushExecutions(): Promise<void> {
    return this.inspection.flushExecutions();
  }
}
