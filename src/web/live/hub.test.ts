/**
 * The live channel between the gateways of one database. A browser is connected to one
 * gateway (A) while its events may happen on another (B): on Postgres, two real gateways
 * on the same database, B's hub emits through its real paths (a user's files changed, a
 * turn streaming into a conversation, a sign-out everywhere) and A's browsers get what is
 * theirs and nothing of another user's. On SQLite there is one gateway, which plays both
 * parts: the same checks hold for its in-memory adapter.
 */
import crypto from 'node:crypto';
import { io as ioClient, type Socket } from 'socket.io-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureUser, type User } from '../../accounts/accounts.js';
import { createConversation } from '../../agent/conversations.js';
import { webSession } from '../../../test/support/web-session.js';
import { startGateway, type Gateway } from '../../../test/support/mcp.js';
import { testDatabaseUrl } from '../../../test/support/postgres.js';
import { until } from '../../../test/support/until.js';
import type { LiveHub, Swap } from './hub.js';

const onPostgres = process.env.SANDGATE_TEST_DATABASE === 'postgres';

/** Where the browsers are connected. */
let a: Gateway;
/** Where the events happen: another gateway on the same database (itself on SQLite). */
let b: Gateway;
const sockets: Socket[] = [];

beforeAll(async () => {
  if (onPostgres) {
    // One database for both, each gateway with its own data directory (and session keys),
    // and the one replica key of their installation, which seals what passes between them.
    const env = { SANDGATE_DATABASE_URL: await testDatabaseUrl(), SANDGATE_REPLICA_KEY: crypto.randomBytes(32).toString('base64') };
    a = await startGateway({ env, noStart: true });
    b = await startGateway({ env, noStart: true });
  } else {
    a = b = await startGateway({ noStart: true });
  }
});

afterAll(async () => {
  for (const s of sockets) s.disconnect();
  if (b !== a) await b?.close();
  await a?.close();
});

interface Session {
  cookie: string;
  csrf: string;
}

/** Signs a user in on `gw` with a one-time link, as a browser does. */
async function signIn(gw: Gateway, user: User): Promise<Session> {
  const web = await webSession(gw, user);
  return { cookie: web.cookie(), csrf: web.csrf };
}

/** A page's live channel on `gw`, and what it received. */
interface Page {
  socket: Socket;
  swaps: Swap[];
  triggers: string[];
  disconnected: boolean;
}

async function openPage(gw: Gateway, s: Session): Promise<Page> {
  const socket = ioClient(gw.url, { transports: ['websocket'], reconnection: false, auth: { csrf: s.csrf }, extraHeaders: { origin: gw.url, cookie: s.cookie } });
  sockets.push(socket);
  const page: Page = { socket, swaps: [], triggers: [], disconnected: false };
  socket.on('swap', (swap: Swap) => page.swaps.push(swap));
  socket.on('trigger', (t: { event: string }) => page.triggers.push(t.event));
  socket.on('disconnect', () => (page.disconnected = true));
  await new Promise<void>((resolve, reject) => {
    socket.on('connect', resolve);
    socket.on('connect_error', reject);
  });
  return page;
}

/** A new conversation of `user`'s, which the page then watches. */
async function watchNewConversation(gw: Gateway, user: User, page: Page): Promise<string> {
  const { id } = await createConversation(gw.gateway.store.db, { userId: user.id, model: 'openai:gpt-test', source: 'web' });
  expect(await page.socket.emitWithAck('watch', id)).toEqual({ ok: true });
  return id;
}

const hubOf = (gw: Gateway): LiveHub => gw.gateway.web.live;

/**
 * Waits until B's hub reaches `page` (on A), then until what is still on its way has
 * arrived, and forgets it: B's adapter listens from a moment after it starts.
 */
async function reachable(page: Page, userId: number): Promise<void> {
  const probe: Swap = { target: '#probe', swap: 'innerHTML', html: '' };
  await until(() => {
    if (!page.swaps.some((s) => s.target === '#probe')) hubOf(b).toRoom(`user:${userId}`, probe);
    return page.swaps.some((s) => s.target === '#probe');
  });
  await new Promise((r) => setTimeout(r, 300));
  page.swaps.length = 0;
  page.triggers.length = 0;
}

describe(onPostgres ? 'live updates across two gateways on one Postgres database' : 'live updates on one SQLite gateway', () => {
  it('reach the pages of their user on another gateway, and no other user’s', async () => {
    const ann = await ensureUser(a.gateway.store.db, 'ann-live');
    const bob = await ensureUser(a.gateway.store.db, 'bob-live');
    const annSession = await signIn(a, ann);
    const annPage = await openPage(a, annSession);
    const bobPage = await openPage(a, await signIn(a, bob));
    await reachable(annPage, ann.id);
    await reachable(bobPage, bob.id);

    // What B's sandbox manager reports when ann's files change (src/web/index.ts wires it).
    hubOf(b).filesChanged(ann.id);
    await until(() => annPage.triggers.length === 1);
    expect(annPage.triggers).toEqual(['files-changed']);

    // A turn of ann's streaming on B into the conversation her page on A watches; its
    // text is over the 8,000 bytes a NOTIFY carries, so it goes through live_attachments.
    // What passes through the database, read as anyone with access to it could.
    const listener = onPostgres ? await b.gateway.store.pgPool!.connect() : undefined;
    const notified: string[] = [];
    if (listener) {
      listener.on('notification', (m) => notified.push(m.payload ?? ''));
      await listener.query('LISTEN "socket.io#/"');
    }
    const conversationId = await watchNewConversation(a, ann, annPage);
    const sink = hubOf(b).sinkFor(ann, conversationId, 'hello');
    const long = `confidential-${'x'.repeat(20_000)}`;
    sink({ type: 'turn', conversationId, turnId: 1, model: 'openai:gpt-test' });
    sink({ type: 'text', delta: long });
    await until(() => annPage.swaps.some((s) => s.target === '#turn-1-live' && s.html.includes(long)));
    if (onPostgres) {
      const { rows } = await b.gateway.store.pgPool!.query<{ payload: Buffer }>('SELECT payload FROM live_attachments');
      expect(rows.length).toBeGreaterThan(0);
      // Sealed: the database holds no word of the page.
      for (const r of rows) expect(r.payload.includes('confidential-')).toBe(false);
    }
    expect(annPage.swaps).toContainEqual({ target: '#transcript-empty', swap: 'delete', html: '' });

    // Sent after all of ann's, on the same channel: once bob's page has it, anything of
    // ann's that were to reach bob would have too.
    hubOf(b).toRoom(`user:${bob.id}`, { target: '#marker', swap: 'innerHTML', html: 'bob-private-marker' });
    await until(() => bobPage.swaps.length === 1);
    expect(bobPage.swaps[0]!.html).toBe('bob-private-marker');
    if (listener) {
      // Every update went through NOTIFY as a sealed body: its header only, in clear.
      expect(notified.length).toBeGreaterThan(0);
      expect(notified.join('\n')).not.toMatch(/bob-private-marker|confidential-|#marker|turn-1-live/);
      for (const n of notified) {
        const m = JSON.parse(n) as Record<string, unknown>;
        expect(typeof m.sealed === 'string' || typeof m.attachmentId === 'number' || typeof m.attachmentId === 'string', n.slice(0, 200)).toBe(true);
      }
      listener.release();
    }
    expect(bobPage.swaps.map((s) => s.target)).toEqual(['#marker']);
    expect(bobPage.triggers).toEqual([]);
    expect(annPage.swaps.some((s) => s.target === '#marker')).toBe(false);

    // Signing out everywhere on B closes ann's pages on A, and only hers.
    hubOf(b).signedOut(ann.id, true);
    await until(() => annPage.disconnected);
    await new Promise((r) => setTimeout(r, 300));
    expect(bobPage.disconnected).toBe(false);
  });
});
