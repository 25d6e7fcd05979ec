/**
 * `sandgate backup` while the gateway works, then `sandgate restore` into an empty data
 * directory and a second gateway on it: every user, token, conversation and workspace
 * file that existed when the backup began is there, and works. Real gateway, real
 * sandboxes and loop-mounted workspaces; the commands run as the CLI runs them.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, type CliContext } from '../src/cli/program.js';
import { configFor, type Config } from '../src/config.js';
import { createLogger } from '../src/logger.js';
import { createDriver } from '../src/sandboxes/index.js';
import { openStore } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';
import { ensureUser, listUsers } from '../src/accounts/accounts.js';
import { createToken, verifyToken } from '../src/tokens/tokens.js';
import { addMessage, createConversation, listConversations, messagesOf } from '../src/agent/conversations.js';
import { callTool, startGateway, toolText, type Gateway } from './support/mcp.js';

let gw: Gateway | undefined;
let restored: Gateway | undefined;

afterAll(async () => {
  await restored?.close();
  await gw?.close();
});

async function connect(url: string, token: string): Promise<Client> {
  const client = new Client({ name: 'sandgate-backup-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return client;
}

/** Runs the command line as `sandgate` would with these settings. */
async function cli(config: Config, ...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const ctx: CliContext = {
    openStore: (opts = {}) => openStore({ ...config, ...opts }, MIGRATIONS),
    dataDir: config.dataDir,
    publicUrl: config.publicUrl,
    readSecret: async () => '',
    driver: () => createDriver(config, createLogger('silent')),
    out: (s) => out.push(s),
    err: (s) => err.push(s),
  };
  const code = await runCli(argv, ctx);
  return { code, out: out.join('\n'), err: err.join('\n') };
}

const run = (client: Client, code: string) => callTool<unknown>(client, 'execute_code', { language: 'python', code }).then(toolText);

describe('backup and restore', () => {
  let alice: Client;
  let token: string;
  beforeAll(async () => {
    // The load below runs as fast as the host allows: no rate limit is under test here.
    gw = await startGateway({ pii: true, env: { SANDGATE_RATE_LIMIT_PER_MIN: '1000000', SANDGATE_RATE_LIMIT_BURST: '100000' } });
    token = await gw.tokenFor('alice', 'laptop');
    alice = await connect(gw.mcpUrl, token);
    expect(await run(alice, "open('/workspace/notes.txt', 'w').write('kept through a backup'); print('ok')")).toContain('ok');
  });

  it('takes a backup under load and restores every user, token, conversation and file', async () => {
    const db = gw!.gateway.store.db;
    const owner = (await listUsers(db)).find((u) => u.name === 'alice')!;
    const chat = await createConversation(db, { userId: owner.id, model: 'openai:gpt-5', source: 'web', title: 'Before the backup' });
    await addMessage(db, { conversationId: chat.id, message: { role: 'user', content: 'remember this' } });

    // Load: new users with a token and a conversation each, and runs writing files, until told to stop.
    let stop = false;
    const made: { name: string; token: string; conversation: string }[] = [];
    const writers = (async () => {
      for (let i = 0; !stop; i++) {
        const u = await ensureUser(db, `load-${i}`);
        const t = await createToken(db, { userId: u.id, name: 'load' });
        const c = await createConversation(db, { userId: u.id, model: 'openai:gpt-5', source: 'api' });
        await addMessage(db, { conversationId: c.id, message: { role: 'user', content: `message ${i}` } });
        made.push({ name: u.name, token: t.token, conversation: c.id });
        // SQLite answers at once: without a turn of the event loop, this loop would starve the gateway.
        await new Promise((r) => setImmediate(r));
      }
    })();
    const runs = (async () => {
      for (let i = 0; !stop; i++) await run(alice, `open('/workspace/load-${i}.txt', 'w').write('x' * 10000)`);
    })();
    await new Promise((r) => setTimeout(r, 1500));

    // Everything made before the backup begins must be in it.
    const before = [...made];
    const storeId = fs.readFileSync(path.join(gw!.harness.config.dataDir, 'workspaces', '.store-id'), 'utf8');
    const dir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-backups-')), 'one');
    const taken = await cli(gw!.harness.config, 'backup', dir);
    expect(taken.err).toBe('');
    expect(taken.code).toBe(0);
    expect(taken.out).toMatch(/written to .* \(\d+ files, 1 workspaces\)/);
    stop = true;
    await Promise.all([writers, runs]);
    expect(before.length).toBeGreaterThan(3);
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    for (const f of ['sandgate.db', 'pii.key', 'provider-keys.key', 'manifest.json']) expect(fs.statSync(path.join(dir, f)).mode & 0o777, f).toBe(0o600);

    // A backup goes into a new or empty directory only.
    const again = await cli(gw!.harness.config, 'backup', dir);
    expect(again.code).toBe(1);
    expect(again.err).toMatch(/is not empty: back up into a new or empty directory/);
    await alice.close();
    await gw!.close();
    gw = undefined;

    // Restore into an empty data directory, then start a gateway on it.
    const target = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-restored-'));
    const back = await cli(configFor({ SANDGATE_DATA_DIR: target }), 'restore', dir);
    expect(back.code, back.err).toBe(0);
    expect(back.out).toMatch(/restored \d+ files and 1 workspaces/);
    // The same workspace store as before: where the database says the users' files are.
    expect(fs.readFileSync(path.join(target, 'workspaces', '.store-id'), 'utf8')).toBe(storeId);
    // Not into one that holds anything.
    const refused = await cli(configFor({ SANDGATE_DATA_DIR: target }), 'restore', dir);
    expect(refused.err).toMatch(/is not empty: restore into an empty data directory/);

    restored = await startGateway({ dataDir: target, env: { SANDGATE_DATABASE_URL: '' } });
    const rdb = restored.gateway.store.db;
    const names = new Set((await listUsers(rdb)).map((u) => u.name));
    for (const m of before) {
      expect(names.has(m.name), m.name).toBe(true);
      expect((await verifyToken(rdb, m.token)).ok, m.name).toBe(true);
      expect((await messagesOf(rdb, m.conversation)).length, m.conversation).toBe(1);
    }
    const chats = await listConversations(rdb, owner.id);
    expect(chats.map((c) => c.title)).toContain('Before the backup');
    expect((await messagesOf(rdb, chat.id))[0]!.message.content).toBe('remember this');

    // Alice's token still works, and her workspace file is there.
    const client = await connect(restored.mcpUrl, token);
    expect(await run(client, "print(open('/workspace/notes.txt').read())")).toContain('kept through a backup');
    await client.close();
  });
});
