/**
 * The preflight on a cluster: whether sandboxes can run there, each failure naming its fix.
 *
 * Quick (every /readyz): the API server answers, the namespace exists, the RuntimeClass
 * exists, and the gateway's service account may do all the driver does (asked of the API
 * server itself with SelfSubjectAccessReviews). Full (at start): also a throwaway pod,
 * hardened as a sandbox, under the RuntimeClass and the sandboxes' NetworkPolicy, that
 * prints its kernel's word (`runtime` holds only when that is gVisor's) and tries to
 * reach the API server (`network` holds only when it cannot).
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
import { K8S_LABELS, podManifest, RUNNER_CONTAINER } from './objects.js';

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
  ['list', 'configmaps', '', ''],
  ['patch', 'configmaps', '', ''],
  ['delete', 'configmaps', '', ''],
  // Only read: where the policy is missing the gateway makes it if it may (the chart makes it, and gives no create).
  ['get', 'networkpolicies', '', 'networking.k8s.io'],
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
    return { api, namespace: notChecked, runtimeClass: notChecked, permissions: notChecked, ...(opts.full ? { runtime: notChecked, network: notChecked } : {}), ...notAvailable() };
  }
  const api = { ok: true, detail: `Kubernetes ${version.gitVersion} at ${server}` };
  const core = o.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const [namespace, runtimeClass, permissions] = await Promise.all([
    core.readNamespace({ name: o.namespace }).then(
      () => ({ ok: true, detail: `namespace ${o.namespace} exists` }),
      (e: unknown) =>
        apiStatus(e)?.code === 403
          ? { ok: false, detail: `the gateway may not read namespace ${o.namespace} (${message(e)}): grant get on it (the Helm chart's ClusterRole does, for that namespace alone)` }
          : { ok: false, detail: `namespace ${o.namespace}: ${message(e)} (create it, or install the Helm chart, which does)` },
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
    const probed =
      namespace.ok && runtimeClass.ok && permissions.ok
        ? await probe(o).catch((e: Error) => ({ runtime: { ok: false, detail: `the runtime check failed: ${e.message}` }, network: { ok: false, detail: 'not checked: the test pod failed' } }))
        : { runtime: { ok: false, detail: 'not checked: the namespace, the RuntimeClass or a permission is missing' }, network: { ok: false, detail: 'not checked: no test pod' } };
    Object.assign(out, probed);
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
  return { ok: true, detail: `the gateway may create, watch, exec in and delete pods, make claims and ConfigMaps, and read the NetworkPolicy, in ${o.namespace}` };
}

/** What the test pod runs: the kernel's word, then a connection to the API server, which a sandbox must not make. */
const PROBE = [
  'dmesg 2>&1 | head -n 5; cat /proc/version',
  'python3 -I -S -c "',
  'import os, socket',
  'try:',
  "    socket.create_connection((os.environ['KUBERNETES_SERVICE_HOST'], int(os.environ['KUBERNETES_SERVICE_PORT'])), 3).close()",
  "    print('sandgate-net: open')",
  'except Exception as e:',
  "    print('sandgate-net: closed', type(e).__name__)",
  '"',
].join('\n');

/**
 * A pod as a sandbox is, under the RuntimeClass and selected by the sandboxes'
 * NetworkPolicy, that prints its kernel's messages and tries to reach the API server:
 * `runtime` holds when the kernel is gVisor's, `network` when the connection fails (the
 * policy is enforced, or gVisor's network is off). The pod is removed after.
 */
async function probe(o: Options): Promise<{ runtime: HealthCheck; network: HealthCheck }> {
  const core = o.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const name = `sandgate-preflight-${crypto.randomBytes(4).toString('hex')}`;
  const pod = podManifest({ workspaceWritable: false, readOnlyMounts: {} }, name, o);
  pod.metadata!.labels = { ...pod.metadata!.labels, [K8S_LABELS.component]: 'preflight' };
  const c = pod.spec!.containers[0]!;
  c.command = ['/bin/sh', '-c', PROBE];
  const failed = (detail: string) => ({ runtime: { ok: false, detail }, network: { ok: false, detail: 'not checked: the test pod did not run' } });
  try {
    await core.createNamespacedPod({ namespace: o.namespace, body: pod });
  } catch (e) {
    return failed(`the cluster refused a test pod: ${message(e)}`);
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
      if (w && /ErrImagePull|ImagePullBackOff|InvalidImageName/.test(w.reason ?? '')) return failed(`the test pod cannot pull the sandbox image ${o.image}: ${waiting} (push the image to a registry the nodes reach, or set the image setting)`);
      await new Promise((r) => setTimeout(r, 500));
    }
    if (phase !== 'Succeeded' && phase !== 'Failed') return failed(`the test pod did not finish within 90 s (phase ${phase}${waiting ? `; ${waiting}` : ''})`);
    const log = String(await core.readNamespacedPodLog({ name, namespace: o.namespace, container: RUNNER_CONTAINER })).slice(0, 4000);
    const kernel = log.split('\n').filter((l) => !l.startsWith('sandgate-net:'));
    const runtime = /gVisor/i.test(kernel.join('\n'))
      ? { ok: true, detail: `a test pod under RuntimeClass ${o.runtimeClassName} runs on gVisor's kernel` }
      : {
          ok: false,
          detail: `a test pod under RuntimeClass ${o.runtimeClassName} does not run on gVisor (its kernel says: ${kernel.join(' ').trim().slice(-200) || 'nothing'}); point the RuntimeClass's handler at gVisor's runsc shim`,
        };
    const net = /^sandgate-net: (open|closed)(.*)$/m.exec(log);
    const network = !net
      ? { ok: false, detail: 'the test pod did not say whether it reached the network' }
      : net[1] === 'closed'
        ? { ok: true, detail: `a sandbox pod reaches nothing: its connection to the API server failed (${net[2]!.trim() || 'refused'})` }
        : {
            ok: false,
            detail: `a sandbox pod reached the API server: the cluster does not enforce the sandboxes' NetworkPolicy. Use a network plugin that does (Calico, Cilium, GKE Dataplane V2), or turn gVisor's network off in its shim's config (network = "none")`,
          };
    return { runtime, network };
  } finally {
    await core.deleteNamespacedPod({ name, namespace: o.namespace, gracePeriodSeconds: 0 }).catch(() => {});
  }
}
