/**
 * What the admin page shows of every sandbox, sampled once for all its viewers: each
 * user's sandbox and the warm pool's, with state, the run in progress, CPU (from the
 * cgroup's CPU time between two samples), memory now and at its peak, and workspace use
 * against its quota (read less often: it walks nothing on the loop backend, but a
 * directory backend has to count). Samples are taken only while someone watches.
 */
import type { Config } from '../../config.js';
import type { Logger } from '../../logger.js';
import { sampleCgroup } from '../../sandboxes/cgroup.js';
import type { SandboxInspection } from '../../sandboxes/inspection.js';
import type { Db } from '../../store/store.js';
import { getUser } from '../../accounts/accounts.js';

export interface SandboxRow {
  /** The owner, or null for a warm-pool sandbox. */
  user: string | null;
  userId: number | null;
  containerId: string;
  state: 'starting' | 'idle' | 'running code' | 'stopping' | 'waiting in the pool';
  /** Idle with its cgroup frozen: it costs no CPU until its next run thaws it. */
  frozen: boolean;
  startedAt: number;
  lastActivity: number | null;
  run?: { language: string; startedAt: number };
  queued: number;
  cpuPercent: number | null;
  memoryBytes: number | null;
  memoryPeakBytes: number | null;
  memoryLimitBytes: number;
  pids: number | null;
  workspace?: { usedBytes: number; limitBytes: number | null };
  /** The gateway replica holding it, when several share the store. */
  replica?: string;
}

export interface SandboxSnapshot {
  at: number;
  rows: SandboxRow[];
  runtime: string;
  /** Replicas that did not say what they hold: their sandboxes are missing from `rows`. */
  unreachable: string[];
}

/** How often viewers get a fresh sample. */
export const SAMPLE_INTERVAL_MS = 2_000;
/** How old a workspace's usage may be before it is read again. */
const WORKSPACE_USAGE_MS = 30_000;

export class SandboxMonitor {
  private readonly prevCpu = new Map<string, { ns: number; at: number }>();
  private readonly peaks = new Map<string, number>();
  private readonly workspaceUsage = new Map<string, { at: number; usage?: { usedBytes: number; limitBytes: number | null } }>();
  private timer?: NodeJS.Timeout;
  private sampling?: Promise<SandboxSnapshot>;
  latest?: SandboxSnapshot;

  constructor(
    private readonly deps: { config: Config; db: Db; sandboxes: SandboxInspection; logger: Logger; runtime: () => string },
  ) {}

  /** A fresh sample (one at a time: callers at the same moment share it). */
  sample(): Promise<SandboxSnapshot> {
    this.sampling ??= this.take().finally(() => (this.sampling = undefined));
    return this.sampling;
  }

  /** Samples every SAMPLE_INTERVAL_MS while `watching()` says someone is, handing each to `publish`. */
  start(watching: () => boolean, publish: (s: SandboxSnapshot) => void): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      if (!watching()) return;
      this.sample().then(publish, (e: unknown) => this.deps.logger.warn({ err: e }, 'sandbox sampling failed'));
    }, SAMPLE_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  private async take(): Promise<SandboxSnapshot> {
    const { sandboxes, config } = this.deps;
    const now = Date.now();
    const limit = config.sandboxMemoryMb * 1024 * 1024;
    // Every replica's, when several share the store (each other one asked over the internal hop).
    const everywhere = await sandboxes.listEverywhere();
    const users = everywhere.sandboxes;
    const starting = sandboxes.startingUsers().filter((id) => !users.some((u) => u.userId === id));
    const startingNames = await Promise.all(starting.map(async (id) => (await getUser(this.deps.db, id))?.name ?? `#${id}`));
    const rows: (SandboxRow & { workspaceId: string })[] = [
      ...users.map((s) => ({
        user: s.user,
        userId: s.userId,
        containerId: s.containerId,
        state: (s.stopping ? 'stopping' : s.running > 0 ? 'running code' : 'idle') as SandboxRow['state'],
        frozen: s.frozen,
        startedAt: s.startedAt,
        lastActivity: s.lastActivity,
        ...(s.run ? { run: s.run } : {}),
        queued: s.queued,
        workspaceId: s.workspaceId,
        ...(s.replica && { replica: s.replica }),
      })),
      ...starting.map((id, i) => ({
          user: startingNames[i]!,
          userId: id,
          containerId: '',
          state: 'starting' as const,
          frozen: false,
          startedAt: now,
          lastActivity: null,
          queued: 0,
          workspaceId: '',
        })),
      ...everywhere.pooled.map((p) => ({
        user: null,
        userId: null,
        containerId: p.containerId,
        state: 'waiting in the pool' as const,
        frozen: p.frozen,
        startedAt: p.startedAt,
        lastActivity: null,
        queued: 0,
        workspaceId: p.workspaceId,
        ...(p.replica && { replica: p.replica }),
      })),
    ].map((r): SandboxRow & { workspaceId: string } => ({ ...r, cpuPercent: null, memoryBytes: null, memoryPeakBytes: null, memoryLimitBytes: limit, pids: null }));
    const live = new Set<string>();
    await Promise.all(
      rows.map(async (r) => {
        live.add(r.containerId);
        const c = sampleCgroup(r.containerId);
        if (c) {
          const prev = this.prevCpu.get(r.containerId);
          const at = performance.now();
          if (prev && at > prev.at) r.cpuPercent = ((c.cpuNs - prev.ns) / 1e6 / (at - prev.at)) * 100;
          this.prevCpu.set(r.containerId, { ns: c.cpuNs, at });
          r.memoryBytes = c.memoryBytes;
          const peak = Math.max(this.peaks.get(r.containerId) ?? 0, c.memoryBytes, c.memoryPeakBytes ?? 0);
          this.peaks.set(r.containerId, peak);
          r.memoryPeakBytes = peak;
          r.pids = c.pids;
        }
        const ws = r.workspaceId;
        if (!ws) return;
        const known = this.workspaceUsage.get(ws);
        if (!known || now - known.at > WORKSPACE_USAGE_MS) {
          const usage = await sandboxes.workspaceUsage(ws).catch(() => undefined);
          this.workspaceUsage.set(ws, { at: now, usage });
        }
        const usage = this.workspaceUsage.get(ws)?.usage;
        if (usage) r.workspace = usage;
      }),
    );
    // Containers gone since the last sample are forgotten.
    for (const id of [...this.prevCpu.keys()]) {
      if (live.has(id)) continue;
      this.prevCpu.delete(id);
      this.peaks.delete(id);
    }
    this.latest = { at: now, rows: rows.map(({ workspaceId: _w, ...r }) => r).sort((a, b) => (a.user ?? '~').localeCompare(b.user ?? '~')), runtime: this.deps.runtime(), unreachable: everywhere.unreachable };
    return this.latest;
  }
}
