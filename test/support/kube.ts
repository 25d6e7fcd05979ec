/**
 * The sandbox driver a test run uses: Docker (the default), or in the `kubernetes` test
 * project the Kubernetes driver, pointed at a stand-in API server (kube-standin.ts) that
 * this test process starts once and that backs each pod with a runsc container on the
 * local Docker. `driverEnvFor` gives the settings for either, to merge into a gateway's.
 */
import { startKubeStandin, type KubeStandin } from './kube-standin.js';

/** The namespace the stand-in has, where the kubernetes project's sandboxes live. */
export const TEST_NAMESPACE = 'sandgate';

let standin: Promise<KubeStandin> | undefined;

export function kubernetesWanted(): boolean {
  return process.env.SANDGATE_TEST_DRIVER === 'kubernetes';
}

/** This process's stand-in API server (started at the first call). */
export function testStandin(): Promise<KubeStandin> {
  standin ??= startKubeStandin({ namespaces: [TEST_NAMESPACE] });
  return standin;
}

/** The settings that put a gateway's sandboxes on the run's driver. */
export async function driverEnv(): Promise<Record<string, string>> {
  if (!kubernetesWanted()) return {};
  const s = await testStandin();
  return { SANDGATE_SANDBOX_DRIVER: 'kubernetes', SANDGATE_K8S_KUBECONFIG: s.kubeconfigPath, SANDGATE_K8S_NAMESPACE: TEST_NAMESPACE, SANDGATE_K8S_IMAGE_PULL_POLICY: 'Never' };
}

