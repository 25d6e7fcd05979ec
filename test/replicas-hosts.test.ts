/**
 * Gateways on two sandbox hosts, each keeping workspaces on its own disk, behind Debian's
 * HAProxy on one Postgres. Here each "host" is a gateway with a data directory of its own
 * (the keys copied, as the README says): its workspaces folder is its own store, and it
 * sees only the containers it made, as a gateway beside another host's dockerd would.
 *
 * A user's files are in the store of their sandbox: every run and file operation,
 * whichever gateway the load balancer picks, reaches that one store; while its gateway
 * restarts they wait or are refused with "try again", never sent to an empty workspace
 * elsewhere; once the host is lost (no gateway for SANDGATE_HOST_LOST_SEC), the user's
 * next run starts a fresh sandbox on the other host.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MIGRATIONS } from '../src/migrations.js';
import { HOP_HEADER, HopSigner, replicaSubkey } from '../src/replicas/hop-auth.js';
import { HOP_WORKSPACE_PATH } from '../src/sandboxes/remote-workspace.js';
import { HOP_DELETIONS_PATH, HOP_STORE_PROBE_PATH } from '../src/sandboxes/remote.js';
import { MAX_FILE_HOPS_PER_USER } from '../src/http/internal.js';
import { openStore, type Store } from '../src/store/store.js';
import { forgetWorkspaceStore } from '../src/replicas/stores.js';
import { configFor } from '../src/config.js';
import { LABEL_GATEWAY } from '../src/sandboxes/docker-driver.js';
import { dockerClient, gatewayIdFor } from '../src/sandboxes/index.js';
import { callTool, executeOverMcp as execute, killAndClean, startGatewayProcess, usersWithTokens, type GatewayProcess } from './support/gateway-process.js';
import { startHaproxy, type Haproxy } from './support/haproxy.js';
import { freePort } from './support/ports.js';
import { testDatabaseUrl } from './support/postgres.js';
import { eventually, until } from './support/until.js';
import { webSession } from './support/web-session.js';

const LEASE_MS = 2000;
const HOST_LOST_SEC = 12;
const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';

describe.skipIf(!onPostgres)('gateways on two sandbox hosts, each with its own workspaces', () => {
  const dirs = { a: '', b: '' };
  const gateways: GatewayProcess[] = [];
  const procs: Record<'a' | 'b', GatewayProcess | undefined> = { a: undefined, b: undefined };
  const ports = { a: 0, b: 0, second: 0 };
  let databaseUrl = '';
  let lb: Haproxy | undefined;
  let store: Store | undefined;
  let token = '';
  let userId = 0;
  let bobToken = '';
  let bobId = 0;
  const urls: Record<'a' | 'b', string> = { a: '', b: '' };

  const env = (host: 'a' | 'b') => ({
    SANDGATE_DATA_DIR: dirs[host],
    SANDGATE_DATABASE_URL: databaseUrl,
    SANDGATE_PORT: String(ports[host]),
    SANDGATE_WARM_POOL_SIZE: '0',
    SANDGATE_REPLICA_LEASE_MS: String(LEASE_MS),
    SANDGATE_HOST_LOST_SEC: String(HOST_LOST_SEC),
    SANDGATE_RATE_LIMIT_PER_MIN: '100000',
    SANDGATE_RATE_LIMIT_BURST: '10000',
  });
  const start = async (host: 'a' | 'b') => {
    const g = startGatewayProcess(env(host));
    gateways.push(g);
    procs[host] = g;
    urls[host] = await g.ready();
    return g;
  };
  const storeIdOf = (host: 'a' | 'b') => fs.readFileSync(path.join(dirs[host], 'workspaces', '.store-id'), 'utf8').trim();
  /** The host whose store the user's lease names: where their files are. */
  const home = async (): Promise<'a' | 'b'> => {
    const row = await store!.db.selectFrom('sandbox_leases').select('workspace_store').where('user_id', '=', userId).executeTakeFirstOrThrow();
    return row.workspace_store === storeIdOf('a') ? 'a' : row.workspace_store === storeIdOf('b') ? 'b' : (`neither: ${row.workspace_store}` as never);
  };
  /** The heartbeats of the gateways on host `h`'s store. */
  const heartbeatsOn = async (h: 'a' | 'b') => (await store!.db.selectFrom('gateway_replicas').select('heartbeat_at').where('workspace_store', '=', storeIdOf(h)).execute()).map((r) => Number(r.heartbeat_at));
  const workspaceId = async () => (await store!.db.selectFrom('users').select('workspace_id').where('id', '=', userId).executeTakeFirstOrThrow()).workspace_id!;
  const run = (code: string) => execute(lb!.url, token, code);

  beforeAll(async () => {
    dirs.a = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-host-a-'));
    dirs.b = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-host-b-'));
    databaseUrl = await testDatabaseUrl();
    // A third server for a second gateway on one host, later (down until then).
    [ports.a, ports.b, ports.second] = [await freePort(), await freePort(), await freePort()];
    const [ann, bob] = await usersWithTokens(databaseUrl, ['ann', 'bob']);
    token = ann!.token;
    bobToken = bob!.token;
    bobId = bob!.user.id;
    userId = ann!.user.id;
    await start('a');
    // The same keys on every host; the workspaces folder (and its store id) its own.
    for (const f of fs.readdirSync(dirs.a).filter((f) => f.endsWith('.key'))) fs.copyFileSync(path.join(dirs.a, f), path.join(dirs.b, f));
    await start('b');
    lb = await startHaproxy([ports.a, ports.b, ports.second], { log: true });
    store = await openStore({ dataDir: dirs.a, databaseUrl }, MIGRATIONS);
  }, 300_000);

  afterAll(async () => {
    await lb?.stop();
    await store?.close();
    await killAndClean(gateways, dirs.a);
    await killAndClean([], dirs.b);
  });

  it('serves every run and file operation from the one store holding the user’s files, whichever gateway is asked', async () => {
    expect(storeIdOf('a')).not.toBe(storeIdOf('b'));
    for (let i = 0; i < 8; i++) {
      const wrote = await callTool(lb!.url, token, 'write_file', { path: `notes/n${i}.txt`, content: `note ${i}` });
      expect(wrote.ok, wrote.text).toBe(true);
      const r = await run("import os\ncount = globals().get('count', 0) + 1\nprint(count, sorted(os.listdir('/workspace/notes')))");
      expect(r.ok, r.text).toBe(true);
      // One sandbox, one Python kernel, and every note written so far in its workspace.
      expect(r.text).toContain(`${i + 1} [${Array.from({ length: i + 1 }, (_, k) => `'n${k}.txt'`).sort().join(', ')}]`);
      const read = await callTool(lb!.url, token, 'read_file', { path: `notes/n${i}.txt` });
      expect(read.ok, read.text).toBe(true);
      expect(read.text).toContain(`note ${i}`);
    }
    const listed = await callTool(lb!.url, token, 'list_files', { path: 'notes' });
    expect(listed.text).toContain('n7.txt');
    // Both gateways answered (round robin), and the files are on one host's disk only.
    expect(lb!.output()).toMatch(/\/g1 /);
    expect(lb!.output()).toMatch(/\/g2 /);
    const h = await home();
    const other = h === 'a' ? 'b' : 'a';
    const ws = await workspaceId();
    expect(fs.existsSync(path.join(dirs[h], 'workspaces', `${ws}.img`))).toBe(true);
    expect(fs.existsSync(path.join(dirs[other], 'workspaces', `${ws}.img`))).toBe(false);
    // The other host's gateway reached them over the hop: files by the workspace endpoint, runs on the channel.
    expect(procs[other]!.output()).not.toContain('sandbox started');
  }, 180_000);

  it('refuses a file operation hop that is unsigned, signed with another key, or asks for anything but the helper’s own fields; the helper keeps a signed one inside the workspace', async () => {
    const h = await home();
    const url = urls[h];
    const id = /"replica":"([^"]+)","internalUrl"/.exec(procs[h]!.output())![1]!;
    const owner = { userId, name: 'ann' };
    const key = Buffer.from(fs.readFileSync(path.join(dirs[h], 'replicas.key'), 'utf8').trim(), 'base64');
    const signer = new HopSigner({ key: replicaSubkey(key, 'internal hop') });
    /** A hop to `to` on the home gateway, signed and sealed by `s` as a replica would send it; its status, and its answer opened. */
    const hop = async <T,>(to: string, s: HopSigner, body: unknown) => {
      const sealed = s.sealRequest(to, JSON.stringify(body));
      const { header, nonce } = s.signRequest('test', id, to, sealed);
      const r = await fetch(`${url}${to}`, { method: 'POST', headers: { [HOP_HEADER]: header }, body: new Uint8Array(sealed) });
      const text = await r.text();
      return { status: r.status, answer: () => JSON.parse(s.openAnswer(nonce, 0, text.trim())) as T };
    };
    const send = (s: HopSigner, body: object) => hop<{ reply?: { ok: boolean; code?: string }; data?: string }>(HOP_WORKSPACE_PATH, s, body);
    const read = { owner, header: { op: 'read', path: 'notes/n0.txt', offset: 0, length: 100 } };
    expect((await fetch(`${url}${HOP_WORKSPACE_PATH}`, { method: 'POST', body: JSON.stringify(read) })).status).toBe(401);
    expect((await send(new HopSigner({ key: crypto.randomBytes(32) }), read)).status).toBe(401);
    // Signed: only the helper's operations and fields, each of its type.
    for (const header of [{ op: 'exec', path: 'x' }, { op: 'stat', path: 'x', cmd: 'rm -rf /' }, { op: 'read', path: { $ne: 1 } }, { op: 'read', path: 'x', offset: -1 }]) {
      expect((await send(signer, { owner, header })).status, JSON.stringify(header)).toBe(400);
    }
    // A signed one is served, and the workspace's helper still refuses what climbs out of it or through a link.
    const ok = await send(signer, read);
    expect(ok.status).toBe(200);
    expect(Buffer.from(ok.answer().data ?? '', 'base64').toString()).toBe('note 0');
    const made = await run("import os\nos.symlink('/etc', '/workspace/etc-link')");
    expect(made.ok, made.text).toBe(true);
    for (const p of ['../../../etc/passwd', 'etc-link/passwd', '/etc/passwd']) {
      const r = await send(signer, { owner, header: { op: 'read', path: p, offset: 0, length: 100 } });
      expect(r.status).toBe(200);
      expect(r.answer().reply?.ok, p).toBe(false);
      expect(r.answer().data).toBeUndefined();
    }
    // One user's flood of file operations: past the ones served at once for them, each is refused with nothing done,
    // and another user's, sent meanwhile, are served (their first files: made on this store, and named as where theirs are).
    const [{ user: cleo }] = await usersWithTokens(databaseUrl, ['cleo']);
    const cleos = { userId: cleo!.id, name: 'cleo' };
    const write = async (who: typeof owner, i: number) => {
      const r = await send(signer, { owner: who, header: { op: 'write', path: `flood/f${i}.bin` }, data: crypto.randomBytes(512 * 1024).toString('base64') });
      const a = r.answer() as { reply?: { ok: boolean }; error?: { reason: string; message: string } };
      return { i, status: r.status, ok: a.reply?.ok === true, busy: a.error?.reason === 'busy' };
    };
    const [flood, others] = await Promise.all([Promise.all(Array.from({ length: 80 }, (_, i) => write(owner, i))), Promise.all(Array.from({ length: 4 }, (_, i) => write(cleos, i)))]);
    const busy = flood.filter((f) => f.busy);
    expect(flood.every((f) => f.status === 200 && (f.ok || f.busy)), JSON.stringify(flood.filter((f) => !f.ok && !f.busy))).toBe(true);
    expect(busy.length).toBeGreaterThan(0);
    expect(busy.length).toBeLessThanOrEqual(80 - MAX_FILE_HOPS_PER_USER);
    expect(others.every((f) => f.ok), JSON.stringify(others)).toBe(true);
    const cleoHome = await store!.db.selectFrom('sandbox_leases').select('workspace_store').where('user_id', '=', cleo!.id).executeTakeFirstOrThrow();
    expect(cleoHome.workspace_store).toBe(storeIdOf(h));
    const written = await run("import os\nprint(sorted(int(n[1:-4]) for n in os.listdir('/workspace/flood')))");
    expect(written.text).toContain(JSON.stringify(flood.filter((f) => f.ok).map((f) => f.i)).replaceAll(',', ', '));

    // Removing deleted users' files: which ones is the database's word, never the request's.
    const askRemoval = (s: HopSigner, body: unknown) => hop<{ removed?: number }>(HOP_DELETIONS_PATH, s, body);
    // A store probe: the asker's own only (the id its credential was signed by), never another replica's.
    const askProbe = (body: object) => hop<{ store?: string; probe?: string | null }>(HOP_STORE_PROBE_PATH, signer, body);
    expect((await fetch(`${url}${HOP_STORE_PROBE_PATH}`, { method: 'POST', body: '{"replica":"test"}' })).status).toBe(401);
    expect((await askProbe({ replica: id })).status).toBe(400);
    expect((await askProbe({ replica: '../../.store-id' })).status).toBe(400);
    expect((await askProbe({ replica: 'test', path: '/etc/passwd' })).status).toBe(400);
    const mine = await askProbe({ replica: 'test' });
    expect(mine.status).toBe(200);
    expect(mine.answer()).toEqual({ store: storeIdOf(h), probes: true, probe: null });

    const ws = await workspaceId();
    expect((await fetch(`${url}${HOP_DELETIONS_PATH}`, { method: 'POST', body: '{}' })).status).toBe(401);
    expect((await askRemoval(new HopSigner({ key: crypto.randomBytes(32) }), {})).status).toBe(401);
    expect((await askRemoval(signer, { workspace: ws })).status).toBe(400);
    expect((await askRemoval(signer, [ws])).status).toBe(400);
    const none = await askRemoval(signer, {});
    expect(none.status).toBe(200);
    expect(none.answer().removed).toBe(0);
    expect(fs.existsSync(path.join(dirs[h], 'workspaces', `${ws}.img`))).toBe(true);
  }, 120_000);

  it('does not start a gateway whose workspaces folder is a copy of another host’s (its store id with it), and says what to do', async () => {
    const h = await home();
    // A data directory copied whole to set up a third host: the keys and the store id, not the folder the others use.
    const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-host-copy-'));
    for (const f of fs.readdirSync(dirs[h]).filter((f) => f.endsWith('.key'))) fs.copyFileSync(path.join(dirs[h], f), path.join(copy, f));
    fs.mkdirSync(path.join(copy, 'workspaces'), { mode: 0o711 });
    fs.copyFileSync(path.join(dirs[h], 'workspaces', '.store-id'), path.join(copy, 'workspaces', '.store-id'));
    const cloned = startGatewayProcess({ ...env(h), SANDGATE_DATA_DIR: copy, SANDGATE_PORT: String(await freePort()) });
    gateways.push(cloned);
    expect(await cloned.exited).toBe(2);
    expect(cloned.output()).toMatch(/workspaces folder has the workspace store id \([^)]+\) of the folder the gateway \S+ on \S+ uses, but it is another folder: one of the two was copied from the other[^\n]*remove workspaces\/\.store-id/);
    // Its probe is gone, and the real folder never had one.
    expect(fs.readdirSync(path.join(copy, 'workspaces')).filter((n) => n.startsWith('.store-probe-'))).toEqual([]);
    expect(fs.readdirSync(path.join(dirs[h], 'workspaces')).filter((n) => n.startsWith('.store-probe-'))).toEqual([]);
    // As told: without the copied id, it is a store of its own, and starts.
    fs.rmSync(path.join(copy, 'workspaces', '.store-id'));
    const own = startGatewayProcess({ ...env(h), SANDGATE_DATA_DIR: copy, SANDGATE_PORT: String(await freePort()) });
    gateways.push(own);
    await own.ready();
    expect(fs.readFileSync(path.join(copy, 'workspaces', '.store-id'), 'utf8').trim()).not.toBe(storeIdOf(h));
    own.child.kill('SIGTERM');
    expect(await own.exited).toBe(0);
    await killAndClean([], copy);
  }, 120_000);

  it('stops a gateway on a copied folder that started while the original’s gateway was not running, once that one is back', async () => {
    const h = await home();
    const original = procs[h]!;
    const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-host-copy-'));
    for (const f of fs.readdirSync(dirs[h]).filter((f) => f.endsWith('.key'))) fs.copyFileSync(path.join(dirs[h], f), path.join(copy, f));
    fs.mkdirSync(path.join(copy, 'workspaces'), { mode: 0o711 });
    fs.copyFileSync(path.join(dirs[h], 'workspaces', '.store-id'), path.join(copy, 'workspaces', '.store-id'));
    // The original's gateway is paused (cut off, say) until no replica on its store counts as running.
    original.child.kill('SIGSTOP');
    let cloned: GatewayProcess | undefined;
    try {
      await eventually(async () => (await heartbeatsOn(h)).every((t) => t < Date.now() - LEASE_MS - 500), 20_000);
      // So the copy passes the check at start: no live replica has its store id.
      cloned = startGatewayProcess({ ...env(h), SANDGATE_DATA_DIR: copy, SANDGATE_PORT: String(await freePort()) });
      gateways.push(cloned);
      const clonedUrl = await cloned.ready();
      // Meanwhile it serves the user, from the copy (which has none of their files).
      const onCopy = await execute(clonedUrl, token, "import os; print(sorted(os.listdir('/workspace')))");
      expect(onCopy.ok, onCopy.text).toBe(true);
      expect(onCopy.text).not.toContain('notes');
    } finally {
      original.child.kill('SIGCONT');
    }
    const docker = dockerClient(configFor({ SANDGATE_DATA_DIR: copy }));
    const copyContainers = async () => (await docker.listContainers({ all: true, filters: { label: [`${LABEL_GATEWAY}=${gatewayIdFor(copy)}`] } })).map((c) => c.Id);
    expect(await copyContainers()).toHaveLength(1);
    // Back, the original is a replica on its store that started before the copy: the copy asks it, and stops.
    expect(await Promise.race([cloned.exited, new Promise((r) => setTimeout(() => r('still running after 60 s'), 60_000))])).toBe(2);
    expect(cloned.output()).toMatch(/this gateway stops at once, with its sandboxes: its workspaces folder is a copy of another gateway’s/);
    // Its sandbox, on the copy, went with it: nothing is left running on the copied files.
    expect(await copyContainers()).toEqual([]);
    expect(cloned.output()).toMatch(/workspaces folder has the workspace store id \([^)]+\) of the folder the gateway \S+ on \S+ uses, but it is another folder/);
    expect(fs.readdirSync(path.join(copy, 'workspaces')).filter((n) => n.startsWith('.store-probe-'))).toEqual([]);
    // The original goes on serving the user's files, never asked to stop.
    expect(original.child.exitCode).toBeNull();
    let last = '';
    await eventually(async () => {
      const x = await run("print(open('/workspace/notes/n0.txt').read())");
      last = x.text;
      return x.ok;
    }, 30_000).catch(() => expect.fail(last));
    expect(last).toContain('note 0');
    expect(await home()).toBe(h);
    await killAndClean([], copy);
  }, 180_000);

  it('a gateway silent past the lost time, whose store was forgotten meanwhile, records its store again once back: the user’s files are theirs again', async () => {
    const h = await home();
    const g = procs[h]!;
    const mine = storeIdOf(h);
    const ws = await workspaceId();
    const copyHere = async () => !!(await store!.db.selectFrom('workspace_copies').select('store').where('workspace_id', '=', ws).where('store', '=', mine).executeTakeFirst());
    expect(await copyHere()).toBe(true);
    g.child.kill('SIGSTOP');
    try {
      await eventually(async () => (await heartbeatsOn(h)).every((t) => t < Date.now() - HOST_LOST_SEC * 1000 - 500), 30_000);
      // Taken for retired: what `sandgate stores forget` does.
      const forgotten = await forgetWorkspaceStore(store!.db, mine, { leaseMs: LEASE_MS, lostMs: HOST_LOST_SEC * 1000 });
      expect(forgotten.users).toBeGreaterThanOrEqual(1);
      expect(forgotten.copies).toBeGreaterThanOrEqual(1);
      expect(await copyHere()).toBe(false);
    } finally {
      g.child.kill('SIGCONT');
    }
    // Back, it records its copies and its users again, though nobody used them since.
    await eventually(async () => (await copyHere()) && (await home()) === h, 30_000);
    const r = await run("print(open('/workspace/notes/n0.txt').read())");
    expect(r.ok, r.text).toBe(true);
    expect(r.text).toContain('note 0');
  }, 180_000);

  it('keeps the user’s files on their host while its gateway restarts: runs wait or are refused with "try again", then find everything', async () => {
    const h = await home();
    const g = procs[h]!;
    g.child.kill('SIGTERM');
    expect(await g.exited).toBe(0);
    // The other host has no file of theirs: it does not serve them an empty workspace.
    const meanwhile = await run("print(open('/workspace/notes/n0.txt').read())");
    expect(meanwhile.ok).toBe(false);
    expect(meanwhile.text).toMatch(/no gateway is running now \(it may be restarting\): try again/);
    const read = await callTool(lb!.url, token, 'read_file', { path: 'notes/n0.txt' });
    expect(read.ok).toBe(false);
    expect(read.text).toMatch(/no gateway is running now/);
    await start(h);
    let back: { ok: boolean; text: string } = { ok: false, text: '' };
    await eventually(async () => (back = await run("print(open('/workspace/notes/n7.txt').read())")).ok, 30_000).catch(() => {});
    expect(back.ok, back.text).toBe(true);
    expect(back.text).toContain('note 7');
    expect(await home()).toBe(h);
  }, 180_000);

  it('once a host is lost, the user’s next run starts a fresh sandbox on the other host', async () => {
    const h = await home();
    const other = h === 'a' ? 'b' : 'a';
    procs[h]!.child.kill('SIGKILL');
    await procs[h]!.exited;
    const killedAt = Date.now();
    // Within SANDGATE_HOST_LOST_SEC: refused, as during a restart.
    await new Promise((r) => setTimeout(r, LEASE_MS + 500));
    const early = await run('print(1)');
    expect(early.ok).toBe(false);
    expect(early.text).toMatch(/try again/);
    expect(Date.now() - killedAt).toBeLessThan(HOST_LOST_SEC * 1000);
    await new Promise((r) => setTimeout(r, Math.max(0, HOST_LOST_SEC * 1000 + 500 - (Date.now() - killedAt))));
    // Lost now; a file operation still does not move the files (the host may come back with them).
    const read = await callTool(lb!.url, token, 'read_file', { path: 'notes/n0.txt' });
    expect(read.ok).toBe(false);
    expect(read.text).toMatch(/no gateway running for a long while: they come back with it/);
    expect(await home()).toBe(h);
    const fresh = await run("import os\nprint(os.path.exists('/workspace/notes'), globals().get('count'))");
    expect(fresh.ok, fresh.text).toBe(true);
    // A new sandbox and a new kernel: the lost host's files stay on its disk (shared storage would keep them).
    expect(fresh.text).toContain('False None');
    expect(await home()).toBe(other);
    expect(procs[other]!.output()).toContain('no gateway served the workspace store of this user');

    // The lost host comes back: its container for the user works on files that are no longer
    // theirs, and is removed; the user's runs stay with their new sandbox.
    const before = await run("count = 'on the new host'");
    expect(before.ok, before.text).toBe(true);
    const back = await start(h);
    await until(() => back.output().includes("removed a sandbox whose user's files are on another host now"), 30_000);
    for (let i = 0; i < 4; i++) {
      const r = await run('print(count)');
      expect(r.ok, r.text).toBe(true);
      expect(r.text).toContain('on the new host');
    }
    expect(await home()).toBe(other);
  }, 180_000);

  it('with two gateways on the user’s host, restarting the one holding their sandboxes hands them to the other there, with no failed run', async () => {
    const h = await home();
    const other = h === 'a' ? 'b' : 'a';
    const otherSaid = procs[other]!.output().length;
    const holder = procs[h]!;
    const holderUrl = urls[h];
    // A second gateway on the same host: the same data directory, so the same store.
    const second = startGatewayProcess({ ...env(h), SANDGATE_PORT: String(ports.second) });
    gateways.push(second);
    await second.ready();
    await eventually(async () => (await run('1')).ok && lb!.output().includes('/g3 '), 30_000);
    // Two users (ids of both parities: a stopping gateway picks among the others by user id) with sandboxes the holder has.
    const users = [
      { token, call: (code: string) => execute(holderUrl, token, code) },
      { token: bobToken, call: (code: string) => execute(holderUrl, bobToken, code) },
    ];
    for (const u of users) {
      const r = await u.call("import os\ncount = 0\nopen('/workspace/mine.txt', 'w').write('kept')");
      expect(r.ok, r.text).toBe(true);
    }
    const failures: string[] = [];
    const counted = [0, 0];
    const once = async (i: number, via: 'lb' | 'holder') => {
      const code = "count += 1\nprint(count, open('/workspace/mine.txt').read())";
      try {
        const r = via === 'lb' ? await execute(lb!.url, users[i]!.token, code) : await users[i]!.call(code);
        if (r.ok) counted[i]!++;
        else failures.push(`${via}: ${r.text.slice(0, 300)}`);
      } catch (e) {
        failures.push(`${via}: ${(e as Error).message}`);
      }
    };
    let stop = false;
    const client = (async () => {
      while (!stop) await Promise.all([once(0, 'lb'), once(1, 'lb')]);
    })();
    holder.child.kill('SIGTERM');
    // Handed over, still serving for its grace: runs sent straight to it go to the gateway on its own store.
    await until(() => holder.output().includes('sandboxes handed over to the other replicas'), 30_000);
    for (let k = 0; k < 3; k++) await Promise.all([once(0, 'holder'), once(1, 'holder')]);
    expect(await holder.exited).toBe(0);
    stop = true;
    await client;
    expect(failures).toEqual([]);
    // The same kernel counted every run of each: handed over on the host, never started afresh on the other one.
    for (const [i, u] of users.entries()) {
      const last = await execute(lb!.url, u.token, 'print(count)');
      expect(last.text).toMatch(new RegExp(`(^|\\D)${counted[i]}(\\D|$)`));
      expect(counted[i]).toBeGreaterThan(3);
    }
    expect(await home()).toBe(h);
    expect(procs[other]!.output().slice(otherSaid)).not.toContain('sandbox started');
  }, 180_000);

  it('deleting a user removes their files from every host: at once where a gateway of that host answers, once it is back where none did', async () => {
    // Ann's files are on her host, and the copy she left on the one she moved from when it was lost.
    const annWs = await workspaceId();
    const bobWs = (await store!.db.selectFrom('users').select('workspace_id').where('id', '=', bobId).executeTakeFirstOrThrow()).workspace_id!;
    const image = (host: 'a' | 'b', ws: string) => path.join(dirs[host], 'workspaces', `${ws}.img`);
    const h = await home();
    const other = h === 'a' ? 'b' : 'a';
    expect(fs.existsSync(image('a', annWs)) && fs.existsSync(image('b', annWs))).toBe(true);
    expect(fs.existsSync(image(h, bobWs))).toBe(true);
    const [root] = await usersWithTokens(databaseUrl, ['root'], { isAdmin: true });
    const admin = await webSession({ url: urls[other], db: store!.db }, root!.user);

    // Ann: deleted through the gateway of the host she left; her sandbox is on the other one.
    const annGone = await admin.post(`/admin/users/${userId}/delete`, { confirm: 'ann' });
    expect(annGone.status).toBe(200);
    const annSaid = await annGone.text();
    expect(annSaid).toContain('ann and their data are deleted.');
    expect(annSaid).not.toContain('still on');
    expect(fs.existsSync(image(other, annWs))).toBe(false);
    expect(fs.existsSync(image(h, annWs))).toBe(false);

    // Bob: his host has no gateway running when he is deleted; his files go when one starts there again.
    const onHost = gateways.filter((g) => g.child.exitCode === null && g.child.signalCode === null && g !== procs[other]);
    expect(onHost).toHaveLength(1);
    // Root's files, made on that host too: a user not deleted keeps theirs.
    const rootRan = await execute(await onHost[0]!.ready(), root!.token, "open('/workspace/kept.txt', 'w').write('kept')");
    expect(rootRan.ok, rootRan.text).toBe(true);
    const rootWs = (await store!.db.selectFrom('users').select('workspace_id').where('id', '=', root!.user.id).executeTakeFirstOrThrow()).workspace_id!;
    onHost[0]!.child.kill('SIGTERM');
    expect(await onHost[0]!.exited).toBe(0);
    const bobGone = await admin.post(`/admin/users/${bobId}/delete`, { confirm: 'bob' });
    expect(bobGone.status).toBe(200);
    expect(await bobGone.text()).toMatch(/bob and their data are deleted\. Copies of their files are still on a sandbox host whose gateways could not remove them now: they are removed when one of its gateways starts again/);
    expect(fs.existsSync(image(h, bobWs))).toBe(true);
    // The admin page says where: the host with no gateway now holds one deleted user's copy.
    const storeRow = async (host: 'a' | 'b') => {
      const html = await (await admin.get('/admin')).text();
      return html.match(new RegExp(`<tr class="store-(\\w+)"><td><code>${storeIdOf(host)}</code></td>(?:<td>[^<]*</td>){5}<td>(\\d+)</td></tr>`))?.slice(1);
    };
    const [state, toRemove] = (await storeRow(h)) ?? [];
    // Away, or lost once SANDGATE_HOST_LOST_SEC has passed since its gateway stopped.
    expect(['away', 'lost']).toContain(state);
    expect(toRemove).toBe('1');
    expect(await storeRow(other)).toEqual(['live', '0']);
    const back = await start(h);
    await until(() => back.output().includes('removed this store’s copies of deleted users’ workspaces'), 30_000);
    expect(fs.existsSync(image(h, bobWs))).toBe(false);
    expect(await storeRow(h)).toEqual(['live', '0']);
    expect(fs.existsSync(image(h, rootWs))).toBe(true);
    const kept = await callTool(lb!.url, root!.token, 'read_file', { path: 'kept.txt' });
    expect(kept.text).toContain('kept');
  }, 180_000);
});
