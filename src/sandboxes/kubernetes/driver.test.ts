/**
 * The Kubernetes driver against the stand-in API server (test/support/kube-standin.ts):
 * the official client, pointed at it by a kubeconfig, over HTTP and the attach
 * WebSocket; each pod a real container under runsc on the local Docker.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { runDriverConformance, execOn } from '../../../test/support/driver-conformance.js';
import { startKubeStandin, type KubeStandin } from '../../../test/support/kube-standin.js';
import { eventually } from '../../../test/support/until.js';
import { configFor } from '../../config.js';
import { createLogger } from '../../logger.js';
import { KubernetesDriver, type KubernetesDriverOptions } from './driver.js';
import { NETWORK_POLICY_NAME, claimName } from './objects.js';

const config = configFor({});
let standin: KubeStandin;

function newDriver(o: Partial<KubernetesDriverOptions> = {}): KubernetesDriver {
  const kubeConfig = new k8s.KubeConfig();
  kubeConfig.loadFromFile(standin.kubeconfigPath);
  return new KubernetesDriver({
    kubeConfig,
    namespace: 'sandgate',
    image: config.sandboxImage,
    imagePullPolicy: 'Never',
    runtimeClassName: 'gvisor',
    gatewayId: 'conformance',
    memoryMb: 512,
    cpus: 1,
    tmpMb: 64,
    workspaceMb: 256,
    logger: createLogger('silent'),
    ...o,
  });
}

beforeAll(async () => {
  standin = await startKubeStandin();
});
afterAll(async () => {
  await standin?.close();
});

runDriverConformance({
  name: 'KubernetesDriver (stand-in API server, runsc)',
  newDriver: () => newDriver(),
  // The workspace is the user's claim: the spec's directory only says that one is mounted.
  spec: (owner) => ({ owner, workspaceDir: '', workspaceWritable: true, readOnlyMounts: {} }),
});

describe('KubernetesDriver specifics', () => {
  it('a pod is hardened as a container is, in Kubernetes terms, and the namespace gets the deny-all NetworkPolicy', async () => {
    const driver = newDriver();
    const h = await driver.start({ owner: { userId: 77, name: 'Ana María' }, workspaceDir: '', workspaceWritable: true, readOnlyMounts: {} });
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
      expect(standin.objects('persistentvolumeclaims', 'sandgate').find((p) => p.metadata.name === claimName(77))?.spec.resources.requests.storage).toBe('256Mi');

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

  it('the workspace is the user’s claim: files outlive the pod and reach the next one', async () => {
    const driver = newDriver();
    const owner = { userId: 78, name: 'keeper' };
    const a = await driver.start({ owner, workspaceDir: '', workspaceWritable: true, readOnlyMounts: {} });
    expect((await execOn(a, 'bash', 'echo kept > /workspace/note.txt && id -u && stat -c %U:%G /workspace/note.txt')).stdout).toMatch(/1000\n.*:/);
    const gone = new Promise<string>((r) => a.onExit(r));
    await driver.stop(a.id);
    await gone;
    const b = await driver.start({ owner, workspaceDir: '', workspaceWritable: true, readOnlyMounts: {} });
    try {
      expect((await execOn(b, 'bash', 'cat /workspace/note.txt')).stdout).toBe('kept\n');
    } finally {
      await driver.stop(b.id);
    }
  });

  it('a pod that dies mid-run ends its handle, and list no longer calls it running', async () => {
    const driver = newDriver();
    const h = await driver.start({ owner: { userId: 79, name: 'dies' }, workspaceDir: '', workspaceWritable: true, readOnlyMounts: {} });
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

  it('a new driver (another gateway, after a restart) finds and adopts a running pod by its labels', async () => {
    const first = newDriver();
    const h = await first.start({ owner: { userId: 80, name: 'adopted' }, workspaceDir: '', workspaceWritable: true, readOnlyMounts: {} });
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
    const before = standin.objects('pods', 'sandgate').length;
    await expect(newDriver({ runtimeClassName: 'kata' }).start({ owner: { userId: 81, name: 'x' }, workspaceDir: '', workspaceWritable: true, readOnlyMounts: {} })).rejects.toThrow(
      /RuntimeClass "kata" not found/,
    );
    await expect(newDriver({ image: 'sandgate/sandbox:absent' }).start({ owner: { userId: 81, name: 'x' }, workspaceDir: '', workspaceWritable: true, readOnlyMounts: {} })).rejects.toThrow(/ErrImagePull/);
    await eventually(async () => standin.objects('pods', 'sandgate').length === before, 10_000);
  });

  it('no sandbox starts when the NetworkPolicy is missing and may not be made', async () => {
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(standin.kubeconfigPath);
    await kc.makeApiClient(k8s.NetworkingV1Api).deleteNamespacedNetworkPolicy({ name: NETWORK_POLICY_NAME, namespace: 'sandgate' });
    standin.deny.add('create networkpolicies');
    try {
      await expect(newDriver().start({ owner: { userId: 82, name: 'y' }, workspaceDir: '', workspaceWritable: true, readOnlyMounts: {} })).rejects.toThrow(/NetworkPolicy/);
    } finally {
      standin.deny.delete('create networkpolicies');
    }
  });
});

describe('preflight on a cluster', () => {
  it('passes on a cluster that has it all, and proves gVisor with a test pod', async () => {
    const checks = await newDriver().health({ full: true });
    for (const name of ['api', 'namespace', 'runtimeClass', 'permissions', 'runtime']) expect(checks[name], name).toMatchObject({ ok: true });
    expect(checks.runtime!.detail).toMatch(/gVisor/);
    expect(checks.freezing).toMatchObject({ ok: true, notAvailable: true });
    expect(checks.runtimeProcesses).toMatchObject({ ok: true, notAvailable: true });
  });

  it('names each missing part and its fix', async () => {
    standin.deny.add('create pods/attach');
    try {
      const checks = await newDriver({ runtimeClassName: 'gvisor-missing', namespace: 'nowhere' }).health({ full: true });
      expect(checks.namespace).toMatchObject({ ok: false });
      expect(checks.namespace!.detail).toMatch(/nowhere.*create it/);
      expect(checks.runtimeClass!.detail).toMatch(/gvisor-missing.*RuntimeClass/);
      expect(checks.permissions!.detail).toMatch(/may not: create pods\/attach/);
      expect(checks.runtime).toMatchObject({ ok: false });
    } finally {
      standin.deny.delete('create pods/attach');
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
