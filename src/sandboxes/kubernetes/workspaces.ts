/**
 * Workspaces on a cluster: each a PersistentVolumeClaim (ReadWriteOnce, sized to the
 * workspace quota, of the configured storage class), made at first use and kept until
 * the workspace is deleted. The size is the storage's to enforce, as the loop backend's
 * ext4 does on a Docker host (most provisioners do; hostPath and local-path ones do not:
 * the README says so).
 *
 * The gateway reaches a workspace's files with no host path: through a short-lived helper
 * pod that mounts the claim and runs the same confined helper as on a Docker host
 * (objects.ts, helperPodManifest), exec'd in it. It starts at the first file
 * operation, goes after the helper's idle time, and is limited to an hour by the cluster
 * whatever becomes of the gateway. While the user's sandbox runs, the helper pod is placed
 * on its node (a ReadWriteOnce claim is mounted by pods of one node only).
 */
import crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import * as k8s from '@kubernetes/client-node';
import type { Logger } from '../../logger.js';
import type { WorkspaceStore } from '../types.js';
import { SANDBOX_GID, SANDBOX_UID } from '../workspace.js';
import { WorkspaceHelper, type HelperProcess } from '../workspace-helper.js';
import { apiStatus } from './api-status.js';
import { claimManifest, claimName, HELPER_COMMAND, helperPodManifest, type PodSettings } from './objects.js';
import { execStreams, waitRunning } from './pods.js';

export interface KubernetesWorkspacesOptions extends Pick<PodSettings, 'image' | 'runtimeClassName' | 'gatewayId' | 'imagePullPolicy'> {
  kubeConfig: k8s.KubeConfig;
  namespace: string;
  /** Size of each workspace claim (the workspace quota). */
  sizeMb: number;
  /** Storage class of the claims; none: the cluster's default. */
  storageClass?: string;
  logger: Logger;
  /** How long a helper pod may take to run. Default 60 s. */
  helperStartMs?: number;
}

export class KubernetesWorkspaces implements WorkspaceStore {
  private readonly core: k8s.CoreV1Api;
  private readonly exec: k8s.Exec;
  private readonly helpers = new Map<string, WorkspaceHelper>();
  private readonly made = new Set<string>();
  private readonly log: Logger;
  /** Every gateway on the same namespace reaches the same claims, from any node. */
  readonly storeId: string;

  constructor(private readonly opts: KubernetesWorkspacesOptions) {
    this.storeId = `kubernetes:${opts.namespace}`;
    this.core = opts.kubeConfig.makeApiClient(k8s.CoreV1Api);
    this.exec = new k8s.Exec(opts.kubeConfig);
    this.log = opts.logger.child({ module: 'kubernetes-workspaces' });
  }

  newId(): string {
    return crypto.randomBytes(9).toString('base64url');
  }

  async ensure(id: string): Promise<string> {
    const claim = claimName(id);
    if (this.made.has(id)) return claim;
    const o = this.opts;
    try {
      await this.core.createNamespacedPersistentVolumeClaim({ namespace: o.namespace, body: claimManifest(id, o.gatewayId, o.sizeMb, o.storageClass) });
      this.log.info({ claim }, 'made a workspace claim');
    } catch (e) {
      if (apiStatus(e)?.code !== 409) throw new Error(`the cluster refused the workspace's claim ${claim}: ${apiStatus(e)?.message ?? (e as Error).message}`);
    }
    this.made.add(id);
    return claim;
  }

  async helper(id: string): Promise<WorkspaceHelper> {
    const claim = await this.ensure(id);
    let helper = this.helpers.get(id);
    if (!helper) {
      helper = new WorkspaceHelper({
        root: claim,
        uid: SANDBOX_UID,
        gid: SANDBOX_GID,
        launch: () => new HelperPod(this, claim),
        onDiagnostic: (m) => this.log.warn(m),
      });
      this.helpers.set(id, helper);
    }
    return helper;
  }

  /** Not known without a helper pod: the admin page shows it as unknown rather than start one per user. */
  usage(id: string): Promise<{ usedBytes: number; limitBytes: number | null }> {
    return Promise.reject(new Error(`the use of workspace claim ${claimName(id)} is the storage's to report`));
  }

  async releaseAll(keep: ReadonlySet<string> = new Set()): Promise<void> {
    for (const [id, helper] of [...this.helpers]) {
      if (keep.has(id)) continue;
      this.helpers.delete(id);
      await helper.close(true);
    }
  }

  async destroy(id: string): Promise<void> {
    const helper = this.helpers.get(id);
    this.helpers.delete(id);
    await helper?.close(true);
    this.made.delete(id);
    try {
      await this.core.deleteNamespacedPersistentVolumeClaim({ name: claimName(id), namespace: this.opts.namespace });
    } catch (e) {
      if (apiStatus(e)?.code !== 404) throw new Error(`the workspace's claim could not be deleted: ${apiStatus(e)?.message ?? (e as Error).message}`);
    }
  }

  /** Starts a helper pod on the claim, on the node of a running pod that mounts it (if any); its name. */
  async startHelperPod(claim: string): Promise<string> {
    const o = this.opts;
    const name = `sandgate-files-${crypto.randomBytes(4).toString('hex')}`;
    const pod = helperPodManifest(claim, name, o);
    const node = await this.nodeOf(claim);
    if (node) pod.spec!.nodeName = node;
    await this.core.createNamespacedPod({ namespace: o.namespace, body: pod });
    try {
      await waitRunning(o.kubeConfig, o.namespace, name, o.helperStartMs ?? 60_000);
    } catch (e) {
      await this.deletePod(name);
      throw e;
    }
    return name;
  }

  async execHelper(name: string): ReturnType<typeof execStreams> {
    return execStreams(this.exec, this.opts.namespace, name, HELPER_COMMAND);
  }

  async deletePod(name: string): Promise<void> {
    await this.core.deleteNamespacedPod({ name, namespace: this.opts.namespace, gracePeriodSeconds: 0 }).catch(() => {});
  }

  private async nodeOf(claim: string): Promise<string | undefined> {
    const pods = await this.core.listNamespacedPod({ namespace: this.opts.namespace, labelSelector: 'app.kubernetes.io/managed-by=sandgate' }).catch(() => undefined);
    const user = pods?.items.find((p) => p.status?.phase === 'Running' && p.spec?.nodeName && p.spec.volumes?.some((v) => v.persistentVolumeClaim?.claimName === claim));
    return user?.spec?.nodeName;
  }
}

/**
 * A helper in a pod, as WorkspaceHelper sees a local process: stdin and stdout are the
 * exec'd helper's, `kill` deletes the pod, `exit` comes when its stream ends.
 * Requests written before the pod runs wait in stdin.
 */
class HelperPod extends EventEmitter implements HelperProcess {
  readonly stdin = new PassThrough();
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  private name?: string;
  private killed = false;

  constructor(
    private readonly store: KubernetesWorkspaces,
    claim: string,
  ) {
    super();
    void this.start(claim);
  }

  private async start(claim: string): Promise<void> {
    try {
      this.name = await this.store.startHelperPod(claim);
      if (this.killed) return void (await this.store.deletePod(this.name));
      const { stdin, stdout, stderr } = await this.store.execHelper(this.name);
      this.stdin.pipe(stdin);
      stdout.pipe(this.stdout, { end: false });
      stderr.pipe(this.stderr, { end: false });
      stdout.on('end', () => this.exited(0, null));
    } catch (e) {
      this.emit('error', new Error(`its pod did not start: ${(e as Error).message}`));
      this.exited(null, 'SIGKILL');
    }
  }

  kill(): boolean {
    this.killed = true;
    if (this.name) void this.store.deletePod(this.name);
    this.exited(null, 'SIGKILL');
    return true;
  }

  private exited(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exitCode !== null || this.signalCode !== null) return;
    this.exitCode = code;
    this.signalCode = signal;
    if (this.name && !this.killed) void this.store.deletePod(this.name);
    this.emit('exit', code, signal);
  }
}
