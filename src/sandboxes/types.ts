/**
 * The sandbox seams.
 *
 * - `SandboxDriver` starts, finds, stops and lists containers (JupyterHub's Spawner,
 *   reduced to what sandgate needs). DockerDriver is the first implementation; a
 *   Kubernetes one must be able to implement the same four verbs.
 * - `SandboxHandle` is one running sandbox: a connected runner plus stats.
 * - `SandboxManager` (manager.ts) owns the lifecycle: one sandbox per user, the warm
 *   pool, idle and lifetime limits, adoption after a restart. Everything above it
 *   (MCP tools, the chat agent, the admin page) talks to the manager only, each through
 *   the part it uses (`SandboxExecution`, `SandboxStops`, `SandboxInspection`, ...).
 */
import type { ExecDone, Language, RunnerEvent } from './protocol.js';
import type { Permissions } from './permissions.js';
import type { WorkspaceHelper } from './workspace-helper.js';

/** Identity of a sandbox owner. `name` is a stable login (GitHub login or local name). */
export interface SandboxOwner {
  userId: number;
  name: string;
}

/** See WorkspaceStore.probes. */
export interface StoreProbes {
  /** Writes a fresh mark for `replicaId`; what it says. */
  write(replicaId: string): string;
  /** The mark for `replicaId` as this folder has it, or undefined. */
  read(replicaId: string): string | undefined;
  remove(replicaId: string): void;
}

/**
 * Where users' workspaces live: host directories (volumes.ts, beside Docker) or claims on
 * a cluster (kubernetes/workspaces.ts). A workspace is known by an id the database keeps.
 */
export interface WorkspaceStore {
  /**
   * Which files this store reaches: gateways whose stores have the same id see the same
   * workspaces (replicas on one host sharing a data directory, workspaces on storage every
   * host mounts, one cluster's claims); a user's files are in the store of their last sandbox.
   */
  readonly storeId: string;
  /** The ids of the workspaces in this store, where it can list them cheaply (a host's folder); a cluster's store does not. */
  localIds?(): Promise<string[]>;
  /**
   * Marks written into a host folder's store, one per replica that asks (`.store-probe-<id>`):
   * a replica starting on a store another already uses writes one, and that one reads it
   * back through its own folder. Different words mean two folders with one store id (a data
   * directory or disk copied from another host). A cluster's store has none.
   */
  probes?: StoreProbes;
  /** A fresh, unused workspace id. */
  newId(): string;
  /** Makes the workspace ready; what the driver mounts at /workspace (a host path, a claim name). */
  ensure(id: string): Promise<string>;
  /** The confined helper every file operation of the gateway on the workspace goes through. */
  helper(id: string): Promise<WorkspaceHelper>;
  /** Bytes used and the limit (null: none), for stats; rejects when not known now. */
  usage(id: string): Promise<{ usedBytes: number; limitBytes: number | null }>;
  /** Lets go of every workspace but those in `keep` (helpers ended, mounts undone); their data stays. */
  releaseAll(keep?: ReadonlySet<string>): Promise<void>;
  /** Deletes a workspace and its data for good. */
  destroy(id: string): Promise<void>;
}

/** What a driver needs to create a sandbox. */
export interface SandboxSpec {
  /** Undefined for a pooled sandbox not yet handed to a user. */
  owner?: SandboxOwner;
  /** The workspace mounted read-write (or read-only, per policy) at /workspace, as the WorkspaceStore gave it: a host directory (Docker), a claim name (Kubernetes). */
  workspaceDir?: string;
  workspaceWritable: boolean;
  /** Extra read-only bind mounts (container path -> host path), e.g. /skills, /tools. */
  readOnlyMounts: Record<string, string>;
  /**
   * The Deno flags of the permission ceiling (denoRunFlags): the sandbox's long-lived Deno
   * host runs with them, and each TypeScript run in a worker narrowed to its own flags.
   */
  denoCeiling?: string[];
  /**
   * The runner's egress relay: the port it listens on in the sandbox's loopback, whether it
   * carries connections to the gateway (`open`: the ceiling grants `net`) or refuses each
   * itself, and the variables its Deno host starts with (the proxy, the registries).
   */
  egress?: { port: number; open: boolean; env: Record<string, string> };
  /** Start the Deno host only at the first TypeScript or JavaScript run (SANDGATE_DENO_HOST=first-use). */
  denoHostOnFirstUse?: boolean;
  /** Extra labels the owner of the driver wants to find again (e.g. the workspace id). */
  labels?: Record<string, string>;
}

export interface SandboxInfo {
  id: string;
  labels: Record<string, string>;
  /** Owner name from the container label, or undefined for a pooled sandbox. */
  owner?: string;
  ownerId?: number;
  createdAt: number;
  running: boolean;
  /** Docker's word for it: created, running, exited, dead… */
  state?: string;
}

export interface SandboxStats {
  cpuPercent: number;
  memoryBytes: number;
  memoryLimitBytes: number;
  pids: number;
}

/** A connected runner in a running container. */
export interface SandboxHandle {
  readonly id: string;
  readonly createdAt: number;
  /** Sends one request line. */
  send(request: object): void;
  /** Subscribes to runner events; returns an unsubscribe function. */
  onEvent(listener: (event: RunnerEvent) => void): () => void;
  /** Called once when the runner's stream ends (container stopped or died). */
  onExit(listener: (reason: string) => void): () => void;
  readonly exited: boolean;
  stats(): Promise<SandboxStats>;
  /** Lets go of the sandbox without stopping it (a gateway that stops leaves it for the next to adopt). */
  detach(): void;
}

/** One named check of whether sandboxes can run, and what to fix when not. */
export interface HealthCheck {
  ok: boolean;
  detail: string;
  /** A feature this driver cannot give (ok, since nothing is wrong): shown as not available, never as passed. */
  notAvailable?: boolean;
}

/**
 * start / find / stop / list, and whether sandboxes can run at all. Implementations must
 * pass runDriverConformance (test/support/driver-conformance.ts). `start` resolves once
 * the runner said `ready`.
 */
export interface SandboxDriver {
  readonly name: string;
  /** The names of `health`'s quick checks, for /readyz. Default: docker, image. */
  readonly quickChecks?: readonly string[];
  /**
   * Named checks that sandboxes can run here (for /readyz and the start), each saying
   * what to fix. Quick ones always; with `full`, also the slow proof that the runtime
   * really isolates (a throwaway sandbox), under the name `runtime`.
   */
  health(opts?: { full?: boolean }): Promise<Record<string, HealthCheck>>;
  start(spec: SandboxSpec): Promise<SandboxHandle>;
  /** Re-attaches to a running sandbox found by `list`; undefined when it is gone. */
  attach(id: string): Promise<SandboxHandle | undefined>;
  /** Stops and removes; a missing sandbox is not an error. */
  stop(id: string): Promise<void>;
  /** Every sandbox this gateway (by its label) owns, running or not. */
  list(): Promise<SandboxInfo[]>;
  /** Ids of every container the backend knows, this gateway's or not (to find runtime processes that outlived theirs). */
  knownContainerIds?(): Promise<Set<string>>;
  /** Gives a pooled sandbox to an owner (relabels it where the backend can). */
  claim?(id: string, owner: SandboxOwner): Promise<void>;
  /**
   * Tells `down` as soon as the backend goes away (or does not answer) and `up` when it
   * answers again, once each per change; returns a function that stops watching.
   */
  watch?(on: { down(): void; up(): void }): () => void;
}

export interface ExecuteOptions {
  language: Language;
  code: string;
  /** Seconds; defaults to the configured default, capped at the configured maximum. */
  timeoutSec?: number;
  /** Forget the state earlier runs of this language kept (Python's kernel, the Deno host's contexts) first. */
  reset?: boolean;
  /** A narrowing of the user's ceiling; a grant beyond the ceiling is an error. */
  permissions?: Partial<Permissions>;
  /** Receives output as it streams. */
  onOutput?: (stream: 'stdout' | 'stderr', data: string) => void;
  /** An AbortSignal that cancels (kills) the execution. */
  signal?: AbortSignal;
  /**
   * Run under this id, with the runner keeping its events until released: a run that
   * must outlive this gateway (an MCP task), followed later with `resume`. Only here: a
   * sandbox another replica holds is refused (held_elsewhere), never sent on.
   */
  keep?: string;
  /** Called once the runner has the run (it waited its turn, its sandbox is up): it will end with a `done`. */
  onStart?: () => void;
}

export interface ExecuteResult extends Omit<ExecDone, 'type' | 'id'> {
  stdout: string;
  stderr: string;
  language: Language;
  /** This gateway let the sandbox go during the run (it stops or hands the sandbox over): a kept run goes on there, any other is cancelled by the gateway that takes the sandbox over. */
  detached?: boolean;
}

/** Handles `call` events raised by code inside a sandbox (e.g. upstream tool calls). */
export type BridgeHandler = (owner: SandboxOwner, method: string, params: unknown) => Promise<unknown>;
