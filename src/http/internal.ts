/**
 * The internal hop's end: where another replica of the same installation sends a run for
 * a user whose sandbox this gateway holds (POST /internal/v1/run), asks it to stop one
 * (/internal/v1/stop), or asks what it holds (/internal/v1/sandboxes, for the admin page).
 *
 * Only a request signed with the installation's replica key, for this replica, with the
 * body signed, and not seen before is heard (src/replicas/hop-auth.ts); anything else is
 * a 401 and runs nothing. The credential is checked before the body is read, so an
 * unsigned request costs no upload; refusals are logged once a minute at most. The run is this gateway's own (`executeHere`: never sent on),
 * and its answer streams back as lines, each a sealed JSON message (src/sandboxes/remote.ts). When the sender
 * goes away, the run is cancelled.
 *
 * The same endpoints under /internal/v1/ take what replicas of the release before sealed
 * hops send (signed, bodies in clear) and answer them in clear, so a rolling upgrade loses no run.
 *
 * Runs themselves come on a run channel (`internalChannel`: a WebSocket at
 * /internal/v3/channel, opened with the same credential, every frame sealed; src/sandboxes/
 * hop-channel.ts) from replicas of this release; POST /internal/v2/run stays for the ones before.
 */
import type http from 'node:http';
import type { Duplex } from 'node:stream';
import express, { type Request, type RequestHandler, type Response } from 'express';
import { WebSocketServer } from 'ws';
import type { Logger } from '../logger.js';
import { HOP_HEADER, HopAuthError, type HopClaims, type HopSigner } from '../replicas/hop-auth.js';
import type { SandboxExecution } from '../sandboxes/execution.js';
import type { SandboxInspection } from '../sandboxes/inspection.js';
import type { SandboxStops } from '../sandboxes/stops.js';
import type { WorkspaceStore } from '../sandboxes/types.js';
import { HOP_CHANNEL_PATH, MAX_RUN_FRAME_BYTES, serveChannel } from '../sandboxes/hop-channel.js';
import { HOP_DELETIONS_PATH, HOP_LIST_PATH, HOP_STORE_PROBE_PATH, HOP_RUN_PATH, HOP_STOP_PATH, HOP_V1_PATHS, parseHopRun, serveRun } from '../sandboxes/remote.js';
import { MAX_CODE_BYTES } from '../sandboxes/run.js';
import { HOP_WORKSPACE_PATH, MAX_WORKSPACE_HOP_BODY, parseWorkspaceHop } from '../sandboxes/remote-workspace.js';
import { GatewayError } from '../errors.js';

/** File operations from other hosts served at once by this gateway; one more is refused ("try again"). */
export const MAX_FILE_HOPS_UNDERWAY = 32;
/** The same for one user's: one user's flood leaves room for the others'. */
export const MAX_FILE_HOPS_PER_USER = 8;
/**
 * A file operation from another host reaches the workspace's helper within this long of
 * its arrival (before its body), or is refused with nothing done: with the helper's own
 * 30 s limit it ends before the sender gives up (35 s, remote-workspace.ts), unless it
 * waits in the helper behind other requests of the same workspace.
 */
export const FILE_HOP_START_WITHIN_MS = 4_000;

export interface InternalHopDeps {
  signer: HopSigner;
  /** This replica's id: a hop for another is refused. */
  selfId: string;
  /** Its workspace store: the probes another replica leaves in it are read back (`HOP_STORE_PROBE_PATH`). */
  workspaces?: Pick<WorkspaceStore, 'storeId' | 'probes'>;
  sandboxes: Pick<SandboxExecution, 'executeHere' | 'workspaceRequestHere'> & Pick<SandboxStops, 'stopUserHere' | 'removeDeletedWorkspaces'> & Pick<SandboxInspection, 'list' | 'pooled'>;
  log: Logger;
  /** Per-stream output the gateways keep (SANDGATE_OUTPUT_LIMIT_KB): how large an answer's frame may be. */
  outputLimitBytes: number;
}

/** The hop's endpoints, by path: each reads the raw body (bounded), checks the hop's credential, then answers. */
export function internalHop(deps: InternalHopDeps): Record<string, RequestHandler[]> {
  const { sandboxes } = deps;
  // The code travels as JSON, where a byte may take six: room for the largest run allowed.
  const raw = express.raw({ type: () => true, limit: MAX_CODE_BYTES * 6 + 64 * 1024 });
  const logRefusal = refusalLog(deps.log);
  const refuse = (req: Request, res: Response, why: string) => {
    logRefusal(req.ip, req.path, why);
    res.status(401).set('connection', 'close').json({ error: { message: 'not a hop from a replica of this installation', reason: 'unauthorized' } });
  };
  /** The credential, checked before the body is read: a request without a valid one costs no upload. */
  const credential: RequestHandler = (req, res, next) => {
    // When the request arrived, before its body: a file operation's time to start counts from here.
    res.locals.received = Date.now();
    try {
      res.locals.hop = deps.signer.verifyHeader(req.get(HOP_HEADER), deps.selfId, req.path);
    } catch (e) {
      if (!(e instanceof HopAuthError)) throw e;
      return refuse(req, res, e.message);
    }
    next();
  };
  const body = [credential, raw];
  // A file operation carries at most a read's payload, in base64.
  const fileBody = [credential, express.raw({ type: () => true, limit: MAX_WORKSPACE_HOP_BODY })];
  /** How the bodies travel: sealed (this release's paths), or in clear (/internal/v1/, from replicas of the release before). */
  const sealedPath = (req: Request) => !req.path.toLowerCase().startsWith('/internal/v1/');
  /** The request's JSON body once it is the one signed (and the credential unused), opened; else answered here, and undefined. */
  const verified = (req: Request, res: Response): unknown => {
    const bytes = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    let text: string;
    try {
      const claims = deps.signer.verifyBody(res.locals.hop as HopClaims, bytes);
      text = sealedPath(req) ? deps.signer.openRequest(claims, bytes) : bytes.toString('utf8');
    } catch (e) {
      if (!(e instanceof HopAuthError)) throw e;
      refuse(req, res, e.message);
      return undefined;
    }
    try {
      return JSON.parse(text) as unknown;
    } catch {
      res.status(400).json({ error: { message: 'not JSON', reason: 'invalid_request' } });
      return undefined;
    }
  };
  /** An answer's lines as the request's path wants them: sealed to its nonce and place, or JSON in clear. */
  const encoder = (req: Request, res: Response) => {
    const claims = res.locals.hop as HopClaims;
    let index = 0;
    return sealedPath(req) ? (v: unknown) => `${deps.signer.sealAnswer(claims, index++, JSON.stringify(v))}\n` : (v: unknown) => `${JSON.stringify(v)}\n`;
  };
  const answer = (req: Request, res: Response, v: unknown) => void res.status(200).type(sealedPath(req) ? 'text/plain' : 'application/json').send(encoder(req, res)(v));
  const bad = (res: Response, what: string) => void res.status(400).json({ error: { message: `not ${what}`, reason: 'invalid_request' } });

  const run: RequestHandler = async (req, res) => {
    const v = verified(req, res);
    if (v === undefined) return;
    const hop = parseHopRun(v);
    if (!hop) return bad(res, 'a run');
    const encode = encoder(req, res);
    // The headers go with the first line (a quiet run sends one within WAIT_EVERY_MS), and
    // the last line ends the answer: a short run's answer is one write.
    res.status(200).set({ 'content-type': sealedPath(req) ? 'text/plain' : 'application/x-ndjson', 'cache-control': 'no-store' });
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    try {
      await serveRun(sandboxes.executeHere.bind(sandboxes), hop, gone.signal, (line) => (line.t === 'done' || line.t === 'error' ? res.end(encode(line)) : res.write(encode(line))));
    } catch (e) {
      // Its error line is written: the answer ends whole, and the log has the rest.
      deps.log.error({ err: e, user: hop.owner.name }, 'a run sent by another replica failed');
    } finally {
      res.end();
    }
  };

  const stop: RequestHandler = async (req, res) => {
    const v = verified(req, res) as Record<string, unknown> | undefined;
    if (v === undefined) return;
    const { userId, kill, by, cause } = v ?? {};
    if (typeof userId !== 'number' || !Number.isSafeInteger(userId) || (kill !== undefined && typeof kill !== 'boolean') || (by !== undefined && typeof by !== 'string') || (cause !== undefined && typeof cause !== 'string')) {
      return bad(res, 'a stop');
    }
    const stopped = await sandboxes.stopUserHere(userId, { kill, by: by?.slice(0, 200), cause: cause?.slice(0, 500) });
    answer(req, res, { stopped });
  };

  const list: RequestHandler = async (req, res) => {
    const v = verified(req, res) as Record<string, unknown> | undefined;
    if (v === undefined) return;
    answer(req, res, { sandboxes: await sandboxes.list({ stats: v?.stats === true }), pooled: sandboxes.pooled() });
  };

  let fileOpsUnderway = 0;
  const fileOpsOf = new Map<number, number>();
  const workspace: RequestHandler = async (req, res) => {
    const v = verified(req, res);
    if (v === undefined) return;
    const hop = parseWorkspaceHop(v);
    if (!hop) return bad(res, 'a file operation');
    // Other hosts' file operations take a bounded share of this gateway, and one user a bounded share of that;
    // beyond it, nothing is done and the sender is told to try again.
    const user = hop.owner.userId;
    const theirs = fileOpsOf.get(user) ?? 0;
    if (fileOpsUnderway >= MAX_FILE_HOPS_UNDERWAY || theirs >= MAX_FILE_HOPS_PER_USER) {
      return answer(req, res, { error: { reason: 'busy', message: 'the gateway on the host of these files is busy with other file operations: try again in a moment' } });
    }
    fileOpsUnderway++;
    fileOpsOf.set(user, theirs + 1);
    try {
      const r = await sandboxes.workspaceRequestHere(hop.owner, hop.header, hop.data, (res.locals.received as number) + FILE_HOP_START_WITHIN_MS);
      answer(req, res, { reply: r.reply, ...(r.data && { data: r.data.toString('base64') }) });
    } catch (e) {
      // A refusal the other gateway shows as the workspace unavailable, with this message.
      if (!(e instanceof GatewayError)) deps.log.error({ err: e, user: hop.owner.name }, 'a file operation sent by another replica failed');
      answer(req, res, { error: { reason: e instanceof GatewayError ? e.reason : 'internal', message: e instanceof GatewayError ? e.message : 'the gateway on the host of these files could not reach them' } });
    } finally {
      fileOpsUnderway--;
      const left = (fileOpsOf.get(user) ?? 1) - 1;
      if (left > 0) fileOpsOf.set(user, left);
      else fileOpsOf.delete(user);
    }
  };

  /** Remove this store's copies of deleted users' workspaces now: which ones is the database's to say, never the request's. */
  const deletions: RequestHandler = async (req, res) => {
    const v = verified(req, res);
    if (v === undefined) return;
    if (typeof v !== 'object' || v === null || Array.isArray(v) || Object.keys(v).length) return bad(res, 'a request to remove deleted users’ workspaces');
    answer(req, res, { removed: await sandboxes.removeDeletedWorkspaces() });
  };

  /** The probe the asking replica left in this store's folder, as this replica reads it: whether the two share the folder. */
  const storeProbe: RequestHandler = (req, res) => {
    const v = verified(req, res) as Record<string, unknown> | undefined;
    if (v === undefined) return;
    // Only the asker's own probe: its id is the one the hop's credential was signed by.
    if (typeof v !== 'object' || v === null || v.replica !== (res.locals.hop as HopClaims).from || Object.keys(v).length !== 1) return bad(res, 'a store probe');
    const probe = deps.workspaces?.probes?.read(String(v.replica));
    answer(req, res, { store: deps.workspaces?.storeId ?? null, probes: !!deps.workspaces?.probes, probe: probe ?? null });
  };

  return {
    [HOP_STORE_PROBE_PATH]: [credential, express.raw({ type: () => true, limit: 4096 }), storeProbe],
    [HOP_DELETIONS_PATH]: [credential, express.raw({ type: () => true, limit: 4096 }), deletions],
    [HOP_WORKSPACE_PATH]: [...fileBody, workspace],
    [HOP_RUN_PATH]: [...body, run],
    [HOP_STOP_PATH]: [...body, stop],
    [HOP_LIST_PATH]: [...body, list],
    [HOP_V1_PATHS.run]: [...body, run],
    [HOP_V1_PATHS.stop]: [...body, stop],
    [HOP_V1_PATHS.list]: [...body, list],
  };
}

/** Refusals logged at most once a minute: unsigned requests from anywhere must not fill the log. */
function refusalLog(log: Logger): (from: string | undefined, path: string, why: string) => void {
  let last = 0;
  return (from, path, why) => {
    if (Date.now() - last <= 60_000) return;
    last = Date.now();
    log.warn({ from, path, err: why }, 'internal hop refused (logged once a minute)');
  };
}

/**
 * The run channel's end: an upgrade to HOP_CHANNEL_PATH whose credential holds (checked
 * as a run's over HTTP, with an empty body: MAC, this replica, its time, a nonce never
 * seen) becomes a channel carrying runs (src/sandboxes/hop-channel.ts); one whose
 * credential does not is answered 401 and closed.
 */
export function internalChannel(deps: InternalHopDeps): InternalChannel {
  const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: MAX_RUN_FRAME_BYTES });
  const logRefusal = refusalLog(deps.log);
  const end = {
    signer: deps.signer,
    executeHere: deps.sandboxes.executeHere.bind(deps.sandboxes),
    log: deps.log,
    underway: new Set<AbortController>(),
    outputLimitBytes: deps.outputLimitBytes,
  };
  return {
    take(req, socket, head) {
      // The path as sent, exactly: no URL parsing (a target Node takes may not be one URL
      // takes), no dot segments or escapes resolved (a load balancer that keeps /internal
      // out matches the path as sent too).
      if ((req.url ?? '').split('?')[0] !== HOP_CHANNEL_PATH) return false;
      let claims: HopClaims;
      try {
        const header = req.headers[HOP_HEADER];
        claims = deps.signer.verify(typeof header === 'string' ? header : undefined, deps.selfId, HOP_CHANNEL_PATH, Buffer.alloc(0));
      } catch (e) {
        if (!(e instanceof HopAuthError)) throw e;
        logRefusal(req.socket.remoteAddress, HOP_CHANNEL_PATH, e.message);
        // Closed once the refusal is out, whatever the other side does (a half-open socket would stay for good).
        socket.end('HTTP/1.1 401 Unauthorized\r\nconnection: close\r\ncontent-length: 0\r\n\r\n', () => socket.destroy());
        setTimeout(() => socket.destroy(), 1000).unref();
        return true;
      }
      wss.handleUpgrade(req, socket, head, (ws) => {
        deps.log.info({ from: claims.from }, 'a run channel from another replica opened');
        serveChannel(ws, claims.nonce, end);
      });
      return true;
    },
    underway: () => end.underway.size,
    close() {
      for (const ws of wss.clients) ws.terminate();
    },
  };
}

export interface InternalChannel {
  /** Takes an upgrade to the channel's path (true), answering it or refusing it; any other is the caller's (false). */
  take(req: http.IncomingMessage, socket: Duplex, head: Buffer): boolean;
  /** Runs under way on channels from other replicas. */
  underway(): number;
  /** Ends every channel from other replicas (their runs are aborted). */
  close(): void;
}
