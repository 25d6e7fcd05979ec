/**
 * SandboxManager: one sandbox per user, and everything about its life, composed from
 * the pieces beside it:
 *
 * - run-queue.ts: a user's sandbox is created on first use and reused; its executions
 *   run one at a time, a bounded number waiting (the Python state is shared, like a
 *   notebook kernel).
 * - run.ts: one execution, and what the gateway keeps of it whatever the runner sends.
 * - warm-pool.ts: pre-started sandboxes handed to new users, so their first run skips
 *   the cold start.
 * - lifecycle.ts: idle sandboxes are stopped, old ones replaced at their next idle
 *   moment, never while an execution runs.
 * - adoption.ts: after a gateway restart, containers are adopted or removed: no orphans.
 * - ceilings.ts: a user's permission ceiling, and the mounts a container gets for it.
 * - calls.ts: calls from code to the gateway's tools.
 * - sandboxes/records.ts: the rows that say which container is whose.
 *
 * A sandbox that dies (OOM, a fork bomb, `stop`) is replaced on the next execution; the
 * workspace lives on the host and is never lost with it.
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { forgetSandboxContainer, recordExecutions, recordSandboxStarted, recordSandboxUse, type ExecutionRow } from './records.js';
import type { Db } from '../store/store.js';
import { claimWorkspace, getUser } from '../accounts/accounts.js';
import { adoptOrRemove, LABEL_ROLE, LABEL_WORKSPACE, removeLeftover } from './adoption.js';
import { routeCalls } from './calls.js';
import { cpuMsNow, forgetCgroup } from './cgroup.js';
import { freeze, thaw, thawLeftFrozen } from './freezer.js';
import { gatewayIdFor } from './gateway-id.js';
import { removeRuntimeLeftovers, runtimeLeftovers, type RuntimeLeftover } from './runtime-leftovers.js';
import { ceilingKey, ceilingOf, defaultCeiling, mountsFor, workspaceWritable } from './ceilings.js';
import { SandboxError } from './errors.js';
import { reapIntervalMs, stopReason } from './lifecycle.js';
import type { Live, UserSandbox } from './live.js';
import { narrowPermissions, networkUnavailable, PermissionError, type Permissions } from './permissions.js';
import { LANGUAGES } from './protocol.js';
import { denoRunFlags, MAX_CODE_BYTES, runOne } from './run.js';
import { RunQueue } from './run-queue.js';
import type { BridgeHandler, ExecuteOptions, ExecuteResult, SandboxDriver, SandboxOwner } from './types.js';
import type { WorkspaceVolumes } from './volumes.js';
import { preloadIn, WarmPool } from './warm-pool.js';
import { Workspace } from './workspace.js';

export interface SandboxManagerDeps {
  config: Config;
  db: Db;
  logger: Logger;
  driver: SandboxDriver;
  volumes: WorkspaceVolumes;
  /** Host directory mounted read-only at /skills. */
  skillsDir: string;
  /** Host directory where per-sandbox /tools mounts are prepared. */
  toolsMountsDir: string;
  /** Fills a sandbox's /tools directory for its owner (undefined owner: a pooled sandbox). */
  prepareTools: (dir: string, owner: SandboxOwner | undefined) => Promise<void>;
}

/**
 * How often a sandbox's use (execution count, last use) is written to the store; also
 * written when it stops. A write per execution cost about a tenth of a warm run.
 */
const USE_RECORD_INTERVAL_MS = 10_000;

/** How often the executions gathered in memory are written to the store. */
const EXECUTION_LOG_INTERVAL_MS = 5_000;
/** How long a graceful stop waits for the cancelled run to end before the container goes. */
const STOP_GRACE_MS = 3_000;
/** A container this young that the gateway does not track may be one it is starting. */
const ORPHAN_MIN_AGE_MS = 60_000;

export interface SandboxSummary {
  user: string;
  userId: number;
  containerId: string;
  startedAt: number;
  lastActivity: number;
  running: number;
  queued: number;
  /** An admin is stopping it now. */
  stopping: boolean;
  /** Idle with its cgroup frozen. */
  frozen: boolean;
  /** The run in flight. */
  run?: { language: string; startedAt: number };
  workspaceId: string;
  stats?: { cpuPercent: number; memoryBytes: number; memoryLimitBytes: number; pids: number };
  workspace?: { usedBytes: number; limitBytes: number | null };
}

/** A warm-pool sandbox waiting for a user. */
/** How a user's sandbox is stopped (`stopUser`). */
export interface StopOptions {
  /** Remove the container at once instead of cancelling the run first. */
  kill?: boolean;
  /** The admin who asked, named to the user. */
  by?: string;
  /** Why, for a stop no admin asked for: the words after "Your sandbox was stopped". */
  cause?: string;
}

export interface PooledSummary {
  containerId: string;
  frozen: boolean;
  startedAt: number;
  workspaceId: string;
}

export class SandboxManager {
  private readonly log: Logger;
  private readonly users = new Map<number, UserSandbox>();
  private readonly starting = new Map<number, Promise<UserSandbox>>();
  /** Users whose sandbox an admin is stopping now. */
  private readonly stopping = new Set<number>();
  private readonly pool: WarmPool;
  /** Names this gateway in the records of what it froze. */
  private readonly gatewayId: string;
  /** dockerd is not answering: nothing freezes until it does (it could neither stop nor restart a frozen container). */
  private daemonAway = false;
  private unwatch?: () => void;
  private reaper?: NodeJS.Timeout;
  private bridge?: BridgeHandler;
  private closed = false;
  private readonly filesListeners = new Set<(owner: SandboxOwner, files: ExecuteResult['files']) => void>();
  /** Executions not yet written to the store (written every few seconds, and at shutdown). */
  private executionLog: ExecutionRow[] = [];
  private executionFlush?: NodeJS.Timeout;

  constructor(private readonly deps: SandboxManagerDeps) {
    this.log = deps.logger.child({ module: 'sandboxes' });
    this.gatewayId = gatewayIdFor(deps.config.dataDir);
    this.pool = new WarmPool({
      size: deps.config.warmPoolSize,
      preload: deps.config.warmPoolPreload.split(',').map((m) => m.trim()).filter(Boolean),
      start: () => this.startLive(undefined, deps.volumes.newId(), defaultCeiling(deps.config)),
      discard: async (live) => {
        this.wake(live);
        await deps.driver.stop(live.handle.id);
        forgetCgroup(live.handle.id);
        await deps.volumes.destroy(live.workspaceId);
      },
      rested: (live) => this.rest(live),
      taken: (live) => this.wake(live),
      log: this.log,
    });
  }

  /**
   * Thaws what an earlier run of this gateway froze and could not thaw (it was killed):
   * dockerd cannot start while one of its containers is frozen, so this comes before
   * anything asks dockerd. Returns how many were frozen.
   */
  thawLeftFrozen(): number {
    const n = thawLeftFrozen(this.gatewayId);
    if (n) this.log.warn({ sandboxes: n }, 'thawed sandboxes an earlier run left frozen');
    return n;
  }

  /** Adopts or removes containers left by an earlier run, then fills the pool and starts the reaper. */
  async init(opts: { reapIntervalMs?: number } = {}): Promise<void> {
    await adoptOrRemove({ driver: this.deps.driver, db: this.deps.db, volumes: this.deps.volumes, log: this.log }, (user, handle, c) => {
      const owner = { userId: user.id, name: user.name };
      const ceiling = this.ceiling(owner);
      this.keep({
        owner,
        handle,
        workspaceId: user.workspaceId!,
        toolsDir: path.join(this.deps.toolsMountsDir, user.workspaceId!),
        startedAt: c.createdAt,
        lastActivity: Date.now(),
        workspaceWritable: workspaceWritable(ceiling),
        ceilingKey: ceilingKey(ceiling),
        hostWrote: true,
        queue: new RunQueue(),
        running: 0,
      });
    });
    this.reaper = setInterval(() => void this.reap().catch((e) => this.log.error({ err: e }, 'reaper failed')), opts.reapIntervalMs ?? reapIntervalMs(this.deps.config));
    this.reaper.unref();
    this.executionFlush = setInterval(() => this.flushExecutions(), EXECUTION_LOG_INTERVAL_MS);
    this.executionFlush.unref();
    this.unwatch = this.deps.driver.watch?.({ down: () => this.daemonDown(), up: () => void this.daemonUp() });
    this.pool.fill();
  }

  /** Every sandbox this gateway holds: the users' and the pool's. */
  private lives(): Live[] {
    return [...this.users.values(), ...this.pool.entries()];
  }

  /**
   * dockerd stopped answering (it is shutting down, or restarting): every frozen sandbox
   * is thawed now, or dockerd's shutdown would wait 15 s for each and its next start
   * forever. Nothing freezes until it answers again.
   */
  private daemonDown(): void {
    if (this.closed || this.daemonAway) return;
    this.daemonAway = true;
    const frozen = this.lives().filter((l) => l.frozen).length;
    this.log.warn({ thawed: frozen }, 'dockerd is not answering: frozen sandboxes are thawed, none freezes until it is back');
    for (const live of this.lives()) this.wake(live);
    // And whatever the records name that memory does not (a freeze whose outcome was lost).
    thawLeftFrozen(this.gatewayId);
  }

  /**
   * dockerd answers again. Sandboxes that died meanwhile (dockerd stops containers when
   * it stops) could not be removed then: this gateway's stopped containers go now, the
   * pool refills, and idle sandboxes freeze again.
   */
  private async daemonUp(): Promise<void> {
    if (this.closed || !this.daemonAway) return;
    this.daemonAway = false;
    this.log.info('dockerd answers again');
    for (const live of this.lives()) if (!live.handle.exited) this.rest(live);
    const stopped = await this.deps.driver.list().then(
      (all) => all.filter((c) => (c.state === 'exited' || c.state === 'dead') && (c.labels[LABEL_ROLE] === 'user' || c.labels[LABEL_ROLE] === 'pool')),
      (e: unknown) => (this.log.warn({ err: e }, 'could not list sandboxes after dockerd came back'), []),
    );
    for (const c of stopped) {
      await removeLeftover(this.deps, c).catch((e: unknown) => this.log.warn({ err: e, container: c.id.slice(0, 12) }, 'could not remove a sandbox that stopped while dockerd was away'));
    }
    this.pool.fill();
  }

  /** Writes the executions gathered so far to the store (the usage view calls it before reading). */
  flushExecutions(): void {
    const rows = this.executionLog;
    this.executionLog = [];
    try {
      recordExecutions(this.deps.db, rows);
    } catch (e) {
      this.log.warn({ err: e, rows: rows.length }, 'could not record executions');
    }
  }

  setBridgeHandler(handler: BridgeHandler): void {
    this.bridge = handler;
  }

  /** Tells `listener` whenever an execution created, changed or deleted files (the web app refreshes its file tree). */
  onFilesChanged(listener: (owner: SandboxOwner, files: ExecuteResult['files']) => void): () => void {
    this.filesListeners.add(listener);
    return () => this.filesListeners.delete(listener);
  }

  /** The workspace, created and mounted if needed (file access before any run). */
  async openWorkspace(owner: SandboxOwner): Promise<Workspace> {
    const id = this.workspaceIdFor(owner, true)!;
    return new Workspace(await this.deps.volumes.helper(id), () => this.touched(owner));
  }

  /** The gateway wrote to this user's workspace: the next execution must scan it afresh. */
  private touched(owner: SandboxOwner): void {
    const sb = this.users.get(owner.userId);
    if (sb) sb.hostWrote = true;
  }

  /** The user's permission ceiling: their own row, else the configured default. */
  ceiling(owner: SandboxOwner): Permissions {
    return ceilingOf(this.deps.db, this.deps.config, owner);
  }

  /**
   * Runs code in the owner's sandbox. Rejects (throws) only for requests that cannot
   * run at all: a bad language, a permission beyond the ceiling, too much code, a full
   * queue. What happens to the code itself (errors, timeouts, kills) is in the result.
   */
  async execute(owner: SandboxOwner, opts: ExecuteOptions): Promise<ExecuteResult> {
    if (this.closed) throw new SandboxError('the gateway is shutting down', 'busy');
    if (!LANGUAGES.includes(opts.language)) {
      throw new SandboxError(`unknown language "${String(opts.language)}"; use one of ${LANGUAGES.join(', ')}`, 'invalid_request');
    }
    if (typeof opts.code !== 'string' || Buffer.byteLength(opts.code) > MAX_CODE_BYTES) {
      throw new SandboxError(`code must be a string of at most ${MAX_CODE_BYTES} bytes`, 'invalid_request');
    }
    const cfg = this.deps.config;
    const timeoutSec = opts.timeoutSec ?? cfg.execTimeoutSec;
    if (!(timeoutSec > 0) || timeoutSec > cfg.execMaxTimeoutSec) {
      throw new SandboxError(`timeout must be between 1 and ${cfg.execMaxTimeoutSec} seconds (SANDGATE_EXEC_MAX_TIMEOUT_SEC)`, 'invalid_request');
    }
    const ceiling = this.ceiling(owner);
    // Network is refused whatever the ceiling says: say why before anything else.
    const net = networkUnavailable({ ...ceiling, net: opts.permissions?.net ?? ceiling.net });
    if (net) throw new PermissionError(net, 'net');
    const effective = narrowPermissions(ceiling, opts.permissions);

    const sb = await this.sandboxFor(owner);
    return sb.queue.push(async () => {
      // The sandbox died while this waited: the run joins its replacement's queue like any
      // new one (its limit, its order, its timer starting only when the run does).
      if (sb.handle.exited) return this.execute(owner, opts);
      this.wake(sb);
      const cpuBefore = cpuMsNow(sb.handle.id);
      const ts = Date.now();
      sb.run = { language: opts.language, startedAt: ts };
      try {
        const result = await runOne(sb, opts, effective, timeoutSec, { driver: this.deps.driver, log: this.log, outputLimitKb: cfg.outputLimitKb, cpus: cfg.sandboxCpus });
        sb.run = undefined;
        const cpuAfter = cpuMsNow(sb.handle.id);
        this.executionLog.push({
          userId: owner.userId,
          ts,
          language: opts.language,
          durationMs: result.durationMs,
          cpuMs: cpuBefore !== undefined && cpuAfter !== undefined ? Math.max(0, cpuAfter - cpuBefore) : null,
          outcome: result.timedOut ? 'timeout' : result.killed ? 'killed' : result.exitCode === 0 ? 'ok' : 'error',
        });
        if (result.files.length) {
          for (const l of this.filesListeners) {
            try {
              l(owner, result.files);
            } catch (e) {
              this.log.warn({ err: e }, 'a files listener failed');
            }
          }
        }
        return result;
      } finally {
        sb.run = undefined;
        this.recordUse(sb);
        this.rest(sb);
      }
    });
  }

  /**
   * Idle sandboxes freeze (SANDGATE_FREEZE_AFTER_MS after their last run): a frozen
   * cgroup costs no CPU, where an idle gVisor sandbox on systrap costs 23–51 ms a second.
   * Never while a run is in flight or queued; the check and the freeze happen in one tick,
   * so a run that arrives later finds it frozen and thaws it.
   */
  private rest(live: Live): void {
    const after = this.deps.config.freezeAfterMs;
    if (!after || this.closed) return;
    if (live.freezeTimer) clearTimeout(live.freezeTimer);
    live.freezeTimer = setTimeout(() => {
      live.freezeTimer = undefined;
      this.freezeNow(live);
    }, after);
    live.freezeTimer.unref();
  }

  /** Freezes `live` unless it is busy, gone or frozen already; once frozen, its warm-ups are due. */
  private freezeNow(live: Live): void {
    const sb = live as Partial<UserSandbox>;
    if (this.closed || this.daemonAway || live.frozen || live.handle.exited || (sb.running ?? 0) > 0 || (sb.queue?.waiting ?? 0) > 0) return;
    live.frozen = true;
    void freeze(live.handle.id, { owner: this.gatewayId }).then((ok) => {
      // Not frozen after all (no freezer here, or it did not settle): it stays awake.
      if (!ok) live.frozen = false;
      else if (live.frozen) this.keepWarm(live);
    });
  }

  /**
   * A frozen sandbox is thawed every SANDGATE_FREEZE_REWARM_SEC for one empty round trip
   * through its runner and Python kernel, then frozen again at once. On hosts whose
   * memory goes cold when left untouched for a minute or so (VMs whose hypervisor
   * reclaims idle guest memory: these machines), the first run after minutes frozen
   * otherwise faults the whole run path back, 5–15 ms; a warm-up costs a few ms of CPU.
   */
  private keepWarm(live: Live): void {
    const every = this.deps.config.freezeRewarmSec * 1000;
    if (!every || this.closed) return;
    if (live.rewarmTimer) clearTimeout(live.rewarmTimer);
    live.rewarmTimer = setTimeout(() => void this.rewarm(live), every);
    live.rewarmTimer.unref();
  }

  private async rewarm(live: Live): Promise<void> {
    live.rewarmTimer = undefined;
    if (this.closed || !live.frozen || live.handle.exited) return;
    const claim = {};
    live.rewarming = claim;
    live.frozen = false;
    thaw(live.handle.id);
    await this.warmUp(live);
    // Woken meanwhile (a run, a stop): whoever woke it decides what comes next.
    if (live.rewarming !== claim) return;
    live.rewarming = undefined;
    this.freezeNow(live);
  }

  /** One empty round trip through the runner's worker and Python kernel; done when answered, gone or 5 s late. */
  private async warmUp(live: Live): Promise<void> {
    await preloadIn(live.handle, [], { timeoutMs: 5000, idPrefix: 'warm' });
  }

  /**
   * Someone is about to use their sandbox (a chat turn began: the model thinks for a
   * second or more before it runs code). A frozen one is thawed and warmed up now, so
   * the pages a long freeze let go cold come back during the model's time, not the
   * run's. It freezes again after the usual delay if no run comes.
   */
  prepare(owner: SandboxOwner): void {
    const sb = this.users.get(owner.userId);
    if (!sb?.frozen || sb.handle.exited) return;
    this.wake(sb);
    void this.warmUp(sb);
    this.rest(sb);
  }

  /** Thaws a frozen sandbox before anything talks to it, and puts off its next freeze. */
  private wake(live: Live): void {
    this.stopTimers(live);
    if (!live.frozen) return;
    live.frozen = false;
    thaw(live.handle.id);
  }

  /** No freeze and no warm-up comes for `live` any more, unless something rests it again. */
  private stopTimers(live: Live): void {
    if (live.freezeTimer) clearTimeout(live.freezeTimer);
    if (live.rewarmTimer) clearTimeout(live.rewarmTimer);
    live.freezeTimer = live.rewarmTimer = live.rewarming = undefined;
  }

  /** The owner's live sandbox, started (from the pool when possible) if needed. */
  private async sandboxFor(owner: SandboxOwner): Promise<UserSandbox> {
    const have = this.users.get(owner.userId);
    if (have && !have.handle.exited && have.ceilingKey === ceilingKey(this.ceiling(owner))) return have;
    if (have && !have.handle.exited) {
      // The admin changed this user's ceiling: mounts must follow, so replace it when idle.
      if (have.running === 0 && have.queue.waiting === 0) await this.stopSandbox(owner.userId, 'permission ceiling changed');
      else return have;
    }
    let p = this.starting.get(owner.userId);
    if (!p) {
      p = this.startFor(owner).finally(() => this.starting.delete(owner.userId));
      this.starting.set(owner.userId, p);
    }
    return p;
  }

  private async startFor(owner: SandboxOwner): Promise<UserSandbox> {
    const ceiling = this.ceiling(owner);
    const existing = this.workspaceIdFor(owner, false);
    const poolable = !existing && ceilingKey(ceiling) === ceilingKey(defaultCeiling(this.deps.config)) && workspaceWritable(ceiling);
    let live = poolable ? this.pool.take() : undefined;
    if (live) {
      claimWorkspace(this.deps.db, owner.userId, live.workspaceId);
      await this.deps.prepareTools(live.toolsDir, owner);
      this.log.info({ user: owner.name }, 'sandbox taken from the warm pool');
    } else {
      live = await this.startLive(owner, this.workspaceIdFor(owner, true)!, ceiling);
    }
    this.pool.fill();
    const sb = this.keep({ ...live, owner, ceilingKey: ceilingKey(ceiling), queue: new RunQueue(), running: 0 });
    recordSandboxStarted(this.deps.db, owner.userId, sb.handle.id, sb.startedAt);
    return sb;
  }

  /** Starts a container for a workspace; `owner` undefined makes a pooled one. */
  private async startLive(owner: SandboxOwner | undefined, workspaceId: string, ceiling: Permissions): Promise<Live> {
    const workspace = await this.deps.volumes.ensure(workspaceId);
    const toolsDir = path.join(this.deps.toolsMountsDir, workspaceId);
    await fsp.mkdir(toolsDir, { recursive: true });
    await this.deps.prepareTools(toolsDir, owner);
    const mounts = mountsFor(ceiling, { workspace, skills: this.deps.skillsDir, tools: toolsDir });
    const handle = await this.deps.driver.start({
      owner,
      ...mounts,
      denoCeiling: denoRunFlags(ceiling),
      denoHostOnFirstUse: this.deps.config.denoHost === 'first-use',
      labels: { [LABEL_WORKSPACE]: workspaceId, [LABEL_ROLE]: owner ? 'user' : 'pool' },
    });
    const now = Date.now();
    return { handle, workspaceId, toolsDir, startedAt: now, lastActivity: now, workspaceWritable: mounts.workspaceWritable, hostWrote: true };
  }

  /** Makes `sb` the owner's sandbox: its calls routed, its death noticed. */
  private keep(sb: UserSandbox): UserSandbox {
    this.users.set(sb.owner.userId, sb);
    routeCalls(sb, () => this.bridge);
    sb.handle.onExit((reason) => {
      if (this.users.get(sb.owner.userId) !== sb) return;
      this.recordUse(sb, true);
      this.users.delete(sb.owner.userId);
      this.log.info({ user: sb.owner.name, reason }, 'sandbox ended');
      // A dead container is removed now; its workspace stays.
      this.stopTimers(sb);
      void this.deps.driver.stop(sb.handle.id).catch(() => {});
    });
    this.rest(sb);
    return sb;
  }

  private workspaceIdFor(owner: SandboxOwner, create: boolean): string | undefined {
    const user = getUser(this.deps.db, owner.userId);
    if (!user) throw new SandboxError(`unknown user ${owner.name}`, 'invalid_request');
    if (user.workspaceId || !create) return user.workspaceId ?? undefined;
    return claimWorkspace(this.deps.db, owner.userId, this.deps.volumes.newId());
  }

  /** Starts pooled sandboxes in the background until the pool is full. */
  fillPool(): void {
    this.pool.fill();
  }

  /** Resolves once the pool is full (for tests and benchmarks). */
  poolReady(timeoutMs?: number): Promise<void> {
    return this.pool.full(timeoutMs);
  }

  get poolSize(): number {
    return this.pool.size;
  }

  /** Stops idle sandboxes and replaces old ones; never touches a running execution. */
  async reap(now = Date.now()): Promise<void> {
    for (const sb of [...this.users.values()]) {
      const reason = stopReason(sb, this.deps.config, now);
      if (reason) await this.stopSandbox(sb.owner.userId, reason);
    }
    await this.pool.discardOlderThan(this.deps.config.maxLifetimeSec * 1000, now);
  }

  /** Writes the sandbox's uncounted executions to the store, if due (or `now`). */
  private recordUse(sb: UserSandbox, now = false): void {
    if (!sb.unrecorded) return;
    const at = Date.now();
    if (!now && at - (sb.recordedAt ?? 0) < USE_RECORD_INTERVAL_MS) return;
    try {
      recordSandboxUse(this.deps.db, sb.owner.userId, sb.lastActivity, sb.unrecorded);
      sb.unrecorded = 0;
      sb.recordedAt = at;
    } catch (e) {
      this.log.warn({ err: e, user: sb.owner.name }, 'could not record sandbox use');
    }
  }

  private async stopSandbox(userId: number, reason: string): Promise<void> {
    const sb = this.users.get(userId);
    if (!sb) return;
    this.recordUse(sb, true);
    this.users.delete(userId);
    this.log.info({ user: sb.owner.name, reason }, 'stopping sandbox');
    this.wake(sb);
    await this.deps.driver.stop(sb.handle.id);
    forgetCgroup(sb.handle.id);
    forgetSandboxContainer(this.deps.db, userId);
  }

  /**
   * Stops a user's sandbox for an admin; the workspace is kept and the next run starts a
   * fresh sandbox. Graceful: the run in progress is cancelled first (up to a few
   * seconds); `kill`: at once. Either way, the runs it ends say who stopped it.
   */
  /**
   * Stops (cancels the run, then removes the container) or kills a user's sandbox. `by`
   * names the admin who asked; `cause` replaces "by an admin" in what the user is told,
   * for a stop nobody asked for (e.g. "when your access to this gateway ended").
   */
  async stopUser(userId: number, opts: StopOptions = {}): Promise<boolean> {
    const sb = this.users.get(userId);
    if (!sb) return false;
    if (this.stopping.has(userId)) return false;
    this.stopping.add(userId);
    try {
      return await this.stopUserNow(sb, opts);
    } finally {
      this.stopping.delete(userId);
    }
  }

  private async stopUserNow(sb: UserSandbox, opts: StopOptions): Promise<boolean> {
    const userId = sb.owner.userId;
    const who = opts.cause ?? `by ${opts.by ? `an admin (${opts.by})` : 'an admin'}`;
    sb.stopNotice = opts.kill
      ? `Your sandbox was killed ${who}, so this run ended. Files in /workspace are kept; the next run starts a fresh sandbox (Python variables are lost).`
      : `Your sandbox was stopped ${who}, so this run was cancelled. Files in /workspace are kept; the next run starts a fresh sandbox (Python variables are lost).`;
    this.wake(sb);
    if (!opts.kill && sb.inFlight) {
      try {
        sb.handle.send({ op: 'cancel', id: `c${sb.inFlight}`, target: sb.inFlight });
      } catch {
        /* runner gone: stopping settles the run */
      }
      const deadline = Date.now() + STOP_GRACE_MS;
      while (sb.run && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
    }
    await this.stopSandbox(userId, opts.kill ? `killed ${who}` : `stopped ${who}`);
    return true;
  }

  /** Stops every user sandbox with nothing running or queued; how many. */
  async stopIdle(by?: string): Promise<number> {
    let n = 0;
    for (const sb of [...this.users.values()]) {
      if (sb.running === 0 && sb.queue.waiting === 0 && (await this.stopUser(sb.owner.userId, { by }))) n++;
    }
    return n;
  }

  /** Removes a user's workspace for good (their sandbox must be stopped first; the admin deletes the user next). */
  async destroyWorkspaceOf(user: { id: number; workspaceId: string | null }): Promise<void> {
    if (this.users.has(user.id)) throw new SandboxError('the user still has a sandbox running', 'busy');
    if (user.workspaceId) await this.deps.volumes.destroy(user.workspaceId);
  }

  /** Bytes a workspace uses and its quota. */
  workspaceUsage(workspaceId: string): Promise<{ usedBytes: number; limitBytes: number | null }> {
    return this.deps.volumes.usage(workspaceId);
  }

  /** The warm pool's sandboxes, waiting for users. */
  pooled(): PooledSummary[] {
    return this.pool.entries().map((l) => ({ containerId: l.handle.id, frozen: !!l.frozen, startedAt: l.startedAt, workspaceId: l.workspaceId }));
  }

  /**
   * Containers of this gateway (by its label) that it does not track: not a user's, not
   * in the pool, not being started, and older than a minute (one made a moment ago may
   * be on its way in). Adoption at start removes such leftovers; these appeared since.
   */
  async orphans(now = Date.now()): Promise<{ id: string; owner?: string; createdAt: number; running: boolean }[]> {
    const tracked = new Set([...[...this.users.values()].map((s) => s.handle.id), ...this.pool.entries().map((l) => l.handle.id)]);
    return (await this.deps.driver.list())
      .filter((c) => !tracked.has(c.id) && now - c.createdAt > ORPHAN_MIN_AGE_MS && this.starting.size === 0)
      .map((c) => ({ id: c.id, owner: c.owner, createdAt: c.createdAt, running: c.running }));
  }

  /** runsc processes whose container is gone (none when the driver cannot say which containers exist). */
  async runtimeLeftovers(): Promise<RuntimeLeftover[]> {
    const known = this.deps.driver.knownContainerIds?.bind(this.deps.driver);
    return known ? runtimeLeftovers(known) : [];
  }

  /** Removes the orphans `orphans()` lists (their workspaces stay); how many. */
  async removeOrphans(now = Date.now()): Promise<number> {
    const found = await this.orphans(now);
    for (const o of found) {
      this.log.warn({ container: o.id.slice(0, 12), owner: o.owner }, 'removing a container this gateway does not track');
      await this.deps.driver.stop(o.id);
    }
    const known = this.deps.driver.knownContainerIds?.bind(this.deps.driver);
    const killed = known ? await removeRuntimeLeftovers(known) : 0;
    if (killed) this.log.warn({ processes: killed }, 'killed runsc processes whose container was gone');
    return found.length + killed;
  }

  /** Users whose sandbox is starting now (no container to show yet). */
  startingUsers(): number[] {
    return [...this.starting.keys()];
  }

  /** Every user sandbox with usage, for the admin page. */
  async list(opts: { stats?: boolean } = {}): Promise<SandboxSummary[]> {
    const out: SandboxSummary[] = [];
    for (const sb of this.users.values()) {
      const s: SandboxSummary = {
        user: sb.owner.name,
        userId: sb.owner.userId,
        containerId: sb.handle.id,
        startedAt: sb.startedAt,
        lastActivity: sb.lastActivity,
        running: sb.running,
        queued: sb.queue.waiting,
        stopping: this.stopping.has(sb.owner.userId),
        frozen: !!sb.frozen,
        workspaceId: sb.workspaceId,
        ...(sb.run ? { run: { ...sb.run } } : {}),
      };
      if (opts.stats) {
        s.stats = await sb.handle.stats().catch(() => undefined);
        s.workspace = await this.deps.volumes.usage(sb.workspaceId).catch(() => undefined);
      }
      out.push(s);
    }
    return out.sort((a, b) => a.user.localeCompare(b.user));
  }

  /**
   * Stops the reaper and the pool. User sandboxes keep running for the next gateway to
   * adopt, with their workspaces mounted, unless `stopAll` (tests, or an operator who
   * wants a clean host); every other workspace is unmounted. `releaseVolumes` unmounts
   * them all. `detachOnly` leaves even the pool running and every mount in place, as a
   * crash would (for tests of adoption).
   */
  async shutdown(opts: { stopAll?: boolean; releaseVolumes?: boolean; detachOnly?: boolean } = {}): Promise<void> {
    this.closed = true;
    this.unwatch?.();
    if (this.reaper) clearInterval(this.reaper);
    if (this.executionFlush) clearInterval(this.executionFlush);
    for (const p of this.starting.values()) await p.catch(() => {});
    await this.pool.close({ detachOnly: opts.detachOnly });
    const running = new Set<string>();
    for (const sb of [...this.users.values()]) {
      this.recordUse(sb, true);
      if (opts.stopAll && !opts.detachOnly) {
        await this.stopSandbox(sb.owner.userId, 'gateway shutdown');
      } else {
        // Left for the next gateway to adopt, thawed: docker stop and rm would hang on a frozen one.
        if (!opts.detachOnly) this.wake(sb);
        else this.stopTimers(sb);
        sb.handle.detach();
        running.add(sb.workspaceId);
      }
    }
    this.users.clear();
    this.flushExecutions();
    if (opts.releaseVolumes) await this.deps.volumes.releaseAll();
    else if (!opts.detachOnly) await this.deps.volumes.releaseAll(running);
  }
}
