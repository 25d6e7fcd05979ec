/**
 * What a dead replica leaves on its sandbox host is not left there: a live replica on the
 * same host sweeps it within a few lease times, with no run asked of it. Its users'
 * sandboxes are adopted (files and Python state intact, stopped later by the idle timeout
 * like any other), its warm pool is removed.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { configFor } from '../src/config.js';
import { dockerClient, gatewayIdFor } from '../src/sandboxes/index.js';
import { LABEL_GATEWAY } from '../src/sandboxes/docker-driver.js';
import { MIGRATIONS } from '../src/migrations.js';
import { openStore } from '../src/store/store.js';
import { executeOverMcp as execute, killAndClean, startGatewayProcess, usersWithTokens, type GatewayProcess } from './support/gateway-process.js';
import { testDatabaseUrl } from './support/postgres.js';
import { until } from './support/until.js';

const LEASE_MS = 2000;
const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';

describe.skipIf(!onPostgres)('a live replica sweeps what a dead one left on their host', () => {
  let dataDir = '';
  const gateways: GatewayProcess[] = [];
  afterAll(async () => {
    await killAndClean(gateways, dataDir);
  });

  it('adopts the dead replica’s sandboxes and removes its warm pool, unasked', async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-replicas-sweep-'));
    const databaseUrl = await testDatabaseUrl();
    const [{ user, token }] = await usersWithTokens(databaseUrl, ['ann']);
    const env = { SANDGATE_DATA_DIR: dataDir, SANDGATE_DATABASE_URL: databaseUrl, SANDGATE_PORT: '0', SANDGATE_WARM_POOL_SIZE: '1', SANDGATE_WARM_POOL_PRELOAD: '', SANDGATE_REPLICA_LEASE_MS: String(LEASE_MS) };
    const docker = dockerClient(configFor({}));
    const ours = async () => docker.listContainers({ all: true, filters: { label: [`${LABEL_GATEWAY}=${gatewayIdFor(dataDir)}`] } });

    const a = startGatewayProcess(env);
    gateways.push(a);
    const urlA = await a.ready();
    const idA = /"replica":"([^"]+)","internalUrl"/.exec(a.output())?.[1];
    expect(idA).toBeDefined();
    // A's pool full first, so Ann's sandbox is taken from it (and keeps its pool label).
    await until(() => a.output().includes('pooled sandbox ready'), 120_000);
    // Ann's sandbox on A, with a file and a variable.
    const ran = await execute(urlA, token, "open('/workspace/kept.txt', 'w').write('left by A')\nkept = 41");
    expect(ran.ok, ran.text).toBe(true);
    // A's pool refills: a pooled container in A's name, ready to be taken.
    await until(() => (a.output().match(/pooled sandbox ready/g) ?? []).length >= 2, 120_000);
    // Her sandbox came from A's pool and keeps its pool label: the store says it is hers.
    const store = await openStore({ dataDir, databaseUrl }, MIGRATIONS);
    const annsId = (await store.db.selectFrom('sandboxes').select('container_id').where('user_id', '=', user.id).executeTakeFirstOrThrow()).container_id;
    await store.close();
    expect(annsId).toBeTruthy();
    const poolOfA = async () => (await ours()).filter((c) => c.Id !== annsId && c.Labels['org.sandgate.role'] === 'pool' && c.Labels['org.sandgate.replica'] === idA);
    const annsContainer = async () => (await ours()).filter((c) => c.Id === annsId && c.State === 'running');
    expect((await poolOfA()).length).toBeGreaterThanOrEqual(1);
    const [ann] = await annsContainer();
    expect(ann).toBeDefined();

    // B starts, then A dies without a word.
    const b = startGatewayProcess(env);
    gateways.push(b);
    const urlB = await b.ready();
    a.child.kill('SIGKILL');
    await a.exited;

    // Within A's lease and a sweep of B's (five lease times), unasked: ann's sandbox is B's, A's pool is gone.
    await until(() => /"msg":"adopted sandbox( an earlier holder left)?"/.test(b.output()), 30_000);
    await until(() => b.output().includes('removed a sandbox left by an earlier run'), 30_000);
    expect(await poolOfA()).toEqual([]);
    expect((await annsContainer()).map((c) => c.Id)).toEqual([ann!.Id]);
    // The adopted sandbox is the same kernel, with its files.
    const after = await execute(urlB, token, "print(open('/workspace/kept.txt').read())\nkept + 1");
    expect(after.ok, after.text).toBe(true);
    expect(after.text).toContain('left by A');
    expect(after.text).toContain('[result] 42');
  }, 240_000);
});
