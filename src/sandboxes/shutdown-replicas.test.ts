/**
 * A replica that stops, beside others on one sandbox host: it unmounts the workspaces it
 * used, but never one another replica may be starting a sandbox on (that replica holds
 * the user's lease, and may have mounted the workspace for a container it has not
 * created yet). Postgres only: on SQLite there is one gateway.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { getUser } from '../accounts/accounts.js';
import { Replica } from '../replicas/leases.js';
import { MIGRATIONS } from '../migrations.js';
import { openStore } from '../store/store.js';
import { createHarness, databaseEnvFor } from '../../test/support/harness.js';

const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';

describe.skipIf(!onPostgres)('a replica stopping beside others', () => {
  it('keeps mounted a workspace whose lease another replica holds, and unmounts the rest', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-shutdown-replicas-'));
    // The replicas' own handle on the database the harness will use (the same for the same directory).
    const store = await openStore({ dataDir, databaseUrl: (await databaseEnvFor(dataDir)).SANDGATE_DATABASE_URL }, MIGRATIONS);
    const ours = new Replica(store.db, { internalUrl: null, sandboxHost: os.hostname(), leaseMs: 60_000 });
    const theirs = new Replica(store.db, { internalUrl: null, sandboxHost: os.hostname(), leaseMs: 60_000 });
    const h = await createHarness({ dataDir, replica: ours, noInit: true });
    const [ann, bob] = [await h.user('ann'), await h.user('bob')];
    await ours.start();
    await theirs.start();
    try {
      // Both workspaces mounted here (the file browser opens them); the other replica holds Ann's lease.
      await h.manager.openWorkspace(ann);
      await h.manager.openWorkspace(bob);
      expect((await theirs.acquire(ann.userId)).ok).toBe(true);
      const workspaceOf = async (userId: number) => fs.realpathSync(path.join(dataDir, 'workspaces', (await getUser(h.store.db, userId))!.workspaceId!));
      const mounted = (p: string) => fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').some((l) => l.split(' ')[4] === p);
      const [annWs, bobWs] = [await workspaceOf(ann.userId), await workspaceOf(bob.userId)];
      expect([mounted(annWs), mounted(bobWs)]).toEqual([true, true]);

      await h.manager.shutdown();
      expect([mounted(annWs), mounted(bobWs)]).toEqual([true, false]);
    } finally {
      await theirs.stop();
      await ours.stop();
      await h.close();
      await store.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
