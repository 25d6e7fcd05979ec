/**
 * A data directory made by the last release of the synchronous SQLite store (schema
 * version 17, test/fixtures/data-v17) opens with today's code and keeps everything. In
 * the postgres project the upgraded store is then copied into Postgres (`sandgate db
 * copy`), a second copy finds nothing left to do, and the same checks run there.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MIGRATIONS } from '../migrations.js';
import { openStore, type Store } from './store.js';
import { copyStore } from './copy.js';
import { listUsers, findUser } from '../accounts/accounts.js';
import { verifyToken, listTokens } from '../tokens/tokens.js';
import { getConversation, messagesOf, turnsOf } from '../agent/conversations.js';
import { ProviderKeys } from '../agent/provider-keys.js';
import { listAudit } from '../audit/audit.js';
import { loginLinkUsable } from '../auth/login-links.js';
import { loadSession } from '../auth/sessions.js';
import { createCredentialStore, loadOrCreateCredentialsKey } from '../upstream/credentials.js';
import { sandboxRecord } from '../sandboxes/records.js';
import { PiiVault } from '../pii/vault.js';
import { loadOrCreatePiiKey } from '../pii/keys.js';
import { createDetector } from '../pii/detector.js';
import { conversationScopeRef } from '../pii/scopes.js';
import { REPO_ROOT } from '../paths.js';
import { testDatabaseUrl } from '../../test/support/postgres.js';

const FIXTURE = path.join(REPO_ROOT, 'test/fixtures/data-v17');
const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';

interface Expected {
  version: number;
  tokens: { alice: string; bob: string };
  conversations: { web: string; api: string };
  loginLink: string;
  pii: { text: string; conversation: string };
}

describe('a data directory from schema version 17', () => {
  let dataDir: string;
  let sqlite: Store;
  let store: Store;
  const expected = JSON.parse(fs.readFileSync(path.join(FIXTURE, 'expected.json'), 'utf8')) as Expected;

  beforeAll(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-upgrade-'));
    fs.cpSync(FIXTURE, dataDir, { recursive: true });
    // git keeps no file modes but the executable bit: the keys come out 0644, which the gateway refuses.
    for (const f of fs.readdirSync(dataDir)) fs.chmodSync(path.join(dataDir, f), 0o600);
    sqlite = await openStore({ dataDir }, MIGRATIONS);
    store = sqlite;
    if (onPostgres) {
      store = await openStore({ dataDir, databaseUrl: await testDatabaseUrl() }, MIGRATIONS);
      const first = await copyStore(sqlite, store);
      expect(first.ok).toBe(true);
      expect(first.tables.find((t) => t.table === 'users')).toMatchObject({ source: 2, target: 2, copied: 2 });
      // Run again (as after an interruption): nothing is missing, nothing is copied twice.
      const again = await copyStore(sqlite, store);
      expect(again.ok).toBe(true);
      expect(again.tables.every((t) => t.copied === 0)).toBe(true);
    }
  });
  afterAll(async () => {
    if (store !== sqlite) await store?.close();
    await sqlite?.close();
  });

  it('is migrated to the current version', () => {
    expect(expected.version).toBe(17);
    expect(store.version).toBe(MIGRATIONS.length);
  });

  it('keeps both users with their settings', async () => {
    const users = await listUsers(store.db);
    expect(users.map((u) => u.name).sort()).toEqual(['alice', 'bob']);
    const alice = (await findUser(store.db, 'alice'))!;
    const bob = (await findUser(store.db, 'bob'))!;
    expect(alice.isAdmin).toBe(true);
    expect(alice.workspaceId).toBe('ws-alice-0001');
    expect(JSON.parse(bob.permissions!)).toEqual({ net: false, timeoutMs: 30000 });
    expect(bob.githubId).toBe(424242);
    expect(bob.defaultModel).toBe('anthropic:claude-sonnet-4-5');
  });

  it('keeps the API tokens working', async () => {
    const alice = (await findUser(store.db, 'alice'))!;
    const a = await verifyToken(store.db, expected.tokens.alice);
    const b = await verifyToken(store.db, expected.tokens.bob);
    expect(a.ok && a.principal.user.id).toBe(alice.id);
    expect(b.ok && b.principal.user.name).toBe('bob');
    expect((await listTokens(store.db, { userId: alice.id })).map((t) => t.name)).toEqual(['laptop']);
  });

  it('keeps conversations, turns and messages', async () => {
    const alice = (await findUser(store.db, 'alice'))!;
    const bob = (await findUser(store.db, 'bob'))!;
    const web = await getConversation(store.db, alice.id, expected.conversations.web);
    expect(web.title).toBe('Plot the sales');
    const messages = await messagesOf(store.db, web.id);
    expect(messages.map((m) => m.message.role)).toEqual(['user', 'assistant']);
    expect((await turnsOf(store.db, web.id)).map((t) => t.status)).toEqual(['complete']);
    const api = await getConversation(store.db, bob.id, expected.conversations.api);
    expect((await messagesOf(store.db, api.id)).map((m) => m.message.content)).toEqual(['hello from the API']);
  });

  it('keeps the sealed secrets readable with the keys beside them', async () => {
    const alice = (await findUser(store.db, 'alice'))!;
    expect(await new ProviderKeys(store.db, dataDir).get(alice.id, 'anthropic')).toBe('sk-ant-fixture-0001');
    expect(await createCredentialStore(store.db, loadOrCreateCredentialsKey(dataDir)).get(alice.id, 'github')).toEqual({ GITHUB_TOKEN: 'ghp_fixture0001' });
    const vault = new PiiVault(store.db, loadOrCreatePiiKey(dataDir), { ttlMs: 10 * 365 * 86_400_000, detector: createDetector() });
    const scope = await vault.scope(conversationScopeRef(alice.id, expected.pii.conversation));
    const back = await scope.detokenize(expected.pii.text);
    expect(back.text).toBe('Mail jane.doe@example.com or call +1 415 555 0134.');
    expect(back.unknown).toEqual([]);
  });

  it('keeps the audit log, the sign-in link, the session and the sandbox record', async () => {
    const alice = (await findUser(store.db, 'alice'))!;
    const bob = (await findUser(store.db, 'bob'))!;
    expect((await listAudit(store.db, alice.id)).map((r) => [r.kind, r.tool, r.outcome])).toEqual([['mcp', 'execute_code', 'ok']]);
    expect((await listAudit(store.db, bob.id)).map((r) => [r.kind, r.outcome])).toEqual([['web', 'denied']]);
    expect(await loginLinkUsable(store.db, expected.loginLink)).toBe(true);
    expect((await loadSession(store.db, 'fixture-session-id'))?.userId).toBe(alice.id);
    expect(await sandboxRecord(store.db, alice.id)).toMatchObject({ containerId: 'c0ffee000000', executions: 3 });
  });

  it('goes on numbering after the copied rows', async () => {
    // A new row after an upgrade (and, on Postgres, after a copy that kept the ids) gets a fresh id.
    const { ensureUser } = await import('../accounts/accounts.js');
    const carol = await ensureUser(store.db, 'carol');
    const ids = (await listUsers(store.db)).map((u) => u.id);
    expect(new Set(ids).size).toBe(3);
    expect(carol.id).toBe(Math.max(...ids));
  });
});
