/**
 * The operator command line: users, personal API tokens, sandboxes, the audit log, and
 * the data itself (backup, restore, the move to Postgres).
 * `buildProgram` takes everything it touches as a context, so tests run it in-process
 * against a temporary store; main.ts builds the real context from configuration. The
 * store is opened by the first command that needs it and closed when the command ends,
 * however it ends (a Postgres pool left open would keep the process alive).
 */
import path from 'node:path';
import { Command, CommanderError, Option } from 'commander';
import { KEYED_PROVIDERS } from '../agent/models.js';
import { ProviderKeys } from '../agent/provider-keys.js';
import { createLoginLink } from '../auth/login-links.js';
import { listAudit, recordAudit } from '../audit/audit.js';
import { dropPiiScope, tokenScopeRef } from '../pii/scopes.js';
import type { SandboxDriver } from '../sandboxes/types.js';
import type { Db, Store } from '../store/store.js';
import { ensureUser, findUser, listUsers, type User } from '../accounts/accounts.js';
import { TOKEN_PREFIX } from '../tokens/format.js';
import { createToken, findTokenBySecret, getToken, listTokens, parseExpiry, revokeToken, revokeTokenByName, tokenState, type TokenRecord } from '../tokens/tokens.js';
import { listSandboxes, stopUserSandbox } from './sandboxes.js';
import { backup, BackupError, restore } from './backup.js';
import { copyStore } from '../store/copy.js';
import { forgetWorkspaceStore, listWorkspaceStores, StoreNotForgotten } from '../replicas/stores.js';
import { deleteUserSessions } from '../auth/sessions.js';
import { disableUser, enableUser, stillRefused } from '../users/users.js';
import { utcText } from '../dates.js';
import { GatewayError } from '../errors.js';
import { configFor } from '../config.js';

export interface CliContext {
  /** Opens the configured store; `migrate: false` opens it as it is (for a backup). */
  openStore(opts?: { migrate?: boolean }): Promise<Store>;
  /** The data directory (for the key file that seals users' provider keys). */
  dataDir: string;
  /** Where users reach the gateway (for sign-in links). */
  publicUrl: string;
  /** Whether members sign in with GitHub (SANDGATE_GITHUB_CLIENT_ID set): admins are then SANDGATE_ADMINS alone. */
  githubInstall?: boolean;
  /** Active tokens one user may hold (SANDGATE_MAX_TOKENS_PER_USER); its default when not given. */
  maxTokensPerUser?: number;
  /** A secret typed or piped on standard input (a provider key), never echoed. */
  readSecret(): Promise<string>;
  /** The sandbox driver of this gateway (containers found by its labels). */
  driver(): SandboxDriver;
  out(text: string): void;
  err(text: string): void;
  now?: () => number;
  /** SANDGATE_REPLICA_LEASE_MS: a gateway whose heartbeat is older is not running. */
  replicaLeaseMs?: number;
  /** SANDGATE_HOST_LOST_SEC: a workspace store with no running gateway for this long is lost. */
  hostLostSec?: number;
  /** Opens (creating its tables in) the Postgres database at `url`, for `db copy`. */
  openStoreAt?(url: string): Promise<Store>;
}

/** A failure the operator can fix; printed without a stack trace. */
export class CliError extends GatewayError {
  override name = 'CliError';
  constructor(message: string) {
    super(message, { reason: 'cli_usage', status: 400 });
  }
}

/** A stored time as text: '-' for none, "unknown" for a value no date can hold (an old install may have stored one). */
const iso = (ms: number | null | undefined) => (ms === null || ms === undefined || ms === 0 ? '-' : utcText(ms, 'iso'));

/** Left-aligned columns, two spaces apart. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!))).join('  ');
  return [line(header), ...rows.map(line)].join('\n');
}

async function requireUser(db: Db, name: string): Promise<User> {
  const u = await findUser(db, name);
  if (!u) throw new CliError(`no user named "${name}". Users appear when they first sign in; to add one now: sandgate users add ${name}`);
  return u;
}

/**
 * Runs an admin action done here and records it in the audit log as the admin page
 * records its own (kind `admin`, the same method, the same outcomes), so the log shows a
 * disable or enable whichever way it was done. The command line has no admin account and
 * comes by none of the ways `via` names, so the row gives the user acted on as both its
 * user and its target, with no `via`: a row the admin page never writes (it always
 * records the admin and how they came, and refuses to disable an admin's own account).
 */
async function auditedHere<T>(db: Db, method: string, user: User, act: () => Promise<T> | T): Promise<T> {
  const started = performance.now();
  const entry = { userId: user.id, via: null, kind: 'admin' as const, method, targetUserId: user.id };
  try {
    const out = await act();
    await recordAudit(db, { ...entry, durationMs: performance.now() - started, outcome: 'ok' });
    return out;
  } catch (e) {
    await recordAudit(db, { ...entry, durationMs: performance.now() - started, outcome: 'error', errorClass: 'internal' });
    throw e;
  }
}

/** The commands; `store` opens the store on first use (runCli closes it). */
export function buildProgram(ctx: CliContext, store: () => Promise<Store>): Command {
  const now = () => (ctx.now ? ctx.now() : Date.now());
  const db = async () => (await store()).db;

  const program = new Command('sandgate')
    .description('Operate a sandgate gateway: users, personal API tokens, sandboxes, audit log.\nReads the same settings as the gateway (SANDGATE_DATA_DIR, .env).')
    .showHelpAfterError()
    .configureOutput({ writeOut: (s) => ctx.out(s.trimEnd()), writeErr: (s) => ctx.err(s.trimEnd()) })
    .exitOverride();

  // ---------------------------------------------------------------- users
  const users = program.command('users').description('Users (normally created at their first sign-in)');
  users
    .command('add')
    .description('Create a user (or update its admin flag)')
    .argument('<name>', 'login name (GitHub login, or any name for a local install)')
    .option('--admin', 'make the user an admin (single-user installs; with GitHub sign-in, admins are SANDGATE_ADMINS)')
    .action(async (name: string, o: { admin?: boolean }) => {
      // With GitHub sign-in the gateway derives admin rights from SANDGATE_ADMINS at every check; a flag set here would be overwritten.
      if (o.admin && ctx.githubInstall) throw new CliError(`with GitHub sign-in, admins are the logins in SANDGATE_ADMINS (read at each membership check): add ${name} there instead of --admin`);
      const existed = !!(await findUser(await db(), name));
      const u = await ensureUser(await db(), name, o.admin ? { isAdmin: true } : {});
      ctx.out(`${existed ? 'Updated' : 'Created'} user ${u.name} (id ${u.id}${u.isAdmin ? ', admin' : ''}).`);
    });
  users
    .command('list')
    .description('List users')
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }) => {
      const all = await listUsers(await db());
      if (o.json) return ctx.out(JSON.stringify(all.map(({ id, name, isAdmin, createdAt }) => ({ id, name, isAdmin, createdAt })), null, 2));
      ctx.out(all.length ? table(['ID', 'NAME', 'ADMIN', 'CREATED'], all.map((u) => [String(u.id), u.name, u.isAdmin ? 'yes' : '', iso(u.createdAt)])) : 'No users yet.');
    });

  users
    .command('login-link')
    .description('Print a one-time sign-in link for a user (valid 15 minutes, good for one sign-in)')
    .argument('<name>', 'login name')
    .action(async (name: string) => {
      const u = await requireUser(await db(), name);
      const link = await createLoginLink(await db(), u.id, now());
      ctx.out(`${ctx.publicUrl.replace(/\/$/, '')}/login/link/${link.secret}`);
      ctx.err(`Signs in as ${u.name}, once, until ${iso(link.expiresAt)}.`);
    });

  users
    .command('disable')
    .description('Disable a user: their sessions end, their tokens and sign-ins are refused and their sandbox stops; nothing of theirs is deleted')
    .argument('<name>', 'login name')
    .action(async (name: string) => {
      const store = await db();
      const u = await requireUser(store, name);
      // The same use-case as the admin page's, with what this process reaches: the store and the sandbox containers.
      let stopped = 0;
      const sandboxes = { stopUser: async () => (stopped = await stopUserSandbox(ctx.driver(), store, u)) };
      await auditedHere(store, 'user/disable', u, () => disableUser({ db: store, sessions: { endSessionsOf: (id) => deleteUserSessions(store, id) }, sandboxes }, u));
      ctx.out(`Disabled ${u.name}: their sessions ended, their tokens and sign-ins are refused${stopped ? `, and ${stopped} sandbox container(s) of theirs stopped` : ''}. Nothing of theirs was deleted.`);
      ctx.err('A running gateway closes the pages they have open at its next membership check (within 30 s); a chat turn of theirs running there now goes on to its end, but the gateway runs no more code for them.');
    });
  users
    .command('enable')
    .description('Let a disabled user in again (their tokens work again; they sign in afresh)')
    .argument('<name>', 'login name')
    .action(async (name: string) => {
      const store = await db();
      const u = await requireUser(store, name);
      const github = stillRefused(u);
      if (u.disabledAt === null) return ctx.out(`${u.name} is not disabled${github ? `, but ${github}` : ''}.`);
      await auditedHere(store, 'user/enable', u, () => enableUser({ db: store }, u));
      ctx.out(github ? `${u.name} is enabled, but ${github}.` : `${u.name} is enabled again.`);
    });

  // ---------------------------------------------------------------- tokens
  const tokens = program.command('tokens').description('Personal API tokens for MCP clients');
  tokens
    .command('create')
    .description('Create a token; it is printed once, on stdout (the explanation goes to stderr)')
    .requiredOption('--user <name>', 'the user the token acts as')
    .requiredOption('--name <name>', 'a label for where it is used, e.g. laptop or ci')
    .option('--expires <when>', 'expiry: 30d, 12h, 8w, 1y, an ISO date (at most 5 years ahead), or never', 'never')
    .action(async (o: { user: string; name: string; expires: string }) => {
      const u = await requireUser(await db(), o.user);
      const expiresAt = parseExpiry(o.expires, now());
      const { token, record } = await createToken(await db(), { userId: u.id, name: o.name, expiresAt, now: now(), maxActive: ctx.maxTokensPerUser });
      ctx.err(
        `Created token "${record.name}" for ${u.name} (id ${record.id}, ${expiresAt ? `expires ${iso(expiresAt)}` : 'never expires'}).\n` +
          'Copy it now: it is shown only this once. MCP clients send it as the header "Authorization: Bearer <token>" (docs/mcp-clients.md).',
      );
      ctx.out(token);
    });
  tokens
    .command('list')
    .description('List tokens (never their secrets)')
    .option('--user <name>', 'only this user’s tokens')
    .option('--all', 'include revoked tokens')
    .option('--json', 'print JSON')
    .action(async (o: { user?: string; all?: boolean; json?: boolean }) => {
      const userId = o.user ? (await requireUser(await db(), o.user)).id : undefined;
      const list = await listTokens(await db(), { userId, includeRevoked: o.all });
      if (o.json) return ctx.out(JSON.stringify(list.map((t) => ({ ...t, state: tokenState(t, now()) })), null, 2));
      if (!list.length) return ctx.out(o.user ? `${o.user} has no tokens.` : 'No tokens.');
      ctx.out(
        table(
          ['ID', 'USER', 'NAME', 'STATE', 'CREATED', 'EXPIRES', 'LAST USED'],
          list.map((t) => [String(t.id), t.userName, t.name, tokenState(t, now()), iso(t.createdAt), t.expiresAt === null ? 'never' : iso(t.expiresAt), iso(t.lastUsedAt)]),
        ),
      );
    });
  tokens
    .command('revoke')
    .description('Revoke a token at once (its next request gets 401): by id, by --user and --name, or by the leaked token itself')
    .argument('[id-or-token]', 'token id (see tokens list), or the token string')
    .option('--user <name>', 'with --name: the token’s user')
    .option('--name <name>', 'with --user: the token’s name')
    .action(async (idOrToken: string | undefined, o: { user?: string; name?: string }) => {
      let record: TokenRecord | undefined;
      if (idOrToken && (o.user || o.name)) throw new CliError('give either a token id (or the token) or --user with --name, not both');
      if (idOrToken?.startsWith(TOKEN_PREFIX)) {
        record = await findTokenBySecret(await db(), idOrToken);
        if (!record) throw new CliError('that token is not known to this gateway (check SANDGATE_DATA_DIR)');
      } else if (idOrToken) {
        if (!/^\d+$/.test(idOrToken)) throw new CliError(`"${idOrToken}" is neither a token id nor a token (${TOKEN_PREFIX}…)`);
        const id = Number(idOrToken);
        record = Number.isSafeInteger(id) ? await getToken(await db(), id) : undefined;
        if (!record) throw new CliError(`no token with id ${idOrToken}`);
      } else if (o.user && o.name) {
        const u = await requireUser(await db(), o.user);
        const id = await revokeTokenByName(await db(), u.id, o.name, now());
        if (id === undefined) throw new CliError(`${o.user} has no active token named "${o.name}"`);
        await dropPiiScope(await db(), tokenScopeRef(u.id, id));
        return ctx.out(`Revoked token "${o.name}" of ${o.user}.`);
      } else {
        throw new CliError('say which token: sandgate tokens revoke <id>, or --user <name> --name <token name>');
      }
      if (record.revokedAt !== null) return ctx.out(`Token ${record.id} ("${record.name}" of ${record.userName}) was already revoked at ${iso(record.revokedAt)}.`);
      await revokeToken(await db(), record.id, { now: now() });
      // What this token's client was shown is forgotten with it.
      await dropPiiScope(await db(), tokenScopeRef(record.userId, record.id));
      ctx.out(`Revoked token ${record.id} ("${record.name}" of ${record.userName}).`);
    });

  // ---------------------------------------------------------------- sandboxes
  const sandboxes = program.command('sandboxes').description('Running sandboxes (one per user)');
  sandboxes
    .command('list')
    .description('List this gateway’s sandbox containers')
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }) => {
      const list = await listSandboxes(ctx.driver(), await db());
      if (o.json) return ctx.out(JSON.stringify(list, null, 2));
      if (!list.length) return ctx.out('No sandboxes.');
      ctx.out(table(['USER', 'CONTAINER', 'STATE', 'CREATED'], list.map((s) => [s.user ?? '(warm pool)', s.container.slice(0, 12), s.running ? 'running' : 'stopped', iso(s.createdAt)])));
    });
  sandboxes
    .command('stop')
    .description('Stop a user’s sandbox now (running code is killed; /workspace is kept; the next run starts a fresh one)')
    .argument('<user>', 'login name')
    .action(async (name: string) => {
      const u = await requireUser(await db(), name);
      const stopped = await stopUserSandbox(ctx.driver(), await db(), u);
      ctx.out(stopped ? `Stopped ${stopped} sandbox container(s) of ${u.name}.` : `${u.name} has no running sandbox.`);
    });

  // ---------------------------------------------------------------- workspace stores
  const stores = program.command('stores').description('Workspace stores: where users’ files are kept (one per host that keeps them on its own disk)');
  const storeTimes = () => ({ leaseMs: ctx.replicaLeaseMs ?? configFor().replicaLeaseMs, lostMs: ctx.hostLostSec === undefined ? undefined : ctx.hostLostSec * 1000, now: now() });
  stores
    .command('list')
    .description('List the workspace stores the database knows of: their gateways, and what each holds')
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }) => {
      const list = await listWorkspaceStores(await db(), storeTimes());
      if (o.json) return ctx.out(JSON.stringify(list, null, 2));
      if (!list.length) return ctx.out('No workspace stores yet: one is recorded when a gateway on Postgres starts.');
      ctx.out(
        table(
          ['STORE', 'STATE', 'LAST SEEN', 'GATEWAYS', 'USERS', 'COPIES', 'OF DELETED USERS'],
          list.map((r) => [r.id, r.state, iso(r.seenAt), r.gateways.map((g) => `${g.id}@${g.sandboxHost}${g.draining ? ' (stopping)' : ''}`).join(', ') || '-', String(r.users), String(r.copies), String(r.deletedCopies)]),
        ),
      );
    });
  stores
    .command('forget')
    .description('Forget a lost workspace store whose host is retired for good: its users’ next runs start with empty workspaces, as they would anyway')
    .argument('<store>', 'its id, as `sandgate stores list` shows it')
    .action(async (id: string) => {
      const gone = await forgetWorkspaceStore(await db(), id, storeTimes()).catch((e: unknown) => {
        throw e instanceof StoreNotForgotten ? new CliError(e.message) : e;
      });
      ctx.out(
        `Forgot workspace store ${id}: ${gone.copies} workspace copies (${gone.deletedCopies} of deleted users), and ${gone.users} users’ record that their files are there. ` +
          'If its host does come back, its gateway records what it holds when it starts, and removes the deleted users’ files.',
      );
    });

  // ---------------------------------------------------------------- provider keys
  const keys = program.command('provider-keys').description('Users’ own API keys for model providers (write-only; used instead of the team key for that user)');
  keys
    .command('set')
    .description('Store a user’s key for a provider, read from standard input (never echoed, never shown again)')
    .requiredOption('--user <name>', 'login name')
    .addOption(new Option('--provider <provider>', 'model provider').choices([...KEYED_PROVIDERS]).makeOptionMandatory())
    .action(async (o: { user: string; provider: string }) => {
      const u = await requireUser(await db(), o.user);
      const value = (await ctx.readSecret()).trim();
      if (!value) throw new CliError('no key on standard input: pipe it in, e.g. sandgate provider-keys set --user alice --provider openai < key.txt');
      await new ProviderKeys(await db(), ctx.dataDir).set(u.id, o.provider, value);
      ctx.out(`Stored ${u.name}’s ${o.provider} key. Their requests to ${o.provider} use it from now on.`);
    });
  keys
    .command('delete')
    .description('Delete a user’s key for a provider (the team key applies again, if there is one)')
    .requiredOption('--user <name>', 'login name')
    .addOption(new Option('--provider <provider>', 'model provider').choices([...KEYED_PROVIDERS]).makeOptionMandatory())
    .action(async (o: { user: string; provider: string }) => {
      const u = await requireUser(await db(), o.user);
      const gone = await new ProviderKeys(await db(), ctx.dataDir).delete(u.id, o.provider);
      ctx.out(gone ? `Deleted ${u.name}’s ${o.provider} key.` : `${u.name} has no ${o.provider} key.`);
    });
  keys
    .command('list')
    .description('Which providers a user has a key for (never the keys)')
    .requiredOption('--user <name>', 'login name')
    .action(async (o: { user: string }) => {
      const u = await requireUser(await db(), o.user);
      const list = await new ProviderKeys(await db(), ctx.dataDir).list(u.id);
      if (!list.length) return ctx.out(`${u.name} has no provider keys.`);
      ctx.out(table(['PROVIDER', 'SET'], list.map((k) => [k.provider, iso(k.updatedAt)])));
    });

  // ---------------------------------------------------------------- audit
  program
    .command('audit')
    .description('A user’s audit log: MCP requests and upstream calls (argument shapes, never values)')
    .requiredOption('--user <name>', 'login name')
    .addOption(new Option('--limit <n>', 'entries to show').default(50).argParser((v) => Number.parseInt(v, 10)))
    .option('--json', 'print JSON')
    .action(async (o: { user: string; limit: number; json?: boolean }) => {
      const u = await requireUser(await db(), o.user);
      const entries = await listAudit(await db(), u.id, { limit: o.limit });
      if (o.json) return ctx.out(JSON.stringify(entries, null, 2));
      if (!entries.length) return ctx.out(`No audit entries for ${u.name}.`);
      ctx.out(
        table(
          ['TIME', 'TOKEN', 'KIND', 'METHOD', 'TOOL', 'MS', 'OUTCOME', 'ARGS'],
          entries.map((e) => [iso(e.ts), e.tokenName ?? '-', e.kind, e.method, e.tool ?? '-', String(Math.round(e.durationMs)), e.errorClass ? `${e.outcome} (${e.errorClass})` : e.outcome, e.argsShape ? JSON.stringify(e.argsShape) : '-']),
        ),
      );
    });

  // ---------------------------------------------------------------- data
  const dbCommand = program.command('db').description('The store: where sandgate keeps its data');
  dbCommand
    .command('copy')
    .description('Copy the SQLite store into an empty Postgres database, all or nothing (stop the gateway first); run again, it checks that both hold the same rows')
    .requiredOption('--to <url>', "the Postgres database, postgres://user:password@host:5432/database; '-' reads it from standard input (keeps the password off the command line)")
    .action(async (o: { to: string }) => {
      const url = o.to === '-' ? (await ctx.readSecret()).trim() : o.to;
      if (!/^postgres(ql)?:\/\/./.test(url)) throw new CliError('--to takes a postgres:// URL, e.g. postgres://sandgate:secret@db.example.com:5432/sandgate');
      if (!ctx.openStoreAt) throw new CliError('this command line cannot open another database');
      const source = await store();
      if (source.dialect !== 'sqlite') throw new CliError(`the store is already on Postgres (${source.location}): db copy moves a SQLite store; unset SANDGATE_DATABASE_URL to copy the file in ${ctx.dataDir}`);
      const target = await ctx.openStoreAt(url);
      try {
        ctx.out(`Copying ${source.location} into ${target.location} (schema version ${target.version}).`);
        const rows: string[][] = [];
        const result = await copyStore(source, target, (c) => rows.push([c.table, String(c.source), String(c.target), String(c.copied), c.same ? 'yes' : 'NO']));
        ctx.out(table(['TABLE', 'SQLITE', 'POSTGRES', 'COPIED NOW', 'SAME ROWS'], rows));
        const off = result.tables.filter((t) => !t.same).map((t) => `${t.table} (${t.source} rows here, ${t.target} there)`);
        if (result.compared && !result.ok) {
          throw new CliError(`the Postgres database is not empty and differs from this store in ${off.join(', ')}: nothing was copied. Copy into an empty database made for sandgate.`);
        }
        if (!result.ok) throw new CliError(`after the copy, ${off.join(', ')} differ: the gateway may have written while copying. Stop it, empty the Postgres database and copy again.`);
        ctx.out(
          result.compared
            ? 'The Postgres database already holds exactly the rows of this store: nothing to copy.'
            : 'Done: every table holds the same rows on both sides.',
        );
        ctx.out(`Set SANDGATE_DATABASE_URL to this database and start the gateway; ${ctx.dataDir}/sandgate.db is no longer read.`);
      } finally {
        await target.close();
      }
    });

  program
    .command('backup')
    .description('Copy the store (SQLite), the key files and every workspace into DIR while the gateway runs')
    .argument('<dir>', 'a new or empty directory')
    .action(async (dir: string) => {
      // As it is: a backup copies what the running gateway has, never upgrades it first.
      const live = await ctx.openStore({ migrate: false });
      try {
        const m = await backup(live, ctx.dataDir, path.resolve(dir), ctx.out).catch(asCliError);
        ctx.out(`Backup of ${ctx.dataDir} written to ${path.resolve(dir)} (${m.files.length} files, ${m.workspaces.length} workspaces).`);
      } finally {
        await live.close();
      }
    });
  program
    .command('restore')
    .description('Put a backup made by `sandgate backup` into the data directory, which must be empty (stop the gateway first)')
    .argument('<dir>', 'the backup')
    .action(async (dir: string) => {
      await restore(path.resolve(dir), ctx.dataDir, ctx.out).catch(asCliError);
    });

  return program;
}

/** A backup's refusal is the operator's to fix: no stack trace. */
function asCliError(e: unknown): never {
  throw e instanceof BackupError ? new CliError(e.message) : e;
}

/**
 * Runs one command line. Returns the exit code: 0 done, 1 a failure the message
 * explains, 2 a usage error.
 */
export async function runCli(argv: string[], ctx: CliContext): Promise<number> {
  let opening: Promise<Store> | undefined;
  const program = buildProgram(ctx, () => (opening ??= ctx.openStore()));
  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (e) {
    if (e instanceof CommanderError) return e.exitCode === 0 ? 0 : 2;
    // Our own errors say what to do; anything else is a bug: its stack helps whoever reports it.
    ctx.err(`sandgate: ${(e as Error).message}`);
    if (!(e instanceof GatewayError)) ctx.err((e as Error).stack ?? '');
    return e instanceof GatewayError && e.reason === 'config_invalid' ? 2 : 1;
  } finally {
    // A store that failed to open has nothing to close; its error was reported above.
    if (opening) await opening.then((s) => s.close()).catch(() => {});
  }
}
