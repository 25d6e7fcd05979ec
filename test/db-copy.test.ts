/**
 * `sandgate db copy --to postgres://…`: the move from the SQLite file to Postgres, as the
 * command line runs it. Runs in the postgres project (it needs a server); the sqlite
 * project skips it.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli, type CliContext } from '../src/cli/program.js';
import { openStore, type StoreOptions } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';
import { ensureUser, listUsers } from '../src/accounts/accounts.js';
import { createToken, verifyToken } from '../src/tokens/tokens.js';
import { addMessage, createConversation, messagesOf } from '../src/agent/conversations.js';
import { recordAudit } from '../src/audit/audit.js';
import { storeUsage } from '../src/limits/store-quota.js';
import { testDatabaseUrl } from './support/postgres.js';

const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';

async function cli(source: StoreOptions & { stdin?: string }, ...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const ctx: CliContext = {
    openStore: () => openStore(source, MIGRATIONS),
    openStoreAt: (url) => openStore({ ...source, databaseUrl: url }, MIGRATIONS),
    dataDir: source.dataDir,
    publicUrl: 'http://127.0.0.1:8787',
    readSecret: async () => source.stdin ?? '',
    driver: () => {
      throw new Error('no sandboxes here');
    },
    out: (s) => out.push(s),
    err: (s) => err.push(s),
  };
  const code = await runCli(argv, ctx);
  return { code, out: out.join('\n'), err: err.join('\n') };
}

describe.skipIf(!onPostgres)('sandgate db copy', () => {
  it('moves a SQLite install into an empty Postgres database, and a second run copies nothing', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-copy-'));
    const lite = await openStore({ dataDir }, MIGRATIONS);
    const tokens: string[] = [];
    const chats: string[] = [];
    // Enough rows for several batches in the busiest tables.
    for (let i = 0; i < 30; i++) {
      const u = await ensureUser(lite.db, `user-${i}`);
      tokens.push((await createToken(lite.db, { userId: u.id, name: 'laptop' })).token);
      const c = await createConversation(lite.db, { userId: u.id, model: 'openai:gpt-5', source: 'web', title: `chat ${i}` });
      chats.push(c.id);
      for (let m = 0; m < 40; m++) await addMessage(lite.db, { conversationId: c.id, message: { role: m % 2 ? 'assistant' : 'user', content: `message ${m} ` + 'x'.repeat(m) } });
      await recordAudit(lite.db, { userId: u.id, kind: 'web', method: 'chat', durationMs: 1, outcome: 'ok' });
    }
    const usage = await storeUsage(lite.db, { storeQuotaMb: 256 }, 1);
    expect(usage.web).toBeGreaterThan(1000);
    await lite.close();

    const url = await testDatabaseUrl();
    const first = await cli({ dataDir }, 'db', 'copy', '--to', url);
    expect(first.err).toBe('');
    expect(first.code).toBe(0);
    expect(first.out).toMatch(/^messages\s+1200\s+1200\s+1200\s+yes$/m);
    expect(first.out).toMatch(/^users\s+30\s+30\s+30\s+yes$/m);
    expect(first.out).toContain('Done: every table holds the same rows on both sides.');
    expect(first.out).not.toContain(new URL(url).password);

    // Run again, it compares: the same rows, nothing copied.
    const again = await cli({ dataDir }, 'db', 'copy', '--to', url);
    expect(again.code).toBe(0);
    expect(again.out).toMatch(/^messages\s+1200\s+1200\s+0\s+yes$/m);
    expect(again.out).toContain('already holds exactly the rows of this store: nothing to copy');

    // Everything works on Postgres, and new rows go on after the copied ids.
    const pg = await openStore({ dataDir, databaseUrl: url }, MIGRATIONS);
    expect((await listUsers(pg.db)).length).toBe(30);
    for (const t of tokens) expect((await verifyToken(pg.db, t)).ok).toBe(true);
    expect((await messagesOf(pg.db, chats[7]!)).length).toBe(40);
    // The running totals the triggers keep came out the same on Postgres.
    expect(await storeUsage(pg.db, { storeQuotaMb: 256 }, 1)).toEqual(usage);
    const newcomer = await ensureUser(pg.db, 'newcomer');
    expect(newcomer.id).toBe(31);
    await pg.close();

    // A target that holds other rows is never merged into, nor called done.
    const third = await cli({ dataDir }, 'db', 'copy', '--to', url);
    expect(third.code).toBe(1);
    // The tokens differ too, with the same count: using them on Postgres set their last use.
    expect(third.err).toMatch(/is not empty and differs from this store in users \(30 rows here, 31 there\), api_tokens \(30 rows here, 30 there\): nothing was copied/);
  });

  it('never merges into a database that holds other rows, even with the same counts', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-copy-'));
    const lite = await openStore({ dataDir }, MIGRATIONS);
    const alice = await ensureUser(lite.db, 'alice');
    const token = (await createToken(lite.db, { userId: alice.id, name: 'laptop' })).token;
    await lite.close();
    // The gateway was started on Postgres once: someone else became user 1 there.
    const url = await testDatabaseUrl();
    const pg = await openStore({ dataDir, databaseUrl: url }, MIGRATIONS);
    await ensureUser(pg.db, 'mallory');
    await pg.close();
    const r = await cli({ dataDir }, 'db', 'copy', '--to', url);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/is not empty and differs from this store in users \(1 rows here, 1 there\).*nothing was copied/);
    const after = await openStore({ dataDir, databaseUrl: url }, MIGRATIONS);
    expect((await listUsers(after.db)).map((u) => u.name)).toEqual(['mallory']);
    expect((await verifyToken(after.db, token)).ok).toBe(false);
    await after.close();
  });

  it('reads the URL from standard input with --to -', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-copy-'));
    const lite = await openStore({ dataDir }, MIGRATIONS);
    await ensureUser(lite.db, 'alice');
    await lite.close();
    const r = await cli({ dataDir, stdin: `${await testDatabaseUrl()}\n` }, 'db', 'copy', '--to', '-');
    expect(r.err).toBe('');
    expect(r.out).toMatch(/^users\s+1\s+1\s+1\s+yes$/m);
  });

  it('refuses what it cannot do, saying why', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-copy-'));
    const notPg = await cli({ dataDir }, 'db', 'copy', '--to', 'mysql://x@y/z');
    expect(notPg.code).toBe(1);
    expect(notPg.err).toMatch(/--to takes a postgres:\/\/ URL/);
    const url = await testDatabaseUrl();
    const fromPg = await cli({ dataDir, databaseUrl: url }, 'db', 'copy', '--to', url);
    expect(fromPg.code).toBe(1);
    expect(fromPg.err).toMatch(/the store is already on Postgres .*db copy moves a SQLite store/);
    const unreachable = await cli({ dataDir }, 'db', 'copy', '--to', 'postgres://sandgate:pw@127.0.0.1:1/nothing');
    expect(unreachable.code).toBe(1);
    expect(unreachable.err).toMatch(/cannot reach the database at postgres:\/\/sandgate:\*\*\*@127\.0\.0\.1:1\/nothing/);
  });
});
