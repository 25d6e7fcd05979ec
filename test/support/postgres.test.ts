/**
 * The throw-away Postgres cluster the postgres project's tests share (test/support/postgres.ts):
 * every database a test asks for is its own and empty, the superuser's password is checked,
 * and the server is reachable on loopback only. The cluster is started by the global setup,
 * not here.
 */
import net from 'node:net';
import os from 'node:os';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { testDatabaseUrl } from './postgres.js';

const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Tables a user made (none in a fresh database). */
async function userTables(c: pg.Client): Promise<string[]> {
  const r = await c.query<{ name: string }>(
    "SELECT table_schema || '.' || table_name AS name FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1",
  );
  return r.rows.map((row) => row.name);
}

/** Whether a TCP connection to host:port is accepted. */
function accepts(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port, timeout: 2_000 });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(false));
  });
}

describe.skipIf(!onPostgres)('throw-away Postgres cluster (skipped unless SANDGATE_TEST_DATABASE=postgres: the postgres project)', () => {
  it('gives each test a database of its own, fresh and empty', async () => {
    const [a, b] = [await testDatabaseUrl(), await testDatabaseUrl()];
    const nameA = new URL(a).pathname.slice(1);
    const nameB = new URL(b).pathname.slice(1);
    expect(nameA).toMatch(/^sg_[0-9a-f]{16}$/);
    expect(nameB).toMatch(/^sg_[0-9a-f]{16}$/);
    expect(nameA).not.toBe(nameB);

    await withClient(a, async (c) => {
      expect((await c.query<{ db: string }>('SELECT current_database() AS db')).rows[0]!.db).toBe(nameA);
      expect(await userTables(c)).toEqual([]);
      await c.query('CREATE TABLE only_in_a (id integer PRIMARY KEY)');
      await c.query('INSERT INTO only_in_a VALUES (1)');
      expect(await userTables(c)).toEqual(['public.only_in_a']);
    });
    await withClient(b, async (c) => {
      expect((await c.query<{ db: string }>('SELECT current_database() AS db')).rows[0]!.db).toBe(nameB);
      expect(await userTables(c)).toEqual([]);
      await expect(c.query('SELECT * FROM only_in_a')).rejects.toMatchObject({ code: '42P01' });
      // The server speaks UTF-8 whatever the machine's locale.
      expect((await c.query<{ e: string }>("SELECT current_setting('server_encoding') AS e")).rows[0]!.e).toBe('UTF8');
    });
  });

  it('refuses a wrong password', async () => {
    const url = new URL(await testDatabaseUrl());
    await withClient(url.toString(), async (c) => {
      expect((await c.query<{ u: string }>('SELECT current_user AS u')).rows[0]!.u).toBe(url.username);
    });
    url.password = 'not-the-password';
    await expect(withClient(url.toString(), async () => undefined)).rejects.toMatchObject({ code: '28P01' });
  });

  it('listens on 127.0.0.1 only', async () => {
    const url = new URL(await testDatabaseUrl());
    expect(url.hostname).toBe('127.0.0.1');
    const port = Number(url.port);
    await withClient(url.toString(), async (c) => {
      expect((await c.query<{ a: string }>("SELECT current_setting('listen_addresses') AS a")).rows[0]!.a).toBe('127.0.0.1');
    });
    expect(await accepts('127.0.0.1', port)).toBe(true);
    // Another loopback address, IPv6 loopback and the machine's own addresses are all refused.
    const others = ['127.0.0.2', '::1', ...Object.values(os.networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address))];
    for (const host of others.filter((h) => h !== '127.0.0.1')) {
      expect(await accepts(host, port), host).toBe(false);
    }
  });
});
