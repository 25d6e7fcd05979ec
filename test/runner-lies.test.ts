/**
 * The manager's own defences against a runner that lies (test/fakes/lying-runner-driver.ts):
 * whatever a runner sends, a run keeps at most its output limit per stream, a `done` for
 * anything but the run in flight is nothing, paths outside /workspace never make it into
 * a result, and a sandbox that floods the gateway is stopped, with a clear result.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { configFor } from '../src/config.js';
import { createLogger } from '../src/logger.js';
import { SandboxManager } from '../src/sandboxes/manager.js';
import { WorkspaceVolumes } from '../src/sandboxes/volumes.js';
import type { Store } from '../src/store/store.js';
import { ensureUser } from '../src/accounts/accounts.js';
import { LyingRunnerDriver, type RunnerScript } from './support/fake-drivers.js';
import { openTestStore } from './support/store.js';

let store: Store | undefined;
let manager: SandboxManager | undefined;

afterEach(async () => {
  await manager?.shutdown({ stopAll: true, releaseVolumes: true });
  await store?.close();
});

async function stack(script: RunnerScript) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-lies-'));
  const config = configFor({ SANDGATE_DATA_DIR: dataDir, SANDGATE_WARM_POOL_SIZE: '0', SANDGATE_OUTPUT_LIMIT_KB: '16', SANDGATE_WORKSPACE_BACKEND: 'directory' });
  const opened = (store = await openTestStore(dataDir));
  const driver = new LyingRunnerDriver(script);
  manager = new SandboxManager({
    config,
    db: opened.db,
    logger: createLogger('silent'),
    driver,
    volumes: new WorkspaceVolumes({ dir: path.join(dataDir, 'workspaces'), backend: 'directory', sizeMb: 16 }),
    skillsDir: dataDir,
    toolsMountsDir: path.join(dataDir, 'tools'),
    prepareTools: async () => {},
  });
  const u = await ensureUser(opened.db, 'alice');
  return { driver, manager, owner: { userId: u.id, name: u.name } };
}

const done = (id: string, extra: object = {}) => ({ type: 'done', id, exitCode: 0, durationMs: 1, timedOut: false, killed: false, restarted: false, truncated: { stdout: 0, stderr: 0 }, files: [], ...extra });

describe('a runner that lies', () => {
  it('output past the limit is not kept, and counted as cut', async () => {
    const { manager: m, owner } = await stack((exec, write) => {
      for (let i = 0; i < 64; i++) write({ type: 'stdout', id: exec.id, data: 'x'.repeat(4096) });
      write(done(exec.id));
    });
    const r = await m.execute(owner, { language: 'python', code: '1' });
    expect(r.stdout.length).toBeLessThanOrEqual(16 * 1024 + 4096);
    expect(r.truncated.stdout).toBeGreaterThanOrEqual(64 * 4096 - r.stdout.length);
    expect(r.killed).toBe(false);
  });

  it('a flood far past the limit stops the sandbox instead of being read', async () => {
    const { manager: m, owner, driver } = await stack((exec, write) => {
      const line = `${JSON.stringify({ type: 'stdout', id: exec.id, data: 'y'.repeat(60_000) })}\n`;
      for (let i = 0; i < 2000; i++) write(line); // 120 MB
      write(done(exec.id));
    });
    const r = await m.execute(owner, { language: 'python', code: '1' });
    expect(r.killed).toBe(true);
    expect(r.notice).toMatch(/far more output than the 16 KiB limit allows, so it was stopped/);
    expect(r.stdout.length).toBeLessThanOrEqual(16 * 1024 + 4096);
    expect(driver.stopped).toHaveLength(1);
    // The user's next run gets a new sandbox.
    expect(driver.live.size).toBe(0);
  });

  it('a done for another run is nothing; the real one names only paths inside /workspace', async () => {
    const { manager: m, owner } = await stack((exec, write) => {
      write(done('someone-else', { result: "'FORGED'" }));
      write(done(`${exec.id}x`, { result: "'FORGED'" }));
      setTimeout(
        () =>
          write(
            done(exec.id, {
              result: "'genuine'",
              files: [
                { path: 'out.csv', size: 3, change: 'created' },
                { path: '../../../etc/shadow', size: 1, change: 'created' },
                { path: '/etc/passwd', size: 1, change: 'modified' },
              ],
            }),
          ),
        50,
      );
    });
    const r = await m.execute(owner, { language: 'python', code: '1' });
    expect(r.result).toBe("'genuine'");
    expect(r.files).toEqual([{ path: 'out.csv', size: 3, change: 'created' }]);
  });

  it('calls from an execution that is not running are refused, the one running is served', async () => {
    const { manager: m, owner, driver } = await stack((exec, write) => {
      write({ type: 'call', id: 'c1', execId: 'stale', method: 'tools/call', params: {} });
      write({ type: 'call', id: 'c2', execId: exec.id, method: 'tools/call', params: {} });
      setTimeout(() => write(done(exec.id)), 100);
    });
    const bridged: string[] = [];
    m.setBridgeHandler(async (_owner, method) => (bridged.push(method), 'served'));
    const r = await m.execute(owner, { language: 'python', code: '1' });
    expect(r.exitCode).toBe(0);
    const results = [...driver.live.values()][0]!.received.filter((q) => q.op === 'call_result');
    expect(results).toEqual([
      { op: 'call_result', id: 'c1', ok: false, error: 'calls are accepted only from the execution that is running' },
      { op: 'call_result', id: 'c2', ok: true, result: 'served' },
    ]);
    expect(bridged).toEqual(['tools/call']);
  });
});
