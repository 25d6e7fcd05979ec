/**
 * A rolling restart of gateway replicas behind Debian's HAProxy, under load: 20 MCP
 * clients (four for each of five users) run code through the load balancer without a
 * pause while each replica in turn gets SIGTERM, hands its users' sandboxes over, exits,
 * and is started again on its port. Not one request fails, every answer is the right
 * one, and each user still has one sandbox, with the Python state it had.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { configFor } from '../src/config.js';
import { dockerClient, gatewayIdFor } from '../src/sandboxes/index.js';
import { LABEL_GATEWAY } from '../src/sandboxes/docker-driver.js';
import { openStore } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';
import { executeOverMcp as execute, killAndClean, startGatewayProcess, usersWithTokens, type GatewayProcess } from './support/gateway-process.js';
import { startHaproxy, type Haproxy } from './support/haproxy.js';
import { freePort } from './support/ports.js';
import { testDatabaseUrl } from './support/postgres.js';

const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';
const USERS = 5;
const CLIENTS_PER_USER = 4;

describe.skipIf(!onPostgres)('a rolling restart of the replicas behind HAProxy', () => {
  let dataDir = '';
  const docker = dockerClient(configFor({}));
  const ours = async () => docker.listContainers({ all: true, filters: { label: [`${LABEL_GATEWAY}=${gatewayIdFor(dataDir)}`] } });
  const gateways: GatewayProcess[] = [];
  let lb: Haproxy | undefined;

  afterAll(async () => {
    await lb?.stop();
    await killAndClean(gateways, dataDir);
  });

  it('drops no request of 20 clients while every replica restarts in turn', async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-rolling-'));
    const databaseUrl = await testDatabaseUrl();
    const tokens = (await usersWithTokens(databaseUrl, Array.from({ length: USERS }, (_, i) => `user${i}`))).map((u) => u.token);

    const ports = [await freePort(), await freePort()];
    const env = (port: number) => ({
      SANDGATE_DATA_DIR: dataDir,
      SANDGATE_DATABASE_URL: databaseUrl,
      SANDGATE_PORT: String(port),
      SANDGATE_WARM_POOL_SIZE: '1',
      SANDGATE_WARM_POOL_PRELOAD: '',
      SANDGATE_RATE_LIMIT_PER_MIN: '100000',
      SANDGATE_RATE_LIMIT_BURST: '10000',
    });
    const start = (slot: number) => {
      const g = startGatewayProcess(env(ports[slot]!));
      gateways.push(g);
      return g;
    };
    const current = [start(0), start(1)];
    await Promise.all(current.map((g) => g.ready()));
    lb = await startHaproxy(ports);
    const url = lb.url;
    // The gateways' internal hop is not reachable through the load balancer, in any case.
    for (const p of ['/internal/v1/run', '/INTERNAL/v1/run']) expect((await fetch(`${url}${p}`, { method: 'POST', body: '{}' })).status).toBe(404);

    // Each user's kernel keeps a counter: a sandbox replaced (not handed over) would start it again.
    for (const token of tokens) {
      const r = await execute(url, token, 'count = 0');
      expect(r.ok, r.text).toBe(true);
    }

    const failures: string[] = [];
    let served = 0;
    const servedFor = tokens.map(() => 0);
    let going = true;
    const client = async (u: number, k: number) => {
      for (let n = 0; going; n++) {
        const r = await execute(url, tokens[u]!, `count += 1\n${k} * 1000 + ${n}`).catch((e: Error) => ({ ok: false, text: e.message }));
        if (!r.ok || !r.text.includes(`[result] ${k * 1000 + n}`)) failures.push(r.text.slice(0, 400));
        else {
          served++;
          servedFor[u]!++;
        }
      }
    };
    const clients = tokens.flatMap((_, u) => Array.from({ length: CLIENTS_PER_USER }, (_, c) => client(u, u * CLIENTS_PER_USER + c)));
    await new Promise((r) => setTimeout(r, 2000));

    for (const slot of [0, 1]) {
      const old = current[slot]!;
      old.child.kill('SIGTERM');
      expect(await old.exited).toBe(0);
      expect(old.output()).toContain('sandboxes handed over to the other replicas');
      const fresh = start(slot);
      current[slot] = fresh;
      await fresh.ready();
      // Back in the load balancer's rotation, and serving, before the next one goes.
      await new Promise((r) => setTimeout(r, 3000));
    }
    const servedBefore = served;
    await new Promise((r) => setTimeout(r, 2000));
    going = false;
    await Promise.all(clients);

    expect(failures).toEqual([]);
    expect(served).toBeGreaterThan(servedBefore);
    expect(served).toBeGreaterThan(100);
    // One sandbox a user, whose kernel counted every run once: handed over, never replaced, no run lost or run twice.
    for (const [u, token] of tokens.entries()) {
      const r = await execute(url, token, 'count');
      expect(r.ok, r.text).toBe(true);
      expect(Number(/\[result\] (\d+)/.exec(r.text)?.[1])).toBe(servedFor[u]);
    }
    // And one container on each user's workspace (a pooled one a user took keeps its pool label).
    const after = await openStore({ dataDir, databaseUrl }, MIGRATIONS);
    const workspaces = (await after.db.selectFrom('users').select('workspace_id').where('name', 'like', 'user%').execute()).map((r) => r.workspace_id);
    await after.close();
    const running = (await ours()).filter((c) => c.State === 'running');
    for (const w of workspaces) expect(running.filter((c) => c.Labels['org.sandgate.workspace'] === w)).toHaveLength(1);
    expect(workspaces).toHaveLength(USERS);
  }, 600_000);
});
