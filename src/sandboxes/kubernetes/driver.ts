/**
 * KubernetesDriver: one Pod per sandbox, through the official @kubernetes/client-node.
 *
 * Chosen: plain Pods, not the agent-sandbox `Sandbox` resource. A Pod needs nothing
 * installed on the cluster beyond gVisor's RuntimeClass, every cluster has it, and the
 * gateway already does what that controller adds (one sandbox per user, adoption, idle
 * stops, a warm pool); a controller of its own would make two owners of one pod.
 *
 * - A sandbox is a Pod in the configured namespace (objects.ts has its hardening), its
 *   workspace the PersistentVolumeClaim the workspace store made (workspaces.ts).
 *   A NetworkPolicy denying all traffic to and from sandbox pods is made if missing;
 *   a start is refused when it cannot be (no sandbox runs without it).
 * - Labels find a pod again (installation, owner id), so any replica lists and adopts
 *   what another started; the owner's login and the gateway's own labels are annotations.
 * - The runner is reached through `exec` on the API server (WebSocket channel protocol):
 *   a relay in the pod joins the exec's stdio to the runner's socket. Not `attach`: the
 *   kubelet writes a container's own stdout to the node's logs, and what code prints is
 *   the users' data. A pod that ends closes the stream, which ends the handle, as a
 *   container's does under Docker.
 * - Stats come from the metrics API (metrics-server), the limit from the pod's spec.
 *
 * What Kubernetes does not offer is not offered: no cgroup freezing of idle sandboxes and
 * no host runsc process checks (the gateway is not on the node), no relabelling of a pooled
 * pod's workspace (a pod's volumes are fixed at its creation). `health` says so.
 */
import crypto from 'node:crypto';
import fsp from 'node:fs/promises';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import type WebSocket from 'isomorphic-ws';
import type { Logger } from '../../logger.js';
import { SandboxError } from '../errors.js';
import type { RunnerEvent } from '../protocol.js';
import { ConnectedSandbox, RunnerConnection } from '../runner-connection.js';
import type { HealthCheck, SandboxDriver, SandboxHandle, SandboxInfo, SandboxSpec, SandboxStats } from '../types.js';
import { apiStatus } from './api-status.js';
import { clusterHealth } from './health.js';
import { createdOf, execStreams, waitRunning } from './pods.js';
import { baseLabels, HELPER_POD_MAX_SEC, K8S_LABELS, mountConfigMap, ownerReference, type MountFiles, K8S_OWNER_ANNOTATION, networkPolicyManifest, NETWORK_POLICY_NAME, podManifest, RELAY_COMMAND, RUNNER_CONTAINER, type PodSettings } from './objects.js';

/** How often `list` (which the lifecycle calls) sweeps what dead gateways left; how old a leftover must be. */
const SWEEP_EVERY_MS = 5 * 60_000;
const LEFTOVER_MS = 10 * 60_000;

export interface KubernetesDriverOptions extends PodSettings {
  kubeConfig: k8s.KubeConfig;
  namespace: string;
  logger: Logger;
  /** How long a new pod may take to run and its runner to answer. Default 120 s (an image pull may be in it). */
  readyTimeoutMs?: number;
  /** How often `list` sweeps leftovers, and how old one must be. Defaults 5 and 10 minutes. */
  sweepEveryMs?: number;
  leftoverMs?: number;
}

const isCode = (e: unknown, code: number) => apiStatus(e)?.code === code;

export class KubernetesDriver implements SandboxDriver {
  readonly name = 'kubernetes';
  readonly quickChecks = ['api', 'namespace', 'runtimeClass', 'permissions'] as const;
  private readonly log: Logger;
  readonly core: k8s.CoreV1Api;
  readonly networking: k8s.NetworkingV1Api;
  private readonly custom: k8s.CustomObjectsApi;
  private readonly exec: k8s.Exec;
  /** The NetworkPolicy is known to exist (checked once, then at every failed start). */
  private policyChecked = false;
  /** When `list` last swept leftovers. */
  private sweptAt = 0;
  /** This gateway's open channels to each pod: ended when it stops the pod, whether or not the API server ends them. */
  private readonly channels = new Map<string, Set<WebSocket>>();

  constructor(private readonly opts: KubernetesDriverOptions) {
    this.log = opts.logger.child({ module: 'kubernetes-driver' });
    this.core = opts.kubeConfig.makeApiClient(k8s.CoreV1Api);
    this.networking = opts.kubeConfig.makeApiClient(k8s.NetworkingV1Api);
    this.custom = opts.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    this.exec = new k8s.Exec(opts.kubeConfig);
  }

  async health(opts: { full?: boolean } = {}): Promise<Record<string, HealthCheck>> {
    // The full check's test pod must meet the policy sandboxes meet: made first where missing.
    if (opts.full) await this.ensureNetworkPolicy().catch((e: Error) => this.log.warn({ err: e.message }, 'the sandboxes\' NetworkPolicy is missing'));
    return clusterHealth(this.opts, opts);
  }

  async start(spec: SandboxSpec): Promise<SandboxHandle> {
    const o = this.opts;
    const who = spec.owner?.name ?? 'pool';
    await this.ensureNetworkPolicy();
    const name = `sandgate-${spec.owner ? `u${spec.owner.userId}-` : 'pool-'}${crypto.randomBytes(4).toString('hex')}`;
    const mounts = new Map<string, MountFiles>();
    for (const [mountPath, dir] of Object.entries(spec.readOnlyMounts)) mounts.set(mountPath, await readMountFiles(dir));
    // The read-only mounts' ConfigMaps first, so that the kubelet finds them at once; then
    // the pod; then each made the pod's (the cluster deletes them with it).
    const made: string[] = [];
    const dropMaps = () => Promise.all(made.map((n) => this.core.deleteNamespacedConfigMap({ name: n, namespace: o.namespace }).catch(() => {})));
    let uid: string;
    try {
      for (const [mountPath, files] of mounts) {
        const cm = mountConfigMap(name, mountPath, files, o.gatewayId);
        await this.core.createNamespacedConfigMap({ namespace: o.namespace, body: cm });
        made.push(cm.metadata!.name!);
      }
      uid = (await this.core.createNamespacedPod({ namespace: o.namespace, body: podManifest(spec, name, o, mounts) })).metadata!.uid!;
    } catch (e) {
      await dropMaps();
      const s = apiStatus(e);
      throw new SandboxError(`the cluster refused the sandbox's pod for ${who}: ${s?.message ?? (e as Error).message}`, 'start_failed');
    }
    try {
      for (const n of made) {
        await this.core.patchNamespacedConfigMap({ name: n, namespace: o.namespace, body: [{ op: 'add', path: '/metadata/ownerReferences', value: [ownerReference(name, uid)] }] });
      }
      const createdAt = await waitRunning(o.kubeConfig, o.namespace, name, o.readyTimeoutMs ?? 120_000);
      const handle = await this.connect(name, createdAt);
      if (!(await this.pingSeparated(handle, 30_000))) {
        handle.connection.exit('runner without separation');
        throw new SandboxError(
          'the sandbox image is out of date (its runner does not run code as a separate user); an operator must build and push the current image',
          'image_missing',
        );
      }
      this.log.info({ pod: name, owner: who }, 'sandbox started');
      return handle;
    } catch (e) {
      await this.stop(name).catch(() => {});
      await dropMaps();
      if (e instanceof SandboxError) throw e;
      throw new SandboxError(`the sandbox did not start: ${(e as Error).message}`, 'start_failed');
    }
  }

  async attach(id: string): Promise<SandboxHandle | undefined> {
    let pod: k8s.V1Pod;
    try {
      pod = await this.core.readNamespacedPod({ name: id, namespace: this.opts.namespace });
    } catch {
      return undefined;
    }
    if (!this.ours(pod) || pod.status?.phase !== 'Running' || pod.metadata?.deletionTimestamp) return undefined;
    let handle: KubernetesSandbox;
    try {
      handle = await this.connect(id, createdOf(pod));
    } catch {
      return undefined;
    }
    if (await this.pingSeparated(handle, 5000).catch(() => false)) return handle;
    handle.connection.exit('not answering');
    return undefined;
  }

  async stop(id: string): Promise<void> {
    try {
      await this.core.deleteNamespacedPod({ name: id, namespace: this.opts.namespace, gracePeriodSeconds: 0 });
    } catch (e) {
      if (!isCode(e, 404)) throw new SandboxError(`removing the sandbox's pod ${id} failed: ${apiStatus(e)?.message ?? (e as Error).message}`, 'start_failed');
    }
    for (const ws of this.channels.get(id) ?? []) ws.close();
    this.channels.delete(id);
  }

  async list(): Promise<SandboxInfo[]> {
    const selector = Object.entries(baseLabels(this.opts.gatewayId))
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
    const pods = await this.core.listNamespacedPod({ namespace: this.opts.namespace, labelSelector: selector });
    if (Date.now() - this.sweptAt >= (this.opts.sweepEveryMs ?? SWEEP_EVERY_MS)) {
      this.sweptAt = Date.now();
      void this.sweep(pods.items).catch((e: Error) => this.log.warn({ err: e.message }, 'could not sweep what earlier gateways left in the namespace'));
    }
    return pods.items.filter((p) => !p.metadata?.deletionTimestamp && ['user', 'pool'].includes(p.metadata?.labels?.[K8S_LABELS.component] ?? '')).map((p) => infoOf(p));
  }

  /**
   * What a gateway that died mid-way left, removed: helper and preflight pods that ended
   * or outlived their time, and the mount ConfigMaps no pod came to own (the gateway died
   * between making them and its pod).
   */
  private async sweep(pods: k8s.V1Pod[]): Promise<void> {
    const { namespace } = this.opts;
    const age = (t?: Date | string) => (t ? Date.now() - new Date(t).getTime() : 0);
    for (const p of pods) {
      const role = p.metadata?.labels?.[K8S_LABELS.component];
      const ended = p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed';
      if ((role === 'helper' && (ended || age(p.metadata?.creationTimestamp) > HELPER_POD_MAX_SEC * 1000)) || (role === 'preflight' && age(p.metadata?.creationTimestamp) >= (this.opts.leftoverMs ?? LEFTOVER_MS))) {
        await this.stop(p.metadata!.name!).catch(() => {});
      }
    }
    const selector = Object.entries({ ...baseLabels(this.opts.gatewayId), [K8S_LABELS.component]: 'mount' })
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
    const maps = await this.core.listNamespacedConfigMap({ namespace, labelSelector: selector });
    for (const cm of maps.items) {
      if (!cm.metadata?.ownerReferences?.length && age(cm.metadata?.creationTimestamp) >= (this.opts.leftoverMs ?? LEFTOVER_MS)) {
        await this.core.deleteNamespacedConfigMap({ name: cm.metadata!.name!, namespace }).catch(() => {});
      }
    }
  }

  /** The NetworkPolicy isolating sandbox pods: made when missing; a start is refused while it cannot be. */
  private async ensureNetworkPolicy(): Promise<void> {
    if (this.policyChecked) return;
    const namespace = this.opts.namespace;
    try {
      await this.networking.readNamespacedNetworkPolicy({ name: NETWORK_POLICY_NAME, namespace });
      this.policyChecked = true;
      return;
    } catch (e) {
      if (!isCode(e, 404)) throw new SandboxError(`the sandboxes' NetworkPolicy ${NETWORK_POLICY_NAME} could not be read: ${apiStatus(e)?.message ?? (e as Error).message}`, 'start_failed');
    }
    try {
      await this.networking.createNamespacedNetworkPolicy({ namespace, body: networkPolicyManifest(this.opts.gatewayId) });
    } catch (e) {
      if (!isCode(e, 409)) {
        throw new SandboxError(
          `no sandbox starts without the NetworkPolicy that cuts sandboxes off the network, and it could not be made: ${apiStatus(e)?.message ?? (e as Error).message} (install it with the Helm chart, or let the gateway's service account create networkpolicies in ${namespace})`,
          'start_failed',
        );
      }
    }
    this.policyChecked = true;
    this.log.info({ namespace }, 'made the NetworkPolicy isolating sandbox pods');
  }

  private ours(pod: k8s.V1Pod): boolean {
    const l = pod.metadata?.labels ?? {};
    return Object.entries(baseLabels(this.opts.gatewayId)).every(([k, v]) => l[k] === v);
  }

  private async pingSeparated(handle: KubernetesSandbox, ms: number): Promise<boolean> {
    const id = `ping-${crypto.randomBytes(4).toString('hex')}`;
    const pong = handle.connection.waitFor((e): e is Extract<RunnerEvent, { type: 'pong' }> => e.type === 'pong' && e.id === id, ms, 'ping');
    handle.send({ op: 'ping', id });
    return !!(await pong).separated;
  }

  private async connect(name: string, createdAt: number): Promise<KubernetesSandbox> {
    const log = this.log.child({ pod: name });
    const { stdin, stdout, stderr, ws } = await execStreams(this.exec, this.opts.namespace, name, RELAY_COMMAND);
    const open = this.channels.get(name) ?? new Set<WebSocket>();
    this.channels.set(name, open);
    open.add(ws);
    ws.addEventListener('close', () => open.delete(ws));
    stderr.setEncoding('utf8');
    stderr.on('data', (d: string) => log.debug({ runner: d.trimEnd() }, 'runner stderr'));
    const connection = new RunnerConnection(stdin, stdout, (line) => log.warn({ line }, 'runner protocol'));
    return new KubernetesSandbox(name, createdAt, connection, ws, this);
  }

  /** A pod's memory use (metrics API) and limit (its spec). */
  async statsOf(name: string): Promise<SandboxStats> {
    const m = (await this.custom.getNamespacedCustomObject({ group: 'metrics.k8s.io', version: 'v1beta1', namespace: this.opts.namespace, plural: 'pods', name })) as k8s.PodMetric;
    const usage = m.containers?.find((c) => c.name === RUNNER_CONTAINER)?.usage;
    return {
      // metrics-server's rate over its window, in cores: as a percentage of one, as Docker's.
      cpuPercent: usage ? Math.round(cpuCores(usage.cpu) * 1000) / 10 : 0,
      memoryBytes: usage ? Math.round(quantityBytes(usage.memory)) : 0,
      memoryLimitBytes: this.opts.memoryMb * 1024 * 1024,
      pids: 0,
    };
  }
}

class KubernetesSandbox extends ConnectedSandbox implements SandboxHandle {
  constructor(
    readonly id: string,
    readonly createdAt: number,
    readonly connection: RunnerConnection,
    private readonly ws: WebSocket,
    private readonly driver: KubernetesDriver,
  ) {
    super();
  }

  /** Closes the exec stream (its relay ends); the pod keeps running for the next gateway to adopt. */
  detach(): void {
    this.ws.close();
  }

  stats(): Promise<SandboxStats> {
    return this.driver.statsOf(this.id);
  }
}

function infoOf(p: k8s.V1Pod): SandboxInfo {
  const labels = p.metadata?.labels ?? {};
  const annotations = p.metadata?.annotations ?? {};
  const phase = p.status?.phase ?? 'Pending';
  const ownerId = labels[K8S_LABELS.ownerId];
  return {
    id: p.metadata!.name!,
    labels: { ...labels, ...annotations },
    owner: annotations[K8S_OWNER_ANNOTATION],
    ownerId: ownerId ? Number(ownerId) : undefined,
    createdAt: createdOf(p),
    running: phase === 'Running',
    // In Docker's words, which the lifecycle reads: a pod that ended is `exited`.
    state: phase === 'Running' ? 'running' : phase === 'Pending' ? 'created' : phase === 'Unknown' ? 'dead' : 'exited',
  };
}

/** "250000000n", "250m", "2" as cores. */
function cpuCores(q: string): number {
  const m = /^([0-9.]+)(n|u|m)?$/.exec(q);
  if (!m) return 0;
  return Number(m[1]) * ({ '': 1, m: 1e-3, u: 1e-6, n: 1e-9 } as Record<string, number>)[m[2] ?? '']!;
}

/** "123456Ki", "12Mi", "1000000" as bytes. */
function quantityBytes(q: string): number {
  const m = /^([0-9.]+)(Ki|Mi|Gi|k|M|G)?$/.exec(q);
  if (!m) return 0;
  const mult: Record<string, number> = { '': 1, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, k: 1e3, M: 1e6, G: 1e9 };
  return Number(m[1]) * mult[m[2] ?? '']!;
}

/** Largest read-only mount carried (a ConfigMap holds at most 1 MiB, base64 takes a third more). */
const MAX_MOUNT_BYTES = 700 * 1024;

/** The regular files under `dir` (symlinks and caches left out), by relative path; a SandboxError when they are too large to carry. */
export async function readMountFiles(dir: string): Promise<MountFiles> {
  const files: MountFiles = new Map();
  let total = 0;
  const walk = async (rel: string): Promise<void> => {
    for (const e of await fsp.readdir(path.join(dir, rel), { withFileTypes: true })) {
      if (e.name === '__pycache__') continue;
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) await walk(p);
      else if (e.isFile()) {
        const data = await fsp.readFile(path.join(dir, p));
        total += data.length;
        if (total > MAX_MOUNT_BYTES) throw new SandboxError(`${dir} holds more than ${MAX_MOUNT_BYTES / 1024} KiB, more than a pod's read-only mount carries on Kubernetes`, 'start_failed');
        files.set(p, data);
      }
    }
  };
  await walk('');
  return files;
}
