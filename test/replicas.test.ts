/**
 * Two gateway processes on one Postgres and one sandbox host (the same data directory,
 * as replicas beside one dockerd share it): a user's sandbox is held by one of them at a
 * time, under its lease; when its holder is killed with SIGKILL, the other takes the
 * lease once it runs out and adopts the running container, with the workspace intact.
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
import { executeOverMcp as execute, killAndClean, startGatewayProcess as startGateway, usersWithTokens } from './support/gateway-process.js';
import { testDatabaseUrl } from './support/postgres.js';
import { webSession } from './support/web-session.js';
import type { Gateway } from './support/mcp.js';
import crypto from 'node:crypto';
import { HOP_HEADER, HopSigner, replicaSubkey } from '../src/replicas/hop-auth.js';
import { HOP_RUN_PATH, HOP_V1_PATHS } from '../src/sandboxes/remote.js';
import { TASKS_EXTENSION } from '../src/mcp/tasks/tasks.js';
import { modernRequest } from './support/raw-request.js';

const LEASE_MS = 2000;

// Replicas share a Postgres: in the sqlite project there is nothing to run.
const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';

describe.skipIf(!onPostgres)('gateway replicas on one Postgres', () => {
  let dataDir = '';
  const docker = dockerClient(configFor({}));
  const ours = async () => docker.listContainers({ all: true, filters: { label: [`${LABEL_GATEWAY}=${gatewayIdFor(dataDir)}`] } });

  afterAll(async () => {
    await killAndClean([], dataDir);
  });

  it('one holds a user’s sandbox at a time; when it is killed, the other adopts the sandbox with its files', async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-replicas-'));
    const databaseUrl = await testDatabaseUrl();
    // The user and their token, in the database both gateways share.
    const [{ user, token }] = await usersWithTokens(databaseUrl, ['ann'], { isAdmin: true });

    // A warm pool of one each, as by default: the user's sandbox comes from A's pool and keeps its pool label.
    const env = { SANDGATE_DATA_DIR: dataDir, SANDGATE_DATABASE_URL: databaseUrl, SANDGATE_PORT: '0', SANDGATE_WARM_POOL_SIZE: '1', SANDGATE_WARM_POOL_PRELOAD: '', SANDGATE_REPLICA_LEASE_MS: String(LEASE_MS) };
    const a = startGateway(env);
    const b = startGateway(env);
    try {
      const [urlA, urlB] = await Promise.all([a.ready(), b.ready()]);
      // Both pools full (a pooled sandbox each, ready to be taken, labelled with its replica), so A's first run takes its own.
      for (const end = Date.now() + 120_000; !a.output().includes('pooled sandbox ready') || !b.output().includes('pooled sandbox ready'); ) {
        if (Date.now() > end) throw new Error('the warm pools did not fill');
        await new Promise((r) => setTimeout(r, 200));
      }

      const first = await execute(urlA, token, "open('/workspace/kept.txt', 'w').write('written through A')\nimport os; os.getpid()");
      expect(first.ok, first.text).toBe(true);
      const store2 = await openStore({ dataDir, databaseUrl }, MIGRATIONS);
      const workspace = (await store2.db.selectFrom('users').select('workspace_id').where('id', '=', user.id).executeTakeFirstOrThrow()).workspace_id;
      await store2.close();
      // The containers running on the user's workspace: theirs only, and only one.
      const onWorkspace = async () => (await ours()).filter((c) => c.State === 'running' && c.Labels['org.sandgate.workspace'] === workspace);
      const [container] = await onWorkspace();
      expect(container).toBeDefined();
      expect(container!.Labels['org.sandgate.role']).toBe('pool');

      // B does not start a second sandbox for the same user: it sends the run to A, over the
      // signed internal hop, and the answer (output, result) comes back through it.
      expect((await execute(urlA, token, "kept_in_kernel = 'set through A'")).ok).toBe(true);
      const throughB = await execute(urlB, token, "print(open('/workspace/kept.txt').read())\nkept_in_kernel");
      expect(throughB.ok, throughB.text).toBe(true);
      expect(throughB.text).toContain('written through A');
      // The same Python kernel answered, in the same container.
      expect(throughB.text).toContain("[result] 'set through A'");
      expect(await onWorkspace()).toHaveLength(1);
      // A client that declares MCP tasks too: its short runs through B are answered by A's kernel, one after another.
      for (let i = 1; i <= 3; i++) {
        const m = await modernRequest(`${urlB}/mcp`, token, 'tools/call', { name: 'execute_code', arguments: { language: 'python', code: `kept_in_kernel + ' ${i}'` } }, { extensions: { [TASKS_EXTENSION]: {} } });
        expect(m.result?.resultType, JSON.stringify(m)).toBe('complete');
        expect(JSON.stringify(m.result?.content)).toContain(`[result] 'set through A ${i}'`);
      }
      expect(await onWorkspace()).toHaveLength(1);
      expect(b.output()).not.toContain('adopted sandbox');
      // On the run channel B keeps open to A, not an HTTP request each.
      const idB = /"replica":"([^"]+)","internalUrl"/.exec(b.output())![1]!;
      expect(a.output()).toContain(`"from":"${idB}","msg":"a run channel from another replica opened"`);

      // A hop not signed with the installation's key runs nothing, whoever sends it.
      const hostWorkspace = path.join(dataDir, "workspaces", workspace!);
      const forged = JSON.stringify({ owner: { userId: user.id, name: 'ann' }, language: 'python', code: "open('/workspace/forged.txt', 'w').write('x')" });
      const stranger = new HopSigner({ key: crypto.randomBytes(32) });
      const idA = /"replica":"([^"]+)","internalUrl"/.exec(a.output())![1]!;
      for (const header of [undefined, 'garbage', stranger.sign('intruder', idA, HOP_RUN_PATH, forged)]) {
        const r = await fetch(`${urlA}${HOP_RUN_PATH}`, { method: 'POST', headers: { 'content-type': 'application/json', ...(header && { [HOP_HEADER]: header }) }, body: forged });
        expect(r.status).toBe(401);
      }
      // Signed with the right key but replayed, or sent to another replica: refused too.
      const signer = new HopSigner({ key: replicaSubkey(Buffer.from(fs.readFileSync(path.join(dataDir, 'replicas.key'), 'utf8').trim(), 'base64'), 'internal hop') });
      // A run A can take: for the sandbox it holds.
      const run = JSON.stringify({ owner: { userId: user.id, name: 'ann' }, language: 'python', code: 'print(6 * 7)' });
      const sealedBody = signer.sealRequest(HOP_RUN_PATH, run);
      const sealed = new Uint8Array(sealedBody);
      const { header: once, nonce } = signer.signRequest('test', idA, HOP_RUN_PATH, sealedBody);
      const answered = await fetch(`${urlA}${HOP_RUN_PATH}`, { method: 'POST', headers: { [HOP_HEADER]: once }, body: sealed });
      expect(answered.status).toBe(200);
      // The answer is sealed to the request: nothing of it in clear, every line opens in its place.
      const lines = (await answered.text()).trim().split('\n');
      expect(lines.join('\n')).not.toMatch(/"t"|stdout|exitCode/);
      expect(lines.map((l, i) => JSON.parse(signer.openAnswer(nonce, i, l)) as { t: string }).at(-1)).toMatchObject({ t: 'done', r: { exitCode: 0, stdout: '42\n' } });
      expect((await fetch(`${urlA}${HOP_RUN_PATH}`, { method: 'POST', headers: { [HOP_HEADER]: once }, body: sealed })).status).toBe(401);
      expect((await fetch(`${urlA}${HOP_RUN_PATH}`, { method: 'POST', headers: { [HOP_HEADER]: signer.sign('test', 'another', HOP_RUN_PATH, forged) }, body: forged })).status).toBe(401);
      // Signed, but not sealed (or sealed under another key): refused, nothing runs.
      expect((await fetch(`${urlA}${HOP_RUN_PATH}`, { method: 'POST', headers: { [HOP_HEADER]: signer.sign('test', idA, HOP_RUN_PATH, forged) }, body: forged })).status).toBe(401);
      // A replica of the release before sealed hops still reaches A, in clear, on the earlier path.
      const v1 = await fetch(`${urlA}${HOP_V1_PATHS.run}`, { method: 'POST', headers: { [HOP_HEADER]: signer.sign('test', idA, HOP_V1_PATHS.run, run) }, body: run });
      expect(v1.status).toBe(200);
      expect(JSON.parse((await v1.text()).trim().split('\n').at(-1)!)).toMatchObject({ t: 'done', r: { exitCode: 0, stdout: '42\n' } });
      expect(fs.existsSync(path.join(hostWorkspace, 'forged.txt'))).toBe(false);

      // A run sent to A when A dies: B's caller hears that it was interrupted, not a result.
      const long = execute(urlB, token, "import time\nprint('started', flush=True)\ntime.sleep(20)\nopen('/workspace/after-the-sleep.txt', 'w').write('x')");
      await new Promise((r) => setTimeout(r, 1500));
      // A dies without a word: its lease runs out, and B adopts the running container.
      a.child.kill('SIGKILL');
      await a.exited;
      const killedAt = Date.now();
      const cut = await long;
      expect(cut.ok).toBe(false);
      expect(cut.text).toMatch(/went away[\s\S]*Whether the code ran to its end is not known/);

      let after: { ok: boolean; text: string } = { ok: false, text: '' };
      while (Date.now() - killedAt < 4 * LEASE_MS + 10_000) {
        after = await execute(urlB, token, "import os\nprint(os.path.exists('/workspace/after-the-sleep.txt'))\nopen('/workspace/kept.txt').read()");
        if (after.ok) break;
        expect(after.text).toMatch(/held by another gateway/);
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(after.ok, after.text).toBe(true);
      expect(after.text).toContain('written through A');
      expect(b.output()).toContain('adopted sandbox an earlier holder left');
      // The run A had in flight, whose caller was told it was interrupted, was cancelled when B
      // adopted the sandbox: B's run did not wait behind it (it would have found its file).
      expect(after.text).toContain('False');
      expect(b.output()).toContain('cancelled the runs an earlier gateway left in an adopted sandbox');
      // The same container, adopted: no second sandbox on the workspace.
      expect((await onWorkspace()).map((c) => c.Id)).toEqual([container!.Id]);

      // A replica started now lists, on its admin page, the sandbox B holds; and an admin's
      // stop there reaches B, which stops it.
      const c = startGateway(env);
      try {
        const urlC = await c.ready();
        const store3 = await openStore({ dataDir, databaseUrl }, MIGRATIONS);
        try {
          const admin = await webSession({ url: urlC, gateway: { store: store3 } } as unknown as Gateway, user);
          const idB = /"replica":"([^"]+)","internalUrl"/.exec(b.output())![1]!;
          const rows = await (await admin.get('/admin/sandboxes/rows')).text();
          expect(rows).toContain(`data-container="${container!.Id.slice(0, 12)}" data-user="ann"`);
          expect(rows).toContain(`on ${idB}`);
          const stopped = await (await admin.post(`/admin/sandboxes/${user.id}/stop`)).text();
          expect(stopped).toContain('Stopped ann’s sandbox.');
          expect(await onWorkspace()).toHaveLength(0);
          expect(b.output()).toContain('stopping sandbox');
        } finally {
          await store3.close();
        }
      } finally {
        c.child.kill('SIGTERM');
        await c.exited;
      }
    } finally {
      a.child.kill('SIGKILL');
      b.child.kill('SIGTERM');
      await Promise.all([a.exited, b.exited]);
    }
  }, 300_000);
});
