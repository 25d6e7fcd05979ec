/**
 * Failure paths the real driver cannot take on demand, through drivers named after how
 * they fail (test/support/fake-drivers.ts), with the rest of the gateway real: a store,
 * the manager, the MCP endpoint, and (for the preflight) the real Docker driver behind.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createDriver } from '../src/sandboxes/index.js';
import { configFor } from '../src/config.js';
import { createLogger } from '../src/logger.js';
import { MAX_QUEUED } from '../src/sandboxes/run-queue.js';
import { runDriverConformance } from './support/driver-conformance.js';
import { BrokenUntilFixedDriver, CrashingDriver, LyingRunnerDriver, NeverReadyDriver, type ScriptedDriver, type ScriptedSandbox } from './support/fake-drivers.js';
import { startGateway, type Gateway } from './support/mcp.js';
import { until } from './support/until.js';

const NEEDS_A_REAL_SANDBOX = {
  reason: 'a scripted runner: no interpreter, no container, no gVisor',
  tests: [
    'start resolves with a connected runner',
    'the sandbox runs under gVisor as a non-root user on a read-only root',
    'only /workspace and /tmp are writable',
    'attach reconnects to a running sandbox',
  ],
};
const spec = (owner: { userId: number; name: string }) => ({ owner, workspaceWritable: true, readOnlyMounts: {} });

runDriverConformance({ name: 'CrashingDriver', newDriver: () => new CrashingDriver(), spec, skip: [NEEDS_A_REAL_SANDBOX] });
runDriverConformance({ name: 'LyingRunnerDriver', newDriver: () => new LyingRunnerDriver(() => {}), spec, skip: [NEEDS_A_REAL_SANDBOX] });
runDriverConformance({
  name: 'NeverReadyDriver',
  newDriver: () => new NeverReadyDriver(),
  spec,
  skip: [
    NEEDS_A_REAL_SANDBOX,
    { reason: 'its sandboxes never start', tests: ['list finds the sandbox with its owner', 'stats report memory and a limit', 'stop removes the sandbox, ends its runner, and tolerates a missing one'] },
  ],
});

let gw: Gateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

describe('a gateway whose sandboxes fail', () => {
  it('never ready: a run gets a clear error, over MCP as a tool result, and nothing is left running', async () => {
    const driver = new NeverReadyDriver();
    gw = await startGateway({ parts: { driver } });
    const owner = await gw.harness.user('nora');
    await expect(gw.harness.manager.execute(owner, { language: 'python', code: '1' })).rejects.toThrow(/did not start/);
    const r = await fetch(gw.mcpUrl, {
      method: 'POST',
      headers: { authorization: `Bearer ${await gw.tokenFor('nora')}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'execute_code', arguments: { language: 'python', code: '1' } } }),
    });
    const text = await r.text();
    expect(text).toContain('"isError":true');
    expect(text).toContain('The sandbox could not do this: the sandbox did not start');
    expect(await driver.list()).toEqual([]);
  });

  it('a sandbox that dies mid-run: the run says so, and runs queued behind it join the replacement\'s queue one at a time', async () => {
    const driver = new CrashingDriver(100);
    gw = await startGateway({ parts: { driver } });
    const owner = await gw.harness.user('cora');
    const crash = gw.harness.manager.execute(owner, { language: 'python', code: 'crash' });
    const queued = ['b', 'c', 'd'].map((code) => gw!.harness.manager.execute(owner, { language: 'python', code }));
    const died = await crash;
    expect(died.killed).toBe(true);
    expect(died.notice).toMatch(/The sandbox stopped during this execution/);
    // Arriving after the death, straight at the replacement.
    const late = gw.harness.manager.execute(owner, { language: 'python', code: 'e' });
    const results = await Promise.all([...queued, late]);
    expect(results.map((r) => [r.exitCode, r.stdout])).toEqual(['b', 'c', 'd', 'e'].map((c) => [0, `running ${c}\n`]));
    expect(driver.started).toHaveLength(2);
    const replacement = driver.started[1] as ScriptedSandbox;
    expect(replacement.maxInFlight).toBe(1);
    expect(replacement.received.filter((q) => q.op === 'exec')).toHaveLength(4);
  });

  it('the queue limit holds for runs moved to a replacement too', async () => {
    const driver = new CrashingDriver(200);
    gw = await startGateway({ parts: { driver } });
    const owner = await gw.harness.user('quinn');
    const crash = gw.harness.manager.execute(owner, { language: 'python', code: 'crash' });
    // Once it runs, the crashing one no longer holds a place in the queue.
    await until(() => (driver.started[0] as ScriptedSandbox | undefined)?.received.some((q) => q.op === 'exec') ?? false, 10_000);
    const queued = Array.from({ length: MAX_QUEUED }, (_, i) => gw!.harness.manager.execute(owner, { language: 'python', code: `q${i}` }));
    await expect(gw.harness.manager.execute(owner, { language: 'python', code: 'one too many' })).rejects.toThrow(/already waiting/);
    await crash;
    await Promise.all(queued);
    expect((driver.started[1] as ScriptedSandbox).maxInFlight).toBe(1);
  });
});

describe('a preflight that fails at start and passes later', () => {
  it('readiness checks again, at most one at a time; the first pass starts the manager', async () => {
    const config = configFor({ SANDGATE_DATA_DIR: '/tmp' });
    const driver = new BrokenUntilFixedDriver(createDriver(config, createLogger('silent')) as unknown as ScriptedDriver);
    gw = await startGateway({ parts: { driver, preflightRetryMs: 300 }, env: { SANDGATE_WARM_POOL_SIZE: '1' } });
    expect(gw.preflight?.ok).toBe(false);
    expect(gw.preflight?.checks.runtime).toEqual({ ok: false, detail: 'runsc is not registered yet' });
    const readyz = () => fetch(`${gw!.url}/readyz`).then((r) => r.status);
    // Many readiness probes at once start one check, not one each.
    await new Promise((r) => setTimeout(r, 350));
    const before = driver.fullChecks;
    expect(await Promise.all(Array.from({ length: 20 }, readyz))).toEqual(Array(20).fill(503));
    expect(driver.fullChecks - before).toBe(1);
    expect(gw.harness.manager.poolSize).toBe(0);
    driver.fix();
    await new Promise((r) => setTimeout(r, 350));
    expect(await readyz()).toBe(200);
    // The manager started: its warm pool fills.
    await until(() => gw!.harness.manager.poolSize === 1, 60_000);
  });
});
