/**
 * What the admin page and its monitor read about sandboxes: each user's sandbox with its
 * run, queue and (on request) usage, the warm pool, the starts under way, and what the
 * gateway does not track (containers it did not start or lost, runsc processes whose
 * container is gone), with the clean-up of the latter. Reads only what the other parts
 * hold; changes nothing but what `removeOrphans` removes.
 */
import type { Held, PartDeps } from './held.js';
import type { Live } from './live.js';
import { removeRuntimeLeftovers, runtimeLeftovers, type RuntimeLeftover } from './runtime-leftovers.js';
import type { ExecutionLog } from './usage.js';
import { LABEL_REPLICA, LABEL_ROLE } from './adoption.js';
import type { SandboxInfo } from './types.js';

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
export interface PooledSummary {
  containerId: string;
  frozen: boolean;
  startedAt: number;
  workspaceId: string;
}

/** A container of this gateway that it does not track. */
export interface Orphan {
  id: string;
  owner?: string;
  createdAt: number;
  running: boolean;
}

export interface SandboxInspection {
  /** Every user sandbox with usage, for the admin page. */
  list(opts?: { stats?: boolean }): Promise<SandboxSummary[]>;
  /** The warm pool's sandboxes, waiting for users. */
  pooled(): PooledSummary[];
  /** Users whose sandbox is starting now (no container to show yet). */
  startingUsers(): number[];
  /** Bytes a workspace uses and its quota. */
  workspaceUsage(workspaceId: string): Promise<{ usedBytes: number; limitBytes: number | null }>;
  /**
   * Containers of this gateway (by its label) that it does not track: not a user's, not
   * in the pool, not being started, and older than a minute (one made a moment ago may
   * be on its way in). Adoption at start removes such leftovers; these appeared since.
   */
  orphans(now?: number): Promise<Orphan[]>;
  /** Removes the orphans `orphans()` lists (their workspaces stay), and runsc leftovers; how many. */
  removeOrphans(now?: number): Promise<number>;
  /** runsc processes whose container is gone (none when the driver cannot say which containers exist). */
  runtimeLeftovers(): Promise<RuntimeLeftover[]>;
  /** Writes the executions gathered so far to the store (the usage view calls it before reading). */
  flushExecutions(): Promise<void>;
}

export class Inspection implements SandboxInspection {
  constructor(private readonly deps: Pick<PartDeps, 'driver' | 'volumes' | 'log' | 'replica'> & { held: Held; pooledLives: () => readonly Live[]; executions: ExecutionLog }) {}

  async list(opts: { stats?: boolean } = {}): Promise<SandboxSummary[]> {
    const { held, volumes } = this.deps;
    const out: SandboxSummary[] = [];
    for (const sb of held.users.values()) {
      const s: SandboxSummary = {
        user: sb.owner.name,
        userId: sb.owner.userId,
        containerId: sb.handle.id,
        startedAt: sb.startedAt,
        lastActivity: sb.lastActivity,
        running: sb.running,
        queued: sb.queue.waiting,
        stopping: held.stopping.has(sb.owner.userId),
        frozen: !!sb.frozen,
        workspaceId: sb.workspaceId,
        ...(sb.run ? { run: { ...sb.run } } : {}),
      };
      if (opts.stats) {
        s.stats = await sb.handle.stats().catch(() => undefined);
        s.workspace = await volumes.usage(sb.workspaceId).catch(() => undefined);
      }
      out.push(s);
    }
    return out.sort((a, b) => a.user.localeCompare(b.user));
  }

  pooled(): PooledSummary[] {
    return this.deps.pooledLives().map((l) => ({ containerId: l.handle.id, frozen: !!l.frozen, startedAt: l.startedAt, workspaceId: l.workspaceId }));
  }

  startingUsers(): number[] {
    return [...this.deps.held.starting.keys()];
  }

  workspaceUsage(workspaceId: string): Promise<{ usedBytes: number; limitBytes: number | null }> {
    return this.deps.volumes.usage(workspaceId);
  }

  async orphans(now = Date.now()): Promise<Orphan[]> {
    const { held, driver, replica } = this.deps;
    const tracked = new Set([...[...held.users.values()].map((s) => s.handle.id), ...this.deps.pooledLives().map((l) => l.handle.id)]);
    const candidates = (await driver.list()).filter((c) => !tracked.has(c.id) && now - c.createdAt > ORPHAN_MIN_AGE_MS && held.starting.size === 0);
    if (!replica || !candidates.length) return candidates.map(toOrphan);
    // Other replicas on this host hold their users' sandboxes and their warm pools: not orphans.
    const others = new Set((await replica.live()).map((r) => r.id).filter((id) => id !== replica.id));
    const orphans: Orphan[] = [];
    for (const c of candidates) {
      if (c.labels[LABEL_ROLE] === 'pool' && others.has(c.labels[LABEL_REPLICA] ?? '')) continue;
      const holder = c.ownerId === undefined ? undefined : await replica.holderOf(c.ownerId);
      if (holder && holder.id !== replica.id) continue;
      orphans.push(toOrphan(c));
    }
    return orphans;
  }

  async removeOrphans(now = Date.now()): Promise<number> {
    const { driver, log } = this.deps;
    const found = await this.orphans(now);
    for (const o of found) {
      log.warn({ container: o.id.slice(0, 12), owner: o.owner }, 'removing a container this gateway does not track');
      await driver.stop(o.id);
    }
    const known = driver.knownContainerIds?.bind(driver);
    const killed = known ? await removeRuntimeLeftovers(known) : 0;
    if (killed) log.warn({ processes: killed }, 'killed runsc processes whose container was gone');
    return found.length + killed;
  }

  async runtimeLeftovers(): Promise<RuntimeLeftover[]> {
    const known = this.deps.driver.knownContainerIds?.bind(this.deps.driver);
    return known ? runtimeLeftovers(known) : [];
  }

  flushExecutions(): Promise<void> {
    return this.deps.executions.flush();
  }
}

const toOrphan = (c: SandboxInfo): Orphan => ({ id: c.id, owner: c.owner, createdAt: c.createdAt, running: c.running });
