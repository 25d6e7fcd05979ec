/**
 * /tools directories: updated in place (a running sandbox keeps its bind mount), filled
 * for pooled sandboxes with the static library only, and regenerated when the
 * catalogue changes.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import type { Store } from '../src/store/store.js';
import { createCredentialStore, loadOrCreateCredentialsKey } from '../src/upstream/credentials.js';
import { UpstreamHub } from '../src/upstream/hub.js';
import { EVERYTHING_SERVER, hubHomes, MEMORY_SERVER, nodeServer, serversFrom, openStoreWithUsers } from './support/upstream.js';
import { createToolsDirs, syncDir } from '../src/upstream/tools-dir.js';
import { until } from './support/until.js';

let dataDir: string;
let store: Store;
let alice: SandboxOwner;
let bob: SandboxOwner;

beforeAll(async () => {
  ({ dataDir, store, owners: [alice, bob] } = await openStoreWithUsers('toolsdir', ['alice', 'bob']));
});
afterAll(async () => {
  await store.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

describe('tools directories', () => {
  it('syncs in place: same directory, changed files rewritten, stale ones removed', () => {
    const dir = path.join(dataDir, 'sync');
    syncDir(dir, new Map([['a/x.ts', '1'], ['a/y.ts', '2'], ['b/z.py', '3']]));
    const ino = fs.statSync(dir).ino;
    const yIno = fs.statSync(path.join(dir, 'a/y.ts')).ino;
    syncDir(dir, new Map([['a/x.ts', '1b'], ['a/y.ts', '2']]));
    expect(fs.statSync(dir).ino).toBe(ino);
    expect(fs.readFileSync(path.join(dir, 'a/x.ts'), 'utf8')).toBe('1b');
    expect(fs.statSync(path.join(dir, 'a/y.ts')).ino).toBe(yIno); // untouched
    expect(fs.existsSync(path.join(dir, 'b'))).toBe(false);
    expect(() => syncDir(dir, new Map([['../escape.ts', 'x']]))).toThrow(/outside the tools directory/);
  });

  it('gives a pooled sandbox the static library only, and fills it when a user claims it', async () => {
    const hub = new UpstreamHub({
      servers: serversFrom({ memory: nodeServer(MEMORY_SERVER, [], { env: { MEMORY_FILE_PATH: '${SANDGATE_WORKDIR}/m.jsonl' }, sandgate: { allowUsers: ['*'] } }) }),
      dataDir,
      ...hubHomes(dataDir, store.db),
    });
    const dirs = createToolsDirs({ hub, dataDir });
    try {
      const pooled = path.join(dataDir, 'sandbox-tools', 'ws1');
      fs.mkdirSync(pooled, { recursive: true });
      await dirs.prepareTools(pooled, undefined);
      expect(fs.existsSync(path.join(pooled, 'sandgate.ts'))).toBe(true);
      expect(fs.existsSync(path.join(pooled, 'python/sandgate_tools/__init__.py'))).toBe(true);
      expect(fs.readdirSync(path.join(pooled, 'servers'))).toEqual(['README.md']);
      expect(hub.status()).toEqual([]); // nothing connected for a pool sandbox

      await dirs.prepareTools(pooled, alice);
      expect(fs.existsSync(path.join(pooled, 'servers/memory/read_graph.ts'))).toBe(true);
      expect(fs.existsSync(path.join(pooled, 'python/sandgate_tools/servers/memory/__init__.py'))).toBe(true);
    } finally {
      dirs.close();
      await hub.close();
    }
  });

  it('regenerates when a server\'s tools become known', async () => {
    const hub = new UpstreamHub({
      servers: serversFrom({
        envy: nodeServer(EVERYTHING_SERVER, ['stdio'], { sandgate: { scope: 'per-user', allowUsers: ['*'], userCredentials: ['API_TOKEN'] } }),
      }),
      dataDir,
      ...hubHomes(dataDir, store.db),
      credentials: createCredentialStore(store.db, loadOrCreateCredentialsKey(dataDir)),
    });
    const dirs = createToolsDirs({ hub, dataDir, regenerateDelayMs: 20 });
    try {
      // Alice has no credential and nobody has listed the server yet: no wrappers, and the README says why.
      const dir = await dirs.toolsDirFor(alice);
      expect(fs.existsSync(path.join(dir, 'servers/envy'))).toBe(false);
      expect(fs.readFileSync(path.join(dir, 'servers/README.md'), 'utf8')).toContain('- envy: upstream server "envy" runs with each user\'s own credentials, and yours are not set: API_TOKEN');

      await hub.setUserCredential(bob, 'envy', 'API_TOKEN', 'bob-token');
      await hub.listTools(bob, 'envy');
      await until(() => fs.existsSync(path.join(dir, 'servers/envy/echo.ts')));
      expect(fs.readFileSync(path.join(dir, 'servers/README.md'), 'utf8')).toContain('`envy` (server "envy"');
    } finally {
      dirs.close();
      await hub.close();
    }
  });
});
