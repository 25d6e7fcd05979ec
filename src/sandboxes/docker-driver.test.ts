import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { configFor } from '../config.js';
import { createLogger } from '../logger.js';
import type { Readable } from 'node:stream';
import { DockerDriver, LABEL_GATEWAY } from './docker-driver.js';
import { runtimeIsolates } from './preflight.js';
import { until } from '../../test/support/until.js';
import { runDriverConformance } from '../../test/support/driver-conformance.js';
import { dockerClient } from './index.js';
import { REPO_ROOT } from '../paths.js';

const config = configFor({ SANDGATE_DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-drv-')) });

function newDriver(image = config.sandboxImage) {
  return new DockerDriver({
    docker: dockerClient(config),
    image,
    runtime: config.sandboxRuntime,
    gatewayId: 'conformance',
    memoryMb: 512,
    cpus: 1,
    pidsLimit: 1024,
    nproc: 64,
    tmpMb: 64,
    logger: createLogger('silent'),
  });
}

function workspace(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-drv-ws-'));
  fs.chownSync(dir, 1000, 1000);
  return dir;
}

runDriverConformance({
  name: 'DockerDriver (runsc)',
  newDriver: () => newDriver(),
  spec: (owner) => ({
    owner,
    workspaceDir: workspace(),
    workspaceWritable: true,
    readOnlyMounts: { '/skills': path.join(REPO_ROOT, 'skills'), '/tools': path.join(REPO_ROOT, 'tools') },
  }),
});

describe('DockerDriver specifics', () => {
  it('creates containers with every hardening flag', () => {
    const spec = newDriver().containerSpec(
      { owner: { userId: 1, name: 'alice' }, workspaceDir: '/w', workspaceWritable: false, readOnlyMounts: { '/skills': '/s' } },
      'n',
    );
    const h = spec.HostConfig!;
    expect(h.Runtime).toBe('runsc');
    expect(h.NetworkMode).toBe('none');
    expect(h.ReadonlyRootfs).toBe(true);
    expect(h.CapDrop).toEqual(['ALL']);
    expect(h.CapAdd).toEqual(['SETUID', 'SETGID', 'KILL']);
    // What code prints travels on the runner's stdout: dockerd keeps no log of it.
    expect(h.LogConfig).toEqual({ Type: 'none', Config: {} });
    expect(h.SecurityOpt).toContain('no-new-privileges');
    expect(h.Memory).toBe(h.MemorySwap);
    expect(h.PidsLimit).toBeGreaterThanOrEqual(64);
    expect(h.Ulimits).toContainEqual({ Name: 'nproc', Soft: 64, Hard: 64 });
    expect(h.Tmpfs!['/tmp']).toMatch(/size=64m/);
    expect(h.Mounts).toEqual([
      { Type: 'bind', Source: '/w', Target: '/workspace', ReadOnly: true },
      { Type: 'bind', Source: '/s', Target: '/skills', ReadOnly: true },
    ]);
    // No host value: only thread pools sized to the CPU limit.
    expect(spec.Env).toEqual(['OPENBLAS_NUM_THREADS=1', 'OMP_NUM_THREADS=1']);
    expect(spec.User).toBe('0:0'); // the runner; code runs as 1000 (see the hostile tests)
    expect(spec.Labels).toMatchObject({ 'org.sandgate.owner': 'alice', 'org.sandgate.owner-id': '1', 'org.sandgate.gateway': 'conformance' });
  });

  it("the runtime check's container carries the gateway's label (a crash leaves nothing adoption cannot find) and is removed", async () => {
    const driver = newDriver();
    const docker = dockerClient(config);
    const events = (await docker.getEvents({ filters: { type: ['container'], event: ['create'], label: [`${LABEL_GATEWAY}=conformance`] } })) as unknown as Readable;
    const created: Record<string, string>[] = [];
    events.on('data', (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n').filter(Boolean)) created.push((JSON.parse(line) as { Actor: { Attributes: Record<string, string> } }).Actor.Attributes);
    });
    try {
      const checks = await driver.health({ full: true });
      expect(checks.runtime).toEqual({ ok: true, detail: 'runsc runs hardened containers (platform systrap)' });
      await until(() => created.length > 0, 5000);
      expect(created[0]).toMatchObject({ [LABEL_GATEWAY]: 'conformance', 'org.sandgate.role': 'preflight' });
    } finally {
      events.destroy();
    }
    expect((await driver.list()).filter((c) => c.labels['org.sandgate.role'] === 'preflight')).toEqual([]);
  });

  it('a runtime check that does not finish in time fails, and leaves no container', async () => {
    const labels = { [LABEL_GATEWAY]: 'conformance', 'org.sandgate.role': 'preflight' };
    const check = await runtimeIsolates(dockerClient(config), { image: config.sandboxImage, runtime: 'runsc', labels, timeoutMs: 1 });
    expect(check.ok).toBe(false);
    expect(check.detail).toMatch(/did not finish within 0.001 s/);
    expect((await newDriver().list()).filter((c) => c.labels['org.sandgate.role'] === 'preflight')).toEqual([]);
  });

  it('a missing image is a clear error naming the fix', async () => {
    await expect(newDriver('sandgate/does-not-exist:0').start({ workspaceWritable: false, readOnlyMounts: {} })).rejects.toThrow(
      /build-sandbox-image/,
    );
  });
});
