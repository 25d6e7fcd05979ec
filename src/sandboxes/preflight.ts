/**
 * Checks, at start and for /readyz, that sandboxes can run: Docker answers, the
 * configured runtime is registered, the image exists, and a container under that
 * runtime really runs gVisor's kernel.
 */
import type Docker from 'dockerode';
import type { Config } from '../config.js';

export interface PreflightResult {
  ok: boolean;
  detail: string;
}

export async function dockerReachable(docker: Docker): Promise<PreflightResult> {
  try {
    await docker.ping();
    return { ok: true, detail: 'docker answers' };
  } catch (e) {
    return { ok: false, detail: `Docker is not reachable (${(e as Error).message}); run scripts/setup-runtime.sh` };
  }
}

export async function imagePresent(docker: Docker, image: string): Promise<PreflightResult> {
  try {
    await docker.getImage(image).inspect();
    return { ok: true, detail: image };
  } catch {
    return { ok: false, detail: `the sandbox image ${image} is missing; run scripts/build-sandbox-image.sh` };
  }
}

/** Runs `dmesg` in a throwaway hardened container; gVisor's kernel says its name there. */
export async function runtimePreflight(docker: Docker, config: Config): Promise<PreflightResult> {
  const info = (await docker.info()) as { Runtimes?: Record<string, unknown> };
  if (!info.Runtimes?.[config.sandboxRuntime]) {
    return { ok: false, detail: `Docker has no runtime "${config.sandboxRuntime}"; run scripts/setup-runtime.sh` };
  }
  const container = await docker.createContainer({
    Image: config.sandboxImage,
    Entrypoint: ['/bin/dmesg'],
    User: '1000:1000',
    NetworkDisabled: true,
    Labels: { 'org.sandgate.role': 'preflight' },
    HostConfig: {
      Runtime: config.sandboxRuntime,
      NetworkMode: 'none',
      ReadonlyRootfs: true,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      AutoRemove: false,
    },
  });
  try {
    await container.start();
    await container.wait();
    const logs = (await container.logs({ stdout: true, stderr: true })).toString('utf8');
    if (config.sandboxRuntime === 'runsc' && !/gVisor/.test(logs)) {
      return { ok: false, detail: `a container under runsc did not report gVisor's kernel: ${logs.slice(0, 200)}` };
    }
    return { ok: true, detail: `${config.sandboxRuntime} runs hardened containers` };
  } catch (e) {
    return { ok: false, detail: `a container under ${config.sandboxRuntime} failed: ${(e as Error).message}; run scripts/setup-runtime.sh` };
  } finally {
    await container.remove({ force: true }).catch(() => {});
  }
}
