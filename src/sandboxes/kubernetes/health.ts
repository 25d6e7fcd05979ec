/**
 * The preflight on a cluster: whether sandboxes can run there, each failure naming its fix.
 *
 * Quick (every /readyz): the API server answers, the namespace exists, the RuntimeClass
 * exists, and the gateway's service account may do all the driver does (asked of the API
 * server itself with SelfSubjectAccessReviews). Full (at start): also a throwaway pod,
 * hardened as a sandbox and under the RuntimeClass, that prints its kernel's word: the
 * check holds only when that is gVisor's.
 *
 * What a cluster does not give is reported as not available (`notAvailable`), never as a
 * check that passed: freezing idle sandboxes, host runsc process checks, the pids limit
 * (the kubelet's podPidsLimit, which the gateway cannot read).
 */
import crypto from 'node:crypto';
import * as k8s from '@kubernetes/client-node';
import type { HealthCheck } from '../types.js';
import { apiStatus } from './api-status.js';
import type { KubernetesDriverOptions } from './driver.js';
import { baseLabels, K8S_LABELS, podManifest, RUNNER_CONTAINER } from './objects.js';

/** What the driver does, as the API server's RBAC names it: [verb, resource, subresource?, group]. */
export const NEEDED_PERMISSIONS: [verb: string, resource: string, subresource: string, group: string][] = [
  ['create', 'pods', '', ''],
  ['get', 'pods', '', ''],
  ['list', 'pods', '', ''],
  ['watch', 'pods', '', ''],
  ['delete', 'pods', '', ''],
  ['create', 'pods', 'exec', ''],
  ['get', 'pods', 'log', ''],
  ['create', 'persistentvolumeclaims', '', ''],
  ['delete', 'persistentvolumeclaims', '', ''],
  ['create', 'configmaps', '', ''],
  ['patch', 'configmaps', '', ''],
  ['delete', 'configmaps', '', ''],
  ['get', 'networkpolicies', '', 'networking.k8s.io'],
  ['create', 'networkpolicies', '', 'networking.k8s.io'],
];

type Options = Pick<KubernetesDriverOptions, 'kubeConfig' | 'namespace' | 'runtimeClassName' | 'image' | 'gatewayId' | 'memoryMb' | 'cpus' | 'tmpMb' | 'imagePullPolicy'>;

const message = (e: unknown) => apiStatus(e)?.message ?? (e as Error).message;

export async function clusterHealth(o: Options, opts: { full?: boolean } = {}): Promise<Record<string, HealthCheck>> {
  const server = o.kubeConfig.getCurrentCluster()?.server ?? '(no cluster in the kubeconfig)';
  const notChecked = { ok: false, detail: 'not checked: the API server does not answer' };
  let version: k8s.VersionInfo;
  try {
    version = await o.kubeConfig.makeApiClient(k8s.VersionApi).getCode();
  } catch (e) {
    const api = { ok: false, detail: `the Kubernetes API server at ${server} does not answer (${message(e)}): check the kubeconfig or the in-cluster service account` };
    return { api, namespace: notChecked, runtimeClass: notChecked, permissions: notChecked, ...(opts.full ? { runtime: notChecked } : {}), ...notAvailable() };
  }
  const api = { ok: true, detail: `Kubernetes ${version.gitVersion} at ${server}` };
  const core = o.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const [namespace, runtimeClass, permissions] = await Promise.all([
    core.readNamespace({ name: o.namespace }).then(
      () => ({ ok: true, detail: `namespace ${o.namespace} exists` }),
      (e: unknown) => ({ ok: false, detail: `namespace ${o.namespace}: ${message(e)} (create it, or install the Helm chart, which does)` }),
    ),
    o.kubeConfig
      .makeApiClient(k8s.NodeV1Api)
      .readRuntimeClass({ name: o.runtimeClassName })
      .then(
        (rc) => ({ ok: true, detail: `RuntimeClass ${o.runtimeClassName} (handler ${rc.handler})` }),
        (e: unknown) => ({
          ok: false,
          detail: `RuntimeClass ${o.runtimeClassName}: ${message(e)}. Install gVisor's containerd shim (runsc) on the nodes and create the RuntimeClass (the chart does with runtimeClass.create=true; GKE Sandbox names it gvisor), or set SANDGATE_K8S_RUNTIME_CLASS to the one the cluster has`,
        }),
      ),
    permissionsCheck(o),
  ]);
  const out: Record<string, HealthCheck> = { api, namespace, runtimeClass, permissions };
  if (opts.full) {
    out.runtime =
      namespace.ok && runtimeClass.ok && permissions.ok
        ? await runtimeIsolates(o).catch((e: Error) => ({ ok: false, detail: `the runtime check failed: ${e.message}` }))
        : { ok: false, detail: 'not checked: the namespace, the RuntimeClass or a permission is missing' };
  }
  return { ...out, ...notAvailable() };
}

function notAvailable(): Record<string, HealthCheck> {
  return {
    freezing: { ok: true, notAvailable: true, detail: 'not available on Kubernetes: idle sandboxes are not frozen (that needs the node’s cgroups); they are stopped when idle as elsewhere' },
    runtimeProcesses: { ok: true, notAvailable: true, detail: 'not available on Kubernetes: the gateway does not see the nodes’ runsc processes; the cluster reaps a pod’s' },
    pidsLimit: { ok: true, notAvailable: true, detail: 'set by the cluster, not the pod: the kubelet’s podPidsLimit bounds a sandbox’s processes (set it on the nodes); gVisor bounds them inside as well' },
  };
}

async function permissionsCheck(o: Options): Promise<HealthCheck> {
  const auth = o.kubeConfig.makeApiClient(k8s.AuthorizationV1Api);
  const missing: string[] = [];
  await Promise.all(
    NEEDED_PERMISSIONS.map(async ([verb, resource, subresource, group]) => {
      const review = await auth.createSelfSubjectAccessReview({
        body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectAccessReview', spec: { resourceAttributes: { namespace: o.namespace, verb, resource, group, ...(subresource && { subresource }) } } },
      });
      if (!review.status?.allowed) missing.push(`${verb} ${resource}${subresource ? `/${subresource}` : ''}`);
    }),
  );
  if (missing.length) {
    return { ok: false, detail: `the gateway's service account may not: ${missing.sort().join(', ')} (in namespace ${o.namespace}); grant them with a Role there (the Helm chart's does)` };
  }
  return { ok: true, detail: `the gateway may create, watch, exec in and delete pods, and create claims and the NetworkPolicy, in ${o.namespace}` };
}

/**
 * A pod as a sandbox is, under the RuntimeClass, that prints its kernel's messages and
 * ends: it runs under gVisor when they are gVisor's. The pod is removed after.
 */
async function runtimeIsolates(o: Options): Promise<HealthCheck> {
  const core = o.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const name = `sandgate-preflight-${crypto.randomBytes(4).toString('hex')}`;
  const pod = podManifest({ workspaceWritable: false, readOnlyMounts: {} }, name, o);
  pod.metadata!.labels = { ...baseLabels(o.gatewayId), [K8S_LABELS.component]: 'preflight' };
  const c = pod.spec!.containers[0]!;
  c.command = ['/bin/sh', '-c', 'dmesg 2>&1 | head -n 5; cat /proc/version'];
  c.stdin = false;
  try {
    await core.createNamespacedPod({ namespace: o.namespace, body: pod });
  } catch (e) {
    return { ok: false, detail: `the cluster refused a test pod: ${message(e)}` };
  }
  try {
    const deadline = Date.now() + 90_000;
    let phase = 'Pending';
    let waiting = '';
    while (Date.now() < deadline) {
      const p = await core.readNamespacedPod({ name, namespace: o.namespace });
      phase = p.status?.phase ?? 'Pending';
      const w = p.status?.containerStatuses?.[0]?.state?.waiting;
      waiting = w ? `${w.reason}: ${w.message ?? ''}` : (p.status?.conditions?.find((x) => x.status === 'False')?.message ?? '');
      if (phase === 'Succeeded' || phase === 'Failed') break;
      if (w && /ErrImagePull|ImagePullBackOff|InvalidImageName/.test(w.reason ?? '')) return { ok: false, detail: `the test pod cannot pull the sandbox image ${o.image}: ${waiting} (push the image to a registry the nodes reach, or set the image setting)` };
      await new Promise((r) => setTimeout(r, 500));
    }
    if (phase !== 'Succeeded' && phase !== 'Failed') return { ok: false, detail: `the test pod did not finish within 90 s (phase ${phase}${waiting ? `; ${waiting}` : ''})` };
    const log = String(await core.readNamespacedPodLog({ name, namespace: o.namespace, container: RUNNER_CONTAINER })).slice(0, 2000);
    if (/gVisor/i.test(log)) return { ok: true, detail: `a test pod under RuntimeClass ${o.runtimeClassName} runs on gVisor's kernel` };
    return {
      ok: false,
      detail: `a test pod under RuntimeClass ${o.runtimeClassName} does not run on gVisor (its kernel says: ${log.trim().split('\n').slice(-1)[0]?.slice(0, 200) || 'nothing'}); point the RuntimeClass's handler at gVisor's runsc shim`,
    };
  } finally {
    await core.deleteNamespacedPod({ name, namespace: o.namespace, gracePeriodSeconds: 0 }).catch(() => {});
  }
}
