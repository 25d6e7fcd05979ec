/**
 * Idle sandboxes freeze, and frozen ones are kept warm. A frozen cgroup costs no CPU,
 * where an idle gVisor sandbox on systrap costs 23–51 ms a second; so a sandbox freezes
 * SANDGATE_FREEZE_AFTER_MS after its last run, is thawed for a moment every
 * SANDGATE_FREEZE_REWARM_SEC to keep its run path in memory, and is thawed before
 * anything talks to it. While dockerd is away nothing freezes (dockerd could neither stop
 * nor restart a frozen container). The warm pool's sandboxes freeze the same way.
 */
import * as metrics from '../telemetry/metrics.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { freeze, thaw, thawLeftFrozen } from './freezer.js';
import type { Held } from './held.js';
import type { Live, UserSandbox } from './live.js';
import type { SandboxOwner } from './types.js';
import { preloadIn } from './warm-pool.js';

/** What the gateway tells the freezer. */
export interface SandboxIdle {
  /**
   * Someone is about to use their sandbox (a chat turn began: the model thinks for a
   * second or more before it runs code). A frozen one is thawed and warmed up now, so
   * the pages a long freeze let go cold come back during the model's time, not the
   * run's. It freezes again after the usual delay if no run comes.
   */
  prepare(owner: SandboxOwner): void;
  /**
   * Thaws what an earlier run of this gateway froze and could not thaw (it was killed):
   * dockerd cannot start while one of its containers is frozen, so this comes before
   * anything asks dockerd. Returns how many were frozen.
   */
  thawLeftFrozen(): number;
}

export class Idle implements SandboxIdle {
  /** dockerd is not answering: nothing freezes until it does. */
  private daemonAway = false;

  constructor(
    private readonly deps: {
      config: Config;
      log: Logger;
      held: Held;
      gatewayId: string;
      /**
       * Whether this gateway may still act on `live` (it holds the lease on its user's
       * sandbox, by its own clock): a replica paused past its lease that wakes with a freeze
       * due must not freeze a container another replica adopted meanwhile. Checked in the
       * tick of the freeze. Always, without replicas.
       */
      mayAct?: (live: Live) => boolean;
    },
  ) {}

  thawLeftFrozen(): number {
    const n = thawLeftFrozen(this.deps.gatewayId);
    if (n) this.deps.log.warn({ sandboxes: n }, 'thawed sandboxes an earlier run left frozen');
    return n;
  }

  prepare(owner: SandboxOwner): void {
    const sb = this.deps.held.users.get(owner.userId);
    if (!sb?.frozen || sb.handle.exited) return;
    this.wake(sb);
    void this.warmUp(sb);
    this.rest(sb);
  }

  /**
   * `live` is idle from now: it freezes after SANDGATE_FREEZE_AFTER_MS unless something
   * comes first. Never while a run is in flight or queued; the check and the freeze
   * happen in one tick, so a run that arrives later finds it frozen and thaws it.
   */
  rest(live: Live): void {
    const after = this.deps.config.freezeAfterMs;
    if (!after || this.deps.held.closed) return;
    if (live.freezeTimer) clearTimeout(live.freezeTimer);
    live.freezeTimer = setTimeout(() => {
      live.freezeTimer = undefined;
      this.freezeNow(live);
    }, after);
    live.freezeTimer.unref();
  }

  /** Thaws a frozen sandbox before anything talks to it, and puts off its next freeze. */
  wake(live: Live): void {
    this.stopTimers(live);
    if (!live.frozen) return;
    live.frozen = false;
    thaw(live.handle.id);
    metrics.thaws.inc();
  }

  /** No freeze and no warm-up comes for `live` any more, unless something rests it again. */
  stopTimers(live: Live): void {
    if (live.freezeTimer) clearTimeout(live.freezeTimer);
    if (live.rewarmTimer) clearTimeout(live.rewarmTimer);
    live.freezeTimer = live.rewarmTimer = live.rewarming = undefined;
  }

  /**
   * dockerd stopped answering (it is shutting down, or restarting): every frozen sandbox
   * is thawed now, or dockerd's shutdown would wait 15 s for each and its next start
   * forever. Nothing freezes until it answers again.
   */
  daemonDown(lives: Live[]): void {
    if (this.deps.held.closed || this.daemonAway) return;
    this.daemonAway = true;
    const frozen = lives.filter((l) => l.frozen).length;
    this.deps.log.warn({ thawed: frozen }, 'dockerd is not answering: frozen sandboxes are thawed, none freezes until it is back');
    for (const live of lives) this.wake(live);
    // And whatever the records name that memory does not (a freeze whose outcome was lost).
    thawLeftFrozen(this.deps.gatewayId);
  }

  /** dockerd answers again: idle sandboxes freeze again. False if it was not away (nothing to do). */
  daemonUp(lives: Live[]): boolean {
    if (this.deps.held.closed || !this.daemonAway) return false;
    this.daemonAway = false;
    this.deps.log.info('dockerd answers again');
    for (const live of lives) if (!live.handle.exited) this.rest(live);
    return true;
  }

  /** Freezes `live` unless it is busy, gone or frozen already; once frozen, its warm-ups are due. */
  private freezeNow(live: Live): void {
    const sb = live as Partial<UserSandbox>;
    if (this.deps.held.closed || this.daemonAway || live.frozen || live.handle.exited || (sb.running ?? 0) > 0 || (sb.queue?.waiting ?? 0) > 0) return;
    if (!this.ours(live)) return;
    live.frozen = true;
    void freeze(live.handle.id, { owner: this.deps.gatewayId }).then((ok) => {
      // Not frozen after all (no freezer here, or it did not settle): it stays awake.
      if (!ok) live.frozen = false;
      else {
        metrics.freezes.inc();
        if (live.frozen) this.keepWarm(live);
      }
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
    if (!every || this.deps.held.closed) return;
    if (live.rewarmTimer) clearTimeout(live.rewarmTimer);
    live.rewarmTimer = setTimeout(() => void this.rewarm(live), every);
    live.rewarmTimer.unref();
  }

  private async rewarm(live: Live): Promise<void> {
    live.rewarmTimer = undefined;
    if (this.deps.held.closed || !live.frozen || live.handle.exited) return;
    // No longer this gateway's: whoever holds it now thaws it when it adopts it.
    if (!this.ours(live)) return;
    const claim = {};
    live.rewarming = claim;
    live.frozen = false;
    thaw(live.handle.id);
    metrics.thaws.inc();
    await this.warmUp(live);
    // Woken meanwhile (a run, a stop): whoever woke it decides what comes next.
    if (live.rewarming !== claim) return;
    live.rewarming = undefined;
    this.freezeNow(live);
  }

  /** Whether this gateway may still act on `live`: not let go, and (with replicas) its lease held now. */
  private ours(live: Live): boolean {
    return !(live as Partial<UserSandbox>).letGo && this.deps.mayAct?.(live) !== false;
  }

  /** One empty round trip through the runner's worker and Python kernel; done when answered, gone or 5 s late. */
  private async warmUp(live: Live): Promise<void> {
    await preloadIn(live.handle, [], { timeoutMs: 5000, idPrefix: 'warm' });
  }
}
