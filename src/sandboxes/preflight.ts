/**
 * The Docker driver's health checks (SandboxDriver.health): Docker answers, the image
 * exists, and (the full check) a container under the configured runtime really runs
 * gVisor's kernel. The throwaway container carries this gateway's label, so one that a
 * crash left behind is found and removed like any other leftover, and its wait is
 * bounded: a runtime that hangs fails the check instead of the start.
 */
import type Docker from 'dockerode';
import type { HealthCheck } from './types.js';

/** How long the throwaway container may take before the check fails and it is removed. */
export const PREFLIGHT_TIMEOUT_MS = 30_000;

export async function dockerReachable(docker: Docker): Promise<HealthCheck> {
  try {
    await docker.ping();
    return { ok: true, detail: 'docker answers' };
  } catch (e) {
    return { ok: false, detail: `Docker is not reachable (${(e as Error).message}); run scripts/setup-runtime.sh` };
  }
}

export async function imagePresent(docker: Docker, image: string): Promise<HealthCheck> {
  try {
    await docker.getImage(image).inspect();
    return { ok: true, detail: image };
  } catch {
    return { ok: false, detail: `the sandbox image ${image} is missing; run scripts/build-sandbox-image.sh` };
  }
}

export interface RuntimeCheckOptions {
  image: string;
  runtime: string;
  /** The gVisor platform wanted; the runtime's registered `--platform` must say the same. */
  platform?: 'systrap' | 'ptrace';
  /** The labels that mark the container as this gateway's (and as a preflight). */
  labels: Record<string, string>;
  timeoutMs?: number;
}

/** Runs `dmesg` in a throwaway hardened container; gVisor's kernel says its name there. */
export async function runtimeIsolates(docker: Docker, o: RuntimeCheckOptions): Promise<HealthCheck> {
  const info = (await docker.info()) as { Runtimes?: Record<string, { runtimeArgs?: string[] } | undefined> };
  const registered = info.Runtimes?.[o.runtime];
  if (!registered) {
    return { ok: false, detail: `Docker has no runtime "${o.runtime}"; run scripts/setup-runtime.sh` };
  }
  // runsc's default platform (no flag) is systrap in the builds that have it.
  const platform = /^--platform=(\w+)$/.exec((registered.runtimeArgs ?? []).find((a) => a.startsWith('--platform=')) ?? '')?.[1] ?? (o.runtime.startsWith('runsc') ? 'systrap' : undefined);
  if (o.platform && platform !== o.platform) {
    return { ok: false, detail: `Docker's runtime "${o.runtime}" runs gVisor on ${platform}, but SANDGATE_RUNSC_PLATFORM=${o.platform}; run scripts/setup-runtime.sh (with the same setting) to register it` };
  }
  const container = await docker.createContainer({
    Image: o.image,
    Entrypoint: ['/bin/dmesg'],
    User: '1000:1000',
    NetworkDisabled: true,
    Labels: o.labels,
    HostConfig: {
      Runtime: o.runtime,
      NetworkMode: 'none',
      ReadonlyRootfs: true,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      AutoRemove: false,
    },
  });
  let timer: NodeJS.Timeout | undefined;
  try {
    await container.start();
    const timeoutMs = o.timeoutMs ?? PREFLIGHT_TIMEOUT_MS;
    const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs)));
    if ((await Promise.race([container.wait(), timedOut])) === 'timeout') {
      return { ok: false, detail: `a container under ${o.runtime} did not finish within ${timeoutMs / 1000} s; check dockerd's log and scripts/setup-runtime.sh` };
    }
    const logs = (await container.logs({ stdout: true, stderr: true })).toString('utf8');
    if (o.runtime.startsWith('runsc') && !/gVisor/.test(logs)) {
      return { ok: false, detail: `a container under runsc did not report gVisor's kernel: ${logs.slice(0, 200)}` };
    }
    return { ok: true, detail: `${o.runtime} runs hardened containers${platform ? ` (platform ${platform})` : ''}` };
  } catch (e) {
    return { ok: false, detail: `a container under ${o.runtime} failed: ${(e as Error).message}; run scripts/setup-runtime.sh` };
  } finally {
    clearTimeout(timer);
    await container.remove({ force: true }).catch(() => {});
  }
}
