/**
 * The operator command line: tokens (create / list / revoke), users, sandboxes (against
 * real containers) and the audit log, run in-process on a real store; plus the
 * bin/sandgate.js shim as a real process.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { argsShape, listAudit, recordAudit } from '../src/audit/audit.js';
import { createDriver } from '../src/sandboxes/index.js';
import { runCli, type CliContext } from '../src/cli/program.js';
import { findUser, suspendUser } from '../src/accounts/accounts.js';
import { isWellFormedToken } from '../src/tokens/format.js';
import { verifyToken } from '../src/tokens/tokens.js';
import { createHarness, type Harness } from './support/harness.js';
import { openStore } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';
import { ProviderKeys } from '../src/agent/provider-keys.js';
import { consumeLoginLink } from '../src/auth/login-links.js';
import { loadSession, saveSession } from '../src/auth/sessions.js';

let h: Harness;

/** Another handle on the harness's database, as a command would open it. */
const reopenStore = () => openStore({ dataDir: h.dataDir, databaseUrl: h.config.databaseUrl }, MIGRATIONS);

async function cli(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  return cliWithInput('', ...argv);
}

async function cliWithInput(stdin: string, ...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  return cliIn({}, stdin, ...argv);
}

async function cliIn(extra: Partial<CliContext>, stdin: string, ...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const ctx: CliContext = {
    ...extra,
    openStore: () => reopenStore(),
    dataDir: h.dataDir,
    publicUrl: 'https://gate.example.com',
    readSecret: async () => stdin,
    driver: () => createDriver(h.config, h.logger),
    out: (s) => out.push(s),
    err: (s) => err.push(s),
  };
  const code = await runCli(argv, ctx);
  return { code, out: out.join('\n'), err: err.join('\n') };
}

beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h?.close();
});

describe('sandgate users', () => {
  it('adds and lists users', async () => {
    expect(await cli('users', 'add', 'alice')).toMatchObject({ code: 0, out: expect.stringMatching(/^Created user alice \(id \d+\)\.$/) });
    expect((await cli('users', 'add', 'root', '--admin')).out).toMatch(/admin/);
    expect((await cli('users', 'list')).out).toMatch(/^ID\s+NAME\s+ADMIN\s+CREATED\n\d+\s+alice\s+\S+\n\d+\s+root\s+yes/);
    expect(await cli('users', 'add', 'no spaces')).toMatchObject({ code: 1, err: expect.stringMatching(/not a valid user name/) });
    // With GitHub sign-in, admins come from SANDGATE_ADMINS alone: the flag is refused, not silently lost.
    expect(await cliIn({ githubInstall: true }, '', 'users', 'add', 'carol', '--admin')).toMatchObject({ code: 1, err: expect.stringMatching(/SANDGATE_ADMINS/) });
    expect((await cli('users', 'list')).out).not.toMatch(/carol/);
  });
});

describe('sandgate tokens', () => {
  it('creates a token, printed once on stdout, with an optional expiry', async () => {
    const r = await cli('tokens', 'create', '--user', 'alice', '--name', 'laptop', '--expires', '30d');
    expect(r.code).toBe(0);
    expect(isWellFormedToken(r.out)).toBe(true);
    expect(r.err).toMatch(/Created token "laptop" for alice \(id \d+, expires \d{4}-.*\)\.\nCopy it now/);
    const v = await verifyToken(h.store.db, r.out);
    expect(v.ok && v.principal.user.name).toBe('alice');
  });

  it('explains what is wrong', async () => {
    expect(await cli('tokens', 'create', '--user', 'nobody', '--name', 'x')).toMatchObject({ code: 1, err: expect.stringMatching(/no user named "nobody".*sandgate users add nobody/) });
    expect(await cli('tokens', 'create', '--user', 'alice', '--name', 'laptop')).toMatchObject({ code: 1, err: expect.stringMatching(/already has an active token named "laptop"/) });
    expect(await cli('tokens', 'create', '--user', 'alice', '--name', 'x', '--expires', 'tomorrow-ish')).toMatchObject({ code: 1, err: expect.stringMatching(/30d, 12h/) });
    expect((await cli('tokens', 'create', '--user', 'alice')).code).toBe(2);
  });

  it('lists tokens without their secrets', async () => {
    const created = (await cli('tokens', 'create', '--user', 'alice', '--name', 'ci')).out;
    const r = await cli('tokens', 'list', '--user', 'alice');
    expect(r.out).toMatch(/^ID\s+USER\s+NAME\s+STATE\s+CREATED\s+EXPIRES\s+LAST USED\n/);
    expect(r.out).toMatch(/alice\s+ci\s+active\s+\S+\s+never\s+-/);
    expect(r.out).toMatch(/alice\s+laptop\s+active/);
    expect(r.out).not.toContain(created.slice(4, 20));
    const json = JSON.parse((await cli('tokens', 'list', '--json')).out) as { name: string; state: string }[];
    expect(json.map((t) => t.name).sort()).toEqual(['ci', 'laptop']);
    expect(JSON.stringify(json)).not.toMatch(/sgp_|hash/);
  });

  it('revokes by id, by user and name, or by the leaked token itself', async () => {
    const t1 = (await cli('tokens', 'create', '--user', 'alice', '--name', 'one')).out;
    const t2 = (await cli('tokens', 'create', '--user', 'alice', '--name', 'two')).out;
    const t3 = (await cli('tokens', 'create', '--user', 'alice', '--name', 'three')).out;
    const ids = JSON.parse((await cli('tokens', 'list', '--json')).out) as { id: number; name: string }[];
    const id1 = ids.find((t) => t.name === 'one')!.id;
    // What each token's client was shown (a PII vault scope) goes with the token.
    const alice = (await findUser(h.store.db, 'alice'))!.id;
    await h.store.db
      .insertInto('pii_scopes')
      .values(ids.map((t) => ({ user_id: alice, kind: 'token' as const, ref: String(t.id), created_at: 0 })))
      .execute();
    const revoked = ids.filter((t) => ['one', 'two', 'three'].includes(t.name)).map((t) => String(t.id));
    const scopes = async () =>
      (
        await h.store.db
          .selectFrom('pii_scopes')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .where('kind', '=', 'token')
          .where('ref', 'in', revoked)
          .executeTakeFirstOrThrow()
      ).n;
    expect(await scopes()).toBe(3);
    expect((await cli('tokens', 'revoke', String(id1))).out).toBe(`Revoked token ${id1} ("one" of alice).`);
    expect((await cli('tokens', 'revoke', '--user', 'alice', '--name', 'two')).out).toBe('Revoked token "two" of alice.');
    expect((await cli('tokens', 'revoke', t3)).out).toMatch(/^Revoked token \d+ \("three" of alice\)\.$/);
    for (const t of [t1, t2, t3]) expect(await verifyToken(h.store.db, t)).toMatchObject({ ok: false, reason: 'revoked' });
    expect(await scopes()).toBe(0);
    expect((await cli('tokens', 'revoke', String(id1))).out).toMatch(/already revoked/);
    expect((await cli('tokens', 'list', '--all')).out).toMatch(/one\s+revoked/);
    expect(await cli('tokens', 'revoke')).toMatchObject({ code: 1, err: expect.stringMatching(/say which token/) });
    expect(await cli('tokens', 'revoke', '999999')).toMatchObject({ code: 1, err: expect.stringMatching(/no token with id 999999/) });
  });
});

describe('sandgate sandboxes', () => {
  it('lists and stops a user’s sandbox; the next run gets a fresh one and the files survive', async () => {
    const alice = await h.user('alice');
    await h.manager.execute(alice, { language: 'python', code: 'open("kept.txt", "w").write("kept")' });
    const listed = await cli('sandboxes', 'list');
    expect(listed.out).toMatch(/^USER\s+CONTAINER\s+STATE\s+CREATED\nalice\s+[0-9a-f]{12}\s+running/);
    const stop = await cli('sandboxes', 'stop', 'alice');
    expect(stop.out).toBe('Stopped 1 sandbox container(s) of alice.');
    expect((await cli('sandboxes', 'list')).out).not.toMatch(/alice/);
    expect((await cli('sandboxes', 'stop', 'alice')).out).toBe('alice has no running sandbox.');
    const again = await h.manager.execute(alice, { language: 'bash', code: 'cat kept.txt' });
    expect(again.stdout).toBe('kept');
  });
});

describe('sandgate stores', () => {
  it('lists the workspace stores and forgets a lost one, refusing one whose gateway may be restarting', async () => {
    const now = Date.now();
    await h.store.db
      .insertInto('workspace_stores')
      .values([
        { id: 'host-gone', seen_at: now - 3_600_000 },
        { id: 'host-restarting', seen_at: now - 30_000 },
      ])
      .execute();
    await h.store.db
      .insertInto('workspace_copies')
      .values([
        { workspace_id: 'ws-stores-0001', store: 'host-gone' },
        { workspace_id: 'ws-stores-0001', store: 'host-restarting' },
      ])
      .execute();
    const listed = await cli('stores', 'list');
    expect(listed.code).toBe(0);
    expect(listed.out).toMatch(/^STORE\s+STATE\s+LAST SEEN\s+GATEWAYS\s+USERS\s+COPIES\s+OF DELETED USERS\n/);
    expect(listed.out).toMatch(/\nhost-gone\s+lost\s+\S+\s+-\s+0\s+1\s+0/);
    expect(listed.out).toMatch(/\nhost-restarting\s+away\s/);
    const json = JSON.parse((await cli('stores', 'list', '--json')).out) as { id: string; state: string }[];
    expect(json.filter((r) => r.id.startsWith('host-'))).toMatchObject([{ id: 'host-gone', state: 'lost' }, { id: 'host-restarting', state: 'away' }]);

    const refused = await cli('stores', 'forget', 'host-restarting');
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(/was running 30 s ago: it may be restarting/);
    const forgot = await cli('stores', 'forget', 'host-gone');
    expect(forgot.code).toBe(0);
    expect(forgot.out).toMatch(/^Forgot workspace store host-gone: 1 workspace copies \(0 of deleted users\)/);
    expect((await cli('stores', 'list')).out).not.toMatch(/host-gone/);
    expect((await cli('stores', 'forget', 'host-gone')).err).toMatch(/no workspace store host-gone is known/);
    expect((await cli('stores', 'forget')).code).toBe(2);
  });
});

describe('sandgate audit', () => {
  it('shows one user’s entries with argument shapes', async () => {
    const alice = (await findUser(h.store.db, 'alice'))!;
    await recordAudit(h.store.db, { userId: alice.id, tokenName: 'laptop', kind: 'mcp', method: 'tools/call', tool: 'execute_code', argsShape: argsShape({ code: 'print(42)' }, { properties: { code: {} } }), durationMs: 3.2, outcome: 'ok' });
    const r = await cli('audit', '--user', 'alice');
    expect(r.out).toMatch(/^TIME\s+TOKEN\s+KIND\s+METHOD\s+TOOL\s+MS\s+OUTCOME\s+ARGS\n\S+\s+laptop\s+mcp\s+tools\/call\s+execute_code\s+3\s+ok\s+\{"code":"string\(9\)"\}/);
    expect((await cli('audit', '--user', 'root')).out).toBe('No audit entries for root.');
  });
});

describe('bin/sandgate.js', () => {
  it('runs the command line through tsx', async () => {
    const bin = fileURLToPath(new URL('../bin/sandgate.js', import.meta.url));
    const { stdout } = await promisify(execFile)(process.execPath, [bin, '--help']);
    expect(stdout).toMatch(/Usage: sandgate \[options\] \[command\]/);
    expect(stdout).toMatch(/tokens\s+Personal API tokens/);
  });
});

describe('sandgate provider-keys', () => {
  it('stores a key from standard input, lists providers but never keys, and deletes it', async () => {
    await cli('users', 'add', 'pia');
    expect(await cliWithInput('sk-pia-secret\n', 'provider-keys', 'set', '--user', 'pia', '--provider', 'openai')).toMatchObject({ code: 0, out: 'Stored pia’s openai key. Their requests to openai use it from now on.' });
    const listed = await cli('provider-keys', 'list', '--user', 'pia');
    expect(listed.out).toMatch(/^PROVIDER\s+SET\nopenai\s+\d{4}-/);
    expect(listed.out).not.toContain('sk-pia');
    const store = await reopenStore();
    const pia = (await findUser(store.db, 'pia'))!;
    expect(await new ProviderKeys(store.db, h.dataDir).get(pia.id, 'openai')).toBe('sk-pia-secret');
    await store.close();
    expect(await cliWithInput('', 'provider-keys', 'set', '--user', 'pia', '--provider', 'openai')).toMatchObject({ code: 1, err: expect.stringMatching(/no key on standard input/) });
    expect((await cli('provider-keys', 'set', '--user', 'pia', '--provider', 'mistral')).code).toBe(2);
    expect((await cli('provider-keys', 'delete', '--user', 'pia', '--provider', 'openai')).out).toBe('Deleted pia’s openai key.');
    expect((await cli('provider-keys', 'list', '--user', 'pia')).out).toBe('pia has no provider keys.');
  });
});

describe('sandgate users disable / enable', () => {
  it('disables a user as the admin page does (sessions ended, tokens refused, sandbox stopped, nothing deleted) and enables them again', async () => {
    await cli('users', 'add', 'dora');
    const token = (await cli('tokens', 'create', '--user', 'dora', '--name', 'laptop')).out;
    const dora = await h.user('dora');
    await h.manager.execute(dora, { language: 'python', code: 'open("kept.txt", "w").write("kept")' });
    await saveSession(h.store.db, 'dora-browser', '{}', dora.userId, Date.now() + 3_600_000);

    const off = await cli('users', 'disable', 'dora');
    expect(off).toMatchObject({ code: 0, out: 'Disabled dora: their sessions ended, their tokens and sign-ins are refused, and 1 sandbox container(s) of theirs stopped. Nothing of theirs was deleted.' });
    // What it cannot reach from outside the gateway, it says.
    expect(off.err).toMatch(/pages they have open at its next membership check.*chat turn/);
    expect((await findUser(h.store.db, 'dora'))?.disabledAt).toEqual(expect.any(Number));
    expect(await loadSession(h.store.db, 'dora-browser')).toBeUndefined();
    expect(await verifyToken(h.store.db, token)).toMatchObject({ ok: false, reason: 'disabled' });
    expect((await cli('sandboxes', 'list')).out).not.toMatch(/dora/);
    // A turn the gateway let in before (the command line cannot cancel it) runs no more
    // code for her: the gateway's sandbox manager refuses, and starts no container.
    await expect(h.manager.execute(dora, { language: 'bash', code: 'echo still here' })).rejects.toMatchObject({ name: 'SandboxError', reason: 'account_disabled', auditClass: 'SandboxError:account_disabled' });
    expect(h.manager.startingUsers()).not.toContain(dora.userId);
    expect((await h.manager.list()).map((s) => s.user)).not.toContain('dora');
    expect((await cli('sandboxes', 'list')).out).not.toMatch(/dora/);

    expect((await cli('users', 'enable', 'dora')).out).toBe('dora is enabled again.');
    expect((await cli('users', 'enable', 'dora')).out).toBe('dora is not disabled.');
    expect(await verifyToken(h.store.db, token)).toMatchObject({ ok: true });
    expect((await h.manager.execute(dora, { language: 'bash', code: 'cat kept.txt' })).stdout).toBe('kept');
    expect((await cli('users', 'disable', 'nobody')).code).toBe(1);

    // Both are in the audit log as the admin page's are; the command line has no admin
    // account, so the user acted on is the row's user and its target, with no `via`.
    const rows = (await listAudit(h.store.db, dora.userId)).filter((e) => e.kind === 'admin');
    expect(rows.map((e) => e.method)).toEqual(['user/enable', 'user/disable']);
    for (const e of rows) expect(e).toMatchObject({ userId: dora.userId, targetUserId: dora.userId, via: null, outcome: 'ok', errorClass: null });
  });

  it('enabling a user GitHub membership also refuses says that they stay out until GitHub lists them', async () => {
    await cli('users', 'add', 'gus');
    const gus = await h.user('gus');
    await suspendUser(h.store.db, gus.userId, 'no longer in the team');
    await cli('users', 'disable', 'gus');
    const still = 'GitHub membership still refuses them: they get in again once GitHub lists them.';
    expect((await cli('users', 'enable', 'gus')).out).toBe(`gus is enabled, but ${still}`);
    expect((await cli('users', 'enable', 'gus')).out).toBe(`gus is not disabled, but ${still}`);
    expect(await findUser(h.store.db, 'gus')).toMatchObject({ disabledAt: null, suspendedAt: expect.any(Number) });
    await expect(h.manager.execute(gus, { language: 'bash', code: 'true' })).rejects.toMatchObject({ reason: 'account_disabled' });
  });
});

describe('sandgate users login-link', () => {
  it('prints a one-time link under the public URL, good for one sign-in', async () => {
    await cli('users', 'add', 'lena');
    const r = await cli('users', 'login-link', 'lena');
    expect(r.code).toBe(0);
    const m = /^https:\/\/gate\.example\.com\/login\/link\/([A-Za-z0-9_-]{32})$/.exec(r.out);
    expect(m).not.toBeNull();
    expect(r.err).toMatch(/^Signs in as lena, once, until \d{4}-/);
    const store = await reopenStore();
    expect(await consumeLoginLink(store.db, m![1]!)).toMatchObject({ ok: true });
    expect(await consumeLoginLink(store.db, m![1]!)).toEqual({ ok: false, reason: 'used' });
    await store.close();
    expect((await cli('users', 'login-link', 'nobody')).code).toBe(1);
  });
});
