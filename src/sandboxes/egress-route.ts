/**
 * Connections code in a sandbox opens to its egress port (the runner's egress relay,
 * sandbox/runner/sandgate_runner/parent/egress_relay.py), as Node streams: taken only
 * from the execution in flight and only when its `net` grant is not empty, each handed to
 * the egress handler (src/egress) with that grant. This file knows the runner's framing
 * and its windows, nothing of HTTP or of policies.
 *
 * Each direction keeps to a window (NET_WINDOW bytes sent and not acknowledged): bytes
 * from the sandbox are acknowledged once the handler has read them, and a write towards
 * the sandbox waits while the runner has not acknowledged enough. A runner that sends
 * past its window, or for a connection it did not open, loses the connection.
 */
import { Duplex } from 'node:stream';
import type { UserSandbox } from './live.js';
import type { Grant } from './permissions.js';
import type { SandboxOwner } from './types.js';

export const NET_WINDOW = 256 * 1024;
/** Bytes per `net_data` sent to the runner (it reads its clients in 32 KiB). */
const FRAME = 32 * 1024;
/** Connections one sandbox may have open at once (the runner's own limit too). */
export const MAX_NET_PER_SANDBOX = 64;

/** A connection code opened, for the egress handler. */
export interface SandboxConnection {
  owner: SandboxOwner;
  /** The execution during which it was opened. */
  execId: string;
  /** That execution's `net` grant (false: none; the proxy refuses, saying so). */
  grant: Grant;
  stream: Duplex;
}

/** Serves connections from sandboxes (the gateway's egress proxy). */
export type EgressHandler = (conn: SandboxConnection) => void;

type Send = (req: { op: 'net_data'; id: string; data: string } | { op: 'net_ack'; id: string; bytes: number } | { op: 'net_end' | 'net_close'; id: string }) => void;

class RunnerStream extends Duplex {
  /** Bytes written towards the sandbox not yet acknowledged, and a write waiting for room. */
  private unacked = 0;
  private waiting?: () => void;
  /** Bytes from the sandbox not yet acknowledged because the reader is behind. */
  private owed = 0;
  /** Bytes the runner sent and we have not acknowledged (its window, checked). */
  private received = 0;
  closedByRunner = false;

  constructor(
    readonly connId: string,
    readonly execId: string,
    private readonly send: Send,
  ) {
    super({ allowHalfOpen: true, readableHighWaterMark: 64 * 1024 });
  }

  fromRunner(data: Buffer): boolean {
    this.received += data.length;
    if (this.received > NET_WINDOW + FRAME) return false;
    if (this.push(data)) this.ack(data.length);
    else this.owed += data.length;
    return true;
  }

  private ack(bytes: number): void {
    this.received -= bytes;
    this.safeSend({ op: 'net_ack', id: this.connId, bytes });
  }

  /** False when the runner acknowledges more than was sent: not the protocol. */
  acked(bytes: number): boolean {
    if (bytes > this.unacked) return false;
    this.unacked -= bytes;
    if (this.unacked < NET_WINDOW && this.waiting) {
      const go = this.waiting;
      this.waiting = undefined;
      go();
    }
    return true;
  }

  private safeSend(req: Parameters<Send>[0]): void {
    try {
      this.send(req);
    } catch {
      this.destroy();
    }
  }

  override _read(): void {
    if (this.owed) {
      const n = this.owed;
      this.owed = 0;
      this.ack(n);
    }
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    for (let at = 0; at < chunk.length; at += FRAME) {
      const piece = chunk.subarray(at, at + FRAME);
      this.safeSend({
        op: 'net_data',
        id: this.connId,
        data: piece.toString('base64'),
      });
    }
    this.unacked += chunk.length;
    if (this.unacked < NET_WINDOW) cb();
    else this.waiting = () => cb();
  }

  override _final(cb: (err?: Error | null) => void): void {
    if (!this.closedByRunner) this.safeSend({ op: 'net_end', id: this.connId });
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    if (!this.closedByRunner) {
      this.closedByRunner = true;
      try {
        this.send({ op: 'net_close', id: this.connId });
      } catch {
        /* the sandbox is gone */
      }
    }
    this.waiting = undefined;
    cb(err);
  }
}

/** Routes `sb`'s egress connections to whatever `handler()` is at the time. */
export function routeEgress(sb: UserSandbox, handler: () => EgressHandler | undefined): void {
  const conns = new Map<string, RunnerStream>();
  const send: Send = (req) => sb.handle.send(req);
  const refuse = (id: string) => {
    try {
      send({ op: 'net_close', id });
    } catch {
      /* gone */
    }
  };
  // The gateway ends a run's connections itself when the run ends (the relay does too):
  // a connection keeps the grant of the run that opened it, and no run outlives its own.
  sb.endEgress = (execId) => {
    for (const c of conns.values()) if (c.execId === execId) c.destroy();
  };
  sb.handle.onExit(() => {
    for (const c of conns.values()) {
      c.closedByRunner = true;
      c.destroy();
    }
    conns.clear();
  });
  sb.handle.onEvent((e) => {
    switch (e.type) {
      case 'net_open': {
        // A run narrowed to no network still reaches the proxy, which refuses each request
        // naming what is missing; a connection from no run in flight is cut.
        const grant = sb.runNet ?? false;
        const serve = handler();
        if (e.execId !== sb.inFlight || !serve || conns.has(e.id) || conns.size >= MAX_NET_PER_SANDBOX) return refuse(e.id);
        const stream = new RunnerStream(e.id, e.execId, send);
        conns.set(e.id, stream);
        stream.on('close', () => conns.delete(e.id));
        serve({ owner: sb.owner, execId: e.execId, grant, stream });
        return;
      }
      case 'net_data': {
        const c = conns.get(e.id);
        if (c && !c.fromRunner(e.data)) {
          c.destroy(new Error('the runner sent past its window'));
        }
        return;
      }
      case 'net_ack': {
        const c = conns.get(e.id);
        if (c && !c.acked(e.bytes)) c.destroy(new Error('the runner acknowledged bytes never sent'));
        return;
      }
      case 'net_end':
        conns.get(e.id)?.push(null);
        return;
      case 'net_close': {
        const c = conns.get(e.id);
        if (c) {
          c.closedByRunner = true;
          c.destroy();
        }
        return;
      }
      default:
    }
  });
}
