/**
 * The real gateway process: starts, becomes ready (Docker, runsc preflight, image),
 * and shuts down cleanly on SIGTERM; killed with SIGKILL while its sandboxes are frozen,
 * the next start recovers them; a bad setting stops the start with its name.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { configFor } from '../src/config.js';
import { freezeState, thaw } from '../src/sandboxes/freezer.js';
import { dockerClient, gatewayIdFor } from '../src/sandboxes/index.js';
import { until } from './support/until.js';
import { startGatewayProcess } from './support/gateway-process.js';

const startGateway = startGatewayProcess;

async function untilAsync(cond: () => Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Mount points at or below `dir`. */
const mountsUnder = (dir: string) =>
  fs
    .readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[1] ?? '')
    .filter((m) => m === dir || m.startsWith(dir + '/'));

describe('gateway process', () => {
  it('starts, reports ready, and stops on SIGTERM', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-main-'));
    const g = startGateway({ SANDGATE_DATA_DIR: dataDir, SANDGATE_PORT: '0', SANDGATE_WARM_POOL_SIZE: '0' });
    try {
      await until(() => /sandgate is running at (http:\/\/\S+)/.test(g.output()), 60_000);
      const url = /sandgate is running at (http:\/\/\S+)/.exec(g.output())![1]!;
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      // The banner's steps work as printed: a user first, then that user's token.
      expect(g.output()).toMatch(/users add <your-name>\n\s+npx sandgate tokens create --user <your-name>/);
      const ready = await fetch(`${url}/readyz`);
      const body = (await ready.json()) as { status: string; checks: Record<string, { ok: boolean }> };
      expect(body.status, JSON.stringify(body)).toBe('ready');
      expect(Object.keys(body.checks).sort()).toEqual(['docker', 'image', 'runtime', 'store']);
      // Logs are JSON lines.
      const logLine = g.output().split('\n').find((l) => l.startsWith('{'))!;
      expect(JSON.parse(logLine)).toMatchObject({ service: 'sandgate' });
      g.child.kill('SIGTERM');
      expect(await g.exited).toBe(0);
      expect(g.output()).toMatch(/"msg":"stopped"/);
    } finally {
      g.child.kill('SIGKILL');
    }
  });

  it('the banner shows an explicit public URL as it was set', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-main-'));
    const g = startGateway({ SANDGATE_DATA_DIR: dataDir, SANDGATE_PORT: '0', SANDGATE_WARM_POOL_SIZE: '0', SANDGATE_PUBLIC_URL: 'https://gate.example.com:8443' });
    try {
      await until(() => /sandgate is running at/.test(g.output()), 60_000);
      expect(g.output()).toContain('sandgate is running at https://gate.example.com:8443\n');
      expect(g.output()).toContain('MCP endpoint:  https://gate.example.com:8443/mcp');
    } finally {
      g.child.kill('SIGTERM');
      await g.exited;
    }
  });

  it.each([
    ['damaged', 'short\n', 0o600, /upstream\.key is not a 32-byte key in base64 or hex: restore it from a backup/],
    ['readable by others', `${'A'.repeat(43)}=\n`, 0o644, /upstream\.key can be read by other users \(mode 644\): run chmod 600/],
  ])('a %s upstream.key stops the start with what to do, not a stack trace', async (_what, content, mode, message) => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-main-'));
    fs.writeFileSync(path.join(dataDir, 'upstream.key'), content, { mode });
    fs.chmodSync(path.join(dataDir, 'upstream.key'), mode);
    const g = startGateway({ SANDGATE_DATA_DIR: dataDir, SANDGATE_PORT: '0', SANDGATE_WARM_POOL_SIZE: '0' });
    expect(await g.exited).toBe(2);
    expect(g.output()).toMatch(message);
    expect(g.output()).not.toMatch(/\n\s+at /);
  });

  it('killed with SIGKILL while its sandboxes are frozen, leaves nothing stuck: the next start recovers them and stops cleanly', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-main-'));
    const env = { SANDGATE_DATA_DIR: dataDir, SANDGATE_PORT: '0', SANDGATE_WARM_POOL_SIZE: '1', SANDGATE_FREEZE_AFTER_MS: '300' };
    const docker = dockerClient(configFor(env));
    const mine = async () => (await docker.listContainers({ all: true, filters: { label: [`org.sandgate.gateway=${gatewayIdFor(dataDir)}`] } })).map((c) => c.Id);
    const first = startGateway(env);
    let second: ReturnType<typeof startGateway> | undefined;
    try {
      await until(() => /sandgate is running at/.test(first.output()), 60_000);
      // The warm pool's sandbox, started and then frozen while it waits.
      await untilAsync(async () => (await mine()).length === 1 && freezeState((await mine())[0]!) === 'frozen', 60_000);
      const [frozenId] = await mine();
      first.child.kill('SIGKILL');
      await first.exited;
      expect(freezeState(frozenId!)).toBe('frozen');

      second = startGateway(env);
      await until(() => /sandgate is running at/.test(second!.output()), 60_000);
      // The frozen one was thawed and removed (a pooled sandbox is not adopted), and a new one fills the pool.
      await untilAsync(async () => !(await mine()).includes(frozenId!), 30_000);
      await untilAsync(async () => (await mine()).length === 1, 60_000);
      second.child.kill('SIGTERM');
      expect(await second.exited).toBe(0);
      expect(await mine()).toEqual([]);
      expect(mountsUnder(dataDir)).toEqual([]);
    } finally {
      first.child.kill('SIGKILL');
      second?.child.kill('SIGKILL');
      for (const id of await mine()) {
        thaw(id);
        await docker.getContainer(id).remove({ force: true }).catch(() => {});
      }
      for (const m of mountsUnder(dataDir).reverse()) spawnSync('umount', ['-l', m]);
    }
  });

  it('a bad setting stops the start with a message naming it', async () => {
    const g = startGateway({ SANDGATE_DATA_DIR: os.tmpdir(), SANDGATE_SANDBOX_MEMORY_MB: 'lots' });
    expect(await g.exited).toBe(2);
    expect(g.output()).toMatch(/SANDGATE_SANDBOX_MEMORY_MB="lots" is invalid/);
  });
});
