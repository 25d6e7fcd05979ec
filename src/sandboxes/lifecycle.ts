/**
 * A sandbox's life from the gateway's side: started for a user on first use (taken from
 * the warm pool when possible), adopted after a gateway restart, replaced when its user's
 * permission ceiling changes or it dies, stopped by the reaper when idle or old, and left
 * running (or stopped) at shutdown. Also what happens while dockerd is away: sandboxes
 * that died meanwhile are removed when it answers again, and the pool refills.
 *
 * A sandbox that dies (OOM, a fork bomb, `stop`) is replaced on the next execution; the
 * workspace lives on the host and is never lost with it.
 */
import * as metrics from '../telemetry/metrics.js';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { recordSandboxStarted } from './records.js';
import { claimWorkspace, getUser, workspacesOf, type User } from '../accounts/accounts.js';
import { admittedAccount } from './admission.js';
import { adoptOrRemove, findLeftFor, LABEL_REPLICA, LABEL_ROLE, LABEL_WORKSPACE, removeLeftover } from './adoption.js';
import { routeCalls } from './calls.js';
import { routeEgress, type EgressHandler } from './egress-route.js';
import { ceilingFrom, ceilingKey, ceilingOf, defaultCeiling, mountsFor, workspaceWritable } from './ceilings.js';
import { forgetCgroup } from './cgroup.js';
import { Draining, HeldElsewhere, SandboxError } from './errors.js';
import type { Held, PartDeps } from './held.js';
import type { Idle } from './idle.js';
import type { Live, UserSandbox } from './live.js';
import { grants, type Permissions } from './permissions.js';
import { claimOne, DENO_PACKAGES_DIR, denoRunFlags, EGRESS_PORT, egressEnv, egressSettings, runsOf } from './run.js';
import { RunQueue } from './run-queue.js';
import { reapIntervalMs, stopReason, type Stops } from './stops.js';
import type { BridgeHandler, SandboxHandle, SandboxInfo, SandboxOwner } from './types.js';
import { recordUse, type ExecutionLog } from './usage.js';
import { WarmPool } from './warm-pool.js';

/** With replicas: how many lease times apart a replica sweeps the host for sandboxes no live replica holds. */
const SWEEP_EVERY_LEASES = 5;
/** How often a replica looks for deleted users' workspaces left on its store. */
const DELETIONS_EVERY_MS = 5 * 60_000;

/** What the gateway (and tests) drive: start, the pool, the reaper, shutdown. */
export interface SandboxLifecycle {
  /** Adopts or removes containers left by an earlier run, then fills the pool and starts the reaper. */
  init(opts?: { reapIntervalMs?: number }): Promise<void>;
  /** Where calls from code to the gateway's tools go. */
  setBridgeHandler(handler: BridgeHandler): void;
  setEgressHandler(handler: EgressHandler): void;
  /** Stops idle sandboxes and replaces old ones; never touches a running execution. */
  reap(now?: number): Promise<void>;
  /** Starts pooled sandboxes in the background until the pool is full. */
  fillPool(): void;
  /** Resolves once the pool is full (for tests and benchmarks). */
  poolReady(timeoutMs?: number): Promise<void>;
  readonly poolSize: number;
  /**
   * Stops the reaper and the pool. User sandboxes keep running for the next gateway to
   * adopt, with their workspaces mounted, unless `stopAll` (tests, or an operator who
   * wants a clean host); every other workspace is unmounted. `releaseVolumes` unmounts
   * them all. `detachOnly` leaves even the pool running and every mount in place, as a
   * crash would (for tests of adoption).
   */
  shutdown(opts?: { stopAll?: boolean; releaseVolumes?: boolean; detachOnly?: boolean }): Promise<void>;
  /**
   * Hands this replica's sandboxes over to the others (it is stopping, and takes no new
   * one): each is let go, running and thawed, its lease released, as soon as nothing runs
   * or waits on it; those still busy after `timeoutMs` are let go all the same (their runs
   * end as interrupted). The next run asked of any replica adopts it. Without replicas, nothing.
   */
  handOver(timeoutMs: number): Promise<void>;
}

export class Lifecycle implements SandboxLifecycle {
  readonly pool: WarmPool;
  private unwatch?: () => void;
  private reaper?: NodeJS.Timeout;
  private sweeper?: NodeJS.Timeout;
  private deletions?: NodeJS.Timeout;
  /** The sweep under way (shutdown waits for it). */
  private sweeping?: Promise<void>;

  constructor(private readonly deps: PartDeps & { held: Held; idle: Idle; stops: Stops; executions: ExecutionLog }) {
    const { config, volumes, idle } = deps;
    this.pool = new WarmPool({
      size: config.warmPoolSize,
      preload: config.warmPoolPreload.split(',').map((m) => m.trim()).filter(Boolean),
      start: () => this.startLive(undefined, volumes.newId(), defaultCeiling(config)),
      discard: (live) => this.discardPooled(live),
      rested: (live) => idle.rest(live),
      taken: (live) => idle.wake(live),
      log: deps.log,
    });
    // A lease seen in other hands, or lapsed, at a heartbeat: the sandbox is let go at
    // once, before its idle timers or the reaper could act on it for this gateway.
    deps.replica?.onLost((userId) => {
      const sb = deps.held.users.get(userId);
      if (sb) this.letGo(sb);
    });
  }

  async init(opts: { reapIntervalMs?: number } = {}): Promise<void> {
    const { driver, db, volumes, log, config, replica } = this.deps;
    await adoptOrRemove({ driver, db, volumes, log, replica }, (user, handle, c) => void this.adopted(user, handle, c.createdAt));
    this.reaper = setInterval(() => void this.reap().catch((e) => log.error({ err: e }, 'reaper failed')), opts.reapIntervalMs ?? reapIntervalMs(config));
    this.reaper.unref();
    if (replica) {
      // A deleted user's files left on this store while it was away: removed now, then looked for every few minutes.
      await this.deps.stops.removeDeletedWorkspaces().catch((e: unknown) => log.warn({ err: e }, 'could not remove deleted users’ workspaces'));
      this.deletions = setInterval(() => void this.deps.stops.removeDeletedWorkspaces().catch((e: unknown) => log.warn({ err: e }, 'could not remove deleted users’ workspaces')), DELETIONS_EVERY_MS);
      this.deletions.unref();
      this.sweeper = setInterval(() => void this.sweepUnheld().catch((e) => log.warn({ err: e }, 'could not sweep the sandboxes no replica holds')), replica.leaseMs * SWEEP_EVERY_LEASES);
      this.sweeper.unref();
    }
    this.deps.executions.start();
    this.unwatch = driver.watch?.({ down: () => this.deps.idle.daemonDown(this.lives()), up: () => void this.daemonUp() });
    this.pool.fill();
  }

  /**
   * Containers on this host that no live replica holds, found as at start and adopted here
   * (the idle timeout then stops them) or removed: a sandbox a stopping replica handed over
   * and nobody asked for again, a dead replica's sandboxes and warm pool. What this
   * replica holds, starts, stops or pools itself is left alone.
   */
  private sweepUnheld(): Promise<void> {
    const { driver, db, volumes, log, replica, held } = this.deps;
    // A draining replica takes nothing back; one whose heartbeat is stale trusts no view of who is live.
    if (!replica || held.closed || this.sweeping || !replica.takesLeases) return Promise.resolve();
    const ownsNow = (c: SandboxInfo) =>
      held.removing.has(c.id) ||
      [...held.users.values()].some((sb) => sb.handle.id === c.id) ||
      (c.ownerId !== undefined && (held.starting.has(c.ownerId) || held.stopping.has(c.ownerId) || held.users.has(c.ownerId))) ||
      (c.labels[LABEL_ROLE] === 'pool' && c.labels[LABEL_REPLICA] === replica.id);
    // Through sandboxFor, as a run would: its lease, then the container left on the host.
    const take = (user: User) => this.sandboxFor({ userId: user.id, name: user.name });
    const adopt = (_user: User, handle: SandboxHandle) => handle.detach();
    this.sweeping = adoptOrRemove({ driver, db, volumes, log, replica }, adopt, { ownsNow, take }).finally(() => (this.sweeping = undefined));
    return this.sweeping;
  }

  /** Makes a container found running for `user` (left by an earlier gateway) their sandbox. */
  private adopted(user: User, handle: SandboxHandle, startedAt: number): UserSandbox {
    const ceiling = ceilingFrom(user, this.deps.config);
    metrics.sandboxStarts.inc({ kind: 'adopted' });
    return this.followKept(this.keep({
      owner: { userId: user.id, name: user.name },
      handle,
      workspaceId: user.workspaceId!,
      toolsDir: path.join(this.deps.toolsMountsDir, user.workspaceId!),
      startedAt,
      lastActivity: Date.now(),
      workspaceWritable: workspaceWritable(ceiling),
      ceilingKey: ceilingKey(ceiling),
      hostWrote: true,
      queue: new RunQueue(),
      running: 0,
    }));
  }

  /**
   * The kept runs (MCP tasks) an adopted sandbox's runner still holds, followed first, in
   * their order, before any run of this gateway's: a run sent meanwhile would wait in the
   * runner behind them while its time limit ran here. `resume` takes their outcomes.
   * Every other run still in the runner is cancelled: its caller was told it was
   * interrupted (the gateway it was sent through died, or let the sandbox go), nobody
   * takes its result, and it would hold this gateway's runs up until it ended.
   */
  private followKept(sb: UserSandbox): UserSandbox {
    const { config, driver, idle, log } = this.deps;
    const settings = { driver, log, outputLimitKb: config.outputLimitKb, cpus: config.sandboxCpus };
    let known!: () => void;
    sb.keptKnown = new Promise<void>((r) => (known = r));
    sb.queue
      .push(async () => {
        idle.wake(sb);
        try {
          const runs = await runsOf(sb);
          const orphans = runs?.execs.filter((id) => !runs.kept?.some((k) => k.id === id && !k.done)) ?? [];
          try {
            for (const target of orphans) sb.handle.send({ op: 'cancel', id: `c${target}`, target });
          } catch {
            /* the runner is gone: its runs ended with it */
          }
          if (orphans.length) log.info({ user: sb.owner.name, runs: orphans.length }, 'cancelled the runs an earlier gateway left in an adopted sandbox: their callers were told they were interrupted');
          const list = runs?.kept;
          if (!list) return void (sb.kept = false);
          const kept = (sb.kept = new Map());
          known();
          let prev: Promise<unknown> = Promise.resolve();
          for (const k of list) {
            // Each run's limit is at most the longest any run may have.
            const p = prev.then(() => claimOne(sb, k.id, { language: k.language }, config.execMaxTimeoutSec, settings));
            kept.set(k.id, p);
            prev = p.catch(() => undefined);
          }
          if (list.length) log.info({ user: sb.owner.name, runs: list.length }, 'following the kept runs of an adopted sandbox');
          await prev;
        } finally {
          known();
          idle.rest(sb);
        }
      })
      .catch((e: unknown) => log.warn({ err: e, user: sb.owner.name }, 'could not follow the kept runs of an adopted sandbox'));
    return sb;
  }

  setBridgeHandler(handler: BridgeHandler): void {
    this.deps.held.bridge = handler;
  }

  setEgressHandler(handler: EgressHandler): void {
    this.deps.held.egress = handler;
  }

  /**
   * The owner's live sandbox, started (from the pool when possible) if needed.
   * `ceiling`: the owner's, when the caller has just read it (one query less per run).
   */
  async sandboxFor(owner: SandboxOwner, ceiling?: Permissions): Promise<UserSandbox> {
    const { held, db, config } = this.deps;
    ceiling ??= await ceilingOf(db, config, owner);
    const key = ceilingKey(ceiling);
    // From here to the start (or the stop below), nothing is awaited: two runs arriving
    // together see the same sandbox, or the same start.
    let have = held.users.get(owner.userId);
    if (have && !this.stillLeased(have)) have = undefined;
    if (have && !have.handle.exited && have.ceilingKey === key) return have;
    if (have && !have.handle.exited) {
      // The admin changed this user's ceiling: mounts must follow, so replace it when idle.
      if (have.running === 0 && have.queue.waiting === 0) await this.deps.stops.stopSandbox(owner.userId, 'permission ceiling changed');
      else return have;
    }
    let p = held.starting.get(owner.userId);
    if (!p) {
      p = this.startFor(owner, ceiling).finally(() => held.starting.delete(owner.userId));
      held.starting.set(owner.userId, p);
    }
    return p;
  }

  /** The owner's workspace id; with `create`, one is claimed if they have none yet. */
  async workspaceIdFor(owner: SandboxOwner, create: boolean): Promise<string | undefined> {
    const user = await getUser(this.deps.db, owner.userId);
    if (!user) throw new SandboxError(`unknown user ${owner.name}`, 'invalid_request');
    if (user.workspaceId || !create) return user.workspaceId ?? undefined;
    return claimWorkspace(this.deps.db, owner.userId, this.deps.volumes.newId());
  }

  fillPool(): void {
    this.pool.fill();
  }

  poolReady(timeoutMs?: number): Promise<void> {
    return this.pool.full(timeoutMs);
  }

  get poolSize(): number {
    return this.pool.size;
  }

  async reap(now = Date.now()): Promise<void> {
    for (const sb of [...this.deps.held.users.values()]) {
      if (!this.stillLeased(sb)) continue;
      const reason = stopReason(sb, this.deps.config, now);
      if (reason) await this.deps.stops.stopSandbox(sb.owner.userId, reason);
    }
    await this.pool.discardOlderThan(this.deps.config.maxLifetimeSec * 1000, now);
  }

  async shutdown(opts: { stopAll?: boolean; releaseVolumes?: boolean; detachOnly?: boolean } = {}): Promise<void> {
    const { held, idle, volumes } = this.deps;
    held.closed = true;
    this.unwatch?.();
    if (this.reaper) clearInterval(this.reaper);
    if (this.sweeper) clearInterval(this.sweeper);
    if (this.deletions) clearInterval(this.deletions);
    await this.sweeping?.catch(() => {});
    this.deps.executions.stop();
    for (const p of held.starting.values()) await p.catch(() => {});
    await this.pool.close({ detachOnly: opts.detachOnly });
    const running = new Set<string>();
    const uses: Promise<void>[] = [];
    for (const sb of [...held.users.values()]) {
      uses.push(recordUse(this.deps, sb, true));
      if (opts.stopAll && !opts.detachOnly) {
        await this.deps.stops.stopSandbox(sb.owner.userId, 'gateway shutdown');
      } else {
        // Left for the next gateway to adopt, thawed: docker stop and rm would hang on a frozen one.
        if (!opts.detachOnly) idle.wake(sb);
        else idle.stopTimers(sb);
        sb.letGo = true;
        sb.handle.detach();
        running.add(sb.workspaceId);
      }
    }
    held.users.clear();
    // Written before the store closes (the gateway closes it after this).
    await Promise.all(uses);
    await this.deps.executions.flush();
    if (opts.releaseVolumes) await volumes.releaseAll();
    else if (!opts.detachOnly) {
      // Other replicas on this host (one data directory) mount their users' workspaces
      // in the same place: those of every container of theirs stay mounted, and those of
      // every user whose lease another replica holds, which may have mounted one for a
      // container it has not created yet (unmounted under it, the container would get the
      // bare directory, with no size limit).
      if (this.deps.replica) {
        for (const c of await this.deps.driver.list().catch(() => [])) if (c.labels[LABEL_WORKSPACE]) running.add(c.labels[LABEL_WORKSPACE]);
        const elsewhere = await this.deps.replica
          .leasedElsewhere()
          .then((users) => workspacesOf(this.deps.db, users))
          .catch((e: unknown) => void this.deps.log.warn({ err: e }, 'could not read which workspaces the other replicas hold: none is unmounted'));
        if (!elsewhere) return;
        for (const id of elsewhere) running.add(id);
      }
      await volumes.releaseAll(running);
    }
  }

  async handOver(timeoutMs: number): Promise<void> {
    const { held, idle, log, replica } = this.deps;
    if (!replica) return;
    const end = Date.now() + timeoutMs;
    let handed = 0;
    const uses: Promise<void>[] = [];
    for (;;) {
      const late = Date.now() >= end;
      for (const sb of [...held.users.values()]) {
        // An admin's stop under way ends it here: never handed on.
        if (held.stopping.has(sb.owner.userId)) continue;
        if (!late && (sb.running > 0 || sb.queue.waiting > 0)) continue;
        // Checked and let go in one tick: a run arriving after this finds no sandbox here, and goes to another replica.
        held.users.delete(sb.owner.userId);
        idle.wake(sb);
        sb.letGo = true;
        sb.handle.detach();
        uses.push(recordUse(this.deps, sb, true), replica.release(sb.owner.userId));
        handed++;
        if (late) log.warn({ user: sb.owner.name }, 'handed a sandbox over with a run still in it: the run ends as interrupted');
      }
      if ((!held.users.size || late) && !held.starting.size && !held.stopping.size) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    await Promise.all(uses);
    log.info({ sandboxes: handed }, 'sandboxes handed over to the other replicas');
  }

  /** Every sandbox this gateway holds: the users' and the pool's. */
  private lives(): Live[] {
    return [...this.deps.held.users.values(), ...this.pool.entries()];
  }

  /**
   * dockerd answers again. Sandboxes that died meanwhile (dockerd stops containers when
   * it stops) could not be removed then: this gateway's stopped containers go now, the
   * pool refills, and idle sandboxes freeze again.
   */
  private async daemonUp(): Promise<void> {
    if (!this.deps.idle.daemonUp(this.lives())) return;
    const { driver, log } = this.deps;
    const stopped = await driver.list().then(
      (all) => all.filter((c) => (c.state === 'exited' || c.state === 'dead') && (c.labels[LABEL_ROLE] === 'user' || c.labels[LABEL_ROLE] === 'pool')),
      (e: unknown) => (log.warn({ err: e }, 'could not list sandboxes after dockerd came back'), []),
    );
    for (const c of stopped) {
      await removeLeftover(this.deps, c).catch((e: unknown) => log.warn({ err: e, container: c.id.slice(0, 12) }, 'could not remove a sandbox that stopped while dockerd was away'));
    }
    this.pool.fill();
  }

  /** Whether this gateway may still act on `sb`: not let go, and its lease held (by this replica's clock); a sandbox found lost is let go. */
  stillHolds(sb: UserSandbox): boolean {
    return !sb.letGo && this.stillLeased(sb);
  }

  /**
   * Whether this gateway still holds `sb`'s lease. One it lost (it could not reach the
   * store for a lease time, and another replica may have taken the sandbox since) is
   * let go at once without touching the container: the stream to its runner is closed
   * (a run waiting on it ends as interrupted) and nothing more is sent to it.
   */
  private stillLeased(sb: UserSandbox): boolean {
    const { replica } = this.deps;
    if (!replica || replica.holds(sb.owner.userId)) return true;
    this.letGo(sb);
    return false;
  }

  /** A sandbox whose lease is gone: no longer this gateway's, its timers stopped, its runner stream closed, the container untouched. */
  private letGo(sb: UserSandbox): void {
    const { held, idle, log, replica } = this.deps;
    if (held.users.get(sb.owner.userId) !== sb) return;
    held.users.delete(sb.owner.userId);
    idle.stopTimers(sb);
    sb.letGo = true;
    sb.handle.detach();
    log.warn({ user: sb.owner.name, replica: replica?.id }, 'this gateway lost the lease on a sandbox: it is let go, untouched');
  }

  /**
   * Takes the lease on the owner's sandbox before anything is started or adopted for
   * them; refused (held_elsewhere) while another live replica holds it.
   */
  private async takeLease(owner: SandboxOwner): Promise<void> {
    const { replica } = this.deps;
    if (!replica) return;
    const lease = await replica.acquire(owner.userId).catch((e: unknown) => {
      if (replica.isDraining) throw new Draining('this gateway is stopping: it takes no new sandbox');
      throw new SandboxError('this gateway cannot take sandboxes now (it is stopping, or cannot reach its database): try again', 'held_elsewhere', (e as Error).message);
    });
    if (!lease.ok && lease.away !== undefined) {
      // Asked again while the run may wait (a gateway restarting there comes back in seconds).
      throw new HeldElsewhere(
        `${owner.name}'s files are on a sandbox host where no gateway is running now (it may be restarting): try again in a few seconds; after SANDGATE_HOST_LOST_SEC without one, their sandbox starts on another host`,
        { id: '', internalUrl: null },
      );
    }
    if (!lease.ok) {
      const why = lease.home ? `${owner.name}'s files are on another sandbox host, whose gateway` : `${owner.name}'s sandbox is held by another gateway of this installation, which`;
      throw new HeldElsewhere(`${why} could not be reached: try again in a few seconds`, lease.holder!);
    }
  }

  private async startFor(owner: SandboxOwner, ceiling: Permissions): Promise<UserSandbox> {
    await this.takeLease(owner);
    try {
      return await this.startLeased(owner, ceiling);
    } catch (e) {
      // Nothing of theirs is held here: the next replica asked may take it at once.
      if (!this.deps.held.users.has(owner.userId)) await this.deps.replica?.release(owner.userId).catch(() => {});
      throw e;
    }
  }

  /** startFor under the owner's lease: a container an earlier holder left running on this host is adopted, else one is started. */
  private async startLeased(owner: SandboxOwner, ceiling: Permissions): Promise<UserSandbox> {
    const { db, config, log } = this.deps;
    if (this.deps.replica) {
      const user = await getUser(db, owner.userId);
      const left = user && (await findLeftFor(this.deps, user, this.deps.held.removing));
      if (left) {
        log.info({ user: owner.name, container: left.handle.id.slice(0, 12) }, 'adopted sandbox an earlier holder left');
        const sb = this.adopted(user, left.handle, left.info.createdAt);
        if (sb.ceilingKey === ceilingKey(ceiling)) return sb;
        // The ceiling changed meanwhile: mounts must follow.
        await this.deps.stops.stopSandbox(owner.userId, 'permission ceiling changed');
        await this.takeLease(owner);
      }
    }
    const existing = await this.workspaceIdFor(owner, false);
    const poolable = !existing && ceilingKey(ceiling) === ceilingKey(defaultCeiling(config)) && workspaceWritable(ceiling);
    let live = poolable ? this.pool.take() : undefined;
    if (live) {
      const pooled = live;
      const claimed = await claimWorkspace(db, owner.userId, pooled.workspaceId).catch(async (e: unknown) => {
        await this.discardPooled(pooled).catch(() => {});
        throw e;
      });
      if (claimed === pooled.workspaceId) {
        await this.deps.replica?.noteCopies([claimed]);
        await this.deps.prepareTools(pooled.toolsDir, owner);
        metrics.sandboxStarts.inc({ kind: 'pool' });
        log.info({ user: owner.name }, 'sandbox taken from the warm pool');
      } else {
        // The user was given a workspace since the read above (their file browser opened
        // it first). The pooled container was made for a workspace that is nobody's, so it
        // is not theirs to use: it is removed, and their sandbox starts on their own.
        log.info({ user: owner.name }, 'a workspace was claimed meanwhile: the pooled sandbox is not used');
        const discarded = this.discardPooled(pooled).catch((e: unknown) => log.warn({ err: e }, 'could not remove a pooled sandbox'));
        try {
          live = await this.startLive(owner, claimed, ceiling);
        } finally {
          await discarded;
        }
      }
    } else {
      live = await this.startLive(owner, (await this.workspaceIdFor(owner, true))!, ceiling);
    }
    this.pool.fill();
    const sb = this.keep({ ...live, owner, ceilingKey: ceilingKey(ceiling), queue: new RunQueue(), running: 0 });
    // The account may have been disabled (or suspended) while this container started.
    // `stopUser` looks only at the sandboxes held, so it found none to stop then, and the
    // command line may have listed the containers before this one was recorded as the
    // user's. Once `keep` above has run, `stopUser` sees it; once the record below is
    // written, the command line does; and the check comes after the record, so a disable
    // written before the record is seen by the check. So a start never outlives a
    // disable: the container just made is stopped, and whatever waited for it is refused
    // as `execute` refuses it.
    await recordSandboxStarted(db, owner.userId, sb.handle.id, sb.startedAt);
    try {
      await admittedAccount(db, owner);
    } catch (e) {
      await this.deps.stops.stopSandbox(owner.userId, 'its account was disabled while it started').catch((err: unknown) => log.warn({ err, user: owner.name }, 'could not stop a sandbox whose account was disabled while it started'));
      throw e;
    }
    return sb;
  }

  /** Stops a pooled sandbox and removes its workspace (nobody's: the pool makes a fresh one for each). */
  private async discardPooled(live: Live): Promise<void> {
    const { idle, driver, volumes } = this.deps;
    idle.wake(live);
    await driver.stop(live.handle.id);
    forgetCgroup(live.handle.id);
    await volumes.destroy(live.workspaceId);
  }

  /** Starts a container for a workspace; `owner` undefined makes a pooled one. */
  private async startLive(owner: SandboxOwner | undefined, workspaceId: string, ceiling: Permissions): Promise<Live> {
    const started = performance.now();
    const workspace = await this.deps.volumes.ensure(workspaceId);
    // Where a user's files are now: a store deleting them asks this one too (a pooled workspace is noted when it is claimed).
    if (owner) await this.deps.replica?.noteCopies([workspaceId]);
    const toolsDir = path.join(this.deps.toolsMountsDir, workspaceId);
    await fsp.mkdir(toolsDir, { recursive: true });
    await this.deps.prepareTools(toolsDir, owner);
    const mounts = mountsFor(ceiling, { workspace, skills: this.deps.skillsDir, tools: toolsDir });
    const handle = await this.deps.driver.start({
      owner,
      ...mounts,
      denoCeiling: denoRunFlags(ceiling, egressSettings(this.deps.config).registries),
      // The relay for connections out: carrying them to the gateway's proxy only when the
      // ceiling grants `net`, else refusing each itself, naming the missing grant.
      egress: {
        port: EGRESS_PORT,
        open: grants(ceiling.net),
        env: {
          ...egressEnv(egressSettings(this.deps.config)),
          // What `npm:` imports fetch lasts in the workspace, as pip's packages do (Deno's cache).
          ...(grants(ceiling.net) && mounts.workspaceWritable && { DENO_DIR: DENO_PACKAGES_DIR }),
        },
      },
      denoHostOnFirstUse: this.deps.config.denoHost === 'first-use',
      labels: { [LABEL_WORKSPACE]: workspaceId, [LABEL_ROLE]: owner ? 'user' : 'pool', ...(this.deps.replica && { [LABEL_REPLICA]: this.deps.replica.id }) },
    });
    const now = Date.now();
    // For a user who waits on it: a cold start (the pool's own starts wait for nobody).
    if (owner) {
      metrics.sandboxStarts.inc({ kind: 'cold' });
      metrics.coldStartSeconds.observe(metrics.secondsSince(started));
    }
    return { handle, workspaceId, toolsDir, startedAt: now, lastActivity: now, workspaceWritable: mounts.workspaceWritable, hostWrote: true };
  }

  /** Makes `sb` the owner's sandbox: its calls routed, its death noticed. */
  private keep(sb: UserSandbox): UserSandbox {
    const { held, idle, log } = this.deps;
    held.users.set(sb.owner.userId, sb);
    routeCalls(sb, () => held.bridge);
    routeEgress(sb, () => held.egress);
    sb.handle.onExit((reason) => {
      if (held.users.get(sb.owner.userId) !== sb) return;
      void recordUse(this.deps, sb, true);
      held.users.delete(sb.owner.userId);
      log.info({ user: sb.owner.name, reason }, 'sandbox ended');
      // A dead container is removed now; its workspace stays. Its lease goes with it: the
      // next run, here or on another replica, starts a fresh one under a new lease.
      idle.stopTimers(sb);
      void this.deps.driver
        .stop(sb.handle.id)
        .catch(() => {})
        .then(() => (held.users.has(sb.owner.userId) || held.starting.has(sb.owner.userId) ? undefined : this.deps.replica?.release(sb.owner.userId)))
        .catch((e: unknown) => log.warn({ err: e, user: sb.owner.name }, 'could not release the lease of a sandbox that ended'));
    });
    idle.rest(sb);
    return sb;
  }
}
