/**
 * The Kubernetes objects of a sandbox, as plain data: its Pod, its user's workspace
 * claim, and the NetworkPolicy that cuts sandbox pods off the network. Pure functions,
 * so that the hardening can be read (and tested) in one place.
 *
 * The pod is what DockerDriver.containerSpec makes, in Kubernetes terms:
 * - `runtimeClassName` (gVisor, default `gvisor`);
 * - the runner alone as root inside gVisor, with SETUID, SETGID and KILL only (to start
 *   code as uid 1000 and end it), every other capability dropped; no privilege
 *   escalation, seccomp RuntimeDefault, a read-only root filesystem;
 * - no service account token, no service links, no host namespaces, `restartPolicy:
 *   Never` (a sandbox that dies is replaced by the gateway, never restarted under it);
 * - requests equal to limits (Guaranteed QoS): memory, CPU, and ephemeral storage;
 * - /tmp an in-memory emptyDir capped at the sandbox's /tmp size; /workspace the user's
 *   claim, group-owned by uid 1000's group (fsGroup) so the code's user may write it;
 * - the runner listens on a socket in a root-only folder, reached by exec'ing relay.py
 *   (RELAY_COMMAND): not through `attach`, whose output the kubelet keeps in the node's logs.
 *
 * The pids limit is the kubelet's (`podPidsLimit`), not the pod's: the preflight says so.
 */
import type { V1ConfigMap, V1NetworkPolicy, V1PersistentVolumeClaim, V1Pod, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import type { SandboxSpec } from '../types.js';
import { threadEnv } from '../run.js';

/** Label keys and values a sandbox's objects carry: any replica finds a user's pod by them. */
export const K8S_LABELS = {
  name: 'app.kubernetes.io/name',
  managedBy: 'app.kubernetes.io/managed-by',
  component: 'app.kubernetes.io/component',
  gateway: 'sandgate.dev/gateway',
  ownerId: 'sandgate.dev/owner-id',
} as const;
/** The owner's login (any text) and the gateway's own labels (LABEL_WORKSPACE …) travel as annotations, whatever their value. */
export const K8S_OWNER_ANNOTATION = 'sandgate.dev/owner';
export const SANDBOX_APP = 'sandgate-sandbox';
/** The name of the NetworkPolicy that isolates every sandbox pod of the namespace. */
export const NETWORK_POLICY_NAME = 'sandgate-sandboxes-deny-all';
/** The uid (and gid) code runs as: the image's user. */
export const SANDBOX_UID = 1000;
export const RUNNER_CONTAINER = 'runner';
/** The runner's socket in a pod (a root-only folder of its own): the gateway reaches it by exec'ing RELAY_COMMAND. */
export const RUNNER_SOCKET = '/run/sandgate/runner.sock';
/**
 * What the gateway execs in a pod to reach its runner. Not `attach`: a container's own
 * stdout is written to the node's logs by the kubelet (and shipped by log agents), and
 * what runs print is the users' data; an exec's streams are not kept.
 */
export const RELAY_COMMAND = ['/usr/bin/python3', '-I', '-S', '/opt/sandgate/runner/relay.py', RUNNER_SOCKET, '30'];
/** What the gateway execs in a helper pod: the confined workspace helper. */
export const HELPER_COMMAND = ['/usr/bin/python3', '-I', '-S', '/opt/sandgate/workspace_helper.py', '/workspace', String(SANDBOX_UID), String(SANDBOX_UID)];

export interface PodSettings {
  image: string;
  /** Default `gvisor`. */
  runtimeClassName: string;
  /** Distinguishes installations sharing a namespace (the gateway id). */
  gatewayId: string;
  memoryMb: number;
  cpus: number;
  tmpMb: number;
  /** Processes per uid in a sandbox (SANDGATE_SANDBOX_NPROC): the runner sets it, as no pod field does. Default 64. */
  nproc?: number;
  imagePullPolicy?: 'IfNotPresent' | 'Always' | 'Never';
}

/** The files of a read-only mount (/skills, /tools), by path relative to it: they travel in a ConfigMap of the pod's own. */
export type MountFiles = Map<string, Buffer>;

/** The ConfigMap that carries a pod's read-only mount at `mountPath`. */
export function mountConfigMapName(podName: string, mountPath: string): string {
  return `${podName}-${mountPath.replace(/[^a-z0-9]/g, '') || 'root'}`;
}

/** What makes an object the pod's: the cluster's garbage collector deletes it with the pod. */
export function ownerReference(podName: string, podUid: string) {
  return { apiVersion: 'v1', kind: 'Pod', name: podName, uid: podUid, blockOwnerDeletion: false };
}

/**
 * The ConfigMap holding `files` for the pod's mount, made before the pod and then given
 * to it (ownerReference). Keys are f0, f1… in the order of `files`; the pod's volume
 * maps each to its path.
 */
export function mountConfigMap(podName: string, mountPath: string, files: MountFiles, gatewayId: string): V1ConfigMap {
  const binaryData: Record<string, string> = {};
  let i = 0;
  for (const data of files.values()) binaryData[`f${i++}`] = data.toString('base64');
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: mountConfigMapName(podName, mountPath),
      labels: { ...baseLabels(gatewayId), [K8S_LABELS.component]: 'mount' },
      annotations: { 'sandgate.dev/pod': podName },
    },
    immutable: true,
    binaryData,
  };
}

/** The claim holding the workspace with this id (the database's, in upper and lower case: its characters as hex, one name for one id). */
export function claimName(workspaceId: string): string {
  if (!/^[A-Za-z0-9_-]{6,64}$/.test(workspaceId)) throw new Error(`invalid workspace id "${workspaceId}"`);
  return `sandgate-ws-${Buffer.from(workspaceId, 'utf8').toString('hex')}`;
}

/** Labels every object of the installation's sandboxes carries. */
export function baseLabels(gatewayId: string): Record<string, string> {
  return { [K8S_LABELS.name]: SANDBOX_APP, [K8S_LABELS.managedBy]: 'sandgate', [K8S_LABELS.gateway]: labelValue(gatewayId) };
}

/** `v` as a label value: at most 63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric. */
export function labelValue(v: string): string {
  const cleaned = v.replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 63).replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '');
  return cleaned || 'x';
}

export function podManifest(spec: SandboxSpec, name: string, s: PodSettings, mounts: ReadonlyMap<string, MountFiles> = new Map()): V1Pod {
  const labels: Record<string, string> = { ...baseLabels(s.gatewayId), [K8S_LABELS.component]: spec.owner ? 'user' : 'pool' };
  const annotations: Record<string, string> = {};
  for (const [k, v] of Object.entries(spec.labels ?? {})) annotations[k] = v;
  if (spec.owner) {
    labels[K8S_LABELS.ownerId] = String(spec.owner.userId);
    annotations[K8S_OWNER_ANNOTATION] = spec.owner.name;
  }
  const memory = `${s.memoryMb}Mi`;
  const cpu = `${Math.round(s.cpus * 1000)}m`;
  const volumes: V1Volume[] = [
    { name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: `${s.tmpMb}Mi` } },
    // The runner's socket: the runner makes the folder root's alone before it listens.
    { name: 'run', emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } },
  ];
  const volumeMounts: V1VolumeMount[] = [
    { name: 'tmp', mountPath: '/tmp' },
    { name: 'run', mountPath: '/run/sandgate' },
  ];
  if (spec.workspaceDir) {
    volumes.push({ name: 'workspace', persistentVolumeClaim: { claimName: spec.workspaceDir, readOnly: !spec.workspaceWritable } });
    volumeMounts.push({ name: 'workspace', mountPath: '/workspace', readOnly: !spec.workspaceWritable });
  }
  for (const [mountPath, files] of mounts) {
    const vname = `ro-${mountPath.replace(/[^a-z0-9]/g, '')}`;
    const items = [...files.keys()].map((p, i) => ({ key: `f${i}`, path: p, mode: 0o444 }));
    volumes.push({ name: vname, configMap: { name: mountConfigMapName(name, mountPath), items, defaultMode: 0o444 } });
    volumeMounts.push({ name: vname, mountPath, readOnly: true });
  }
  const env = [
    { name: 'SANDGATE_RUNNER_SOCKET', value: RUNNER_SOCKET },
    { name: 'SANDGATE_NPROC', value: String(s.nproc ?? 64) },
    ...Object.entries(threadEnv(s.cpus)).map(([n, value]) => ({ name: n, value })),
    ...(spec.denoCeiling ? [{ name: 'SANDGATE_DENO_CEILING', value: JSON.stringify(spec.denoCeiling) }] : []),
    ...(spec.egress
      ? [
          { name: 'SANDGATE_EGRESS_PORT', value: String(spec.egress.port) },
          { name: 'SANDGATE_EGRESS_ENV', value: JSON.stringify(spec.egress.env) },
          ...(spec.egress.open ? [{ name: 'SANDGATE_EGRESS_OPEN', value: '1' }] : []),
        ]
      : []),
    ...(spec.denoHostOnFirstUse ? [{ name: 'SANDGATE_DENO_HOST', value: 'first-use' }] : []),
  ];
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels, annotations },
    spec: {
      runtimeClassName: s.runtimeClassName,
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      hostNetwork: false,
      hostPID: false,
      hostIPC: false,
      terminationGracePeriodSeconds: 0,
      securityContext: {
        fsGroup: SANDBOX_UID,
        fsGroupChangePolicy: 'OnRootMismatch',
        seccompProfile: { type: 'RuntimeDefault' },
      },
      containers: [
        {
          name: RUNNER_CONTAINER,
          image: s.image,
          imagePullPolicy: s.imagePullPolicy ?? 'IfNotPresent',
          // The runner; it starts every user process as uid 1000 (sandgate_runner/parent/settings.py).
          securityContext: {
            runAsUser: 0,
            runAsGroup: 0,
            runAsNonRoot: false,
            privileged: false,
            allowPrivilegeEscalation: false,
            readOnlyRootFilesystem: true,
            capabilities: { drop: ['ALL'], add: ['SETUID', 'SETGID', 'KILL'] },
            seccompProfile: { type: 'RuntimeDefault' },
          },
          workingDir: '/workspace',
          env,
          stdin: false,
          tty: false,
          resources: {
            requests: { memory, cpu, 'ephemeral-storage': '64Mi' },
            limits: { memory, cpu, 'ephemeral-storage': '64Mi' },
          },
          volumeMounts,
        },
      ],
      volumes,
    },
  };
}

/** The claim for a workspace, sized to the workspace quota. */
export function claimManifest(workspaceId: string, gatewayId: string, sizeMb: number, storageClass?: string): V1PersistentVolumeClaim {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name: claimName(workspaceId), labels: { ...baseLabels(gatewayId), [K8S_LABELS.component]: 'workspace' }, annotations: { 'sandgate.dev/workspace': workspaceId } },
    spec: {
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: `${sizeMb}Mi` } },
      ...(storageClass && { storageClassName: storageClass }),
    },
  };
}

/** Every sandbox pod of the namespace: no traffic in, none out. */
export function networkPolicyManifest(gatewayId: string): V1NetworkPolicy {
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name: NETWORK_POLICY_NAME, labels: baseLabels(gatewayId) },
    spec: {
      podSelector: { matchLabels: { [K8S_LABELS.name]: SANDBOX_APP } },
      policyTypes: ['Ingress', 'Egress'],
      ingress: [],
      egress: [],
    },
  };
}

/** How long a workspace helper pod may live at most, whatever becomes of the gateway that made it. */
export const HELPER_POD_MAX_SEC = 3600;

/**
 * A short-lived pod through which the gateway reaches files in a workspace claim
 * (kubernetes/workspaces.ts): the same helper as on a Docker host (host/workspace_helper.py,
 * in the image), which chroots into the workspace and acts as the sandbox's user with no
 * capability. The pod only waits; the gateway execs the helper in it (HELPER_COMMAND), so
 * no file's content passes through the container's logged stdout; and it is gone after
 * HELPER_POD_MAX_SEC whatever happens.
 */
export function helperPodManifest(claim: string, name: string, s: Pick<PodSettings, 'image' | 'runtimeClassName' | 'gatewayId' | 'imagePullPolicy'>): V1Pod {
  const pod = podManifest({ workspaceDir: claim, workspaceWritable: true, readOnlyMounts: {} }, name, { ...s, memoryMb: 256, cpus: 0.5, tmpMb: 16 });
  pod.metadata!.labels = { ...baseLabels(s.gatewayId), [K8S_LABELS.component]: 'helper' };
  pod.metadata!.annotations = { 'sandgate.dev/claim': claim };
  pod.spec!.activeDeadlineSeconds = HELPER_POD_MAX_SEC;
  pod.spec!.volumes = pod.spec!.volumes!.filter((v) => v.name !== 'run');
  pod.spec!.containers[0]!.volumeMounts = pod.spec!.containers[0]!.volumeMounts!.filter((m) => m.name !== 'run');
  const c = pod.spec!.containers[0]!;
  c.command = ['/bin/sleep', String(HELPER_POD_MAX_SEC)];
  c.env = [];
  // Only what the helper needs to chroot into the workspace and become the sandbox's user.
  c.securityContext!.capabilities = { drop: ['ALL'], add: ['SETUID', 'SETGID', 'SYS_CHROOT'] };
  return pod;
}
