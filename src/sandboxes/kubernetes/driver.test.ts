/**
 * The Kubernetes driver against the stand-in API server (test/support/kube-standin.ts):
 * the official client, pointed at it by a kubeconfig, over HTTP and the attach
 * WebSocket; each pod a real container under runsc on the local Docker.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { runDriverConformance, execOn } from '../../../test/support/driver-conformance.js';
import { startKubeStandin, type KubeStandin } from '../../../test/support/kube-standin.js';
import { eventually } from '../../../test/support/until.js';
import { configFor } from '../../config.js';
import { REPO_ROOT } from '../../paths.js';
import { createLogger } from '../../logger.js';
import { Workspace } from '../workspace.js';
import { KubernetesDriver, type KubernetesDriverOptions } from './driver.js';
import { NETWORK_POLICY_NAME, claimName } from './objects.js';
import { KubernetesWorkspaces } from './workspaces.js';

const config = configFor({});
let standin: KubeStandin;

function kubeConfig(): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(standin.kubeconfigPath);
  return kc;
}

let store: KubernetesWorkspaces;
/** A spec for `owner` with a workspace claim of its own (or the one of `workspaceId`). */
async function specFor(owner: { userId: number; name: string }, workspaceId = store.newId(), readOnlyMounts: Record<string, string> = {}) {
  return { owner, workspaceDir: await store.ensure(workspaceId), workspaceWritable: true, readOnlyMounts };
}

function newDriver(o: Partial<KubernetesDriverOptions> = {}): KubernetesDriver {
  return new KubernetesDriver({
    kubeConfig: kubeConfig(),
    namespace: 'sandgate',
    image: config.sandboxImage,
    imagePullPolicy: 'Never',
    runtimeClassName: 'gvisor',
    gatewayId: 'conformance',
    memoryMb: 512,
    cpus: 1,
    tmpMb: 64,
    logger: createLogger('silent'),
    ...o,
  });
}

beforeAll(async () => {
  standin = await startKubeStandin();
  store = new KubernetesWorkspaces({ kubeConfig: kubeConfig(), namespace: 'sandgate', image: config.sandboxImage, imagePullPolicy: 'Never', runtimeClassName: 'gvisor', gatewayId: 'conformance', sizeMb: 256, logger: createLogger('silent') });
});
afterAll(async () => {
  await standin?.close();
});

runDriverConformance({
  name: 'KubernetesDriver (stand-in API server, runsc)',
  newDriver: () => newDriver(),
  // The workspace is a claim the workspace store made; the spec names it.
  spec: (owner) => specFor(owner, undefined, { '/skills': path.join(REPO_ROOT, 'skills'), '/tools': path.join(REPO_ROOT, 'tools') }),
});

describe('KubernetesDriver specifics', () => {
  it('a pod is hardened as a container is, in Kubernetes terms, and the namespace gets the deny-all NetworkPolicy', async () => {
    const driver = newDriver();
    const workspaceId = store.newId();
    const h = await driver.start(await specFor({ userId: 77, name: 'Ana María' }, workspaceId));
    try {
      const pod = standin.objects('pods', 'sandgate').find((p) => p.metadata.name === h.id)!;
      const c = pod.spec.containers[0];
      expect(pod.spec.runtimeClassName).toBe('gvisor');
      expect(pod.spec.automountServiceAccountToken).toBe(false);
      expect(pod.spec.enableServiceLinks).toBe(false);
      expect(pod.spec.restartPolicy).toBe('Never');
      expect(c.securityContext).toMatchObject({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, privileged: false, capabilities: { drop: ['ALL'], add: ['SETUID', 'SETGID', 'KILL'] }, seccompProfile: { type: 'RuntimeDefault' } });
      expect(c.resources.limits).toMatchObject({ memory: '512Mi', cpu: '1000m' });
      expect(c.resources.requests).toEqual(c.resources.limits);
      // The owner's login is any text: an annotation; the id a label, to find the pod by.
      expect(pod.metadata.annotations['sandgate.dev/owner']).toBe('Ana María');
      expect(pod.metadata.labels['sandgate.dev/owner-id']).toBe('77');
      expect(standin.objects('networkpolicies', 'sandgate').map((n) => n.metadata.name)).toEqual([NETWORK_POLICY_NAME]);
      expect(standin.objects('persistentvolumeclaims', 'sandgate').find((p) => p.metadata.name === claimName(workspaceId))?.spec.resources.requests.storage).toBe('256Mi');
      expect(pod.spec.volumes.find((v: { name: string }) => v.name === 'workspace').persistentVolumeClaim.claimName).toBe(claimName(workspaceId));

      // Inside: no service account token, no service links, no network.
      const r = await execOn(h, 'bash', 'ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1; cat /proc/net/dev');
      expect(r.stdout).toMatch(/No such file or directory/);
      expect(r.stdout).toMatch(/\blo:/);
      expect(r.stdout).not.toMatch(/eth0/);
      // The stand-in gave the pod no network because the NetworkPolicy isolates it (runsc here has none of its own anyway).
      const Docker = (await import('dockerode')).default;
      expect((await new Docker().getContainer(standin.containerOf('sandgate', h.id)!).inspect()).HostConfig.NetworkMode).toBe('none');
      const env = await execOn(h, 'bash', 'env');
      expect(env.stdout).not.toContain('SANDGATE_SERVICE_HOST');
    } finally {
      await driver.stop(h.id);
    }
  });

  it('the stand-in gives a pod without the driver’s hardening a token and a network: the checks above can fail', async () => {
    const driver = newDriver();
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(standin.kubeconfigPath);
    const core = kc.makeApiClient(k8s.CoreV1Api);
    // runc: runsc is registered with Docker here with no network of its own, whatever the pod's.
    await kc.makeApiClient(k8s.NodeV1Api).createRuntimeClass({ body: { apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name: 'runc' }, handler: 'runc' } });
    await core.createNamespacedPod({
      namespace: 'sandgate',
      body: { metadata: { name: 'plain', labels: { app: 'other' } }, spec: { restartPolicy: 'Never', runtimeClassName: 'runc', containers: [{ name: 'c', image: config.sandboxImage, imagePullPolicy: 'Never', command: ['/bin/sh', '-c', 'ls /var/run/secrets/kubernetes.io/serviceaccount; env | grep SERVICE_HOST; cat /proc/net/dev'] }] } },
    });
    await eventually(async () => ['Succeeded', 'Failed'].includes((await core.readNamespacedPod({ name: 'plain', namespace: 'sandgate' })).status?.phase ?? ''), 60_000);
    const log = await core.readNamespacedPodLog({ name: 'plain', namespace: 'sandgate' });
    expect(log).toMatch(/token/);
    expect(log).toMatch(/SANDGATE_SERVICE_HOST/);
    expect(log).toMatch(/eth0/);
    await core.deleteNamespacedPod({ name: 'plain', namespace: 'sandgate' });
    expect(driver.name).toBe('kubernetes');
  });

  it('what code prints reaches no log of the cluster: the runner is reached by exec, not through the container’s stdout', async () => {
    const driver = newDriver();
    const h = await driver.start(await specFor({ userId: 83, name: 'quiet' }));
    try {
      const secret = `card-4111-1111-${Date.now()}`;
      expect((await execOn(h, 'python', `print(${JSON.stringify(secret)})`)).stdout).toBe(`${secret}\n`);
      const log = await kubeConfig().makeApiClient(k8s.CoreV1Api).readNamespacedPodLog({ name: h.id, namespace: 'sandgate' });
      expect(String(log)).not.toContain(secret);
      expect(String(log)).not.toContain('"type"');
      // Code (uid 1000) cannot reach the runner's socket to speak for the gateway.
      const r = await execOn(h, 'bash', 'ls -ld /run/sandgate; python3 -c "import socket; s = socket.socket(socket.AF_UNIX); s.connect(\'/run/sandgate/runner.sock\')" 2>&1 | tail -n 1');
      expect(r.stdout).toMatch(/^drwx------ \d+ root root/);
      expect(r.stdout).toMatch(/PermissionError|Permission denied/);
    } finally {
      await driver.stop(h.id);
    }
  });

  it('stats come from the metrics API: a busy pod shows its CPU and memory, its limit from its spec', async () => {
    const driver = newDriver();
    const h = await driver.start(await specFor({ userId: 85, name: 'busy' }));
    try {
      // A run that spins for 4 s, asked about while it runs.
      const spinning = execOn(h, 'python', 'import time\nend = time.time() + 4\nwhile time.time() < end: pass');
      await new Promise((r) => setTimeout(r, 1200));
      const s = await h.stats();
      await spinning;
      expect(s.cpuPercent).toBeGreaterThan(20);
      expect(s.memoryBytes).toBeGreaterThan(0);
      expect(s.memoryLimitBytes).toBe(512 * 1024 * 1024);
    } finally {
      await driver.stop(h.id);
    }
  });

  it('the workspace is the user’s claim: files outlive the pod and reach the next one', async () => {
    const driver = newDriver();
    const owner = { userId: 78, name: 'keeper' };
    const workspaceId = store.newId();
    const a = await driver.start(await specFor(owner, workspaceId));
    expect((await execOn(a, 'bash', 'echo kept > /workspace/note.txt && id -u && stat -c %U:%G /workspace/note.txt')).stdout).toMatch(/1000\n.*:/);
    const gone = new Promise<string>((r) => a.onExit(r));
    await driver.stop(a.id);
    await gone;
    const b = await driver.start(await specFor(owner, workspaceId));
    try {
      expect((await execOn(b, 'bash', 'cat /workspace/note.txt')).stdout).toBe('kept\n');
    } finally {
      await driver.stop(b.id);
    }
  });

  it('a pod that dies mid-run ends its handle, and list no longer calls it running', async () => {
    const driver = newDriver();
    const h = await driver.start(await specFor({ userId: 79, name: 'dies' }));
    const exited = new Promise<string>((r) => h.onExit(r));
    const run = execOn(h, 'python', 'import time; time.sleep(30)');
    run.catch(() => {});
    await new Promise((r) => setTimeout(r, 500));
    // The node kills the container under the pod (as an OOM kill or an eviction would).
    const cid = standin.containerOf('sandgate', h.id)!;
    const Docker = (await import('dockerode')).default;
    await new Docker().getContainer(cid).kill();
    expect(await exited).toBeTruthy();
    await expect(run).rejects.toThrow(/exited/);
    await eventually(async () => (await driver.list()).find((s) => s.id === h.id)?.running === false, 10_000);
    await driver.stop(h.id);
  });

  it('what a gateway that died mid-way left is swept: mount ConfigMaps no pod owns, helper pods that ended', async () => {
    const core = kubeConfig().makeApiClient(k8s.CoreV1Api);
    const labels = { 'app.kubernetes.io/name': 'sandgate-sandbox', 'app.kubernetes.io/managed-by': 'sandgate', 'sandgate.dev/gateway': 'conformance' };
    await core.createNamespacedConfigMap({ namespace: 'sandgate', body: { metadata: { name: 'left-mount', labels: { ...labels, 'app.kubernetes.io/component': 'mount' } }, data: { a: 'b' } } });
    await core.createNamespacedPod({
      namespace: 'sandgate',
      body: { metadata: { name: 'left-helper', labels: { ...labels, 'app.kubernetes.io/component': 'helper' } }, spec: { restartPolicy: 'Never', runtimeClassName: 'gvisor', containers: [{ name: 'runner', image: config.sandboxImage, imagePullPolicy: 'Never', command: ['/bin/true'] }] } },
    });
    await eventually(async () => (await core.readNamespacedPod({ name: 'left-helper', namespace: 'sandgate' })).status?.phase === 'Succeeded', 30_000);
    const driver = newDriver({ sweepEveryMs: 0, leftoverMs: 0 });
    // A live sandbox's own ConfigMaps (owned by its pod) are not leftovers.
    const live = await driver.start(await specFor({ userId: 84, name: 'keeps' }, undefined, { '/skills': path.join(REPO_ROOT, 'skills') }));
    try {
      expect((await driver.list()).some((s) => s.id === 'left-helper')).toBe(false);
      await eventually(async () => !standin.objects('configmaps', 'sandgate').some((c) => c.metadata.name === 'left-mount') && !standin.objects('pods', 'sandgate').some((p) => p.metadata.name === 'left-helper'), 10_000);
      expect(standin.objects('configmaps', 'sandgate').map((c) => c.metadata.name)).toContain(`${live.id}-skills`);
    } finally {
      await driver.stop(live.id);
    }
  });

  it('a new driver (another gateway, after a restart) finds and adopts a running pod by its labels', async () => {
    const first = newDriver();
    const h = await first.start(await specFor({ userId: 80, name: 'adopted' }));
    await execOn(h, 'python', 'x = 41');
    h.detach();
    const second = newDriver();
    const found = (await second.list()).find((s) => s.ownerId === 80)!;
    expect(found).toMatchObject({ id: h.id, owner: 'adopted', running: true });
    const again = (await second.attach(found.id))!;
    try {
      expect((await execOn(again, 'python', 'x + 1')).result).toBe('42');
    } finally {
      await second.stop(found.id);
    }
    // Another installation in the namespace sees none of it.
    expect((await newDriver({ gatewayId: 'other' }).list()).some((s) => s.id === h.id)).toBe(false);
  });

  it('a start is refused when the RuntimeClass is missing or the image cannot be had, and leaves no pod', async () => {
    // By name: an earlier test's pod may still be going (its container being removed), so a count could fall below this.
    const names = () => standin.objects('pods', 'sandgate').map((p) => p.metadata.name as string);
    const before = new Set(names());
    await expect(newDriver({ runtimeClassName: 'kata' }).start(await specFor({ userId: 81, name: 'x' }))).rejects.toThrow(
      /RuntimeClass "kata" not found/,
    );
    await expect(newDriver({ image: 'sandgate/sandbox:absent' }).start(await specFor({ userId: 81, name: 'x' }))).rejects.toThrow(/ErrImagePull/);
    await eventually(async () => names().every((n) => before.has(n)), 10_000);
  });

  it('no sandbox starts when the NetworkPolicy is missing and may not be made', async () => {
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(standin.kubeconfigPath);
    await kc.makeApiClient(k8s.NetworkingV1Api).deleteNamespacedNetworkPolicy({ name: NETWORK_POLICY_NAME, namespace: 'sandgate' });
    standin.deny.add('create networkpolicies');
    try {
      await expect(newDriver().start(await specFor({ userId: 82, name: 'y' }))).rejects.toThrow(/NetworkPolicy/);
    } finally {
      standin.deny.delete('create networkpolicies');
    }
  });
});

describe('read-only mounts on a cluster', () => {
  it('/skills and /tools travel in ConfigMaps the pod owns: readable, not writable, gone with the pod', async () => {
    const driver = newDriver();
    const h = await driver.start(await specFor({ userId: 91, name: 'reader' }, undefined, { '/skills': path.join(REPO_ROOT, 'skills'), '/tools': path.join(REPO_ROOT, 'tools') }));
    const maps = () => standin.objects('configmaps', 'sandgate').filter((c) => c.metadata.ownerReferences?.[0]?.name === h.id);
    try {
      expect(maps().map((c) => c.metadata.name).sort()).toEqual([`${h.id}-skills`, `${h.id}-tools`]);
      const r = await execOn(h, 'bash', 'ls /skills; ls /tools; touch /tools/x 2>&1 || echo refused; stat -c %U /tools/sandgate.ts');
      expect(r.stdout).toContain('data-analysis');
      expect(r.stdout).toContain('sandgate.ts');
      expect(r.stdout).toMatch(/refused/);
      expect(r.stdout).toMatch(/root\n$/);
      const py = await execOn(h, 'python', "import sys; sys.path.insert(0, '/tools/python'); import sandgate_tools; print('ok')");
      expect(py.stdout).toBe('ok\n');
    } finally {
      await driver.stop(h.id);
    }
    await eventually(async () => maps().length === 0, 10_000);
  });
});

describe('workspace files on a cluster', () => {
  it('the gateway reads and writes a workspace through a helper pod on its claim, as the sandbox’s user, and the sandbox sees it', async () => {
    const workspaceId = store.newId();
    const driver = newDriver();
    const h = await driver.start(await specFor({ userId: 90, name: 'files' }, workspaceId));
    try {
      const ws = new Workspace(await store.helper(workspaceId), () => {});
      await ws.write('notes/from-gateway.txt', 'hello from the gateway\n');
      expect((await execOn(h, 'bash', 'cat /workspace/notes/from-gateway.txt; stat -c %u /workspace/notes/from-gateway.txt')).stdout).toBe('hello from the gateway\n1000\n');
      await execOn(h, 'python', "open('/workspace/made-inside.csv', 'w').write('a,b\\n1,2\\n')");
      expect((await ws.read('made-inside.csv')).data.toString()).toBe('a,b\n1,2\n');
      expect((await ws.list('', { recursive: true })).map((e) => e.path).sort()).toEqual(['made-inside.csv', 'notes', 'notes/from-gateway.txt']);
      // A symlink planted by code is refused, as on a Docker host: the helper is the same.
      await execOn(h, 'bash', 'ln -s /etc/passwd /workspace/trap');
      await expect(ws.read('trap')).rejects.toThrow();
      const helpers = standin.objects('pods', 'sandgate').filter((p) => p.metadata.labels['app.kubernetes.io/component'] === 'helper');
      expect(helpers).toHaveLength(1);
      expect(helpers[0]!.spec.containers[0].securityContext.capabilities).toEqual({ drop: ['ALL'], add: ['SETUID', 'SETGID', 'SYS_CHROOT'] });
      expect(helpers[0]!.spec.activeDeadlineSeconds).toBeGreaterThan(0);
    } finally {
      await store.releaseAll();
      await driver.stop(h.id);
    }
    // The helper pod goes with it; the sandbox driver never lists it as a sandbox.
    await eventually(async () => !standin.objects('pods', 'sandgate').some((p) => p.metadata.labels['app.kubernetes.io/component'] === 'helper'), 10_000);
  });

  it('a deleted workspace takes its claim and data with it', async () => {
    const workspaceId = store.newId();
    await store.ensure(workspaceId);
    expect(standin.objects('persistentvolumeclaims', 'sandgate').some((p) => p.metadata.name === claimName(workspaceId))).toBe(true);
    await store.destroy(workspaceId);
    expect(standin.objects('persistentvolumeclaims', 'sandgate').some((p) => p.metadata.name === claimName(workspaceId))).toBe(false);
  });
});

describe('preflight on a cluster', () => {
  it('passes on a cluster that has it all, and proves gVisor with a test pod', async () => {
    const checks = await newDriver().health({ full: true });
    for (const name of ['api', 'namespace', 'runtimeClass', 'permissions', 'runtime', 'network']) expect(checks[name], name).toMatchObject({ ok: true });
    expect(checks.runtime!.detail).toMatch(/gVisor/);
    expect(checks.network!.detail).toMatch(/reaches nothing/);
    expect(checks.freezing).toMatchObject({ ok: true, notAvailable: true });
    expect(checks.runtimeProcesses).toMatchObject({ ok: true, notAvailable: true });
  });

  it('names each missing part and its fix', async () => {
    standin.deny.add('create pods/exec');
    try {
      const checks = await newDriver({ runtimeClassName: 'gvisor-missing', namespace: 'nowhere' }).health({ full: true });
      expect(checks.namespace).toMatchObject({ ok: false });
      expect(checks.namespace!.detail).toMatch(/nowhere.*create it/);
      expect(checks.runtimeClass!.detail).toMatch(/gvisor-missing.*RuntimeClass/);
      expect(checks.permissions!.detail).toMatch(/may not: create pods\/exec/);
      expect(checks.runtime).toMatchObject({ ok: false });
    } finally {
      standin.deny.delete('create pods/exec');
    }
  });

  it('a RuntimeClass whose handler is not gVisor fails the runtime check', async () => {
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(standin.kubeconfigPath);
    await kc.makeApiClient(k8s.NodeV1Api).createRuntimeClass({ body: { apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name: 'plain-runc' }, handler: 'runc' } });
    const checks = await newDriver({ runtimeClassName: 'plain-runc' }).health({ full: true });
    expect(checks.runtimeClass).toMatchObject({ ok: true });
    expect(checks.runtime).toMatchObject({ ok: false });
    expect(checks.runtime!.detail).toMatch(/does not run on gVisor/);
  });

  it('a cluster that does not enforce NetworkPolicy fails the network check, naming the fix', async () => {
    // Its pods all get a network (as under flannel); under runc the test pod reaches the API server.
    const lax = await startKubeStandin({ enforceNetworkPolicy: false, runtimeClasses: { gvisor: 'runsc', plain: 'runc' } });
    try {
      const kc = new k8s.KubeConfig();
      kc.loadFromFile(lax.kubeconfigPath);
      const checks = await newDriver({ kubeConfig: kc, runtimeClassName: 'plain' }).health({ full: true });
      expect(checks.network).toMatchObject({ ok: false });
      expect(checks.network!.detail).toMatch(/does not enforce the sandboxes' NetworkPolicy.*Calico, Cilium/);
      // gVisor with its network off reaches nothing even there.
      const gvisor = await newDriver({ kubeConfig: kc }).health({ full: true });
      expect(gvisor.network).toMatchObject({ ok: true });
    } finally {
      await lax.close();
    }
  });

  it('a namespace the gateway may not read is named as a missing permission', async () => {
    standin.deny.add('get namespaces');
    try {
      const checks = await newDriver().health();
      expect(checks.namespace).toMatchObject({ ok: false });
      expect(checks.namespace!.detail).toMatch(/may not read namespace sandgate.*ClusterRole/);
    } finally {
      standin.deny.delete('get namespaces');
    }
  });

  it('an API server that does not answer is named, with what to check', async () => {
    standin.down = true;
    try {
      const checks = await newDriver().health();
      expect(checks.api).toMatchObject({ ok: false });
      expect(checks.api!.detail).toMatch(/does not answer/);
    } finally {
      standin.down = false;
    }
  });
});
