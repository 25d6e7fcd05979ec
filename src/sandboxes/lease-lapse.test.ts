/**
 * A replica whose lease lapsed while a run waited its turn (the process was paused, or cut
 * off from the store, past the lease time) never sends that run to the sandbox: another
 * replica took the lease meanwhile, and may have adopted the container. Postgres only: on SQLite there is one
 * gateway, and no lease.
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
import { killAndClean } from '../../test/support/gateway-process.js';

const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';
const LEASE_MS = 4_000;

describe.skipIf(!onPostgres)('a run that waited past its replica’s lease', () => {
  it('is never sent to the sandbox: the replica lets it go, and the run is refused (held elsewhere) with nothing run', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-lease-lapse-'));
    const store = await openStore({ dataDir, databaseUrl: (await databaseEnvFor(dataDir)).SANDGATE_DATABASE_URL }, MIGRATIONS);
    // This replica's monotonic clock, which the test moves on as a long pause would.
    let paused = 0;
    const replica = new Replica(store.db, { internalUrl: null, sandboxHost: os.hostname(), leaseMs: LEASE_MS, monotonic: () => performance.now() + paused });
    // The other replica, whose clock is ahead by the pause: to it, this one's heartbeat ran out.
    const other = new Replica(store.db, { internalUrl: null, sandboxHost: os.hostname(), leaseMs: LEASE_MS, now: () => Date.now() + 3 * LEASE_MS });
    const h = await createHarness({ dataDir, replica, noInit: true });
    const ann = await h.user('ann');
    await replica.start();
    await other.start();
    try {
      expect((await h.manager.execute(ann, { language: 'python', code: 'x = 1' })).exitCode).toBe(0);
      const workspace = path.join(dataDir, 'workspaces', (await getUser(h.store.db, ann.userId))!.workspaceId!);

      const long = h.manager.execute(ann, { language: 'python', code: 'import time\ntime.sleep(1.5)\n"first"' });
      await new Promise((r) => setTimeout(r, 300));
      // Waits its turn in this gateway behind the long run.
      const queued = h.manager.execute(ann, { language: 'bash', code: 'echo ran > /workspace/after-the-lapse.txt' });
      queued.catch(() => undefined);
      await new Promise((r) => setTimeout(r, 300));
      // The lease lapses (by this replica's own clock) while both wait, and the other replica takes it.
      paused = 2 * LEASE_MS;
      expect((await other.acquire(ann.userId)).ok).toBe(true);
      expect((await long).result).toBe("'first'");
      // Not sent: the lease is asked for afresh, and found in the other replica's hands.
      await expect(queued).rejects.toThrow(/held by another gateway/);
      await new Promise((r) => setTimeout(r, 500));
      expect(fs.existsSync(path.join(workspace, 'after-the-lapse.txt'))).toBe(false);
    } finally {
      await other.stop().catch(() => undefined);
      await replica.stop().catch(() => undefined);
      await h.close();
      await store.close();
      // The sandbox let go is no longer this gateway's to stop: removed here with the test's folder.
      await killAndClean([], dataDir);
    }
  });
});
