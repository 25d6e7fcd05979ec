/**
 * An upgrade keeps everything: a copy of an install written by an earlier release
 * (test/fixtures/upgrade/96f796d, made by scripts/make-upgrade-fixture.ts) is started with
 * today's gateway and its real migrations. The schema steps it lacks run once; its admin,
 * its API tokens (and the revoked one's refusal), the user's ceiling, workspace file,
 * conversation, sealed provider key and upstream credential, and the audit log are all
 * there and work over HTTP; a second start changes nothing. The sqlite project upgrades
 * the SQLite install; the postgres project restores the release's Postgres database (plain
 * SQL) into a fresh one and upgrades that. Real gateway, real sandboxes.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findUser, listUsers } from '../src/accounts/accounts.js';
import { getConversation, messagesOf, turnsOf } from '../src/agent/conversations.js';
import { ProviderKeys } from '../src/agent/provider-keys.js';
import { queryAudit, recordAudit } from '../src/audit/audit.js';
import { auditEgressMigration } from '../src/audit/schema.js';
import { MIGRATIONS, versionOf } from '../src/migrations.js';
import { REPO_ROOT } from '../src/paths.js';
import { SANDBOX_GID, SANDBOX_UID } from '../src/sandboxes/workspace.js';
import { openStore, type Store } from '../src/store/store.js';
import { verifyToken } from '../src/tokens/tokens.js';
import { createCredentialStore, loadOrCreateCredentialsKey } from '../src/upstream/credentials.js';
import type { UpgradeFixture } from '../scripts/make-upgrade-fixture.js';
import { executeOverMcp } from './support/gateway-process.js';
import { rawRequest, startGateway, type Gateway } from './support/mcp.js';
import { testDatabaseUrl } from './support/postgres.js';
import { modernRequest } from './support/raw-request.js';
import { webSession } from './support/web-session.js';

const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';
const FIXTURE = path.join(REPO_ROOT, 'test/fixtures/upgrade/96f796d');
const kind = onPostgres ? 'postgres' : 'sqlite';
const expected = JSON.parse(fs.readFileSync(path.join(FIXTURE, `${kind}.json`), 'utf8')) as UpgradeFixture;
/** The tables whose rows the release wrote. */
const TABLES = ['users', 'api_tokens', 'conversations', 'turns', 'messages', 'provider_keys', 'upstream_credentials', 'audit_log'];

/** Puts the release's Postgres database (plain SQL, as pg_dump wrote it) into the empty database at `url`. */
async function restoreDump(url: string, file: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(fs.readFileSync(file, 'utf8'));
  } finally {
    await client.end();
  }
}

/** The schema as the database itself describes it, and the rows of each table the release wrote. */
async function snapshot(store: Store): Promise<unknown> {
  const schema =
    store.dialect === 'sqlite'
      ? (await sql`SELECT type, name, sql FROM sqlite_master ORDER BY type, name`.execute(store.db)).rows
      : [
          (await sql`SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position`.execute(store.db)).rows,
          (await sql`SELECT conrelid::regclass::text AS "table", conname, pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2`.execute(store.db)).rows,
          (await sql`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname`.execute(store.db)).rows,
        ];
  const rows: Record<string, number> = {};
  for (const t of TABLES) rows[t] = Number((await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${sql.table(t)}`.execute(store.db)).rows[0]!.n);
  return { version: store.version, schema, rows };
}

describe(`an install made by ${expected.commit}, on ${kind}`, () => {
  let dataDir: string;
  let databaseUrl = '';
  let versionBefore: number;
  let gw: Gateway | undefined;
  const env = () => ({ SANDGATE_WORKSPACE_BACKEND: 'directory', ...(databaseUrl && { SANDGATE_DATABASE_URL: databaseUrl }) });

  beforeAll(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-upgrade-'));
    fs.cpSync(path.join(FIXTURE, kind), dataDir, { recursive: true });
    // git keeps no owners and no modes but the executable bit: the keys go back to 0600
    // (the gateway refuses others), the workspace to the sandbox's user, as the release left them.
    for (const f of fs.readdirSync(dataDir)) if (f.endsWith('.key') || f === 'sandgate.db') fs.chmodSync(path.join(dataDir, f), 0o600);
    for (const f of fs.readdirSync(path.join(dataDir, 'workspaces'), { recursive: true, encoding: 'utf8' })) fs.chownSync(path.join(dataDir, 'workspaces', f), SANDBOX_UID, SANDBOX_GID);
    if (onPostgres) {
      databaseUrl = await testDatabaseUrl();
      await restoreDump(databaseUrl, path.join(FIXTURE, 'postgres.sql'));
    }
    const before = await openStore({ dataDir, databaseUrl, migrate: false }, MIGRATIONS);
    versionBefore = before.version;
    await before.close();
    gw = await startGateway({ dataDir, env: env() });
  });
  afterAll(async () => {
    await gw?.close();
  });

  it('runs the steps the release lacked, the egress audit step among them', async () => {
    expect(versionBefore).toBe(expected.version);
    expect(versionBefore).toBeLessThan(versionOf(auditEgressMigration));
    expect(gw!.gateway.store.version).toBe(MIGRATIONS.length);
    // What that step allows: an audit row of kind egress, beside the release's rows.
    const alice = (await findUser(gw!.gateway.store.db, expected.user.name))!;
    await recordAudit(gw!.gateway.store.db, { userId: alice.id, kind: 'egress', method: 'connect', tool: 'pypi.org/443', durationMs: 3, outcome: 'ok' });
    expect((await queryAudit(gw!.gateway.store.db, { kind: 'egress' })).map((r) => r.tool)).toEqual(['pypi.org/443']);
  });

  it('keeps the users, the admin and the user’s ceiling', async () => {
    const db = gw!.gateway.store.db;
    expect((await listUsers(db)).map((u) => u.name).sort()).toEqual([expected.admin.name, expected.user.name]);
    const alice = (await findUser(db, expected.user.name))!;
    expect((await findUser(db, expected.admin.name))!.isAdmin).toBe(true);
    expect(alice.isAdmin).toBe(false);
    expect(alice.defaultModel).toBe(expected.user.defaultModel);
    expect(alice.permissions).toBe(expected.user.permissions);
    // Over HTTP: the admin's old token opens the admin API, the user's does not.
    const users = await fetch(`${gw!.url}/admin/api/users`, { headers: { authorization: `Bearer ${expected.admin.token}` } });
    expect(users.status).toBe(200);
    const listed = ((await users.json()) as { users: { name: string; isAdmin: boolean; permissions: string }[] }).users;
    expect(listed.find((u) => u.name === expected.admin.name)?.isAdmin).toBe(true);
    expect(listed.find((u) => u.name === expected.user.name)).toMatchObject({ isAdmin: false, permissions: expected.user.permissions });
    const refused = await fetch(`${gw!.url}/admin/api/users`, { headers: { authorization: `Bearer ${expected.user.token}` } });
    expect(refused.status).toBe(403);
  });

  it('keeps the audit log', async () => {
    const db = gw!.gateway.store.db;
    const names = new Map((await listUsers(db)).map((u) => [u.id, u.name]));
    const kept = (await queryAudit(db, { until: expected.madeAt + 1, limit: 1000 })).reverse();
    expect(kept.map((r) => [names.get(r.userId), r.kind, r.method, r.tool, r.outcome])).toEqual(expected.audit);
    // And the admin reads it over HTTP with the old token.
    const csv = await fetch(`${gw!.url}/admin/audit.csv`, { headers: { authorization: `Bearer ${expected.admin.token}` } });
    expect(csv.status).toBe(200);
    const text = await csv.text();
    for (const [, , method, tool] of expected.audit) expect(text).toContain(tool ?? method);
  });

  it('takes the old API tokens over HTTP, and refuses the revoked and the wrong one', async () => {
    const db = gw!.gateway.store.db;
    expect((await verifyToken(db, expected.user.token)).ok).toBe(true);
    const listed = await modernRequest(gw!.mcpUrl, expected.user.token, 'tools/list', {});
    expect((listed.result?.tools as { name: string }[]).map((t) => t.name)).toContain('execute_code');
    for (const token of [expected.user.revokedToken, `${expected.user.token.slice(0, -4)}AAAA`]) {
      const r = await rawRequest(gw!.mcpUrl, {
        headers: { authorization: `Bearer ${token}`, 'mcp-protocol-version': '2025-06-18' },
        body: { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} },
      });
      expect(r.status, token).toBe(401);
    }
  });

  it('keeps the workspace, in the sandbox too, under the user’s ceiling', async () => {
    const { token } = expected.user;
    const read = await modernRequest(gw!.mcpUrl, token, 'tools/call', { name: 'read_file', arguments: { path: expected.workspace.path } });
    expect((read.result?.content as { text: string }[])[0]!.text).toContain(expected.workspace.content.trim());
    const run = await executeOverMcp(gw!.url, token, `print(open('/workspace/${expected.workspace.path}').read())`);
    expect(run).toEqual({ ok: true, text: expect.stringContaining('Kept through an upgrade.') as string });
    // The ceiling the admin set lets her write under /workspace/out only.
    const inside = await modernRequest(gw!.mcpUrl, token, 'tools/call', { name: 'write_file', arguments: { path: 'out/after.txt', content: 'after the upgrade' } });
    expect(inside.result?.isError).toBeFalsy();
    const outside = await modernRequest(gw!.mcpUrl, token, 'tools/call', { name: 'write_file', arguments: { path: 'elsewhere.txt', content: 'no' } });
    expect(outside.result?.isError).toBe(true);
  });

  it('shows the conversation and its messages on the user’s chat page', async () => {
    const db = gw!.gateway.store.db;
    const alice = (await findUser(db, expected.user.name))!;
    const { id, title, messages } = expected.conversation;
    expect((await getConversation(db, alice.id, id)).title).toBe(title);
    expect((await messagesOf(db, id)).map((m) => m.message.role)).toEqual(messages.map((m) => m.role));
    expect((await turnsOf(db, id)).map((t) => t.status)).toEqual(['complete']);
    const web = await webSession(gw!, alice);
    const index = await web.get('/chat', { htmx: false });
    expect(index.status).toBe(200);
    expect(await index.text()).toContain(title);
    const page = await web.get(`/c/${id}`, { htmx: false });
    expect(page.status).toBe(200);
    const html = await page.text();
    for (const m of messages) expect(html).toContain(m.text);
    // Nobody else's: the admin is answered as for a conversation that does not exist.
    const admin = (await findUser(db, expected.admin.name))!;
    expect((await (await webSession(gw!, admin)).get(`/c/${id}`, { htmx: false })).status).toBe(404);
  });

  it('opens the sealed provider key and upstream credential with the keys beside them', async () => {
    const db = gw!.gateway.store.db;
    const alice = (await findUser(db, expected.user.name))!;
    for (const f of ['provider-keys.key', 'upstream.key']) expect(fs.existsSync(path.join(dataDir, f)), f).toBe(true);
    expect(await new ProviderKeys(db, dataDir).get(alice.id, 'anthropic')).toBe(expected.providerKey.value);
    const credentials = createCredentialStore(db, loadOrCreateCredentialsKey(dataDir));
    expect(await credentials.get(alice.id, expected.credential.server)).toEqual({ [expected.credential.name]: expected.credential.value });
  });

  it('changes nothing when started again', async () => {
    await gw!.close({ keepData: true });
    gw = undefined;
    const first = await openStore({ dataDir, databaseUrl, migrate: false }, MIGRATIONS);
    const before = await snapshot(first);
    await first.close();
    gw = await startGateway({ dataDir, env: env() });
    expect(gw.gateway.store.version).toBe(MIGRATIONS.length);
    expect(await snapshot(gw.gateway.store)).toEqual(before);
    expect((await modernRequest(gw.mcpUrl, expected.user.token, 'tools/list', {})).result).toBeDefined();
  });
});
