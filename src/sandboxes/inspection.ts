/**
 * What the admin page and its monitor read about sandboxes: each user's sandbox with its
 * run, queue and (on request) usage, the warm pool, the starts under way, and what the
 * gateway does not track (containers it did not start or lost, runsc processes whose
 * container is gone), with the clean-up of the latter. Reads only what the other parts
 * hold; changes nothing but what `removeOrphans` removes.
 */
import type { SandboxCounts } from '../telemetry/metrics.js';
import type { Held, PartDeps } from './held.js';
import type { Live } from './live.js';
import { removeRuntimeLeftovers, runtimeLeftovers, type RuntimeLeftover } from './runtime-leftovers.js';
import type { ExecutionLog } from './usage.js';
import { LABEL_REPLICA, LABEL_ROLE } from './adoption.js';
import type { SandboxInfo } from './types.js';
import { askReplica, HOP_LIST_PATH } from './remote.js';

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
  /** The gateway replica holding it (on a Postgres store). */
  replica?: string;
}

/** A warm-pool sandbox waiting for a user. */
export interface PooledSummary {
  containerId: string;
  frozen: boolean;
  startedAt: number;
  workspaceId: string;
  /** The gateway replica whose pool it is in (on a Postgres store). */
  replica?: string;
}

/** What every live replica holds: the sandboxes of each that answered, and the ids of those that did not. */
export interface EverywhereSummary {
  sandboxes: SandboxSummary[];
  pooled: PooledSummary[];
  unreachable: string[];
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
  /** `list` and `pooled` of every live replica on the store, this one's included (each other asked over the internal hop). */
  listEverywhere(opts?: { stats?: boolean }): Promise<EverywhereSummary>;
  /** Users whose sandbox is starting now (no container to show yet). */
  startingUsers(): number[];
  /** This gateway's sandboxes by state, and the runs waiting: read at once (a metrics scrape). */
  counts(): SandboxCounts;
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
  constructor(private readonly deps: Pick<PartDeps, 'driver' | 'volumes' | 'log' | 'replica' | 'hop'> & { held: Held; pooledLives: () => readonly Live[]; executions: ExecutionLog }) {}

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
        ...(this.deps.replica && { replica: this.deps.replica.id }),
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
    const replica = this.deps.replica?.id;
    return this.deps.pooledLives().map((l) => ({ containerId: l.handle.id, frozen: !!l.frozen, startedAt: l.startedAt, workspaceId: l.workspaceId, ...(replica && { replica }) }));
  }

  async listEverywhere(opts: { stats?: boolean } = {}): Promise<EverywhereSummary> {
    const { replica, hop, log } = this.deps;
    const out: EverywhereSummary = { sandboxes: await this.list(opts), pooled: this.pooled(), unreachable: [] };
    if (!replica || !hop) return out;
    const others = (await replica.live()).filter((r) => r.id !== replica.id);
    await Promise.all(
      others.map(async (r) => {
        try {
          if (!r.internalUrl) throw new Error('it takes no requests from the others');
          const answer = await askReplica({ id: r.id, internalUrl: r.internalUrl }, HOP_LIST_PATH, { stats: !!opts.stats }, { signer: hop, selfId: replica.id, timeoutMs: 3000 });
          const { sandboxes, pooled } = checkedListing(answer, r.id);
          out.sandboxes.push(...sandboxes);
          out.pooled.push(...pooled);
        } catch (e) {
          log.warn({ replica: r.id, err: (e as Error).message }, 'a replica did not say what it holds');
          out.unreachable.push(r.id);
        }
      }),
    );
    out.sandboxes.sort((a, b) => a.user.localeCompare(b.user));
    return out;
  }

  counts(): SandboxCounts {
    const byState = { starting: this.deps.held.starting.size, idle: 0, frozen: 0, running: 0, pooled: 0 };
    let queued = 0;
    for (const sb of this.deps.held.users.values()) {
      byState[sb.running > 0 ? 'running' : sb.frozen ? 'frozen' : 'idle']++;
      queued += sb.queue.waiting;
    }
    byState.pooled = this.deps.pooledLives().length;
    return { byState, queued };
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

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
const str = (v: unknown, max = 200) => (typeof v === 'string' ? v.slice(0, max) : '');

/**
 * Another replica's listing, as this gateway takes it: every field typed and bounded,
 * each entry marked with the replica that answered (whatever it said of itself), at most
 * 10,000 of each kind.
 */
export function checkedListing(v: unknown, replica: string): { sandboxes: SandboxSummary[]; pooled: PooledSummary[] } {
  const o = isObject(v) ? v : {};
  const sandboxes = (Array.isArray(o.sandboxes) ? o.sandboxes : []).slice(0, 10_000).filter(isObject).map((s): SandboxSummary => {
    const stats = isObject(s.stats) ? { cpuPercent: num(s.stats.cpuPercent), memoryBytes: num(s.stats.memoryBytes), memoryLimitBytes: num(s.stats.memoryLimitBytes), pids: num(s.stats.pids) } : undefined;
    const workspace = isObject(s.workspace) ? { usedBytes: num(s.workspace.usedBytes), limitBytes: s.workspace.limitBytes === null ? null : num(s.workspace.limitBytes) } : undefined;
    return {
      user: str(s.user),
      userId: num(s.userId),
      containerId: str(s.containerId, 64),
      startedAt: num(s.startedAt),
      lastActivity: num(s.lastActivity),
      running: num(s.running),
      queued: num(s.queued),
      stopping: s.stopping === true,
      frozen: s.frozen === true,
      workspaceId: str(s.workspaceId, 64),
      ...(isObject(s.run) && { run: { language: str(s.run.language, 20), startedAt: num(s.run.startedAt) } }),
      ...(stats && { stats }),
      ...(workspace && { workspace }),
      replica,
    };
  });
  const pooled = (Array.isArray(o.pooled) ? o.pooled : []).slice(0, 10_000).filter(isObject).map((p): PooledSummary => ({ containerId: str(p.containerId, 64), frozen: p.frozen === true, startedAt: num(p.startedAt), workspaceId: str(p.workspaceId, 64), replica }));
  return { sandboxes, pooled };
}
