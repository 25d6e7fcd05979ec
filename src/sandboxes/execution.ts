/**
 * Running code for a user, and reaching their workspace: what the MCP tools, the chat
 * agent, skills and the files page use. A run is checked (language, size, timeout,
 * permissions within the user's ceiling) before anything starts, then queued on the
 * user's sandbox (started if needed: lifecycle.ts); what the gateway keeps of it is
 * logged in batches (usage.ts), and listeners hear of the files it changed.
 */
import * as metrics from '../telemetry/metrics.js';
import { span } from '../telemetry/traces.js';
import { admittedAccount } from './admission.js';
import { ceilingFrom, ceilingOf } from './ceilings.js';
import { cpuMsNow } from './cgroup.js';
import { Draining, HeldElsewhere, SandboxError } from './errors.js';
import type { Held, PartDeps } from './held.js';
import type { Idle } from './idle.js';
import type { Lifecycle } from './lifecycle.js';
import { narrowPermissions, type Permissions } from './permissions.js';
import { LANGUAGES, type Language } from './protocol.js';
import { claimOne, egressSettings, MAX_CODE_BYTES, runOne } from './run.js';
import type { ExecuteOptions, ExecuteResult, SandboxOwner } from './types.js';
import { recordUse, type ExecutionLog } from './usage.js';
import { Workspace, WorkspaceError } from './workspace.js';
import { TOO_LATE_MESSAGE, type HelperReply } from './workspace-helper.js';
import { CHANGING_OPS, remoteWorkspace } from './remote-workspace.js';
import type { UserSandbox } from './live.js';
import { HopChannels } from './hop-channel.js';
import { HopRefused, sendRun, type HopTarget } from './remote.js';

/** How long a replica found holding a user's sandbox is sent their runs without asking the store again. */
const HOLDER_KEPT_MS = 1000;
/** The outcome of a kept run this gateway let go before it ended (it stops, or handed the sandbox over). */
const LET_GO: Omit<ExecuteResult, 'language'> = {
  exitCode: null,
  durationMs: 0,
  timedOut: false,
  killed: false,
  restarted: false,
  truncated: { stdout: 0, stderr: 0 },
  files: [],
  stdout: '',
  stderr: '',
  detached: true,
};

/** A file operation for a user whose files are on a host with no gateway running now. */
const AWAY_MESSAGE = 'your files are on a sandbox host where no gateway is running now (it may be restarting): try again in a few seconds';

/** A file operation for a user whose files are on a host that has had no gateway for SANDGATE_HOST_LOST_SEC. */
const LOST_MESSAGE =
  'your files are on a sandbox host that has had no gateway running for a long while: they come back with it; running code now starts a new sandbox on another host, without those files';

/** How long a stopping replica tries to hand a run on while the sandbox's lease changes hands. */
const HAND_ON_MS = 10_000;

export type FilesListener = (owner: SandboxOwner, files: ExecuteResult['files']) => void;

/** Code run for an owner, and their workspace. */
export interface SandboxExecution {
  /**
   * Runs code in the owner's sandbox. Rejects (throws) only for requests that cannot
   * run at all: a bad language, a permission beyond the ceiling, too much code, a full
   * queue, an account disabled or suspended (admission.ts). What happens to the code
   * itself (errors, timeouts, kills) is in the result.
   */
  execute(owner: SandboxOwner, opts: ExecuteOptions): Promise<ExecuteResult>;
  /**
   * Runs code only on this gateway: as `execute`, but a sandbox another replica holds is
   * refused (held_elsewhere), never sent on. The internal hop's end (src/http/internal.ts).
   */
  executeHere(owner: SandboxOwner, opts: ExecuteOptions): Promise<ExecuteResult>;
  /** The user's permission ceiling: their own row, else the configured default. */
  ceiling(owner: SandboxOwner): Promise<Permissions>;
  /**
   * The workspace, created and mounted if needed (file access before any run); refused, like a run, to an account disabled or suspended.
   * With gateways on several sandbox hosts, it is the one of the host the user's files are on: reached through a gateway there when that is another.
   */
  openWorkspace(owner: SandboxOwner): Promise<Workspace>;
  /**
   * One request of the owner's workspace helper, on this gateway's workspace store only:
   * refused (held_elsewhere) when their files are in another. The internal hop's end for
   * file operations from gateways on other hosts (src/sandboxes/remote-workspace.ts).
   * Refused with nothing done when it would reach the helper after `startBy` (epoch ms).
   */
  workspaceRequestHere(owner: SandboxOwner, header: Record<string, unknown>, data?: Buffer, startBy?: number): Promise<{ reply: HelperReply; data?: Buffer }>;
  /** Tells `listener` whenever an execution created, changed or deleted files (the web app refreshes its file tree). */
  onFilesChanged(listener: FilesListener): () => void;
  /**
   * Follows a kept run (`keep`) to its end, on this gateway only, in its turn: in the
   * owner's sandbox, which this gateway holds or takes (adopting the container after a
   * restart). Undefined when the sandbox's runner does not know the run (its container
   * was gone and a new one started); held_elsewhere while another replica holds it.
   */
  resume(owner: SandboxOwner, execId: string, opts: ResumeOptions): Promise<ExecuteResult | undefined>;
  /** The kept run's result is stored: the runner may forget it. */
  release(owner: SandboxOwner, execId: string): void;
}

export interface ResumeOptions {
  language: Language;
  /** The run's own time limit (it started earlier: the gateway's backstop). */
  timeoutSec: number;
  signal?: AbortSignal;
  onOutput?: ExecuteOptions['onOutput'];
}

export class Execution implements SandboxExecution {
  private readonly filesListeners = new Set<FilesListener>();

  /** Where runs of users whose sandbox another replica holds were sent lately (a hop skips the store while this holds). */
  private readonly holders = new Map<number, { target: HopTarget; until: number }>();

  /** Runs sent to the replicas holding their sandboxes, one channel per replica (hop-channel.ts). */
  private readonly channels: HopChannels | undefined;

  constructor(private readonly deps: Pick<PartDeps, 'config' | 'db' | 'driver' | 'volumes' | 'log' | 'replica' | 'hop'> & { held: Held; idle: Idle; lifecycle: Lifecycle; executions: ExecutionLog }) {
    const { hop, replica, config } = deps;
    this.channels = hop && replica ? new HopChannels({ signer: hop, selfId: replica.id, outputLimitBytes: config.outputLimitKb * 1024 }) : undefined;
  }

  /** Closes the channels to other replicas: runs still on them end as interrupted. */
  close(): void {
    this.channels?.close();
  }

  ceiling(owner: SandboxOwner): Promise<Permissions> {
    return ceilingOf(this.deps.db, this.deps.config, owner);
  }

  onFilesChanged(listener: FilesListener): () => void {
    this.filesListeners.add(listener);
    return () => this.filesListeners.delete(listener);
  }

  async openWorkspace(owner: SandboxOwner): Promise<Workspace> {
    const user = await admittedAccount(this.deps.db, owner);
    const { replica, hop } = this.deps;
    const home = replica && hop ? await replica.homeOf(owner.userId) : ({ where: 'here' } as const);
    if (home.where === 'away') throw new WorkspaceError('EUNAVAILABLE', AWAY_MESSAGE);
    if (home.where === 'lost') throw new WorkspaceError('EUNAVAILABLE', LOST_MESSAGE);
    if (home.where === 'elsewhere') {
      // The replica holding the sandbox, when it is on that store: its next run then knows the gateway wrote.
      const holder = await replica!.holderOf(owner.userId);
      const via = holder && holder.workspaceStore === home.store && holder.internalUrl && !holder.draining ? holder : home.via;
      return new Workspace(remoteWorkspace({ id: via.id, internalUrl: via.internalUrl! }, owner, { signer: hop!, selfId: replica!.id, log: this.deps.log }));
    }
    // The row just read names it, unless this is the first use (then one is claimed).
    const id = user?.workspaceId ?? (await this.firstWorkspace(owner));
    const helper = await this.deps.volumes.helper(id);
    await replica?.noteCopies([id]);
    return new Workspace(helper, () => this.touched(owner));
  }

  /** The user's first workspace, made on this store (by a file operation, before any run): their files are here from now on. */
  private async firstWorkspace(owner: SandboxOwner): Promise<string> {
    const id = (await this.deps.lifecycle.workspaceIdFor(owner, true))!;
    await this.deps.replica?.claimFiles([owner.userId]);
    return id;
  }

  async workspaceRequestHere(owner: SandboxOwner, header: Record<string, unknown>, data?: Buffer, startBy = Infinity): Promise<{ reply: HelperReply; data?: Buffer }> {
    const user = await admittedAccount(this.deps.db, owner);
    const home = this.deps.replica ? await this.deps.replica.homeOf(owner.userId) : ({ where: 'here' } as const);
    if (home.where === 'away') throw new WorkspaceError('EUNAVAILABLE', AWAY_MESSAGE);
    if (home.where === 'lost') throw new WorkspaceError('EUNAVAILABLE', LOST_MESSAGE);
    if (home.where !== 'here') throw new WorkspaceError('EUNAVAILABLE', 'your files moved to another sandbox host a moment ago: try again');
    const id = user?.workspaceId ?? (await this.firstWorkspace(owner));
    const helper = await this.deps.volumes.helper(id);
    await this.deps.replica?.noteCopies([id]);
    // Too late to start: the sender may give up before it would end. Nothing is done. The
    // helper holds it behind the workspace's other requests while it still can start in time.
    if (Date.now() > startBy) throw new WorkspaceError('EUNAVAILABLE', TOO_LATE_MESSAGE);
    if (CHANGING_OPS.has(String(header.op))) this.touched(owner);
    return helper.request(header, data, startBy);
  }

  execute(owner: SandboxOwner, opts: ExecuteOptions): Promise<ExecuteResult> {
    // A kept run must live where its sandbox does: never sent over the hop.
    return this.run(owner, opts, opts.keep === undefined);
  }

  async resume(owner: SandboxOwner, execId: string, opts: ResumeOptions): Promise<ExecuteResult | undefined> {
    const { config: cfg, held, idle, log } = this.deps;
    if (held.closed) throw new SandboxError('the gateway is shutting down', 'busy');
    // Adopted (or, when its container is gone, started afresh: the runner then knows no such run).
    const sb = held.users.get(owner.userId) ?? (await this.deps.lifecycle.sandboxFor(owner, ceilingFrom(await admittedAccount(this.deps.db, owner), cfg)));
    // Followed since the sandbox was adopted (a runner of an older image keeps no runs).
    await sb.keptKnown;
    if (sb.kept === false) return undefined;
    const followed = sb.kept?.get(execId);
    if (followed) {
      sb.kept!.delete(execId);
      const cancel = () => {
        try {
          sb.handle.send({ op: 'cancel', id: `c${execId}`, target: execId });
        } catch {
          /* the runner is gone: the run ended with it */
        }
      };
      if (opts.signal?.aborted) cancel();
      else opts.signal?.addEventListener('abort', cancel, { once: true });
      return followed.finally(() => opts.signal?.removeEventListener('abort', cancel));
    }
    return sb.queue.push(async () => {
      // This gateway let the sandbox go while the claim waited: the run may go on there.
      if (sb.letGo) return { ...LET_GO, language: opts.language };
      if (sb.handle.exited) return undefined;
      idle.wake(sb);
      sb.run = { language: opts.language, startedAt: Date.now() };
      try {
        const result = await claimOne(sb, execId, opts, opts.timeoutSec, { driver: this.deps.driver, log, outputLimitKb: cfg.outputLimitKb, cpus: cfg.sandboxCpus });
        if (result?.files.length) this.filesChanged(owner, result.files);
        return result;
      } finally {
        sb.run = undefined;
        void recordUse(this.deps, sb);
        idle.rest(sb);
      }
    });
  }

  release(owner: SandboxOwner, execId: string): void {
    const sb = this.deps.held.users.get(owner.userId);
    try {
      sb?.handle.send({ op: 'release', id: `r${execId}`, target: execId });
    } catch {
      /* the runner is gone, and its records with it */
    }
  }

  executeHere(owner: SandboxOwner, opts: ExecuteOptions): Promise<ExecuteResult> {
    return this.run(owner, opts, false);
  }

  private async run(owner: SandboxOwner, opts: ExecuteOptions, mayForward: boolean): Promise<ExecuteResult> {
    const { config: cfg, held, idle, log } = this.deps;
    if (held.closed) throw new SandboxError('the gateway is shutting down', 'busy');
    if (!LANGUAGES.includes(opts.language)) {
      throw new SandboxError(`unknown language "${String(opts.language)}"; use one of ${LANGUAGES.join(', ')}`, 'invalid_request');
    }
    if (typeof opts.code !== 'string' || Buffer.byteLength(opts.code) > MAX_CODE_BYTES) {
      throw new SandboxError(`code must be a string of at most ${MAX_CODE_BYTES} bytes`, 'invalid_request');
    }
    const timeoutSec = opts.timeoutSec ?? cfg.execTimeoutSec;
    if (!(timeoutSec > 0) || timeoutSec > cfg.execMaxTimeoutSec) {
      throw new SandboxError(`timeout must be between 1 and ${cfg.execMaxTimeoutSec} seconds (SANDGATE_EXEC_MAX_TIMEOUT_SEC)`, 'invalid_request');
    }
    // A run for a sandbox another replica was just seen holding goes there at once: the
    // holder checks the account and the permissions, as it does for its own runs.
    if (mayForward) {
      const sent = await this.forwarded(owner, opts, timeoutSec);
      if (sent) return sent;
    } else if (opts.keep !== undefined && this.knownHolder(owner)) {
      // A kept run lives where its sandbox does: refused here at once, before the store is
      // asked, and its caller sends the call on as any other (execute-code.ts: runOrTask).
      throw new SandboxError(`${owner.name}'s sandbox is held by another gateway of this installation`, 'held_elsewhere');
    }
    // The user's row, read once: whether their account may run code, and their ceiling.
    const ceiling = ceilingFrom(await admittedAccount(this.deps.db, owner), cfg);
    const effective = narrowPermissions(ceiling, opts.permissions, egressSettings(cfg).registries);
    const sb = await this.sandboxOrSent(owner, opts, ceiling, timeoutSec, mayForward);
    if ('exitCode' in sb) return sb;
    return sb.queue.push(async () => {
      // The sandbox died while this waited: the run joins its replacement's queue like any
      // new one (its limit, its order, its timer starting only when the run does). Its
      // account is checked again there: a sandbox killed because its user was disabled
      // does not come back for the runs that were waiting on it.
      if (sb.handle.exited) return this.run(owner, opts, mayForward);
      // The lease lapsed while the run waited (this process was paused, or cut off from the
      // store): another replica may have adopted the sandbox, so nothing is sent to it from
      // here. The run is asked for afresh (sent to the holder, or refused), never run twice:
      // it was not sent. Checked in the tick that sends it (runOne sends before it awaits).
      if (!this.deps.lifecycle.stillHolds(sb)) return this.run(owner, opts, mayForward);
      idle.wake(sb);
      const cpuBefore = cpuMsNow(sb.handle.id);
      const ts = Date.now();
      sb.run = { language: opts.language, startedAt: ts };
      try {
        const result = await span('sandbox.run', { 'sandgate.language': opts.language, 'sandgate.user.id': owner.userId, 'sandgate.container.id': sb.handle.id.slice(0, 12) }, async (s) => {
          const r = await runOne(sb, opts, effective, timeoutSec, { driver: this.deps.driver, log, outputLimitKb: cfg.outputLimitKb, cpus: cfg.sandboxCpus, egress: egressSettings(cfg) });
          s?.setAttributes({ 'sandgate.exit_code': r.exitCode ?? -1, 'sandgate.timed_out': !!r.timedOut, 'sandgate.duration_ms': r.durationMs });
          return r;
        }).catch((e: unknown) => {
          metrics.executions.inc({ language: opts.language, outcome: 'failed' });
          throw e;
        });
        sb.run = undefined;
        const cpuAfter = cpuMsNow(sb.handle.id);
        const outcome = result.timedOut ? 'timeout' : result.killed ? 'killed' : result.exitCode === 0 ? 'ok' : 'error';
        this.deps.executions.add({
          userId: owner.userId,
          ts,
          language: opts.language,
          durationMs: result.durationMs,
          cpuMs: cpuBefore !== undefined && cpuAfter !== undefined ? Math.max(0, cpuAfter - cpuBefore) : null,
          outcome,
        });
        metrics.executions.inc({ language: opts.language, outcome });
        metrics.executionSeconds.observe({ language: opts.language, outcome }, result.durationMs / 1000);
        if (result.files.length) this.filesChanged(owner, result.files);
        return result;
      } finally {
        sb.run = undefined;
        void recordUse(this.deps, sb);
        idle.rest(sb);
      }
    });
  }

  /**
   * The owner's sandbox here; or, when another replica holds it (or this one is
   * stopping), the run's result from the replica that ran it. While a sandbox changes
   * hands (a holder that just took it and cannot be reached yet, one that is stopping and
   * let it go a moment ago, one that died and whose lease has not run out) the lease is
   * asked for again, for at most a lease time and a second; then the refusal stands.
   */
  private async sandboxOrSent(owner: SandboxOwner, opts: ExecuteOptions, ceiling: Permissions, timeoutSec: number, mayForward: boolean): Promise<UserSandbox | ExecuteResult> {
    const { hop, replica } = this.deps;
    const giveUpAt = Date.now() + (replica ? replica.leaseMs + 1000 : 0);
    for (;;) {
      try {
        return await this.deps.lifecycle.sandboxFor(owner, ceiling);
      } catch (e) {
        if (!hop || !replica) throw e;
        // Another replica holds it: the run goes there, over the internal hop (and the next one too, at once).
        if (e instanceof HeldElsewhere && e.holder.internalUrl) this.holders.set(owner.userId, { target: { id: e.holder.id, internalUrl: e.holder.internalUrl }, until: Date.now() + HOLDER_KEPT_MS });
        if (!mayForward) throw e;
        if (e instanceof HeldElsewhere && e.holder.internalUrl) {
          const sent = await this.forwarded(owner, opts, timeoutSec);
          if (sent) return sent;
        }
        // This replica is stopping: the run goes to one that is not, which takes the sandbox.
        if (e instanceof Draining) {
          const sent = await this.handedOn(owner, opts, timeoutSec);
          if (sent) return sent;
        }
        if (!(e instanceof HeldElsewhere) || Date.now() >= giveUpAt) throw e;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  /**
   * The run's result from the replica known to hold the owner's sandbox, or undefined
   * when none is known (or the one known no longer holds it: the store is asked again).
   */
  private async forwarded(owner: SandboxOwner, opts: ExecuteOptions, timeoutSec: number): Promise<ExecuteResult | undefined> {
    const target = this.knownHolder(owner);
    if (!target) return undefined;
    try {
      return await this.sent(target, owner, opts, timeoutSec);
    } catch (e) {
      if (!(e instanceof HopRefused)) throw e;
      this.holders.delete(owner.userId);
      this.deps.log.debug({ user: owner.name, holder: target.id, err: e.message }, 'the replica last known to hold a sandbox did not take the run: asking the store');
      return undefined;
    }
  }

  /** The replica this one saw holding the owner's sandbox within HOLDER_KEPT_MS, when this one does not hold it now. */
  private knownHolder(owner: SandboxOwner): HopTarget | undefined {
    const known = this.holders.get(owner.userId);
    if (!known || !this.deps.hop || !this.deps.replica) return undefined;
    if (known.until < Date.now() || this.deps.held.users.has(owner.userId)) {
      this.holders.delete(owner.userId);
      return undefined;
    }
    return known.target;
  }

  /**
   * A run this stopping replica cannot take, sent to the replica holding the sandbox, or
   * to a live one that is not stopping (which takes it: adopting the container this one
   * handed over). Tried for a few seconds, while leases change hands; undefined when no
   * replica took it.
   */
  private async handedOn(owner: SandboxOwner, opts: ExecuteOptions, timeoutSec: number): Promise<ExecuteResult | undefined> {
    const { hop, replica, log } = this.deps;
    if (!hop || !replica) return undefined;
    const end = Date.now() + HAND_ON_MS;
    while (Date.now() < end) {
      const holder = await replica.holderOf(owner.userId);
      let target = holder && holder.id !== replica.id && holder.internalUrl ? { id: holder.id, internalUrl: holder.internalUrl } : undefined;
      if (!target && !holder) {
        const live = (await replica.live()).filter((r) => r.id !== replica.id && !r.draining && r.internalUrl);
        // One on this replica's workspace store, where the sandbox handed over and the user's files are; others only when none is.
        const mine = live.filter((r) => r.workspaceStore === replica.workspaceStore);
        const others = mine.length ? mine : live;
        // The same user goes to the same replica while the set does not change: their runs meet one sandbox.
        const pick = others[owner.userId % Math.max(1, others.length)];
        if (pick) target = { id: pick.id, internalUrl: pick.internalUrl! };
      }
      if (target) {
        try {
          return await this.sent(target, owner, opts, timeoutSec);
        } catch (e) {
          if (!(e instanceof HopRefused)) throw e;
          log.debug({ user: owner.name, to: target.id, err: e.message }, 'a stopping replica could not hand a run on yet');
        }
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    return undefined;
  }

  /** The run's result from `target`: over its channel, or over HTTP to a replica of an earlier release. */
  private async sent(target: HopTarget, owner: SandboxOwner, opts: ExecuteOptions, timeoutSec: number): Promise<ExecuteResult> {
    const { hop, replica, config } = this.deps;
    const r = await this.channels?.run(target, owner, opts, timeoutSec);
    return r ?? sendRun(target, owner, opts, { signer: hop!, selfId: replica!.id, timeoutSec, outputLimitBytes: config.outputLimitKb * 1024 });
  }

  private filesChanged(owner: SandboxOwner, files: ExecuteResult['files']): void {
    for (const l of this.filesListeners) {
      try {
        l(owner, files);
      } catch (e) {
        this.deps.log.warn({ err: e }, 'a files listener failed');
      }
    }
  }

  /** The gateway wrote to this user's workspace: the next execution must scan it afresh. */
  private touched(owner: SandboxOwner): void {
    const sb = this.deps.held.users.get(owner.userId);
    if (sb) sb.hostWrote = true;
  }
}
