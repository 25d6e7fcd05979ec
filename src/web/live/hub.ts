/**
 * The live channel of the web app: socket.io on the gateway's HTTP server. The server
 * renders every update as an HTML partial (the same templates as the pages) and sends
 * `{target, swap, html}`; the page hands it to htmx.swap. No HTML is built in client code.
 *
 * A connection is a signed-in browser: the session cookie (read on the handshake), the
 * page's CSRF token in the handshake's auth (a socket another site opens with the
 * cookie has no token), and an Origin of this gateway. It joins its user's room (files
 * changed anywhere) and, on `watch`, the room of one conversation that is its user's.
 * Signing out disconnects the session's connections; losing access at a membership
 * check disconnects every connection of the user. Pages make no requests while they
 * only listen, so the hub asks the membership check itself, every MEMBERSHIP_SWEEP_MS,
 * for every user it has a connection of (and takes the admin room from a user who is no
 * longer an admin).
 *
 * On Postgres the gateways of a tier share one database, and a browser is connected to
 * one of them while the event for it may happen on another (its sandbox, its turn). The
 * Server then has socket.io's Postgres adapter: every emit to a room, and every
 * disconnect of a room, reaches the connections of that room on every gateway (NOTIFY
 * on one channel, LISTEN on one connection of the store's pool; a message over 8,000
 * bytes goes through the live_attachments table, src/web/live/schema.ts). What the hub
 * counts itself (roomSize, the membership sweep) stays this gateway's own connections.
 * Order across gateways is not the order of emits: each goes out as its own query, on
 * whichever pooled connection is free, and a large one as two (its row, then the NOTIFY),
 * so a small swap sent just after a large one can arrive first. A page that reloads shows
 * the turn as stored.
 * On SQLite there is one process, and the default in-memory adapter.
 */
import crypto from 'node:crypto';
import type http from 'node:http';
import type { Request, RequestHandler } from 'express';
import { createAdapter } from '@socket.io/postgres-adapter';
import { sealedAdapter } from './sealed-adapter.js';
import type pg from 'pg';
import { Server } from 'socket.io';
import { validateHostHeader } from '@modelcontextprotocol/server';
import { getConversation } from '../../agent/conversations.js';
import type { AgentEvent, EventSink } from '../../agent/events.js';
import type { Config } from '../../config.js';
import type { Logger } from '../../logger.js';
import type { ModelBoundary } from '../../pii/boundary.js';
import type { Db } from '../../store/store.js';
import type { User } from '../../accounts/accounts.js';
import { sessionKey } from '../../auth/sessions.js';
import { isImage, titleFor, toolKey, transcript } from '../chat/transcript.js';
import { allowedHostnames } from '../../http/host-origin.js';
import type { WebSessions } from '../../auth/session-middleware.js';
import { escapeHtml, renderPartial } from '../render.js';
import { LIVE_ATTACHMENTS_TABLE } from './schema.js';

export interface Swap {
  target: string;
  swap: 'beforeend' | 'innerHTML' | 'outerHTML' | 'delete';
  html: string;
  /** Where to put `html` instead when `target` is not on the page (it was loaded after the target was made). */
  fallback?: { target: string; swap: 'beforeend'; html: string };
}

/** Messages a connection may send in a second before it is cut off. */
const MAX_EVENTS_PER_SECOND = 20;
/** How often connected users are put to the membership check, at most (it asks GitHub only when a check is due). */
const MEMBERSHIP_SWEEP_MS = 30_000;

/** The event by which one replica asks the others to stop a turn one of them runs (socket.io's server-side emit, sealed like every update). */
const STOP_TURN = 'sandgate:stop-turn';
/** How old a stop may arrive (the gateways' clocks agree within far less); the time is sealed with it. */
const STOP_TURN_FRESH_MS = 30_000;

export class LiveHub {
  private io?: Server;
  /** Whether the live channel reaches the other gateways on the database (socket.io's Postgres adapter). */
  private clustered = false;
  private readonly turnStops = new Set<(userId: number, conversationId: string) => void>();
  private readonly log: Logger;
  private sweep?: NodeJS.Timeout;
  private sweeping = false;
  private unsubscribe?: () => void;

  constructor(
    private readonly deps: {
      config: Config;
      db: Db;
      logger: Logger;
      boundary: ModelBoundary;
      auth: WebSessions;
      /** The store's Postgres pool (Store.pgPool): the live channel then reaches the browsers of every gateway on the database. */
      pgPool?: pg.Pool;
      /** Seals live updates on their way through the database (derived from the replica key). */
      liveKey?: Buffer;
    },
  ) {
    this.log = deps.logger.child({ module: 'live' });
  }

  attach(server: http.Server): void {
    const { config, auth } = this.deps;
    const own = new URL(config.publicUrl);
    const loopback = ['localhost', '127.0.0.1', '[::1]'].includes(own.hostname);
    const hosts = allowedHostnames({ ...config, mcpAllowedHosts: '' });
    this.clustered = !!this.deps.pgPool && this.clusterReady(this.deps.pgPool);
    const io = new Server(server, {
      path: '/socket.io',
      serveClient: false,
      maxHttpBufferSize: 16 * 1024,
      ...(this.clustered && this.deps.pgPool && { adapter: this.clusterAdapter(this.deps.pgPool) }),
      allowRequest: (req, cb) => {
        if (!validateHostHeader(req.headers.host, hosts).ok) return cb('host not allowed', false);
        const origin = req.headers.origin;
        let ok = origin === own.origin;
        if (!ok && loopback && origin) {
          try {
            const u = new URL(origin);
            ok = ['localhost', '127.0.0.1', '[::1]'].includes(u.hostname) && u.port === (own.port || (own.protocol === 'https:' ? '443' : '80'));
          } catch {
            ok = false;
          }
        }
        cb(ok ? null : 'origin not allowed', ok);
      },
    });
    // An upgrade to any other path is the gateway's to take or cut (src/gateway.ts `attach`).
    // The session and its user, read once per connection (the handshake request).
    for (const m of auth.session) io.engine.use(onlyForHandshake(m));
    io.use((socket, next) => {
      const req = socket.request as Request;
      const presented = (socket.handshake.auth as { csrf?: unknown } | undefined)?.csrf;
      const expected = (req.session as { csrfToken?: string } | undefined)?.csrfToken;
      if (typeof presented !== 'string' || !expected || presented.length !== expected.length || !crypto.timingSafeEqual(Buffer.from(presented), Buffer.from(expected))) {
        return next(new Error('unauthorized: reload the page'));
      }
      auth
        .stillAllowed(req)
        .then((r) => {
          // A 503 (GitHub not answering) is worth retrying: the page reconnects by itself.
          if (!r.ok) return next(new Error(r.status === 503 ? 'unavailable: try again' : 'unauthorized: sign in again'));
          req.user = r.user;
          next();
        })
        .catch(() => next(new Error('unauthorized')));
    });
    io.on('connection', (socket) => {
      const req = socket.request as Request;
      const user = req.user as User;
      (socket.data as { userId?: number }).userId = user.id;
      void socket.join([`user:${user.id}`, `session:${sessionRoom(req.sessionID)}`]);
      let events = 0;
      const window = setInterval(() => (events = 0), 1000);
      socket.on('disconnect', () => clearInterval(window));
      socket.onAny(() => {
        if (++events > MAX_EVENTS_PER_SECOND) socket.disconnect(true);
      });
      // The admin page's live table: admins only (a non-admin is told no, and nothing joins).
      socket.on('watch-admin', (ack?: unknown) => {
        const reply = typeof ack === 'function' ? (ack as (r: { ok: boolean; status?: number }) => void) : () => {};
        // Admin rights as the settings give them now, never the flag the user had at the handshake.
        auth.membership
          .confirm(user.id)
          .then((r) => {
            if (!r.ok || !r.user.isAdmin) return reply({ ok: false, status: r.ok ? 403 : r.status });
            void socket.join('admins');
            reply({ ok: true });
          })
          .catch(() => reply({ ok: false, status: 500 }));
      });
      let watching: string | undefined;
      // One watch at a time, in the order they came: the last one asked for is the one watched.
      let watches = Promise.resolve();
      socket.on('watch', (conversationId: unknown, ack?: unknown) => {
        const reply = typeof ack === 'function' ? (ack as (r: { ok: boolean }) => void) : () => {};
        if (typeof conversationId !== 'string' || conversationId.length > 64) return reply({ ok: false });
        watches = watches
          // Only a conversation of this user's (getConversation throws for any other).
          .then(() => getConversation(this.deps.db, user.id, conversationId))
          .then(
            () => {
              // Gone meanwhile: a room joined now would never be left.
              if (!socket.connected) return;
              if (watching) void socket.leave(`conv:${watching}`);
              watching = conversationId;
              void socket.join(`conv:${conversationId}`);
              reply({ ok: true });
            },
            () => reply({ ok: false }),
          )
          .catch((e: unknown) => this.log.warn({ err: e }, 'a live watch failed'));
      });
    });
    // Only another gateway can send this (its messages are sealed under the replica key);
    // it is still checked, as anything read off the database is.
    io.on(STOP_TURN, (userId: unknown, conversationId: unknown, sentAt: unknown) => {
      if (!Number.isSafeInteger(userId) || typeof conversationId !== 'string' || conversationId.length > 64) return;
      // A sealed message copied off the database and sent again later stops nothing.
      if (typeof sentAt !== 'number' || !(Math.abs(Date.now() - sentAt) <= STOP_TURN_FRESH_MS)) return;
      for (const stop of this.turnStops) stop(userId as number, conversationId);
    });
    this.io = io;
    this.unsubscribe = auth.membership.onAccessLost((userId) => this.signedOut(userId, true));
    const every = Math.min(MEMBERSHIP_SWEEP_MS, Math.max(1000, (config.authRecheckSec * 1000) / 2));
    this.sweep = setInterval(() => void this.sweepMembership().catch((e: unknown) => this.log.warn({ err: e }, 'could not check the connected users’ membership')), every);
    this.sweep.unref();
  }

  /**
   * Whether the pool has room for the adapter: it holds one connection for good (its
   * LISTEN), and a pool of one would leave no connection for anything else. Else the
   * live channel stays this gateway's (as before there were several), said once at start.
   */
  private clusterReady(pool: pg.Pool): boolean {
    const max = pool.options.max ?? 10;
    if (max >= 2) return true;
    this.log.warn({ poolSize: max }, 'live updates reach only the pages connected to this gateway: set SANDGATE_DATABASE_POOL_SIZE to 2 or more for them to cross gateways');
    return false;
  }

  /**
   * socket.io's Postgres adapter on the store's pool. An update it cannot pass on is lost
   * for the browsers of the other gateways (a reload shows it): logged, never thrown.
   * Its timers and its LISTEN connection end with the Server (close()).
   */
  private clusterAdapter(pool: pg.Pool): ReturnType<typeof createAdapter> {
    // The adapter keeps one pooled client for its LISTEN and, when that connection ends
    // (a database restart, a failover, a server-side timeout), takes a new one without
    // giving the old one back: each drop would keep a slot of the store's pool for good,
    // and the store's close() would wait for it forever. A client that ends is given back
    // here (as broken, so the pool drops it); the adapter's own close() still releases
    // the live one itself, after removing this listener.
    const releasing = {
      query: pool.query.bind(pool),
      connect: async () => {
        const client = await pool.connect();
        client.once('end', () => client.release(new Error('the live channel connection ended')));
        return client;
      },
    } as unknown as pg.Pool;
    const adapter = createAdapter(releasing, {
      tableName: LIVE_ATTACHMENTS_TABLE,
      errorHandler: (err) => {
        // Once closed, what fails is the goodbye to the other gateways as the pool ends.
        if (this.io) this.log.warn({ err }, 'a live update could not be passed to the other gateways');
      },
    });
    // Pages with personal data restored pass through the database: sealed, when the gateways share a key.
    const key = this.deps.liveKey;
    return key ? sealedAdapter(adapter, key, (why) => this.log.warn(why)) : adapter;
  }

  /** Every connected user put to the membership check: none of theirs stays connected when it says no, nor in the admin room when they are no admin. */
  private async sweepMembership(): Promise<void> {
    const io = this.io;
    if (!io || this.sweeping) return;
    this.sweeping = true;
    try {
      await this.sweepUsers(io);
    } finally {
      this.sweeping = false;
    }
  }

  private async sweepUsers(io: Server): Promise<void> {
    const byUser = new Map<number, string[]>();
    for (const [id, socket] of io.of('/').sockets) {
      const userId = (socket.data as { userId?: number }).userId;
      if (userId !== undefined) byUser.set(userId, [...(byUser.get(userId) ?? []), id]);
    }
    for (const [userId, ids] of byUser) {
      try {
        const r = await this.deps.auth.membership.confirm(userId);
        if (!r.ok) {
          this.log.info({ userId, reason: r.reason }, 'live pages of a user who may not come in now: disconnected');
          io.in(`user:${userId}`).disconnectSockets(true);
        } else if (!r.user.isAdmin) {
          for (const id of ids) void io.of('/').sockets.get(id)?.leave('admins');
        }
      } catch (e) {
        this.log.warn({ err: e, userId }, 'could not check a connected user’s membership');
      }
    }
  }

  /** Calls `stop` when another gateway asks for a turn to be stopped (askOthersToStopTurn); the one running it stops it. */
  onTurnStopAsked(stop: (userId: number, conversationId: string) => void): void {
    this.turnStops.add(stop);
  }

  /**
   * Asks the other gateways on the database to stop the running turn of a user's
   * conversation: the turn runs on whichever gateway took the message that started it,
   * and a Stop may reach another. The caller has checked that the conversation is the user's.
   * Nothing to do with one gateway.
   */
  askOthersToStopTurn(userId: number, conversationId: string): void {
    if (this.clustered) this.io?.serverSideEmit(STOP_TURN, userId, conversationId, Date.now());
  }

  /** Connections in a room now (the admin page's sampler runs only while someone watches). */
  roomSize(room: string): number {
    return this.io?.of('/').adapter.rooms.get(room)?.size ?? 0;
  }

  /** A server-rendered swap to every connection in a room. */
  toRoom(room: string, swap: Swap): void {
    this.io?.to(room).emit('swap', swap);
  }

  /** Disconnects the live channel of one session, or of every session of the user. */
  signedOut(userId: number, everywhere: boolean, sessionId?: string): void {
    if (!this.io) return;
    if (everywhere) this.io.in(`user:${userId}`).disconnectSockets(true);
    else if (sessionId) this.io.in(`session:${sessionRoom(sessionId)}`).disconnectSockets(true);
  }

  /** Every page of the user that shows files refreshes its tree. */
  filesChanged(userId: number): void {
    this.io?.to(`user:${userId}`).emit('trigger', { event: 'files-changed' });
  }

  /**
   * The sink of one turn: each event as the partial that shows it, in order, to every
   * page watching the conversation; at the end, the whole turn as the store has it.
   */
  sinkFor(user: User, conversationId: string, userText: string): EventSink {
    const room = `conv:${conversationId}`;
    let turnId = 0;
    let block = 0;
    let inText = false;
    let chain = Promise.resolve();
    const send = (s: Swap) => this.io?.to(room).emit('swap', s);
    const live = () => `#turn-${turnId}-live`;
    const blockId = () => `t${turnId}-b${block}`;
    const handle = async (e: AgentEvent): Promise<void> => {
      switch (e.type) {
        case 'turn': {
          turnId = e.turnId;
          send({ target: '#transcript-empty', swap: 'delete', html: '' });
          send({ target: '#transcript', swap: 'beforeend', html: renderPartial('live/turn-start', { turnId, userText }) });
          send({ target: '#composer-actions', swap: 'innerHTML', html: renderPartial('chat/composer-actions', { running: true, conversationId }) });
          // Its name (the first message's words): the header, its entry in the list and the window's title.
          const title = await titleFor(this.deps.boundary, user, await getConversation(this.deps.db, user.id, conversationId));
          if (title) {
            send({ target: '#conversation-title', swap: 'innerHTML', html: escapeHtml(title) });
            send({ target: `#conv-link-${conversationId}`, swap: 'innerHTML', html: escapeHtml(title) });
            send({ target: 'title', swap: 'innerHTML', html: escapeHtml(`${title} · sandgate`) });
          }
          return;
        }
        case 'text': {
          if (!inText) {
            inText = true;
            block++;
            send({ target: live(), swap: 'beforeend', html: renderPartial('live/text-block', { id: blockId(), text: e.delta }) });
          } else {
            send({
              target: `#${blockId()}`,
              swap: 'beforeend',
              html: escapeHtml(e.delta),
              fallback: { target: live(), swap: 'beforeend', html: renderPartial('live/text-block', { id: blockId(), text: e.delta }) },
            });
          }
          return;
        }
        case 'tool_call': {
          inText = false;
          const input = (e.input ?? {}) as { language?: unknown; code?: unknown };
          const item = {
            key: toolKey(e.id),
            name: e.name,
            files: [],
            ...(e.name === 'execute_code' && typeof input.code === 'string' ? { language: String(input.language ?? ''), code: input.code } : { input: JSON.stringify(e.input, null, 2) }),
          };
          send({ target: live(), swap: 'beforeend', html: renderPartial('chat/tool', { item, live: true }) });
          return;
        }
        case 'output':
          send({ target: `#out-${toolKey(e.id)}`, swap: 'beforeend', html: escapeHtml(`${e.text}\n`) });
          return;
        case 'tool_result':
          send({ target: `#res-${toolKey(e.id)}`, swap: 'innerHTML', html: renderPartial('chat/result', { result: { text: e.text, isError: e.isError } }) });
          return;
        case 'files':
          send({ target: `#files-${toolKey(e.id)}`, swap: 'innerHTML', html: renderPartial('chat/files-inline', { files: e.files.map((f) => ({ ...f, image: isImage(f.path) })) }) });
          return;
        case 'error':
          inText = false;
          send({ target: live(), swap: 'beforeend', html: renderPartial('notice', { message: e.message, error: true }) });
          return;
        case 'done': {
          const conversation = await getConversation(this.deps.db, user.id, conversationId);
          const [turn] = await transcript(this.deps.db, this.deps.boundary, user, conversation, turnId);
          if (turn) send({ target: `#turn-${turnId}`, swap: 'outerHTML', html: renderPartial('chat/turn', { turn, running: false }) });
          send({ target: '#composer-actions', swap: 'innerHTML', html: renderPartial('chat/composer-actions', { running: false, conversationId }) });
          return;
        }
        default:
          return;
      }
    };
    return (e) => {
      chain = chain
        .then(() => handle(e))
        .catch((err: unknown) => {
          this.log.warn({ err, event: e.type }, 'a live update failed');
          // The page must not stay "running" because the last swap failed: a reload shows the turn as stored.
          if (e.type === 'done') {
            send({ target: live(), swap: 'beforeend', html: renderPartial('notice', { message: 'This answer could not be shown live: reload the page to see it.', error: true }) });
            send({ target: '#composer-actions', swap: 'innerHTML', html: renderPartial('chat/composer-actions', { running: false, conversationId }) });
          }
        });
    };
  }

  /** Disconnects every browser (their connections are upgraded: closing the HTTP server alone would wait for them). */
  close(): Promise<void> {
    const io = this.io;
    this.io = undefined;
    clearInterval(this.sweep);
    this.unsubscribe?.();
    return new Promise((resolve) => (io ? io.close(() => resolve()) : resolve()));
  }
}

const sessionRoom = sessionKey;

/** Runs an express middleware on the socket.io handshake only (later requests of a connection carry its sid). */
function onlyForHandshake(m: RequestHandler): (req: http.IncomingMessage, res: http.ServerResponse, next: (err?: unknown) => void) => void {
  return (req, res, next) => {
    const isHandshake = (req as { _query?: { sid?: string } })._query?.sid === undefined;
    if (isHandshake) m(req as Request, res as never, next);
    else next();
  };
}
