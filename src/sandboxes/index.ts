/**
 * Builds the sandbox stack from configuration: the driver (Docker, or Kubernetes), the
 * workspace store (host volumes, or claims) and the manager. The one place that knows which driver is in use.
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
import { SKILLS_DIR, TOOLS_DIR } from '../paths.js';
import Docker from 'dockerode';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { Db } from '../store/store.js';
import { DockerDriver } from './docker-driver.js';
import { SandboxManager } from './manager.js';
import * as k8s from '@kubernetes/client-node';
import type { SandboxDriver, SandboxOwner, WorkspaceStore } from './types.js';
import { KubernetesDriver } from './kubernetes/driver.js';
import { KubernetesWorkspaces } from './kubernetes/workspaces.js';
import { WorkspaceVolumes } from './volumes.js';
import { gatewayIdFor } from './gateway-id.js';
import type { HopSigner } from '../replicas/hop-auth.js';
import type { Replica } from '../replicas/leases.js';

export { gatewayIdFor };

export function dockerClient(config: Config): Docker {
  return new Docker({ socketPath: config.dockerSocket });
}

/** Copies the static in-sandbox library (repo tools/) into a sandbox's /tools directory. */
export async function copyStaticTools(dir: string): Promise<void> {
  await fsp.cp(TOOLS_DIR, dir, { recursive: true, force: true, filter: (src) => !src.includes('__pycache__') });
}

export interface SandboxStackOptions {
  /** The driver; by default the one for these settings (`createDriver`). */
  driver?: SandboxDriver;
  prepareTools?: (dir: string, owner: SandboxOwner | undefined) => Promise<void>;
  skillsDir?: string;
  /** This gateway among its replicas: sandboxes are held under leases (SandboxManagerDeps.replica). */
  replica?: Replica;
  /** Signs the runs sent to the replica holding a user's sandbox (SandboxManagerDeps.hop). */
  hop?: HopSigner;
  /** Where workspaces are; by default the one for these settings (`createWorkspaceStore`). */
  volumes?: WorkspaceStore;
}

/** The driver for these settings; the CLI uses it alone to find the gateway's containers. */
/** Docker's name for the runtime the settings ask for: runsc on ptrace is registered as runsc-ptrace (scripts/setup-runtime.sh). */
export function runtimeFor(config: Config): string {
  return config.sandboxRuntime === 'runsc' && config.runscPlatform === 'ptrace' ? 'runsc-ptrace' : config.sandboxRuntime;
}

/** The cluster's client settings: a kubeconfig file, or the pod's service account, or the usual places. */
export function kubeConfigFor(config: Config): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  if (config.k8sKubeconfig) kc.loadFromFile(config.k8sKubeconfig);
  else kc.loadFromDefault();
  return kc;
}

/** Where and how pods and claims are made: the settings the driver and the workspace store share. */
function clusterSettings(config: Config) {
  return {
    kubeConfig: kubeConfigFor(config),
    namespace: config.k8sNamespace,
    image: config.sandboxImage,
    imagePullPolicy: config.k8sImagePullPolicy,
    runtimeClassName: config.k8sRuntimeClass,
    gatewayId: gatewayIdFor(config.dataDir),
  };
}

export function createDriver(config: Config, logger: Logger): SandboxDriver {
  if (config.sandboxDriver === 'kubernetes') {
    return new KubernetesDriver({
      ...clusterSettings(config),
      memoryMb: config.sandboxMemoryMb,
      cpus: config.sandboxCpus,
      tmpMb: config.sandboxTmpMb,
      nproc: config.sandboxNproc,
      logger,
    });
  }
  return new DockerDriver({
    docker: dockerClient(config),
    image: config.sandboxImage,
    runtime: runtimeFor(config),
    platform: config.sandboxRuntime === 'runsc' ? config.runscPlatform : undefined,
    gatewayId: gatewayIdFor(config.dataDir),
    memoryMb: config.sandboxMemoryMb,
    cpus: config.sandboxCpus,
    pidsLimit: config.sandboxPidsLimit,
    nproc: config.sandboxNproc,
    tmpMb: config.sandboxTmpMb,
    logger,
  });
}

/** Where these settings keep workspaces: claims on the cluster, or the data directory's `workspaces/`. */
export function createWorkspaceStore(config: Config, logger: Logger): WorkspaceStore {
  return config.sandboxDriver === 'kubernetes'
    ? new KubernetesWorkspaces({
        ...clusterSettings(config),
        sizeMb: config.workspaceMb,
        storageClass: config.k8sStorageClass || undefined,
        logger,
      })
    : new WorkspaceVolumes({
        dir: path.join(config.dataDir, 'workspaces'),
        backend: config.workspaceBackend,
        sizeMb: config.workspaceMb,
      });
}

export function createSandboxManager(config: Config, db: Db, logger: Logger, opts: SandboxStackOptions = {}): SandboxManager {
  const driver = opts.driver ?? createDriver(config, logger);
  const onCluster = config.sandboxDriver === 'kubernetes';
  const volumes = opts.volumes ?? createWorkspaceStore(config, logger);
  return new SandboxManager({
    // No cgroup of a pod is the gateway's to freeze: idle sandboxes on a cluster are stopped, never frozen.
    config: onCluster ? { ...config, freezeAfterMs: 0, freezeRewarmSec: 0 } : config,
    db,
    logger,
    driver,
    volumes,
    skillsDir: opts.skillsDir ?? SKILLS_DIR,
    toolsMountsDir: path.join(config.dataDir, 'sandbox-tools'),
    prepareTools: opts.prepareTools ?? ((dir) => copyStaticTools(dir)),
    replica: opts.replica,
    hop: opts.hop,
  });
}
