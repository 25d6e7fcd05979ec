/**
 * SandboxManager: one sandbox per user, and everything about its life.
 *
 * - A user's sandbox is created on first use and reused; executions in one sandbox
 *   run one at a time (the Python state is shared, like a notebook kernel).
 * - A warm pool of pre-started sandboxes (runner up, data stack imported, an empty
 *   workspace) is handed to new users, so their first run skips the cold start.
 * - Idle sandboxes are stopped after `idleTimeoutSec`, never while an execution runs;
 *   sandboxes older than `maxLifetimeSec` are replaced at their next idle moment.
 * - After a gateway restart, containers are found by label and adopted (when the store
 *   maps them to a user and the runner answers) or removed: no orphans.
 * - A sandbox that dies (OOM, a fork bomb, `stop`) is replaced on the next execution;
 *   the workspace lives on the host and is never lost with it.
 */
import crypto from 'node:crypto';
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { statement, type Db } from '../store/store.js';
import { getUser } from '../store/users.js';
import { SandboxError } from './errors.js';
import {
  allows,
  denoFlags,
  narrowPermissions,
  networkUnavailable,
  parsePermissions,
  PermissionError,
  type Permissions,
} from './permissions.js';
import { LANGUAGES, type ExecDone, type ExecRequest, type RunnerEvent } from './protocol.js';
import type { BridgeHandler, ExecuteOptions, ExecuteResult, SandboxDriver, SandboxHandle, SandboxOwner } from './types.js';
import type { WorkspaceVolumes } from './volumes.js';
import { Workspace } from './workspace.js';

export const LABEL_WORKSPACE = 'org.sandgate.workspace';
export const LABEL_ROLE = 'org.sandgate.role';

/** Largest program text accepted in one execution. */
export const MAX_CODE_BYTES = 1024 * 1024;
/** Executions that may wait behind a running one in the same sandbox. */
export const MAX_QUEUED = 16;
/** How long past its timeout the gateway waits for the runner before it kills the container. */
const TIMEOUT_GRACE_MS = 10_000;
/** Calls from code to the gateway one sandbox may have waiting at once (the runner's own limit too). */
const MAX_CALLS_IN_FLIGHT = 8;
/** Output kept per stream beyond the limit the runner enforces: room for its truncation notice. */
const OUTPUT_SLACK = 4096;
/**
 * Output bytes of one run past which the sandbox is stopped as broken: the runner keeps
 * each stream to the limit itself, so only a runner that no longer keeps the protocol
 * gets here, and the gateway stops reading it instead of spending its time on it.
 */
const outputViolationBytes = (limit: number) => 4 * limit + 1024 * 1024;
const BRIDGE_SOCKET = '/tmp/.sandgate/bridge.sock';

/** The environment every process in a sandbox starts with; nothing from the host. */
const BASE_ENV: Record<string, string> = {
  PATH: '/usr/local/bin:/usr/bin:/bin',
  HOME: '/workspace',
  LANG: 'C.UTF-8',
  TMPDIR: '/tmp',
  MPLBACKEND: 'Agg',
  MPLCONFIGDIR: '/tmp/.matplotlib',
  DENO_DIR: '/tmp/.deno',
  DENO_NO_UPDATE_CHECK: '1',
  NO_COLOR: '1',
  PYTHONUNBUFFERED: '1',
  PYTHONDONTWRITEBYTECODE: '1',
  PYTHONPATH: '/tools/python',
};

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

interface Live {
  handle: SandboxHandle;
  workspaceId: string;
  toolsDir: string;
  startedAt: number;
  lastActivity: number;
  running: number;
  queued: number;
  tail: Promise<unknown>;
  /** Mounted read-write? (from the ceiling when the container was made) */
  workspaceWritable: boolean;
  ceilingKey: string;
  /** The gateway wrote to the workspace since the last execution began. */
  hostWrote: boolean;
  /** The execution the runner is running now: the only one whose calls are taken. */
  inFlight?: string;
}

interface UserSandbox extends Live {
  owner: SandboxOwner;
  /** Executions not yet counted in the store, and when the store was last told. */
  unrecorded?: number;
  recordedAt?: number;
}

/**
 * How often a sandbox's use (execution count, last use) is written to the store; also
 * written when it stops. A write per execution cost about a tenth of a warm run.
 */
const USE_RECORD_INTERVAL_MS = 10_000;

export interface SandboxSummary {
  user: string;
  userId: number;
  containerId: string;
  startedAt: number;
  lastActivity: number;
  running: number;
  queued: number;
  stats?: { cpuPercent: number; memoryBytes: number; memoryLimitBytes: number; pids: number };
  workspace?: { usedBytes: number; limitBytes: number | null };
}

export class SandboxManager {
  private readonly log: Logger;
  private readonly users = new Map<number, UserSandbox>();
  private readonly starting = new Map<number, Promise<UserSandbox>>();
  private readonly pool: Live[] = [];
  private poolStarting = 0;
  private reaper?: NodeJS.Timeout;
  private bridge?: BridgeHandler;
  private closed = false;

  constructor(private readonly deps: SandboxManagerDeps) {
    this.log = deps.logger.child({ module: 'sandboxes' });
  }

  /** Adopts or removes containers left by an earlier run, then fills the pool and starts the reaper. */
  async init(opts: { reapIntervalMs?: number } = {}): Promise<void> {
    await this.adopt();
    const interval = opts.reapIntervalMs ?? Math.min(30_000, (this.deps.config.idleTimeoutSec * 1000) / 4);
    this.reaper = setInterval(() => void this.reap().catch((e) => this.log.error({ err: e }, 'reaper failed')), interval);
    this.reaper.unref();
    this.fillPool();
  }

  setBridgeHandler(handler: BridgeHandler): void {
    this.bridge = handler;
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
    const user = getUser(this.deps.db, owner.userId);
    return parsePermissions(user?.permissions ?? this.deps.config.defaultPermissions);
  }

  /**
   * Runs code in the owner's sandbox. Rejects (throws) only for requests that cannot
   * run at all: a bad language, a permission beyond the ceiling, too much code. What
   * happens to the code itself (errors, timeouts, kills) is in the result.
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
    if (sb.queued >= MAX_QUEUED) {
      throw new SandboxError(`${sb.queued} executions are already waiting in this sandbox; wait for them to finish`, 'busy');
    }
    sb.queued++;
    const run = sb.tail.then(async () => {
      sb.queued--;
      // The sandbox died while this waited: the run joins its replacement's queue like any
      // new one (its limit, its order, its timer starting only when the run does).
      if (sb.handle.exited) return this.execute(owner, opts);
      return this.runOne(sb, owner, opts, effective, timeoutSec);
    });
    sb.tail = run.catch(() => {});
    return run;
  }

  private async runOne(sb: UserSandbox, owner: SandboxOwner, opts: ExecuteOptions, perms: Permissions, timeoutSec: number): Promise<ExecuteResult> {
    const id = `x${crypto.randomBytes(6).toString('hex')}`;
    const request: ExecRequest = {
      op: 'exec',
      id,
      language: opts.language,
      code: opts.code,
      timeoutMs: timeoutSec * 1000,
      outputLimit: this.deps.config.outputLimitKb * 1024,
      env: { ...BASE_ENV },
      denoFlags: [
        '--no-prompt',
        ...denoFlags(perms, {
          read: [BRIDGE_SOCKET],
          write: [BRIDGE_SOCKET],
          net: [`unix:${BRIDGE_SOCKET}`],
          env: ['SANDGATE_BRIDGE', 'SANDGATE_EXEC_ID'],
        }),
      ],
      fs: fsNarrowing(perms, sb.workspaceWritable),
      reuseSnapshot: !sb.hostWrote,
    };
    sb.hostWrote = false;
    sb.running++;
    sb.inFlight = id;
    sb.lastActivity = Date.now();
    const output = { stdout: [] as string[], stderr: [] as string[] };
    // What the gateway keeps of each stream and what it dropped, whatever the runner sends.
    const limit = this.deps.config.outputLimitKb * 1024;
    const kept = { stdout: 0, stderr: 0 };
    const dropped = { stdout: 0, stderr: 0 };
    let received = 0;
    const started = performance.now();
    try {
      const done = await new Promise<ExecDone>((resolve) => {
        let settled = false;
        const finish = (d: ExecDone) => {
          if (settled) return;
          settled = true;
          clearTimeout(backstop);
          off();
          offExit();
          opts.signal?.removeEventListener('abort', onAbort);
          resolve(d);
        };
        const off = sb.handle.onEvent((e: RunnerEvent) => {
          // Only events of the run in flight count; a `done` for anything else is nothing.
          if (!('id' in e) || e.id !== id) return;
          if (e.type === 'stdout' || e.type === 'stderr') {
            const bytes = Buffer.byteLength(e.data);
            received += bytes;
            if (received > outputViolationBytes(limit)) {
              this.log.error({ user: owner.name, bytes: received }, 'sandbox sent far more output than its limit; stopping it');
              void this.deps.driver.stop(sb.handle.id).catch(() => {});
              return finish(
                died(
                  `The sandbox sent far more output than the ${this.deps.config.outputLimitKb} KiB limit allows, so it was stopped. ` +
                    'Files in /workspace are kept; Python variables are lost.',
                ),
              );
            }
            if (kept[e.type] + bytes > limit + OUTPUT_SLACK) {
              dropped[e.type] += bytes;
              return;
            }
            kept[e.type] += bytes;
            output[e.type].push(e.data);
            opts.onOutput?.(e.type, e.data);
          } else if (e.type === 'done') finish(e);
        });
        const died = (notice: string): ExecDone => ({
          type: 'done',
          id,
          exitCode: null,
          durationMs: performance.now() - started,
          timedOut: false,
          killed: true,
          restarted: true,
          truncated: { stdout: 0, stderr: 0 },
          files: [],
          notice,
        });
        const offExit = sb.handle.onExit((reason) => {
          this.log.warn({ user: owner.name, reason }, 'sandbox died during an execution');
          finish(
            died(
              'The sandbox stopped during this execution (it ran out of memory or processes, or was stopped). ' +
                'It is replaced on the next run; files in /workspace are kept, Python variables are lost.',
            ),
          );
        });
        // The runner enforces the timeout; this only covers a runner that stopped answering.
        const backstop = setTimeout(() => {
          this.log.error({ user: owner.name }, 'runner missed a timeout; killing the sandbox');
          void this.deps.driver.stop(sb.handle.id);
          finish({ ...died(`The execution exceeded its ${timeoutSec} s limit and the sandbox had to be killed. Files in /workspace are kept; Python variables are lost.`), timedOut: true });
        }, timeoutSec * 1000 + TIMEOUT_GRACE_MS);
        const onAbort = () => {
          try {
            sb.handle.send({ op: 'cancel', id: `c${id}`, target: id });
          } catch {
            /* runner gone: onExit settles */
          }
        };
        opts.signal?.addEventListener('abort', onAbort, { once: true });
        if (opts.signal?.aborted) onAbort();
        try {
          sb.handle.send(request);
        } catch (e) {
          finish(died(`The sandbox was not reachable (${(e as Error).message}); it is replaced on the next run.`));
        }
      });
      sb.unrecorded = (sb.unrecorded ?? 0) + 1;
      const { type: _t, id: _i, ...rest } = done;
      const truncated = { stdout: done.truncated.stdout + dropped.stdout, stderr: done.truncated.stderr + dropped.stderr };
      return { ...rest, truncated, language: opts.language, stdout: output.stdout.join(''), stderr: output.stderr.join('') };
    } finally {
      if (sb.inFlight === id) sb.inFlight = undefined;
      sb.running--;
      sb.lastActivity = Date.now();
      this.recordUse(sb);
    }
  }

  /** The owner's live sandbox, started (from the pool when possible) if needed. */
  private async sandboxFor(owner: SandboxOwner): Promise<UserSandbox> {
    const have = this.users.get(owner.userId);
    if (have && !have.handle.exited && have.ceilingKey === this.ceilingKey(owner)) return have;
    if (have && !have.handle.exited) {
      // The admin changed this user's ceiling: mounts must follow, so replace it when idle.
      if (have.running === 0 && have.queued === 0) await this.stopSandbox(owner.userId, 'permission ceiling changed');
      else return have;
    }
    let p = this.starting.get(owner.userId);
    if (!p) {
      p = this.startFor(owner).finally(() => this.starting.delete(owner.userId));
      this.starting.set(owner.userId, p);
    }
    return p;
  }

  private ceilingKey(owner: SandboxOwner): string {
    return JSON.stringify(this.ceiling(owner));
  }

  private async startFor(owner: SandboxOwner): Promise<UserSandbox> {
    const ceiling = this.ceiling(owner);
    const writable = allows(ceiling, 'write', '/workspace');
    const existing = this.workspaceIdFor(owner, false);
    let live: Live | undefined;
    if (!existing && writable && this.ceilingKey(owner) === this.defaultCeilingKey()) live = this.takeFromPool();
    if (live) {
      this.deps.db.prepare('UPDATE users SET workspace_id = ? WHERE id = ?').run(live.workspaceId, owner.userId);
      await this.deps.prepareTools(live.toolsDir, owner);
      this.log.info({ user: owner.name }, 'sandbox taken from the warm pool');
    } else {
      const wsId = this.workspaceIdFor(owner, true)!;
      live = await this.startLive(owner, wsId, ceiling);
    }
    this.fillPool();
    const sb: UserSandbox = { ...live, owner, ceilingKey: JSON.stringify(ceiling) };
    this.users.set(owner.userId, sb);
    this.watch(sb);
    this.deps.db
      .prepare(
        `INSERT INTO sandboxes (user_id, container_id, started_at, last_used_at) VALUES (?, ?, ?, ?)
         ON CONFLICT(user_id) DO UPDATE SET container_id = excluded.container_id, started_at = excluded.started_at, last_used_at = excluded.last_used_at`,
      )
      .run(owner.userId, sb.handle.id, sb.startedAt, sb.lastActivity);
    return sb;
  }

  private defaultCeilingKey(): string {
    return JSON.stringify(parsePermissions(this.deps.config.defaultPermissions));
  }

  /** Starts a container for a workspace; `owner` undefined makes a pooled one. */
  private async startLive(owner: SandboxOwner | undefined, workspaceId: string, ceiling: Permissions): Promise<Live> {
    const wsPath = await this.deps.volumes.ensure(workspaceId);
    const toolsDir = path.join(this.deps.toolsMountsDir, workspaceId);
    await fsp.mkdir(toolsDir, { recursive: true });
    await this.deps.prepareTools(toolsDir, owner);
    const readOnlyMounts: Record<string, string> = {};
    if (allows(ceiling, 'read', '/skills')) readOnlyMounts['/skills'] = this.deps.skillsDir;
    if (allows(ceiling, 'read', '/tools')) readOnlyMounts['/tools'] = toolsDir;
    const readable = allows(ceiling, 'read', '/workspace');
    const writable = allows(ceiling, 'write', '/workspace');
    const handle = await this.deps.driver.start({
      owner,
      workspaceDir: readable || writable ? wsPath : undefined,
      workspaceWritable: writable,
      readOnlyMounts,
      labels: { [LABEL_WORKSPACE]: workspaceId, [LABEL_ROLE]: owner ? 'user' : 'pool' },
    });
    const now = Date.now();
    return { handle, workspaceId, toolsDir, startedAt: now, lastActivity: now, running: 0, queued: 0, tail: Promise.resolve(), workspaceWritable: writable, ceilingKey: '', hostWrote: true };
  }

  /** Routes bridge calls and notices death. */
  private watch(sb: UserSandbox): void {
    let calls = 0;
    sb.handle.onEvent((e) => {
      if (e.type !== 'call') return;
      // Only the id is kept while the call is out: its parameters go to the bridge alone.
      const id = e.id;
      const reply = (ok: boolean, result?: unknown, error?: string) => {
        try {
          sb.handle.send({ op: 'call_result', id, ok, result, error });
        } catch {
          /* sandbox gone */
        }
      };
      // The runner takes calls only from the running execution; so does the gateway.
      if (e.execId !== sb.inFlight) return reply(false, undefined, 'calls are accepted only from the execution that is running');
      if (!this.bridge) return reply(false, undefined, 'no tools are available from this gateway');
      if (calls >= MAX_CALLS_IN_FLIGHT) return reply(false, undefined, `${MAX_CALLS_IN_FLIGHT} calls are already waiting: wait for one to finish`);
      calls++;
      this.bridge(sb.owner, e.method, e.params)
        .then(
          (r) => reply(true, r),
          (err: unknown) => reply(false, undefined, err instanceof Error ? err.message : String(err)),
        )
        .finally(() => calls--);
    });
    sb.handle.onExit((reason) => {
      if (this.users.get(sb.owner.userId) === sb) {
        this.recordUse(sb, true);
        this.users.delete(sb.owner.userId);
        this.log.info({ user: sb.owner.name, reason }, 'sandbox ended');
        // A dead container is removed now; its workspace stays.
        void this.deps.driver.stop(sb.handle.id).catch(() => {});
      }
    });
  }

  private workspaceIdFor(owner: SandboxOwner, create: boolean): string | undefined {
    const user = getUser(this.deps.db, owner.userId);
    if (!user) throw new SandboxError(`unknown user ${owner.name}`, 'invalid_request');
    if (user.workspaceId || !create) return user.workspaceId ?? undefined;
    const id = this.deps.volumes.newId();
    this.deps.db.prepare('UPDATE users SET workspace_id = ? WHERE id = ? AND workspace_id IS NULL').run(id, owner.userId);
    return getUser(this.deps.db, owner.userId)!.workspaceId!;
  }

  // --- warm pool -------------------------------------------------------------

  private takeFromPool(): Live | undefined {
    while (this.pool.length) {
      const live = this.pool.shift()!;
      if (!live.handle.exited) return live;
    }
    return undefined;
  }

  /** Starts pooled sandboxes in the background until the pool is full. */
  fillPool(): void {
    const want = this.deps.config.warmPoolSize;
    while (!this.closed && this.pool.length + this.poolStarting < want) {
      this.poolStarting++;
      void this.startPooled()
        .catch((e) => this.log.error({ err: e }, 'could not start a pooled sandbox'))
        .finally(() => this.poolStarting--);
    }
  }

  /** Resolves once the pool is full (for tests and benchmarks). */
  async poolReady(timeoutMs = 120_000): Promise<void> {
    const t0 = Date.now();
    while (this.pool.length < this.deps.config.warmPoolSize) {
      if (Date.now() - t0 > timeoutMs) throw new Error('warm pool did not fill in time');
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  private async startPooled(): Promise<void> {
    const wsId = this.deps.volumes.newId();
    const live = await this.startLive(undefined, wsId, parsePermissions(this.deps.config.defaultPermissions));
    const modules = this.deps.config.warmPoolPreload.split(',').map((m) => m.trim()).filter(Boolean);
    if (modules.length) {
      const id = `p${crypto.randomBytes(4).toString('hex')}`;
      const waiter = new Promise<void>((resolve) => {
        const off = live.handle.onEvent((e) => {
          if (e.type === 'preloaded' && e.id === id) {
            off();
            if (e.error) this.log.warn({ error: e.error }, 'pool preload failed');
            resolve();
          }
        });
        live.handle.onExit(() => resolve());
      });
      live.handle.send({ op: 'preload', id, modules });
      await waiter;
    }
    if (this.closed) {
      await this.deps.driver.stop(live.handle.id);
      await this.deps.volumes.destroy(wsId);
      return;
    }
    live.handle.onExit(() => {
      const i = this.pool.indexOf(live);
      if (i >= 0) this.pool.splice(i, 1);
    });
    this.pool.push(live);
  }

  // --- lifecycle -------------------------------------------------------------

  /** Stops idle sandboxes and replaces old ones; never touches a running execution. */
  async reap(now = Date.now()): Promise<void> {
    const cfg = this.deps.config;
    for (const sb of [...this.users.values()]) {
      if (sb.running > 0 || sb.queued > 0) continue;
      if (now - sb.lastActivity > cfg.idleTimeoutSec * 1000) await this.stopSandbox(sb.owner.userId, 'idle');
      else if (now - sb.startedAt > cfg.maxLifetimeSec * 1000) await this.stopSandbox(sb.owner.userId, 'maximum lifetime reached');
    }
    for (const live of [...this.pool]) {
      if (now - live.startedAt > cfg.maxLifetimeSec * 1000) {
        this.pool.splice(this.pool.indexOf(live), 1);
        await this.deps.driver.stop(live.handle.id);
        await this.deps.volumes.destroy(live.workspaceId);
      }
    }
    this.fillPool();
  }

  /** Writes the sandbox's uncounted executions to the store, if due (or `now`). */
  private recordUse(sb: UserSandbox, now = false): void {
    if (!sb.unrecorded) return;
    const at = Date.now();
    if (!now && at - (sb.recordedAt ?? 0) < USE_RECORD_INTERVAL_MS) return;
    try {
      statement(this.deps.db, 'UPDATE sandboxes SET last_used_at = ?, executions = executions + ? WHERE user_id = ?').run(sb.lastActivity, sb.unrecorded, sb.owner.userId);
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
    await this.deps.driver.stop(sb.handle.id);
    this.deps.db.prepare('UPDATE sandboxes SET container_id = NULL WHERE user_id = ?').run(userId);
  }

  /** Stops a user's sandbox (admin). Running executions are killed and told so. */
  async stopUser(userId: number): Promise<boolean> {
    if (!this.users.has(userId)) return false;
    await this.stopSandbox(userId, 'stopped by an admin');
    return true;
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
        queued: sb.queued,
      };
      if (opts.stats) {
        s.stats = await sb.handle.stats().catch(() => undefined);
        s.workspace = await this.deps.volumes.usage(sb.workspaceId).catch(() => undefined);
      }
      out.push(s);
    }
    return out.sort((a, b) => a.user.localeCompare(b.user));
  }

  get poolSize(): number {
    return this.pool.length;
  }

  /** Finds containers of an earlier run: adopts those the store maps to a user, removes the rest. */
  private async adopt(): Promise<void> {
    const found = await this.deps.driver.list();
    for (const c of found) {
      const row = this.deps.db.prepare('SELECT user_id FROM sandboxes WHERE container_id = ?').get(c.id) as { user_id: number } | undefined;
      const user = row && getUser(this.deps.db, row.user_id);
      const handle = user && c.running && user.workspaceId === c.labels[LABEL_WORKSPACE] ? await this.deps.driver.attach(c.id) : undefined;
      if (user && handle) {
        const owner = { userId: user.id, name: user.name };
        const ceiling = this.ceiling(owner);
        const sb: UserSandbox = {
          owner,
          handle,
          workspaceId: user.workspaceId!,
          toolsDir: path.join(this.deps.toolsMountsDir, user.workspaceId!),
          startedAt: c.createdAt,
          lastActivity: Date.now(),
          running: 0,
          queued: 0,
          tail: Promise.resolve(),
          workspaceWritable: allows(ceiling, 'write', '/workspace'),
          ceilingKey: JSON.stringify(ceiling),
          hostWrote: true,
        };
        this.users.set(user.id, sb);
        this.watch(sb);
        this.log.info({ user: user.name, container: c.id.slice(0, 12) }, 'adopted sandbox');
      } else {
        await this.deps.driver.stop(c.id);
        if (c.labels[LABEL_ROLE] === 'pool' && c.labels[LABEL_WORKSPACE] && !this.workspaceInUse(c.labels[LABEL_WORKSPACE])) {
          await this.deps.volumes.destroy(c.labels[LABEL_WORKSPACE]).catch(() => {});
        }
        this.log.info({ container: c.id.slice(0, 12) }, 'removed a sandbox left by an earlier run');
      }
    }
  }

  private workspaceInUse(id: string): boolean {
    return !!this.deps.db.prepare('SELECT 1 FROM users WHERE workspace_id = ?').get(id);
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
    if (this.reaper) clearInterval(this.reaper);
    for (const p of this.starting.values()) await p.catch(() => {});
    while (this.poolStarting > 0) await new Promise((r) => setTimeout(r, 50));
    for (const live of this.pool.splice(0)) {
      if (opts.detachOnly) {
        (live.handle as { detach?: () => void }).detach?.();
        continue;
      }
      await this.deps.driver.stop(live.handle.id).catch(() => {});
      await this.deps.volumes.destroy(live.workspaceId).catch(() => {});
    }
    const running = new Set<string>();
    for (const sb of [...this.users.values()]) {
      this.recordUse(sb, true);
      if (opts.stopAll && !opts.detachOnly) {
        await this.stopSandbox(sb.owner.userId, 'gateway shutdown');
      } else {
        (sb.handle as { detach?: () => void }).detach?.();
        running.add(sb.workspaceId);
      }
    }
    this.users.clear();
    if (opts.releaseVolumes) await this.deps.volumes.releaseAll();
    else if (!opts.detachOnly) await this.deps.volumes.releaseAll(running);
  }
}

/**
 * Paths the container mounts but this execution may not use: write-denied ones become
 * read-only, read-denied ones are hidden. Empty when the request did not narrow.
 */
export function fsNarrowing(perms: Permissions, workspaceWritable: boolean): ExecRequest['fs'] {
  const readOnly: string[] = [];
  const hidden: string[] = [];
  for (const p of ['/workspace', '/skills', '/tools']) {
    if (!allows(perms, 'read', p) && !(p === '/workspace' && allows(perms, 'write', p))) hidden.push(p);
  }
  if (workspaceWritable && !allows(perms, 'write', '/workspace') && !hidden.includes('/workspace')) readOnly.push('/workspace');
  return readOnly.length || hidden.length ? { readOnly, hidden } : undefined;
}
