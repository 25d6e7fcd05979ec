/**
 * The copied-folder check (store-copies.ts) against replicas on real HTTP servers serving
 * the hop's store-probe endpoint (src/http/internal.ts) from real folders, on the store:
 * what the several-gateway tests cannot easily make happen on time. A replica that does not
 * answer at first, one that is slow to see a new file, one that answers for another store.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { internalHop } from '../http/internal.js';
import { createLogger } from '../logger.js';
import { HopSigner } from '../replicas/hop-auth.js';
import { Replica } from '../replicas/leases.js';
import { storePerTest, type TestStore } from '../../test/support/store.js';
import { until } from '../../test/support/until.js';
import { StoreCopyCheck } from './store-copies.js';
import type { StoreProbes } from './types.js';
import { storeIdOf, storeProbes, STORE_ID_FILE } from './volumes.js';

const KEY = crypto.randomBytes(32);
const LEASE_MS = 60_000;
const quiet = createLogger('silent');

describe('the copied workspaces folder check', () => {
  let store: TestStore;
  storePerTest((s) => (store = s));
  const servers: http.Server[] = [];
  const replicas: Replica[] = [];
  const checks: StoreCopyCheck[] = [];
  const dirs: string[] = [];
  afterEach(async () => {
    for (const c of checks.splice(0)) c.stop();
    for (const r of replicas.splice(0)) await r.stop();
    for (const s of servers.splice(0)) {
      s.closeAllConnections();
      await new Promise((r) => s.close(r));
    }
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });

  const folder = () => {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-store-copies-'));
    dirs.push(d);
    return d;
  };

  /**
   * A replica on the store's `storeId`, answering probes through `probes` (its folder's),
   * on a real server; while `state.down` it drops every connection unanswered.
   */
  async function peer(id: string, storeId: string, probes: StoreProbes | undefined, answersFor = storeId) {
    const state = { down: false, asked: 0 };
    const app = express();
    app.use((req, _res, next) => {
      if (state.down) return req.socket.destroy();
      state.asked++;
      next();
    });
    const routes = internalHop({
      signer: new HopSigner({ key: KEY }),
      selfId: id,
      workspaces: { storeId: answersFor, probes },
      log: quiet,
      outputLimitBytes: 1024,
      sandboxes: {
        executeHere: () => Promise.reject(new Error('no run in this test')),
        workspaceRequestHere: () => Promise.reject(new Error('no file operation in this test')),
        stopUserHere: async () => false,
        removeDeletedWorkspaces: async () => 0,
        list: async () => [],
        pooled: () => [],
      },
    });
    for (const [p, handlers] of Object.entries(routes)) app.post(p, ...handlers);
    const server = http.createServer(app);
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const replica = new Replica(store.db, { id, internalUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, sandboxHost: `host-${id}`, leaseMs: LEASE_MS, workspaceStore: storeId });
    await replica.start();
    replicas.push(replica);
    return state;
  }

  /** The replica that checks, on folder `dir`, not registered yet (as at a gateway's start); what it logs goes to `lines`. */
  function checker(id: string, dir: string, lines: string[] = []) {
    const replica = new Replica(store.db, { id, internalUrl: 'http://127.0.0.1:9/', sandboxHost: `host-${id}`, leaseMs: LEASE_MS, workspaceStore: storeIdOf(dir) });
    const log = createLogger('info', { write: (s: string) => void lines.push(s) });
    const check = new StoreCopyCheck(replica, new HopSigner({ key: KEY }), { storeId: storeIdOf(dir), probes: storeProbes(dir) }, log, { withinMs: 600, everyMs: 150 });
    checks.push(check);
    const start = async () => {
      await replica.start();
      replicas.push(replica);
    };
    return { check, start };
  }

  /** `d` started while `silent` said nothing, and watching once it answers: what `d` tells the operator. */
  async function watchingOnceUp(d: ReturnType<typeof checker>, silent: { down: boolean }): Promise<string[]> {
    await d.check.atStart();
    await d.start();
    const said: string[] = [];
    d.check.watch((m) => said.push(m));
    silent.down = false;
    return said;
  }

  /** A folder and a copy of it: the same store id, not the same files. */
  function folderAndCopy() {
    const original = folder();
    const storeId = storeIdOf(original);
    const copy = folder();
    fs.copyFileSync(path.join(original, STORE_ID_FILE), path.join(copy, STORE_ID_FILE));
    expect(storeIdOf(copy)).toBe(storeId);
    return { original, copy, storeId };
  }

  it('refuses a start on a copied folder, naming the replica whose folder it copies', async () => {
    const { original, copy, storeId } = folderAndCopy();
    await peer('a', storeId, storeProbes(original));
    await expect(checker('d', copy).check.atStart()).rejects.toThrow(/the gateway a on host-a uses, but it is another folder/);
    // The same folder: it starts.
    await checker('e', original).check.atStart();
  });

  it('asks again a replica that did not answer at its start, and stops on a second look that it is not the same folder', async () => {
    const { original, copy, storeId } = folderAndCopy();
    await peer('a', storeId, storeProbes(original));
    const c = await peer('c', storeId, storeProbes(copy));
    c.down = true;
    const lines: string[] = [];
    // A shares its folder; C said nothing.
    const said = await watchingOnceUp(checker('d', original, lines), c);
    await until(() => said.length > 0, 15_000);
    expect(said[0]).toMatch(/the gateway c on host-c uses, but it is another folder/);
    // Not on the first look that found it.
    expect(lines.some((l) => l.includes('"replica":"c"') && l.includes('asking again before stopping'))).toBe(true);
  });

  it('does not stop a serving gateway when a replica sees its probe late, on the look after', async () => {
    const { original, copy, storeId } = folderAndCopy();
    await peer('a', storeId, storeProbes(original));
    const lines: string[] = [];
    // C reads the copy until the checker says it asks again, then the folder itself (a shared folder that showed the file late).
    const late = storeProbes(copy);
    const shared = storeProbes(original);
    let seenLate = 0;
    const readLate = (id: string) => {
      if (!lines.some((l) => l.includes('asking again'))) return late.read(id);
      const word = shared.read(id);
      if (word) seenLate++;
      return word;
    };
    const c = await peer('c', storeId, { write: (id) => shared.write(id), remove: (id) => shared.remove(id), read: readLate });
    c.down = true;
    const said = await watchingOnceUp(checker('d', original, lines), c);
    // Asked again, it finds the probe: then it is never asked again, and this gateway goes on.
    await until(() => seenLate > 0, 15_000);
    await new Promise((r) => setTimeout(r, 1000));
    const settled = c.asked;
    await new Promise((r) => setTimeout(r, 1000));
    expect(c.asked).toBe(settled);
    expect(said).toEqual([]);
  });

  it('takes no word from a replica that answers for another store or keeps no probes', async () => {
    const { original, copy, storeId } = folderAndCopy();
    const moved = await peer('b', storeId, storeProbes(copy), 'another-store-id');
    const cluster = await peer('c', storeId, undefined);
    const d = checker('d', original);
    await d.check.atStart();
    await d.start();
    const said: string[] = [];
    d.check.watch((m) => said.push(m));
    // Asked again at each look (their word did not count), and never taken for copies.
    const [b0, c0] = [moved.asked, cluster.asked];
    await until(() => moved.asked > b0 + 1 && cluster.asked > c0 + 1, 15_000);
    expect(said).toEqual([]);
  });
});
