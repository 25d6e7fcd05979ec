/**
 * A stand-in Kubernetes API server: what the Kubernetes sandbox driver and its preflight
 * use, on the real wire protocol, with each pod backed by a real container on the local
 * Docker (under runsc when the pod's RuntimeClass says so).
 *
 * Served, as the API server serves them (JSON, `Status` objects for errors):
 * - `GET /version`;
 * - pods, persistentvolumeclaims, configmaps (core/v1), networkpolicies (networking.k8s.io/v1) in a
 *   namespace: create, get, list with label and field selectors, JSON patch, delete, and watch
 *   (`?watch=true`: one JSON event per line, the existing objects first as ADDED);
 * - runtimeclasses (node.k8s.io/v1, cluster-wide): get, list, create, delete;
 * - `pods/{name}/attach` and `pods/{name}/exec` over the WebSocket channel protocol
 *   (v5.channel.k8s.io, v4…): stdin on channel 0, stdout 1, stderr 2, the status on 3
 *   when the container or command ends (an exec's exit code in it, as the kubelet says it);
 * - `pods/{name}/log`; pod metrics (metrics.k8s.io/v1beta1, as metrics-server gives them);
 * - selfsubjectaccessreviews (authorization.k8s.io/v1).
 *
 * Every object created is validated against the Kubernetes OpenAPI schema
 * (kubernetes-models) and its names and labels checked as the API server checks them: an
 * invalid one is a 422, as there. A pod naming a RuntimeClass that does not exist is
 * refused (its admission plugin); one whose claim does not exist or is not bound stays
 * Pending. What a kubelet does is done to the container: the security context (user,
 * groups, read-only root, capabilities, no privilege escalation), resource limits, a pod
 * pids limit, emptyDir in memory as a size-capped tmpfs, a claim as a directory of its
 * own (chgrp'd to the fsGroup), the service account token mounted unless the pod opts
 * out, service links in the environment unless it opts out. The network: a pod that a
 * NetworkPolicy of its namespace isolates both ways with no rule letting anything through
 * gets none; any other pod is on Docker's bridge network.
 *
 * TLS as a cluster has it: a CA of its own (in the kubeconfig) and a certificate for
 * 127.0.0.1. Credentials: a bearer token; requests without it are 401. `deny` lists what the
 * token may not do (`"create pods/attach"`, `"create networkpolicies"`), for the
 * preflight's permission checks: such a request is a 403, and a review says not allowed.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, type Duplex } from 'node:stream';
import Docker from 'dockerode';
import { WebSocketServer, type WebSocket } from 'ws';
import { makeCertificates } from './tls.js';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';
import { RuntimeClass } from 'kubernetes-models/node.k8s.io/v1/RuntimeClass';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { PersistentVolumeClaim } from 'kubernetes-models/v1/PersistentVolumeClaim';
import { Pod } from 'kubernetes-models/v1/Pod';

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export interface KubeStandinOptions {
  /** Namespaces that exist. Default ['sandgate']. */
  namespaces?: string[];
  /** RuntimeClasses there are, name -> handler (Docker runtime). Default { gvisor: 'runsc' }. */
  runtimeClasses?: Record<string, string>;
  /** Storage classes that bind claims. Default ['standard'] (the default class). */
  storageClasses?: string[];
  /** The kubelet's pod pids limit. Default 1024. */
  podPidsLimit?: number;
  /** Whether NetworkPolicies isolate pods (false: a network plugin that ignores them, as flannel). Default true. */
  enforceNetworkPolicy?: boolean;
  docker?: Docker;
}

export interface KubeStandin {
  url: string;
  token: string;
  /** A kubeconfig file naming this server and token, namespace `namespace`. */
  kubeconfigPath: string;
  /** What the token may not do, as "verb resource[/subresource]". */
  deny: Set<string>;
  /** Requests served, as `METHOD path` (without the query). */
  calls: string[];
  /** While true, every connection is dropped unanswered. */
  down: boolean;
  /** The Docker container behind a pod, once it has one. */
  containerOf(namespace: string, pod: string): string | undefined;
  /** The objects of a kind (`pods`, `persistentvolumeclaims`, `networkpolicies`, `runtimeclasses`) in a namespace ('' for cluster-wide ones). */
  objects(resource: string, namespace?: string): Obj[];
  /** The directory holding a claim's data. */
  claimDir(namespace: string, claim: string): string;
  close(): Promise<void>;
}

/** The label of every container a stand-in started (the test run's teardown removes any left). */
export const STANDIN_LABEL = 'org.sandgate.kube-standin';
const TOKEN_PATH = '/var/run/secrets/kubernetes.io/serviceaccount';

/** Kinds served, by resource name: their group/version, kind, namespaced, and the schema check. */
const RESOURCES: Record<string, { group: string; version: string; kind: string; namespaced: boolean; validate: (o: Obj) => void }> = {
  pods: { group: '', version: 'v1', kind: 'Pod', namespaced: true, validate: (o) => new Pod(o as never).validate() },
  persistentvolumeclaims: { group: '', version: 'v1', kind: 'PersistentVolumeClaim', namespaced: true, validate: (o) => new PersistentVolumeClaim(o as never).validate() },
  configmaps: { group: '', version: 'v1', kind: 'ConfigMap', namespaced: true, validate: (o) => new ConfigMap(o as never).validate() },
  networkpolicies: { group: 'networking.k8s.io', version: 'v1', kind: 'NetworkPolicy', namespaced: true, validate: (o) => new NetworkPolicy(o as never).validate() },
  runtimeclasses: { group: 'node.k8s.io', version: 'v1', kind: 'RuntimeClass', namespaced: false, validate: (o) => new RuntimeClass(o as never).validate() },
};

class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

const status = (code: number, reason: string, message: string) => ({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code });

const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

/** The API server's checks of metadata: name, labels (keys and values). */
function checkMetadata(kind: string, meta: Obj): void {
  const name = String(meta.name ?? '');
  if (!name || name.length > 253 || !DNS1123_SUBDOMAIN.test(name)) throw new ApiError(422, 'Invalid', `${kind} "${name}" is invalid: metadata.name: Invalid value: "${name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'`);
  if (kind === 'Pod' && name.length > 63) throw new ApiError(422, 'Invalid', `Pod "${name}" is invalid: metadata.name: must be no more than 63 characters`);
  for (const [k, v] of Object.entries((meta.labels ?? {}) as Record<string, unknown>)) {
    const slash = k.lastIndexOf('/');
    const prefix = slash >= 0 ? k.slice(0, slash) : '';
    const local = slash >= 0 ? k.slice(slash + 1) : k;
    if ((prefix && (prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix))) || local.length > 63 || !LABEL_NAME.test(local)) {
      throw new ApiError(422, 'Invalid', `${kind} "${name}" is invalid: metadata.labels: Invalid value: "${k}": name part must consist of alphanumeric characters, '-', '_' or '.'`);
    }
    if (typeof v !== 'string' || v.length > 63 || (v !== '' && !LABEL_NAME.test(v))) {
      throw new ApiError(422, 'Invalid', `${kind} "${name}" is invalid: metadata.labels: Invalid value: "${String(v)}": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', at most 63`);
    }
  }
}

/** Label selector (equality and set based, as `kubectl -l` takes them), as a predicate. */
export function parseLabelSelector(selector: string): (labels: Record<string, string>) => boolean {
  const terms: ((l: Record<string, string>) => boolean)[] = [];
  for (const raw of selector.match(/([^,(]+(\([^)]*\))?)/g) ?? []) {
    const t = raw.trim();
    if (!t) continue;
    let m: RegExpMatchArray | null;
    if ((m = t.match(/^([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)$/))) {
      const [, k, op, list] = m;
      const vals = list!.split(',').map((s) => s.trim());
      terms.push(op === 'in' ? (l) => k! in l && vals.includes(l[k!]!) : (l) => !(k! in l) || !vals.includes(l[k!]!));
    } else if ((m = t.match(/^([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)$/))) {
      const [, k, op, v] = m;
      terms.push(op === '!=' ? (l) => l[k!] !== v : (l) => l[k!] === v);
    } else if ((m = t.match(/^!([^\s]+)$/))) {
      const k = m[1]!;
      terms.push((l) => !(k in l));
    } else if (/^[^\s!=()]+$/.test(t)) {
      terms.push((l) => t in l);
    } else {
      throw new ApiError(400, 'BadRequest', `unable to parse requirement: ${t}`);
    }
  }
  return (labels) => terms.every((f) => f(labels));
}

function parseFieldSelector(selector: string): (o: Obj) => boolean {
  const terms = selector
    .split(',')
    .filter(Boolean)
    .map((t) => {
      const m = t.match(/^([a-z.]+)\s*(==|=|!=)\s*(.*)$/i);
      if (!m) throw new ApiError(400, 'BadRequest', `invalid field selector: ${t}`);
      const [, field, op, v] = m;
      const get = (o: Obj) => field!.split('.').reduce<unknown>((x, k) => (x as Obj | undefined)?.[k], o);
      return (o: Obj) => (op === '!=' ? get(o) !== v : get(o) === v);
    });
  return (o) => terms.every((f) => f(o));
}

/** Kubernetes quantities: "512Mi", "1G", "500m" (cpu), "2". */
export function quantity(q: string | number | undefined): number | undefined {
  if (q === undefined) return undefined;
  const m = String(q).match(/^([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$/);
  if (!m) throw new ApiError(422, 'Invalid', `quantities must match the regular expression: ${String(q)}`);
  const mult: Record<string, number> = { '': 1, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4 };
  return Number(m[1]) * mult[m[2] ?? '']!;
}

export async function startKubeStandin(opts: KubeStandinOptions = {}): Promise<KubeStandin> {
  const id = crypto.randomBytes(4).toString('hex');
  const token = crypto.randomBytes(24).toString('base64url');
  const docker = opts.docker ?? new Docker();
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-kube-'));
  fs.chmodSync(root, 0o755);
  const namespaces = new Set(opts.namespaces ?? ['sandgate']);
  const storageClasses = new Set(opts.storageClasses ?? ['standard']);
  const podPidsLimit = opts.podPidsLimit ?? 1024;
  /** resource -> "ns/name" -> object */
  const store = new Map<string, Map<string, Obj>>(Object.keys(RESOURCES).map((r) => [r, new Map()]));
  const watchers = new Set<{ resource: string; namespace: string; match: (o: Obj) => boolean; send: (type: string, o: Obj) => void }>();
  /** "ns/pod" -> its container id */
  const containers = new Map<string, string>();
  /** "ns/pod" -> the ends of its attach and exec streams: the kubelet ends them when the container ends. */
  const streams = new Map<string, Set<() => void>>();
  const endStreams = (podKey: string) => {
    for (const end of streams.get(podKey) ?? []) end();
    streams.delete(podKey);
  };
  const deny = new Set<string>();
  const calls: string[] = [];
  let rv = 1;
  const sockets = new Set<Duplex>();
  const self: KubeStandin = {
    url: '',
    token,
    kubeconfigPath: path.join(root, 'kubeconfig'),
    deny,
    calls,
    down: false,
    containerOf: (ns, pod) => containers.get(`${ns}/${pod}`),
    objects: (resource, namespace = '') => [...(store.get(resource)?.values() ?? [])].filter((o) => !namespace || o.metadata.namespace === namespace).map((o) => structuredClone(o)),
    claimDir: (ns, claim) => path.join(root, 'claims', ns, claim),
    close,
  };

  for (const [name, handler] of Object.entries(opts.runtimeClasses ?? { gvisor: 'runsc' })) {
    put('runtimeclasses', { apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name }, handler }, '');
  }

  function key(namespace: string, name: string) {
    return `${namespace}/${name}`;
  }
  function put(resource: string, o: Obj, namespace: string, type: 'ADDED' | 'MODIFIED' = 'ADDED'): Obj {
    o.metadata.resourceVersion = String(++rv);
    store.get(resource)!.set(key(namespace, o.metadata.name), o);
    notify(resource, type, o);
    return o;
  }
  function notify(resource: string, type: string, o: Obj) {
    for (const w of watchers) if (w.resource === resource && (!w.namespace || w.namespace === (o.metadata.namespace ?? '')) && w.match(o)) w.send(type, o);
  }
  function remove(resource: string, namespace: string, name: string): Obj | undefined {
    const o = store.get(resource)!.get(key(namespace, name));
    if (!o) return undefined;
    store.get(resource)!.delete(key(namespace, name));
    o.metadata.resourceVersion = String(++rv);
    notify(resource, 'DELETED', o);
    return o;
  }
  function allowed(verb: string, resource: string, subresource?: string): boolean {
    return !deny.has(`${verb} ${resource}${subresource ? `/${subresource}` : ''}`);
  }
  function forbid(verb: string, resource: string, group: string, namespace: string, subresource?: string, name?: string) {
    if (allowed(verb, resource, subresource)) return;
    throw new ApiError(403, 'Forbidden', `${resource}${subresource ? `/${subresource}` : ''}${name ? ` "${name}"` : ''} is forbidden: User "system:serviceaccount:${namespace || 'default'}:sandgate" cannot ${verb} resource "${resource}${subresource ? `/${subresource}` : ''}" in API group "${group}"${namespace ? ` in the namespace "${namespace}"` : ' at the cluster scope'}`);
  }

  // --- pods: the kubelet's part
  /** Whether a NetworkPolicy of the pod's namespace isolates it both ways, letting nothing through. */
  function isolated(pod: Obj): boolean {
    const ns = pod.metadata.namespace as string;
    let ingress = false;
    let egress = false;
    for (const np of self.objects('networkpolicies', ns)) {
      const sel = np.spec?.podSelector ?? {};
      const matchLabels = (sel.matchLabels ?? {}) as Record<string, string>;
      if (sel.matchExpressions?.length) continue;
      if (!Object.entries(matchLabels).every(([k, v]) => pod.metadata.labels?.[k] === v)) continue;
      const types: string[] = np.spec.policyTypes ?? ['Ingress', ...(np.spec.egress ? ['Egress'] : [])];
      // Any rule lets something through: only a policy with none isolates.
      if (types.includes('Ingress')) ingress ||= !(np.spec.ingress?.length > 0);
      if (types.includes('Egress')) egress ||= !(np.spec.egress?.length > 0);
    }
    return ingress && egress;
  }

  function setPodStatus(pod: Obj, statusPatch: Obj) {
    const current = store.get('pods')!.get(key(pod.metadata.namespace, pod.metadata.name));
    if (current !== pod) return;
    pod.status = { ...pod.status, ...statusPatch };
    put('pods', pod, pod.metadata.namespace, 'MODIFIED');
  }

  async function runPod(pod: Obj): Promise<void> {
    const ns = pod.metadata.namespace as string;
    const spec = pod.spec as Obj;
    const c = spec.containers[0] as Obj;
    // Scheduling waits for every claim to exist and be bound.
    for (let tries = 0; ; tries++) {
      if (store.get('pods')!.get(key(ns, pod.metadata.name)) !== pod) return;
      const missing = (spec.volumes ?? [])
        .filter((v: Obj) => v.persistentVolumeClaim)
        .map((v: Obj) => v.persistentVolumeClaim.claimName as string)
        .find((claim: string) => store.get('persistentvolumeclaims')!.get(key(ns, claim))?.status?.phase !== 'Bound');
      const missingMap = (spec.volumes ?? []).map((v: Obj) => v.configMap?.name as string | undefined).find((n: string | undefined) => n && !store.get('configmaps')!.has(key(ns, n)));
      if (!missing && !missingMap) break;
      if (missing) {
        const message = store.get('persistentvolumeclaims')!.has(key(ns, missing)) ? `pod has unbound immediate PersistentVolumeClaims` : `persistentvolumeclaim "${missing}" not found`;
        if (tries === 0) setPodStatus(pod, { phase: 'Pending', conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message }] });
      } else if (tries === 0) {
        // As the kubelet: the pod is scheduled, its container waits for the volume.
        setPodStatus(pod, { phase: 'Pending', containerStatuses: [{ name: spec.containers[0].name, ready: false, restartCount: 0, image: spec.containers[0].image, imageID: '', state: { waiting: { reason: 'ContainerCreating', message: `configmap "${missingMap}" not found` } } }] });
      }
      await new Promise((r) => setTimeout(r, 300));
    }
    const sc = { ...(spec.securityContext ?? {}), ...(c.securityContext ?? {}) } as Obj;
    const limits = (c.resources?.limits ?? {}) as Obj;
    const mounts: Docker.MountSettings[] = [];
    const tmpfs: Record<string, string> = {};
    for (const vm of (c.volumeMounts ?? []) as Obj[]) {
      const vol = (spec.volumes ?? []).find((v: Obj) => v.name === vm.name) as Obj | undefined;
      if (!vol) throw new Error(`volume ${vm.name} not found`);
      if (vol.persistentVolumeClaim) {
        const dir = self.claimDir(ns, vol.persistentVolumeClaim.claimName);
        if (spec.securityContext?.fsGroup !== undefined) {
          // As the kubelet does for a volume that supports ownership management.
          fs.chownSync(dir, 0, spec.securityContext.fsGroup);
          fs.chmodSync(dir, 0o2775);
        }
        mounts.push({ Type: 'bind', Source: dir, Target: vm.mountPath, ReadOnly: !!(vm.readOnly || vol.persistentVolumeClaim.readOnly) });
      } else if (vol.configMap) {
        // The kubelet's projection: each item (or every key) a file, read-only.
        const cm = store.get('configmaps')!.get(key(ns, vol.configMap.name))!;
        const dir = fs.mkdtempSync(path.join(root, 'configmap-'));
        const all = { ...(cm.data ?? {}), ...Object.fromEntries(Object.entries((cm.binaryData ?? {}) as Record<string, string>).map(([k, v]) => [k, Buffer.from(v, 'base64')])) } as Record<string, string | Buffer>;
        const items = ((vol.configMap.items as Obj[] | undefined) ?? Object.keys(all).map((k) => ({ key: k, path: k }))) as Obj[];
        for (const item of items) {
          if (String(item.path).split('/').includes('..') || String(item.path).startsWith('/')) throw new Error(`invalid item path ${item.path}`);
          const file = path.join(dir, item.path);
          fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o755 });
          fs.writeFileSync(file, all[item.key] ?? '', { mode: item.mode ?? vol.configMap.defaultMode ?? 0o644 });
        }
        fs.chmodSync(dir, 0o755);
        mounts.push({ Type: 'bind', Source: dir, Target: vm.mountPath, ReadOnly: true });
      } else if (vol.emptyDir) {
        if (vol.emptyDir.medium === 'Memory') {
          const size = quantity(vol.emptyDir.sizeLimit);
          tmpfs[vm.mountPath] = `rw,nosuid,nodev${size ? `,size=${Math.floor(size)}` : ''},mode=1777`;
        } else {
          const dir = fs.mkdtempSync(path.join(root, 'emptydir-'));
          fs.chmodSync(dir, 0o777);
          mounts.push({ Type: 'bind', Source: dir, Target: vm.mountPath, ReadOnly: !!vm.readOnly });
        }
      } else {
        throw new Error(`the stand-in mounts claims, ConfigMaps and emptyDir volumes only (${vm.name})`);
      }
    }
    if (spec.automountServiceAccountToken !== false) {
      const dir = path.join(root, 'sa', `${ns}-${pod.metadata.name}`);
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(path.join(dir, 'token'), `eyJhbGciOiJSUzI1NiJ9.${crypto.randomBytes(32).toString('base64url')}.standin`);
      fs.writeFileSync(path.join(dir, 'namespace'), ns);
      mounts.push({ Type: 'bind', Source: dir, Target: TOKEN_PATH, ReadOnly: true });
    }
    const env = ((c.env ?? []) as Obj[]).map((e) => `${e.name}=${e.value ?? ''}`);
    // As the kubelet: the API server's address, always (here where pods on Docker's bridge reach this server).
    env.push(`KUBERNETES_SERVICE_HOST=${serviceAddress.host}`, `KUBERNETES_SERVICE_PORT=${serviceAddress.port}`);
    if (spec.enableServiceLinks !== false) env.push('SANDGATE_SERVICE_HOST=10.96.0.20', 'SANDGATE_SERVICE_PORT=8080', 'SANDGATE_PORT=tcp://10.96.0.20:8080');
    const runtimeClass = spec.runtimeClassName ? store.get('runtimeclasses')!.get(key('', spec.runtimeClassName)) : undefined;
    const memory = quantity(limits.memory);
    const cpu = quantity(limits.cpu);
    const user = sc.runAsUser !== undefined ? `${sc.runAsUser}${sc.runAsGroup !== undefined ? `:${sc.runAsGroup}` : ''}` : undefined;
    const groups = [...(spec.securityContext?.fsGroup !== undefined ? [spec.securityContext.fsGroup] : []), ...(spec.securityContext?.supplementalGroups ?? [])].map(String);
    let container: Docker.Container;
    try {
      container = await docker.createContainer({
        name: `kube-${id}-${ns}-${pod.metadata.name}`,
        Image: c.image,
        ...(c.command && { Entrypoint: c.command }),
        ...(c.args && { Cmd: c.args }),
        ...(user && { User: user }),
        ...(c.workingDir && { WorkingDir: c.workingDir }),
        Env: env,
        Labels: { [STANDIN_LABEL]: id, 'io.kubernetes.pod.name': pod.metadata.name, 'io.kubernetes.pod.namespace': ns },
        OpenStdin: !!c.stdin,
        StdinOnce: !!c.stdinOnce,
        AttachStdin: !!c.stdin,
        AttachStdout: true,
        AttachStderr: true,
        Tty: !!c.tty,
        HostConfig: {
          ...(runtimeClass && { Runtime: runtimeClass.handler }),
          ...(opts.enforceNetworkPolicy !== false && isolated(pod) ? { NetworkMode: 'none' } : {}),
          ReadonlyRootfs: !!sc.readOnlyRootFilesystem,
          Privileged: !!sc.privileged,
          CapDrop: sc.capabilities?.drop ?? [],
          CapAdd: sc.capabilities?.add ?? [],
          SecurityOpt: sc.allowPrivilegeEscalation === false ? ['no-new-privileges'] : [],
          ...(memory && { Memory: Math.floor(memory), MemorySwap: Math.floor(memory) }),
          ...(cpu && { NanoCpus: Math.round(cpu * 1e9) }),
          PidsLimit: podPidsLimit,
          GroupAdd: groups,
          Tmpfs: tmpfs,
          Mounts: mounts,
          RestartPolicy: { Name: 'no' },
        },
      });
    } catch (e) {
      const reason = /No such image/i.test((e as Error).message) ? 'ErrImagePull' : 'CreateContainerError';
      setPodStatus(pod, { phase: 'Pending', containerStatuses: [{ name: c.name, ready: false, restartCount: 0, image: c.image, imageID: '', state: { waiting: { reason, message: (e as Error).message } } }] });
      return;
    }
    containers.set(key(ns, pod.metadata.name), container.id);
    if (store.get('pods')!.get(key(ns, pod.metadata.name)) !== pod) {
      await container.remove({ force: true }).catch(() => {});
      return;
    }
    try {
      await container.start();
    } catch (e) {
      setPodStatus(pod, { phase: 'Failed', containerStatuses: [{ name: c.name, ready: false, restartCount: 0, image: c.image, imageID: '', state: { terminated: { exitCode: 128, reason: 'StartError', message: (e as Error).message } } }] });
      return;
    }
    const startedAt = new Date().toISOString();
    setPodStatus(pod, {
      phase: 'Running',
      podIP: `10.244.0.${(rv % 250) + 2}`,
      hostIP: '192.168.0.10',
      startTime: startedAt,
      conditions: [
        { type: 'PodScheduled', status: 'True' },
        { type: 'Ready', status: 'True' },
      ],
      containerStatuses: [{ name: c.name, ready: true, started: true, restartCount: 0, image: c.image, imageID: `docker-pullable://${c.image}`, containerID: `docker://${container.id}`, state: { running: { startedAt } } }],
    });
    const exit = (await container.wait().catch(() => ({ StatusCode: 137 }))) as { StatusCode: number };
    endStreams(key(ns, pod.metadata.name));
    const info = await container.inspect().catch(() => undefined);
    setPodStatus(pod, {
      phase: exit.StatusCode === 0 ? 'Succeeded' : 'Failed',
      conditions: [{ type: 'Ready', status: 'False', reason: 'PodCompleted' }],
      containerStatuses: [
        {
          name: c.name,
          ready: false,
          started: false,
          restartCount: 0,
          image: c.image,
          imageID: `docker-pullable://${c.image}`,
          containerID: `docker://${container.id}`,
          state: { terminated: { exitCode: exit.StatusCode, reason: info?.State.OOMKilled ? 'OOMKilled' : exit.StatusCode === 0 ? 'Completed' : 'Error', startedAt, finishedAt: new Date().toISOString() } },
        },
      ],
    });
  }

  async function deletePod(pod: Obj): Promise<void> {
    const ns = pod.metadata.namespace as string;
    pod.metadata.deletionTimestamp = new Date().toISOString();
    pod.metadata.deletionGracePeriodSeconds = 0;
    put('pods', pod, ns, 'MODIFIED');
    const cid = containers.get(key(ns, pod.metadata.name));
    if (cid) await docker.getContainer(cid).remove({ force: true }).catch(() => {});
    containers.delete(key(ns, pod.metadata.name));
    endStreams(key(ns, pod.metadata.name));
    fs.rmSync(path.join(root, 'sa', `${ns}-${pod.metadata.name}`), { recursive: true, force: true });
    remove('pods', ns, pod.metadata.name);
    // The garbage collector: what the pod owned goes with it.
    for (const cm of self.objects('configmaps', ns)) if ((cm.metadata.ownerReferences ?? []).some((r: Obj) => r.uid === pod.metadata.uid)) remove('configmaps', ns, cm.metadata.name);
    // A claim being deleted goes once no pod uses it (its protection finalizer).
    for (const pvc of self.objects('persistentvolumeclaims', ns)) if (pvc.metadata.deletionTimestamp) finishClaimDeletion(ns, pvc.metadata.name);
  }

  function claimInUse(ns: string, claim: string): boolean {
    return self.objects('pods', ns).some((p) => (p.spec.volumes ?? []).some((v: Obj) => v.persistentVolumeClaim?.claimName === claim));
  }
  function finishClaimDeletion(ns: string, claim: string) {
    if (claimInUse(ns, claim)) return;
    remove('persistentvolumeclaims', ns, claim);
    fs.rmSync(self.claimDir(ns, claim), { recursive: true, force: true });
  }

  // --- the REST API
  async function readJson(req: http.IncomingMessage): Promise<Obj> {
    const v = await readJsonAny(req);
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new ApiError(400, 'BadRequest', 'the body of the request was in an unknown format: not an object');
    return v as Obj;
  }

  async function readJsonAny(req: http.IncomingMessage): Promise<unknown> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req) {
      size += (c as Buffer).length;
      if (size > 3 * 1024 * 1024) throw new ApiError(413, 'RequestEntityTooLarge', 'request is too large');
      chunks.push(c as Buffer);
    }
    try {
      return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
    } catch (e) {
      throw new ApiError(400, 'BadRequest', `the body of the request was in an unknown format: ${(e as Error).message}`);
    }
  }

  async function create(resource: string, namespace: string, body: Obj): Promise<Obj> {
    const r = RESOURCES[resource]!;
    if (r.namespaced && !namespaces.has(namespace)) throw new ApiError(404, 'NotFound', `namespaces "${namespace}" not found`);
    const o = structuredClone(body);
    o.apiVersion = r.group ? `${r.group}/${r.version}` : r.version;
    o.kind = r.kind;
    o.metadata ??= {};
    if (!o.metadata.name && o.metadata.generateName) o.metadata.name = `${o.metadata.generateName}${crypto.randomBytes(3).toString('hex').slice(0, 5)}`;
    if (r.namespaced) {
      if (o.metadata.namespace && o.metadata.namespace !== namespace) throw new ApiError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
      o.metadata.namespace = namespace;
    }
    checkMetadata(r.kind, o.metadata);
    try {
      r.validate(o);
    } catch (e) {
      throw new ApiError(422, 'Invalid', `${r.kind} "${o.metadata.name}" is invalid: ${(e as Error).message.slice(0, 2000)}`);
    }
    if (store.get(resource)!.has(key(namespace, o.metadata.name))) throw new ApiError(409, 'AlreadyExists', `${resource} "${o.metadata.name}" already exists`);
    o.metadata.uid = crypto.randomUUID();
    o.metadata.creationTimestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    if (resource === 'pods') {
      const spec = o.spec as Obj;
      if (spec.containers.length !== 1) throw new ApiError(422, 'Invalid', 'the stand-in runs pods of one container');
      if (spec.runtimeClassName && !store.get('runtimeclasses')!.has(key('', spec.runtimeClassName))) {
        throw new ApiError(403, 'Forbidden', `pods "${o.metadata.name}" is forbidden: pod rejected: RuntimeClass "${spec.runtimeClassName}" not found`);
      }
      o.status = { phase: 'Pending', qosClass: 'Guaranteed' };
      put(resource, o, namespace);
      void runPod(o).catch((e: Error) => setPodStatus(o, { phase: 'Failed', message: e.message }));
      return o;
    }
    if (resource === 'persistentvolumeclaims') {
      const cls = (o.spec.storageClassName as string | undefined) ?? 'standard';
      const bound = storageClasses.has(cls);
      if (bound) fs.mkdirSync(self.claimDir(namespace, o.metadata.name), { recursive: true, mode: 0o755 });
      o.status = bound ? { phase: 'Bound', accessModes: o.spec.accessModes, capacity: { storage: o.spec.resources?.requests?.storage } } : { phase: 'Pending' };
    }
    return put(resource, o, namespace);
  }

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://standin');
    calls.push(`${req.method} ${url.pathname}`);
    if (req.headers.authorization !== `Bearer ${token}`) throw new ApiError(401, 'Unauthorized', 'Unauthorized');
    const send = (code: number, body: unknown) => {
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (url.pathname === '/version') return send(200, { major: '1', minor: '33', gitVersion: 'v1.33.0-sandgate-standin', platform: 'linux/amd64' });

    if (req.method === 'POST' && url.pathname === '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews') {
      const body = await readJson(req);
      const a = (body.spec?.resourceAttributes ?? {}) as Obj;
      const ok = allowed(String(a.verb), String(a.resource), a.subresource ? String(a.subresource) : undefined);
      return send(201, { apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectAccessReview', metadata: {}, spec: body.spec, status: { allowed: ok, ...(ok ? {} : { reason: 'no RBAC policy matched' }) } });
    }

    let m = url.pathname.match(/^\/api\/v1\/namespaces\/([^/]+)$/);
    if (m && req.method === 'GET') {
      forbid('get', 'namespaces', '', '', undefined, m[1]);
      if (!namespaces.has(m[1]!)) throw new ApiError(404, 'NotFound', `namespaces "${m[1]}" not found`);
      return send(200, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: m[1] }, status: { phase: 'Active' } });
    }

    m = url.pathname.match(/^\/apis\/metrics\.k8s\.io\/v1beta1\/namespaces\/([^/]+)\/pods\/([^/]+)$/);
    if (m && req.method === 'GET') {
      const [, ns, name] = m;
      const cid = containers.get(key(ns!, name!));
      const pod = store.get('pods')!.get(key(ns!, name!));
      if (!cid || !pod) throw new ApiError(404, 'NotFound', `podmetrics.metrics.k8s.io "${ns}/${name}" not found`);
      const s = (await docker.getContainer(cid).stats({ stream: false })) as Obj;
      const memory = Math.max(0, (s.memory_stats?.usage ?? 0) - (s.memory_stats?.stats?.inactive_file ?? s.memory_stats?.stats?.total_inactive_file ?? 0));
      return send(200, {
        kind: 'PodMetrics',
        apiVersion: 'metrics.k8s.io/v1beta1',
        metadata: { name, namespace: ns, creationTimestamp: new Date().toISOString() },
        timestamp: new Date().toISOString(),
        window: '10s',
        // As metrics-server: CPU as a rate (nanocores over the sample), not a total.
        containers: [{ name: pod.spec.containers[0].name, usage: { cpu: `${nanocores(s)}n`, memory: `${Math.ceil(memory / 1024)}Ki` } }],
      });
    }

    m = url.pathname.match(/^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/log$/);
    if (m && req.method === 'GET') {
      const [, ns, name] = m;
      forbid('get', 'pods', '', ns!, 'log', name);
      const cid = containers.get(key(ns!, name!));
      if (!store.get('pods')!.has(key(ns!, name!))) throw new ApiError(404, 'NotFound', `pods "${name}" not found`);
      if (!cid) throw new ApiError(400, 'BadRequest', `container "${store.get('pods')!.get(key(ns!, name!))!.spec.containers[0].name}" in pod "${name}" is waiting to start: ContainerCreating`);
      const raw = (await docker.getContainer(cid).logs({ stdout: true, stderr: true, follow: false })) as unknown as Buffer;
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(demuxed(raw));
      return;
    }

    // Collections and objects: /api/v1/namespaces/{ns}/{res}[/{name}], /apis/{g}/{v}/namespaces/{ns}/{res}[/{name}], /apis/{g}/{v}/{res}[/{name}]
    m = url.pathname.match(/^\/(?:api\/v1|apis\/([^/]+)\/([^/]+))(?:\/namespaces\/([^/]+))?\/([a-z]+)(?:\/([^/]+))?$/);
    const r = m && RESOURCES[m[4]!];
    if (!m || !r || (m[1] ?? '') !== r.group || (m[1] ? m[2] : 'v1') !== r.version || !!m[3] !== r.namespaced) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    const resource = m[4]!;
    const namespace = m[3] ?? '';
    const name = m[5];
    if (name) {
      if (req.method === 'GET') {
        forbid('get', resource, r.group, namespace, undefined, name);
        const o = store.get(resource)!.get(key(namespace, name));
        if (!o) throw new ApiError(404, 'NotFound', `${resource}${r.group ? `.${r.group}` : ''} "${name}" not found`);
        return send(200, o);
      }
      if (req.method === 'DELETE') {
        forbid('delete', resource, r.group, namespace, undefined, name);
        const o = store.get(resource)!.get(key(namespace, name));
        if (!o) throw new ApiError(404, 'NotFound', `${resource}${r.group ? `.${r.group}` : ''} "${name}" not found`);
        if (resource === 'pods') {
          if (!o.metadata.deletionTimestamp) void deletePod(o);
          return send(200, o);
        }
        if (resource === 'persistentvolumeclaims') {
          o.metadata.deletionTimestamp = new Date().toISOString();
          put(resource, o, namespace, 'MODIFIED');
          finishClaimDeletion(namespace, name);
          return send(200, o);
        }
        remove(resource, namespace, name);
        return send(200, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', details: { name, kind: resource } });
      }
      if (req.method === 'PATCH') {
        forbid('patch', resource, r.group, namespace, undefined, name);
        const o = store.get(resource)!.get(key(namespace, name));
        if (!o) throw new ApiError(404, 'NotFound', `${resource}${r.group ? `.${r.group}` : ''} "${name}" not found`);
        if (!String(req.headers['content-type']).startsWith('application/json-patch+json')) throw new ApiError(415, 'UnsupportedMediaType', `the stand-in takes JSON patches only (${req.headers['content-type']})`);
        const ops = (await readJsonAny(req)) as Obj[];
        if (!Array.isArray(ops)) throw new ApiError(400, 'BadRequest', 'a JSON patch is an array of operations');
        const patched = structuredClone(o);
        for (const op of ops) applyJsonPatchOp(patched, op);
        for (const f of ['name', 'namespace', 'uid', 'creationTimestamp']) if (patched.metadata?.[f] !== o.metadata[f]) throw new ApiError(422, 'Invalid', `metadata.${f}: field is immutable`);
        if (o.immutable && (JSON.stringify(patched.data) !== JSON.stringify(o.data) || JSON.stringify(patched.binaryData) !== JSON.stringify(o.binaryData))) {
          throw new ApiError(422, 'Invalid', `${r.kind} "${name}" is invalid: data: Forbidden: field is immutable when \`immutable\` is set`);
        }
        checkMetadata(r.kind, patched.metadata);
        try {
          r.validate(patched);
        } catch (e) {
          throw new ApiError(422, 'Invalid', `${r.kind} "${name}" is invalid: ${(e as Error).message.slice(0, 2000)}`);
        }
        return send(200, put(resource, patched, namespace, 'MODIFIED'));
      }
      throw new ApiError(405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`);
    }
    if (req.method === 'POST') {
      forbid('create', resource, r.group, namespace);
      return send(201, await create(resource, namespace, await readJson(req)));
    }
    if (req.method !== 'GET') throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
    if (r.namespaced && !namespaces.has(namespace)) throw new ApiError(404, 'NotFound', `namespaces "${namespace}" not found`);
    const labels = parseLabelSelector(url.searchParams.get('labelSelector') ?? '');
    const fields = parseFieldSelector(url.searchParams.get('fieldSelector') ?? '');
    const match = (o: Obj) => labels(o.metadata.labels ?? {}) && fields(o);
    if (url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1') {
      forbid('watch', resource, r.group, namespace);
      res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
      const w = { resource, namespace, match, send: (type: string, o: Obj) => res.write(`${JSON.stringify({ type, object: o })}\n`) };
      if (!url.searchParams.get('resourceVersion')) for (const o of self.objects(resource, namespace).filter(match)) w.send('ADDED', o);
      watchers.add(w);
      const timeout = Number(url.searchParams.get('timeoutSeconds') ?? 1800);
      const t = setTimeout(() => res.end(), timeout * 1000);
      res.on('close', () => {
        clearTimeout(t);
        watchers.delete(w);
      });
      return;
    }
    forbid('list', resource, r.group, namespace);
    return send(200, { apiVersion: r.group ? `${r.group}/${r.version}` : r.version, kind: `${r.kind}List`, metadata: { resourceVersion: String(rv) }, items: self.objects(resource, namespace).filter(match) });
  }

  // --- attach, over the WebSocket channel protocol
  const wss = new WebSocketServer({
    noServer: true,
    handleProtocols: (protocols) => ['v5.channel.k8s.io', 'v4.channel.k8s.io'].find((p) => protocols.has(p)) ?? false,
  });
  function refuseUpgrade(socket: Duplex, e: ApiError) {
    const body = JSON.stringify(status(e.code, e.reason, e.message));
    socket.end(`HTTP/1.1 ${e.code} ${http.STATUS_CODES[e.code]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  }
  async function upgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://standin');
    calls.push(`${req.method} ${url.pathname}`);
    if (self.down) return void socket.destroy();
    if (req.headers.authorization !== `Bearer ${token}`) return refuseUpgrade(socket, new ApiError(401, 'Unauthorized', 'Unauthorized'));
    const m = url.pathname.match(/^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/(attach|exec)$/);
    if (!m) return refuseUpgrade(socket, new ApiError(404, 'NotFound', 'the server could not find the requested resource'));
    const [, ns, name, sub] = m as unknown as [string, string, string, 'attach' | 'exec'];
    try {
      forbid('create', 'pods', '', ns, sub, name);
    } catch (e) {
      return refuseUpgrade(socket, e as ApiError);
    }
    const pod = store.get('pods')!.get(key(ns, name));
    if (!pod) return refuseUpgrade(socket, new ApiError(404, 'NotFound', `pods "${name}" not found`));
    const c = pod.spec.containers[0] as Obj;
    const wanted = url.searchParams.get('container');
    if (wanted && wanted !== c.name) return refuseUpgrade(socket, new ApiError(400, 'BadRequest', `container ${wanted} is not valid for pod ${name}`));
    const cid = containers.get(key(ns, name));
    if (pod.status?.phase !== 'Running' || !cid) return refuseUpgrade(socket, new ApiError(400, 'BadRequest', `container ${c.name} in pod ${name} is not running`));
    const wantStdin = url.searchParams.get('stdin') === 'true';
    if (sub === 'attach' && wantStdin && !c.stdin) return refuseUpgrade(socket, new ApiError(400, 'BadRequest', `container ${c.name} in pod ${name} does not take stdin`));
    const command = url.searchParams.getAll('command');
    if (sub === 'exec' && !command.length) return refuseUpgrade(socket, new ApiError(400, 'BadRequest', 'you must specify at least 1 command'));
    let stream: Duplex;
    /** The exec's exit code, once it ended (exec only). */
    let exitCode: () => Promise<number | null> = async () => null;
    try {
      if (sub === 'attach') {
        stream = (await docker.getContainer(cid).attach({ stream: true, stdin: wantStdin, stdout: true, stderr: true, hijack: true })) as unknown as Duplex;
      } else {
        const ex = await docker.getContainer(cid).exec({ Cmd: command, AttachStdin: wantStdin, AttachStdout: true, AttachStderr: true, Tty: false });
        stream = (await ex.start({ hijack: true, stdin: wantStdin })) as unknown as Duplex;
        exitCode = async () => (await ex.inspect().catch(() => undefined))?.ExitCode ?? null;
      }
    } catch (e) {
      return refuseUpgrade(socket, new ApiError(500, 'InternalError', (e as Error).message));
    }
    wss.handleUpgrade(req, socket, head, (ws: WebSocket) => {
      const out = new PassThrough();
      const err = new PassThrough();
      docker.modem.demuxStream(stream, out, err);
      const frame = (channel: number) => (d: Buffer) => ws.readyState === ws.OPEN && ws.send(Buffer.concat([Buffer.from([channel]), d]));
      if (url.searchParams.get('stdout') !== 'false') out.on('data', frame(1));
      if (url.searchParams.get('stderr') !== 'false') err.on('data', frame(2));
      let ended = false;
      const end = async () => {
        if (ended) return;
        ended = true;
        const code = await exitCode();
        if (ws.readyState !== ws.OPEN) return;
        const st = !code
          ? { metadata: {}, status: 'Success' }
          : { metadata: {}, status: 'Failure', message: `command terminated with non-zero exit code: error executing command [${command.join(' ')}], exit code ${code}`, reason: 'NonZeroExitCode', details: { causes: [{ reason: 'ExitCode', message: String(code) }] } };
        ws.send(Buffer.concat([Buffer.from([3]), Buffer.from(JSON.stringify(st))]));
        ws.close(1000);
      };
      stream.on('end', () => void end());
      stream.on('close', () => void end());
      stream.on('error', () => void end());
      const podKey = key(ns, name);
      const ends = streams.get(podKey) ?? new Set<() => void>();
      streams.set(podKey, ends);
      const endNow = () => {
        stream.destroy();
        void end();
      };
      ends.add(endNow);
      ws.on('close', () => ends.delete(endNow));
      ws.on('message', (data: Buffer, isBinary: boolean) => {
        const b = isBinary ? data : Buffer.from(data.toString(), 'utf8');
        if (b.length === 0) return;
        if (b[0] === 0 && wantStdin) stream.write(b.subarray(1));
        // 255 0: the client closes its stdin (v5): the process sees its end.
        else if (b[0] === 255 && b[1] === 0 && wantStdin) stream.end();
        // Other channels (resize) mean nothing without a tty.
      });
      ws.on('close', () => stream.destroy());
      ws.on('error', () => stream.destroy());
    });
  }

  const tls = makeCertificates(root);
  const server = https.createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    if (self.down) return void req.socket.destroy();
    handle(req, res).catch((e: unknown) => {
      const err = e instanceof ApiError ? e : new ApiError(500, 'InternalError', (e as Error).message);
      if (res.headersSent) return void res.end();
      res.writeHead(err.code, { 'content-type': 'application/json' });
      res.end(JSON.stringify(status(err.code, err.reason, err.message)));
    });
  });
  server.on('upgrade', (req, socket, head) => void upgrade(req, socket, head).catch(() => socket.destroy()));
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    if (self.down) s.destroy();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  self.url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // The same API where pods reach it (the kubernetes Service): on Docker's bridge gateway.
  const bridgeGateway = ((await docker.getNetwork('bridge').inspect().catch(() => undefined)) as Obj | undefined)?.IPAM?.Config?.[0]?.Gateway as string | undefined;
  const podSide = https.createServer({ key: tls.key, cert: tls.cert }, server.listeners('request')[0] as http.RequestListener);
  podSide.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  if (bridgeGateway) await new Promise<void>((r) => podSide.listen(0, bridgeGateway, r));
  const serviceAddress = bridgeGateway ? { host: bridgeGateway, port: (podSide.address() as AddressInfo).port } : { host: '10.96.0.1', port: 443 };
  const namespace = [...namespaces][0] ?? 'default';
  fs.writeFileSync(
    self.kubeconfigPath,
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- name: standin',
      '  cluster:',
      `    server: ${self.url}`,
      `    certificate-authority-data: ${tls.ca.toString('base64')}`,
      'users:',
      '- name: sandgate',
      '  user:',
      `    token: ${token}`,
      'contexts:',
      '- name: standin',
      '  context:',
      '    cluster: standin',
      '    user: sandgate',
      `    namespace: ${namespace}`,
      'current-context: standin',
      '',
    ].join('\n'),
    { mode: 0o600 },
  );

  async function close(): Promise<void> {
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => server.close(() => r()));
    if (podSide.listening) await new Promise<void>((r) => podSide.close(() => r()));
    for (const c of await docker.listContainers({ all: true, filters: { label: [`${STANDIN_LABEL}=${id}`] } })) {
      await docker.getContainer(c.Id).remove({ force: true }).catch(() => {});
    }
    fs.rmSync(root, { recursive: true, force: true });
  }
  return self;
}

/** One operation of a JSON patch (RFC 6902): add, replace and remove, on a JSON pointer. */
function applyJsonPatchOp(target: Obj, op: Obj): void {
  if (typeof op?.path !== 'string' || !op.path.startsWith('/')) throw new ApiError(422, 'Invalid', 'a patch operation needs a path');
  const parts = op.path.slice(1).split('/').map((p: string) => p.replaceAll('~1', '/').replaceAll('~0', '~'));
  const last = parts.pop()!;
  let at: Obj = target;
  for (const p of parts) {
    if (at[p] === undefined || typeof at[p] !== 'object') throw new ApiError(422, 'Invalid', `the patch's path ${op.path} does not exist`);
    at = at[p] as Obj;
  }
  if (op.op === 'add' || op.op === 'replace') {
    if (Array.isArray(at) && last === '-') (at as unknown[]).push(op.value);
    else (at as Obj)[last] = op.value;
  } else if (op.op === 'remove') {
    delete (at as Obj)[last];
  } else {
    throw new ApiError(422, 'Invalid', `the stand-in applies add, replace and remove (not ${String(op.op)})`);
  }
}

/** CPU use between Docker's two samples, in nanocores (a thousand million: one core). */
function nanocores(s: Obj): number {
  const used = (s.cpu_stats?.cpu_usage?.total_usage ?? 0) - (s.precpu_stats?.cpu_usage?.total_usage ?? 0);
  const system = (s.cpu_stats?.system_cpu_usage ?? 0) - (s.precpu_stats?.system_cpu_usage ?? 0);
  if (!(used > 0) || !(system > 0)) return 0;
  return Math.round((used / system) * (s.cpu_stats?.online_cpus ?? 1) * 1e9);
}

/** Docker's multiplexed log (8-byte frame headers), as one text: stdout and stderr as they came. */
function demuxed(raw: Buffer): Buffer {
  const parts: Buffer[] = [];
  for (let i = 0; i + 8 <= raw.length; ) {
    const size = raw.readUInt32BE(i + 4);
    parts.push(raw.subarray(i + 8, i + 8 + size));
    i += 8 + size;
  }
  return Buffer.concat(parts);
}
