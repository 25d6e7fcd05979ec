/**
 * DockerDriver: one hardened container per sandbox, on dockerode.
 *
 * Hardening (each layer stands on its own):
 * - runtime runsc (gVisor): a user-space kernel between code and the host kernel;
 * - read-only root, no-new-privileges, network none; user code runs as uid 1000 with no
 *   capability. The runner alone runs as root inside gVisor with only SETUID, SETGID and
 *   KILL (to start code as uid 1000 and end it): being another uid, it cannot be reached
 *   by code through /proc, ptrace or signals, so nothing code writes can pass for the
 *   runner's word;
 * - memory (no swap), CPU, a host-side pids limit and an in-sandbox nproc ulimit
 *   (gVisor enforces nproc itself: a fork bomb gets EAGAIN instead of killing the sandbox);
 * - /tmp a size-capped tmpfs; /workspace the only writable mount; /skills and /tools
 *   read-only binds;
 * - an empty environment: only the image's own ENV; no host variable is ever passed.
 *
 * The runner is reached over the container's attached stdio (OpenStdin, Tty false):
 * one long-lived stream, ~0.5 ms per round trip, instead of ~150 ms per `docker exec`.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import { PassThrough } from 'node:stream';
import type { Duplex } from 'node:stream';
import Docker from 'dockerode';
import type { Logger } from '../logger.js';
import { thaw } from './freezer.js';
import { fromDockerError, SandboxError } from './errors.js';
import type { RunnerEvent } from './protocol.js';
import { ConnectedSandbox, RunnerConnection } from './runner-connection.js';
import { threadEnv } from './run.js';
import { dockerReachable, imagePresent, runtimeIsolates } from './preflight.js';
import type { HealthCheck, SandboxDriver, SandboxHandle, SandboxInfo, SandboxSpec, SandboxStats } from './types.js';

export const LABEL_GATEWAY = 'org.sandgate.gateway';
export const LABEL_OWNER = 'org.sandgate.owner';
export const LABEL_OWNER_ID = 'org.sandgate.owner-id';

/** All a runner needs: start code as the sandbox user (SETUID, SETGID) and end it (KILL). */
export const RUNNER_CAPABILITIES = ['SETUID', 'SETGID', 'KILL'];

export interface DockerDriverOptions {
  docker: Docker;
  image: string;
  runtime: string;
  /** The gVisor platform the settings ask for (SANDGATE_RUNSC_PLATFORM); the preflight checks Docker registered it. */
  platform?: 'systrap' | 'ptrace';
  /** Distinguishes gateways sharing one dockerd (each data directory is one gateway). */
  gatewayId: string;
  memoryMb: number;
  cpus: number;
  pidsLimit: number;
  nproc: number;
  tmpMb: number;
  logger: Logger;
  /** How long a new container may take to say `ready`. */
  readyTimeoutMs?: number;
}

export class DockerDriver implements SandboxDriver {
  readonly name = 'docker';
  private readonly log: Logger;

  constructor(private readonly opts: DockerDriverOptions) {
    this.log = opts.logger.child({ module: 'docker-driver' });
  }

  /** The container create body; exported for tests that check the hardening. */
  containerSpec(spec: SandboxSpec, name: string): Docker.ContainerCreateOptions {
    const o = this.opts;
    const labels: Record<string, string> = { [LABEL_GATEWAY]: o.gatewayId, ...spec.labels };
    if (spec.owner) {
      labels[LABEL_OWNER] = spec.owner.name;
      labels[LABEL_OWNER_ID] = String(spec.owner.userId);
    }
    const mounts: Docker.MountSettings[] = [];
    if (spec.workspaceDir) {
      mounts.push({ Type: 'bind', Source: spec.workspaceDir, Target: '/workspace', ReadOnly: !spec.workspaceWritable });
    }
    for (const [target, source] of Object.entries(spec.readOnlyMounts)) {
      mounts.push({ Type: 'bind', Source: source, Target: target, ReadOnly: true });
    }
    const memory = o.memoryMb * 1024 * 1024;
    return {
      name,
      Image: o.image,
      // The runner; it starts every user process as uid 1000 (sandgate_runner/parent/settings.py, SANDBOX_UID).
      User: '0:0',
      WorkingDir: '/workspace',
      // Only what the runner needs to know of the ceiling: its Deno flags (no secret, no host
      // value); and thread pools sized to the CPU limit for what the kernel imports before
      // its first execution (the warm pool's preloads), as for executions (run.ts).
      Env: [
        ...Object.entries(threadEnv(o.cpus)).map(([k, v]) => `${k}=${v}`),
        ...(spec.denoCeiling ? [`SANDGATE_DENO_CEILING=${JSON.stringify(spec.denoCeiling)}`] : []),
        ...(spec.denoHostOnFirstUse ? ['SANDGATE_DENO_HOST=first-use'] : []),
        ...(spec.egress ? [`SANDGATE_EGRESS_PORT=${spec.egress.port}`, `SANDGATE_EGRESS_ENV=${JSON.stringify(spec.egress.env)}`, ...(spec.egress.open ? ['SANDGATE_EGRESS_OPEN=1'] : [])] : []),
      ],
      Labels: labels,
      OpenStdin: true,
      StdinOnce: false,
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
      NetworkDisabled: true,
      HostConfig: {
        Runtime: o.runtime,
        NetworkMode: 'none',
        ReadonlyRootfs: true,
        CapDrop: ['ALL'],
        CapAdd: RUNNER_CAPABILITIES,
        SecurityOpt: ['no-new-privileges'],
        Privileged: false,
        Memory: memory,
        MemorySwap: memory,
        NanoCpus: Math.round(o.cpus * 1e9),
        PidsLimit: o.pidsLimit,
        Ulimits: [
          { Name: 'nproc', Soft: o.nproc, Hard: o.nproc },
          { Name: 'nofile', Soft: 4096, Hard: 4096 },
        ],
        Tmpfs: { '/tmp': `rw,nosuid,nodev,size=${o.tmpMb}m,mode=1777` },
        Mounts: mounts,
        IpcMode: 'private',
        RestartPolicy: { Name: 'no' },
        // No log: the runner's stdout is the protocol, which carries what code prints (users'
        // data, before the PII boundary); attach works without one, and the gateway logs the
        // runner's stderr itself.
        LogConfig: { Type: 'none', Config: {} },
      },
    };
  }

  async health(opts: { full?: boolean } = {}): Promise<Record<string, HealthCheck>> {
    const o = this.opts;
    const docker = await dockerReachable(o.docker);
    if (!docker.ok) {
      const unknown = { ok: false, detail: 'not checked: Docker is not reachable' };
      return { docker, image: unknown, ...(opts.full ? { runtime: unknown } : {}) };
    }
    const image = await imagePresent(o.docker, o.image);
    if (!opts.full) return { docker, image };
    const runtime = image.ok
      ? await runtimeIsolates(o.docker, { image: o.image, runtime: o.runtime, platform: o.platform, labels: { [LABEL_GATEWAY]: o.gatewayId, 'org.sandgate.role': 'preflight' } }).catch(
          (e: Error): HealthCheck => ({ ok: false, detail: `the runtime check failed: ${e.message}` }),
        )
      : { ok: false, detail: 'not checked: the sandbox image is missing' };
    return { docker, image, runtime };
  }

  async start(spec: SandboxSpec): Promise<SandboxHandle> {
    const o = this.opts;
    const who = spec.owner?.name ?? 'pool';
    const name = `sandgate-${o.gatewayId}-${who}-${crypto.randomBytes(4).toString('hex')}`;
    let container: Docker.Container;
    try {
      container = await o.docker.createContainer(this.containerSpec(spec, name));
    } catch (e) {
      throw fromDockerError(e, `creating container for ${who}`, { image: o.image, runtime: o.runtime });
    }
    try {
      const handle = await this.connect(container, Date.now());
      // Listen before starting: the runner may say `ready` before start() returns.
      const ready = handle.connection.waitFor(
        (e): e is Extract<RunnerEvent, { type: 'ready' }> => e.type === 'ready',
        o.readyTimeoutMs ?? 60_000,
        'ready',
      );
      ready.catch(() => {});
      try {
        await container.start();
      } catch (e) {
        throw fromDockerError(e, `starting container for ${who}`, { image: o.image, runtime: o.runtime });
      }
      const said = await ready;
      if (!said.separated) {
        // A runner that runs code as its own uid could be impersonated by that code.
        throw new SandboxError(
          'the sandbox image is out of date (its runner does not run code as a separate user); an operator must run scripts/build-sandbox-image.sh',
          'image_missing',
          `runner ready without separation: ${JSON.stringify(said)}`,
        );
      }
      this.log.info({ container: container.id.slice(0, 12), owner: who }, 'sandbox started');
      return handle;
    } catch (e) {
      await container.remove({ force: true }).catch(() => {});
      if (e instanceof SandboxError) throw e;
      throw new SandboxError(`the sandbox did not start: ${(e as Error).message}`, 'start_failed');
    }
  }

  async attach(id: string): Promise<SandboxHandle | undefined> {
    const container = this.opts.docker.getContainer(id);
    let info: Docker.ContainerInspectInfo;
    try {
      info = await container.inspect();
    } catch {
      return undefined;
    }
    if (!info.State.Running) return undefined;
    // A gateway that crashed may have left it frozen: a frozen runner cannot answer the ping below.
    thaw(info.Id);
    const handle = await this.connect(container, Date.parse(info.Created));
    try {
      const id = `adopt-${crypto.randomBytes(4).toString('hex')}`;
      const pong = handle.connection.waitFor((e): e is Extract<RunnerEvent, { type: 'pong' }> => e.type === 'pong' && e.id === id, 5000, 'ping');
      handle.send({ op: 'ping', id });
      // A container of an older image, whose runner runs code as itself, is not adopted.
      if (!(await pong).separated) throw new Error('runner without separation');
      return handle;
    } catch {
      handle.connection.exit('not answering');
      return undefined;
    }
  }

  async stop(id: string): Promise<void> {
    // Removing a frozen container waits forever for its kill (cgroup v1): thaw it first.
    thaw(id);
    try {
      await this.opts.docker.getContainer(id).remove({ force: true });
    } catch (e) {
      if ((e as { statusCode?: number }).statusCode !== 404) throw fromDockerError(e, `removing ${id.slice(0, 12)}`);
    }
  }

  async knownContainerIds(): Promise<Set<string>> {
    return new Set((await this.opts.docker.listContainers({ all: true })).map((c) => c.Id));
  }

  async list(): Promise<SandboxInfo[]> {
    const containers = await this.opts.docker.listContainers({
      all: true,
      filters: { label: [`${LABEL_GATEWAY}=${this.opts.gatewayId}`] },
    });
    return containers.map((c) => ({
      id: c.Id,
      labels: c.Labels,
      owner: c.Labels[LABEL_OWNER],
      ownerId: c.Labels[LABEL_OWNER_ID] ? Number(c.Labels[LABEL_OWNER_ID]) : undefined,
      createdAt: c.Created * 1000,
      running: c.State === 'running',
      state: c.State,
    }));
  }

  /**
   * Watches dockerd once a second. When dockerd shuts down it first closes its API and
   * then stops its containers: that is the moment to hear of it. Where dockerd made its
   * socket, the file goes away at once (or is new: dockerd restarted between two looks);
   * where systemd holds the socket for it, connections are taken and never answered, so
   * two pings in a row without an answer within 2 s count too. Connections already open,
   * an event stream's, stay open until dockerd exits: they tell nothing in time.
   */
  watch(on: { down(): void; up(): void }): () => void {
    const socket = (this.opts.docker.modem as { socketPath?: string }).socketPath;
    if (!socket) return () => {};
    let away: boolean | undefined;
    let inode: number | undefined;
    let unanswered = 0;
    let looking = false;
    const change = (down: boolean) => {
      if (away === down) return;
      const first = away === undefined;
      away = down;
      if (down) on.down();
      else if (!first) on.up();
    };
    const look = async () => {
      if (looking) return;
      looking = true;
      try {
        const st = fs.statSync(socket, { throwIfNoEntry: false });
        if (!st || (inode !== undefined && st.ino !== inode)) {
          inode = undefined;
          unanswered = 0;
          change(true);
          if (!st) return;
        }
        if (await answersWithin(this.opts.docker, 2000)) {
          inode = st.ino;
          unanswered = 0;
          change(false);
        } else if (++unanswered >= 2 || away === undefined) {
          change(true);
        }
      } finally {
        looking = false;
      }
    };
    void look();
    const timer = setInterval(() => void look(), 1000);
    timer.unref();
    return () => clearInterval(timer);
  }

  private async connect(container: Docker.Container, createdAt: number): Promise<DockerSandbox> {
    const stream = (await container.attach({ stream: true, stdin: true, stdout: true, stderr: true, hijack: true })) as unknown as Duplex;
    const out = new PassThrough();
    const err = new PassThrough();
    this.opts.docker.modem.demuxStream(stream, out, err);
    stream.on('end', () => out.end());
    stream.on('close', () => out.end());
    const log = this.log.child({ container: container.id.slice(0, 12) });
    err.setEncoding('utf8');
    err.on('data', (d: string) => log.debug({ runner: d.trimEnd() }, 'runner stderr'));
    const connection = new RunnerConnection(stream, out, (line) => log.warn({ line }, 'runner protocol'));
    return new DockerSandbox(container, createdAt, connection, stream);
  }
}

class DockerSandbox extends ConnectedSandbox implements SandboxHandle {
  private lastCpu?: { total: number; system: number };

  constructor(
    private readonly container: Docker.Container,
    readonly createdAt: number,
    readonly connection: RunnerConnection,
    private readonly stream: Duplex,
  ) {
    super();
  }

  get id(): string {
    return this.container.id;
  }

  /** Detaches without stopping the container (used at gateway shutdown). */
  detach(): void {
    this.stream.destroy();
  }

  async stats(): Promise<SandboxStats> {
    const s = await this.container.stats({ stream: false, 'one-shot': true });
    const total = s.cpu_stats?.cpu_usage?.total_usage ?? 0;
    const system = s.cpu_stats?.system_cpu_usage ?? 0;
    const cpus = s.cpu_stats?.online_cpus ?? 1;
    let cpuPercent = 0;
    if (this.lastCpu && system > this.lastCpu.system) {
      cpuPercent = ((total - this.lastCpu.total) / (system - this.lastCpu.system)) * cpus * 100;
    }
    this.lastCpu = { total, system };
    return {
      cpuPercent: Math.max(0, Math.round(cpuPercent * 10) / 10),
      // As `docker stats` shows it: usage without reclaimable page cache.
      memoryBytes: Math.max(0, (s.memory_stats?.usage ?? 0) - inactiveFile(s.memory_stats?.stats)),
      memoryLimitBytes: s.memory_stats?.limit ?? 0,
      pids: s.pids_stats?.current ?? 0,
    };
  }
}

/** Whether dockerd answers a ping within `ms` (one that is starting accepts connections and answers nothing). */
function answersWithin(docker: Docker, ms: number): Promise<boolean> {
  // Aborted when late: a dockerd that takes connections and answers nothing keeps none.
  const ping = docker.ping.bind(docker) as unknown as (opts: { abortSignal: AbortSignal }) => Promise<unknown>;
  return ping({ abortSignal: AbortSignal.timeout(ms) }).then(
    () => true,
    () => false,
  );
}

function inactiveFile(stats: Record<string, number> | undefined): number {
  if (!stats) return 0;
  return stats.total_inactive_file ?? stats.inactive_file ?? 0;
}
