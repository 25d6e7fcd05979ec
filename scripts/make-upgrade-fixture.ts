/**
 * Makes test/fixtures/upgrade/<commit>/: an install written by an earlier release of
 * sandgate, which test/upgrade.test.ts upgrades with today's code.
 *
 *   node --import tsx scripts/make-upgrade-fixture.ts [commit] [--worktree DIR]
 *
 * (as root; the commit defaults to 96f796d; --worktree uses that checkout of the commit,
 * its dependencies installed, instead of making one.)
 *
 * The commit is checked out into a temporary git worktree (removed at the end), its
 * dependencies installed with `npm ci`, and that release's own gateway started on a fresh
 * data directory, once on SQLite and once on a Postgres database of a throw-away cluster.
 * Against each it makes what an install holds, through its pages, its MCP endpoint and
 * its modules: an admin and a user, API tokens (one revoked), a permission ceiling set on
 * the admin page, a provider key saved on the settings page, a sealed upstream
 * credential, a conversation with a finished turn and two messages, a workspace file
 * written with write_file, and the audit rows all of that leaves. The fixture gets:
 *
 *   sqlite/, sqlite.json       the data directory (sandgate.db, the keys, the workspace) and what it holds
 *   postgres/, postgres.sql,   the data directory (keys and workspace), the database as plain SQL
 *   postgres.json              (pg_dump, one INSERT a row), and what it holds
 *
 * Workspaces use the `directory` backend: a `loop` workspace is an ext4 image of
 * SANDGATE_WORKSPACE_MB, too large to keep in the repository. The keys are made for the
 * fixture and protect nothing else.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { REPO_ROOT } from '../src/paths.js';
import { findPostgresBinaries, startPostgresCluster } from '../test/support/postgres.js';
import { modernRequest } from '../test/support/raw-request.js';

/** Before the egress work (4cce680), whose audit migration is the one an upgrade from here runs. */
const DEFAULT_COMMIT = '96f796d';

/** What the fixture's JSON file says the install holds: the test checks each. */
export interface UpgradeFixture {
  commit: string;
  /** The schema version the release left (SQLite's user_version, Postgres's sandgate_schema). */
  version: number;
  madeAt: number;
  admin: { name: string; token: string };
  user: { name: string; token: string; revokedToken: string; permissions: string; defaultModel: string };
  conversation: { id: string; title: string; model: string; messages: { role: string; text: string }[] };
  workspace: { path: string; content: string };
  providerKey: { provider: string; value: string };
  credential: { server: string; name: string; value: string };
  /** Every audit row, oldest first: user, kind, method, tool, outcome. */
  audit: [string, string, string, string | null, string][];
}

// The parts of the old release this script calls, as that release declares them. Loaded
// from its worktree at run time: nothing here is today's code.
interface Db {
  readonly __db: unique symbol;
}
interface OldUser {
  id: number;
  name: string;
  permissions: string | null;
}
interface OldGateway {
  store: { db: Db; version: number };
  app: http.RequestListener;
  attach(server: http.Server): void;
  close(opts?: { stopAll?: boolean }): Promise<void>;
}
interface OldRelease {
  configFor(env: Record<string, string>): unknown;
  createLogger(level: string): unknown;
  createGateway(config: unknown, logger: unknown): Promise<OldGateway>;
  ensureUser(db: Db, name: string, opts?: { isAdmin?: boolean }): Promise<OldUser>;
  createToken(db: Db, opts: { userId: number; name: string }): Promise<{ token: string; record: { id: number } }>;
  revokeToken(db: Db, id: number): Promise<boolean>;
  setDefaultModel(db: Db, userId: number, model: string | null): Promise<void>;
  createLoginLink(db: Db, userId: number): Promise<{ secret: string }>;
  createConversation(db: Db, o: { userId: number; model: string; source: 'web' | 'api'; title?: string }): Promise<{ id: string }>;
  startTurn(db: Db, conversationId: string, model: string): Promise<{ id: number }>;
  addMessage(db: Db, o: { conversationId: string; turnId?: number; message: { role: string; content: string }; model?: string; keyOwner?: 'user' | 'team' }): Promise<number>;
  endTurn(db: Db, turnId: number, status: 'complete', rounds: number): Promise<void>;
  createCredentialStore(db: Db, key: Buffer): { set(userId: number, server: string, name: string, value: string): Promise<void> };
  loadOrCreateCredentialsKey(dataDir: string): Buffer;
  queryAudit(db: Db, q: { limit?: number }): Promise<{ userId: number; kind: string; method: string; tool: string | null; outcome: string }[]>;
  listUsers(db: Db): Promise<OldUser[]>;
}

/** The old release's modules, from its worktree (run through tsx, as that release runs itself). */
async function loadRelease(worktree: string): Promise<OldRelease> {
  const load = async (file: string) => (await import(pathToFileURL(path.join(worktree, 'src', file)).href)) as Record<string, unknown>;
  const modules = await Promise.all(
    [
      'config.ts',
      'logger.ts',
      'gateway.ts',
      'accounts/accounts.ts',
      'tokens/tokens.ts',
      'auth/login-links.ts',
      'agent/conversations.ts',
      'upstream/credentials.ts',
      'audit/audit.ts',
    ].map(load),
  );
  return Object.assign({}, ...modules) as OldRelease;
}

/** A browser signed in on the old gateway with a one-time link, sending forms as the pages' htmx does. */
async function signIn(base: string, release: OldRelease, db: Db, user: OldUser): Promise<(path: string, form: Record<string, string>) => Promise<string>> {
  let cookie = '';
  const request = async (p: string, init: RequestInit = {}): Promise<Response> => {
    const headers = new Headers(init.headers);
    if (cookie) headers.set('cookie', cookie);
    const r = await fetch(`${base}${p}`, { ...init, headers, redirect: 'manual' });
    const set = r.headers.getSetCookie().map((c) => c.split(';')[0]!);
    if (set.length) cookie = set.join('; ');
    return r;
  };
  const form = (fields: Record<string, string>) => ({ headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields).toString() });
  const { secret } = await release.createLoginLink(db, user.id);
  const linkCsrf = /name="_csrf" value="([^"]+)"/.exec(await (await request(`/login/link/${secret}`)).text())?.[1];
  if (!linkCsrf) throw new Error('the sign-in link page has no CSRF field');
  const signedIn = await request('/login/link', { method: 'POST', ...form({ _csrf: linkCsrf, secret }) });
  if (signedIn.headers.get('location') !== '/chat') throw new Error(`sign-in by link failed: ${signedIn.status}`);
  const csrf = /data-csrf="([^"]+)"/.exec(await (await request('/chat')).text())?.[1];
  if (!csrf) throw new Error('the chat page has no CSRF token');
  return async (p, fields) => {
    const { headers, body } = form(fields);
    const r = await request(p, { method: 'POST', headers: { ...headers, 'x-csrf-token': csrf, 'hx-request': 'true' }, body });
    const text = await r.text();
    if (r.status !== 200) throw new Error(`POST ${p}: ${r.status} ${text.slice(0, 300)}`);
    return text;
  };
}

/** Starts the old release's gateway on `dataDir` (and `databaseUrl`, when given) and makes the install's data through it. */
async function makeInstall(release: OldRelease, commit: string, dataDir: string, databaseUrl: string): Promise<UpgradeFixture> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const config = release.configFor({
    SANDGATE_DATA_DIR: dataDir,
    SANDGATE_DATABASE_URL: databaseUrl,
    SANDGATE_PUBLIC_URL: base,
    SANDGATE_HOST: '127.0.0.1',
    SANDGATE_WORKSPACE_BACKEND: 'directory',
    SANDGATE_PII_TOKENIZE: 'false',
    SANDGATE_WARM_POOL_SIZE: '0',
    SANDGATE_UPSTREAM_HOME_DIR: `${dataDir}-homes`,
    SANDGATE_LOG_LEVEL: 'warn',
  });
  // No start(): nothing here runs code, so no sandbox and no preflight (the tools that
  // touch files work on the host, without a sandbox).
  const gw = await release.createGateway(config, release.createLogger('warn'));
  server.on('request', gw.app);
  gw.attach(server);
  const db = gw.store.db;
  try {
    const admin = await release.ensureUser(db, 'admin', { isAdmin: true });
    const alice = await release.ensureUser(db, 'alice');
    const adminToken = (await release.createToken(db, { userId: admin.id, name: 'ops' })).token;
    const old = await release.createToken(db, { userId: alice.id, name: 'old-laptop' });
    await release.revokeToken(db, old.record.id);
    const model = 'anthropic:claude-sonnet-4-5';
    await release.setDefaultModel(db, alice.id, model);

    // Alice on the web: a token from the tokens page, her own key on the settings page.
    const asAlice = await signIn(base, release, db, alice);
    const created = await asAlice('/tokens', { name: 'laptop', expires: 'never' });
    const token = /sgp_[A-Za-z0-9]+/.exec(created)?.[0];
    if (!token) throw new Error('the tokens page showed no token');
    const providerKey = { provider: 'anthropic', value: 'sk-ant-upgrade-fixture-0001' };
    await asAlice(`/settings/keys/${providerKey.provider}`, { key: providerKey.value });

    // The admin on the admin page: a narrower ceiling for alice (no writes outside /workspace/out).
    const permissions = '{"read":["/workspace","/skills","/tools"],"write":["/workspace/out"]}';
    const asAdmin = await signIn(base, release, db, admin);
    await asAdmin(`/admin/users/${alice.id}/permissions`, { permissions });

    // An upstream credential, sealed with upstream.key (the settings page would need the server running).
    const credential = { server: 'github', name: 'GITHUB_TOKEN', value: 'ghp_upgradeFixture0001' };
    await release.createCredentialStore(db, release.loadOrCreateCredentialsKey(dataDir)).set(alice.id, credential.server, credential.name, credential.value);

    // Over MCP with her token: a file in her workspace, where her ceiling lets her write.
    const workspace = { path: 'out/plan.md', content: '# Plan\n\nKept through an upgrade.\n' };
    const listed = await modernRequest(`${base}/mcp`, token, 'tools/list', {});
    if (!listed.result) throw new Error(`tools/list failed: ${JSON.stringify(listed.error)}`);
    const wrote = await modernRequest(`${base}/mcp`, token, 'tools/call', { name: 'write_file', arguments: { path: workspace.path, content: workspace.content } });
    if (!wrote.result || wrote.result.isError) throw new Error(`write_file failed: ${JSON.stringify(wrote)}`);

    // A conversation of the built-in agent, as a finished turn leaves it.
    const title = 'Quarterly numbers';
    const messages = [
      { role: 'user', text: 'What is the mean amount in orders.csv?' },
      { role: 'assistant', text: 'The mean amount is 41.7 over 1,200 orders.' },
    ];
    const conversation = await release.createConversation(db, { userId: alice.id, model, source: 'web', title });
    const turn = await release.startTurn(db, conversation.id, model);
    await release.addMessage(db, { conversationId: conversation.id, turnId: turn.id, message: { role: 'user', content: messages[0]!.text } });
    await release.addMessage(db, { conversationId: conversation.id, turnId: turn.id, message: { role: 'assistant', content: messages[1]!.text }, model, keyOwner: 'user' });
    await release.endTurn(db, turn.id, 'complete', 1);

    const users = await release.listUsers(db);
    const names = new Map(users.map((u) => [u.id, u.name]));
    const audit = (await release.queryAudit(db, { limit: 1000 })).reverse().map((r) => [names.get(r.userId)!, r.kind, r.method, r.tool, r.outcome] as UpgradeFixture['audit'][number]);
    return {
      commit,
      version: gw.store.version,
      madeAt: Date.now(),
      admin: { name: admin.name, token: adminToken },
      // The ceiling as the release stored it (the admin page writes it out in full).
      user: { name: alice.name, token, revokedToken: old.token, permissions: users.find((u) => u.id === alice.id)!.permissions!, defaultModel: model },
      conversation: { id: conversation.id, title, model, messages },
      workspace,
      providerKey,
      credential,
      audit,
    };
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await gw.close();
  }
}

/**
 * Copies what a data directory holds into the fixture: the store (SQLite), the key files,
 * the workspaces. Anything else is refused, a write-ahead log too (a closed store has
 * none: its pages are all in sandgate.db).
 */
function keepDataDir(from: string, to: string): void {
  fs.mkdirSync(to, { recursive: true });
  for (const name of fs.readdirSync(from)) {
    if (name !== 'sandgate.db' && !name.endsWith('.key') && name !== 'workspaces') throw new Error(`the data directory holds ${name}, which the fixture does not expect`);
    fs.cpSync(path.join(from, name), path.join(to, name), { recursive: true });
  }
}

function run(cmd: string, args: string[], cwd: string): string {
  return execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 << 20 });
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const at = args.indexOf('--worktree');
  const given = at >= 0 ? path.resolve(args.splice(at, 2)[1] ?? '') : undefined;
  const commit = run('git', ['rev-parse', '--short=7', `${args[0] ?? DEFAULT_COMMIT}^{commit}`], REPO_ROOT).trim();
  const out = path.join(REPO_ROOT, 'test/fixtures/upgrade', commit);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-upgrade-fixture-'));
  const worktree = given ?? path.join(tmp, `sandgate-${commit}`);
  if (given) {
    const head = run('git', ['rev-parse', '--short=7', 'HEAD'], given).trim();
    if (head !== commit) throw new Error(`${given} is at ${head}, not ${commit}`);
  } else {
    run('git', ['worktree', 'add', '--detach', worktree, commit], REPO_ROOT);
  }
  try {
    if (!given) {
      console.log(`installing ${commit}'s dependencies (npm ci)`);
      run('npm', ['ci', '--omit=dev', '--no-audit', '--no-fund'], worktree);
    }
    const release = await loadRelease(worktree);
    fs.rmSync(path.join(out, 'sqlite'), { recursive: true, force: true });
    fs.rmSync(path.join(out, 'postgres'), { recursive: true, force: true });

    console.log('writing the SQLite install');
    const liteDir = path.join(tmp, 'sqlite');
    const lite = await makeInstall(release, commit, liteDir, '');
    keepDataDir(liteDir, path.join(out, 'sqlite'));
    fs.writeFileSync(path.join(out, 'sqlite.json'), `${JSON.stringify(lite, null, 2)}\n`);

    console.log('writing the Postgres install');
    const cluster = await startPostgresCluster();
    try {
      const url = await cluster.createDatabase();
      const pgDir = path.join(tmp, 'postgres');
      const pg = await makeInstall(release, commit, pgDir, url);
      keepDataDir(pgDir, path.join(out, 'postgres'));
      fs.writeFileSync(path.join(out, 'postgres.json'), `${JSON.stringify(pg, null, 2)}\n`);
      const pgDump = path.join(path.dirname(findPostgresBinaries().initdb), 'pg_dump');
      const dump = run(pgDump, ['--no-owner', '--no-privileges', '--inserts', `--dbname=${url}`], tmp);
      // psql's own commands and settings newer servers only know are left out: the file is
      // plain SQL that any client restores into Postgres 15 or later.
      const portable = dump
        .split('\n')
        .filter((l) => !/^\\(un)?restrict\b/.test(l) && !/^SET transaction_timeout\b/.test(l))
        .join('\n');
      fs.writeFileSync(path.join(out, 'postgres.sql'), portable);
    } finally {
      await cluster.stop();
    }
    console.log(`written to ${path.relative(REPO_ROOT, out)}`);
  } finally {
    if (!given) run('git', ['worktree', 'remove', '--force', worktree], REPO_ROOT);
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

await main();
