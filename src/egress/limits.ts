/**
 * What one user's connections out may take, whichever sandbox or replica-local run opens
 * them: connections open at once, bytes per hour, and a rate across all of them (a token
 * bucket), so one user's downloads cannot take the gateway's time from others' runs.
 * Kept in memory per gateway.
 */
import type { Duplex, Readable, Writable } from 'node:stream';

export interface LimitSettings {
  maxConnections: number;
  bytesPerHour: number;
  bytesPerSec: number;
}

interface UserUse {
  open: number;
  hourStart: number;
  hourBytes: number;
  /** Token bucket: bytes that may pass now, refilled at bytesPerSec up to one second's worth. */
  tokens: number;
  refilled: number;
}

export interface Meter {
  readonly sentBytes: number;
  readonly receivedBytes: number;
  readonly ended: boolean;
  sent(n: number): void;
  received(n: number): void;
  /** Copies `from` into `to`, counting, paced and with backpressure; `to` ends when `from` does. */
  pipe(from: Readable | Duplex, to: Writable | Duplex, direction: 'sent' | 'received'): void;
  /** The connection is over: it no longer counts as open. */
  end(): void;
}

const HOUR = 3_600_000;

export class EgressLimits {
  private readonly users = new Map<number, UserUse>();

  constructor(private readonly settings: LimitSettings) {}

  private use(userId: number): UserUse {
    let u = this.users.get(userId);
    const now = Date.now();
    if (!u) {
      u = {
        open: 0,
        hourStart: now,
        hourBytes: 0,
        tokens: this.settings.bytesPerSec,
        refilled: now,
      };
      this.users.set(userId, u);
    }
    if (now - u.hourStart >= HOUR) {
      u.hourStart = now;
      u.hourBytes = 0;
    }
    return u;
  }

  /** A new connection for `userId`, or why not. */
  admit(userId: number): { ok: true; meter: Meter } | { ok: false; message: string } {
    const u = this.use(userId);
    if (u.open >= this.settings.maxConnections) {
      return {
        ok: false,
        message: `${this.settings.maxConnections} connections are already open (SANDGATE_EGRESS_MAX_CONNECTIONS): wait for one to end`,
      };
    }
    if (u.hourBytes >= this.settings.bytesPerHour) {
      const mins = Math.ceil((u.hourStart + HOUR - Date.now()) / 60_000);
      return {
        ok: false,
        message: `this hour's ${Math.round(this.settings.bytesPerHour / 1048576)} MiB of network traffic are used up (SANDGATE_EGRESS_MB_PER_HOUR): try again in ${mins} min`,
      };
    }
    u.open++;
    return { ok: true, meter: this.meter(u) };
  }

  /** Milliseconds to wait before `n` more bytes may pass (0: now); takes them. */
  private pace(u: UserUse, n: number): number {
    const now = Date.now();
    const rate = this.settings.bytesPerSec;
    u.tokens = Math.min(rate, u.tokens + ((now - u.refilled) * rate) / 1000);
    u.refilled = now;
    u.tokens -= n;
    u.hourBytes += n;
    return u.tokens >= 0 ? 0 : Math.ceil((-u.tokens * 1000) / rate);
  }

  private meter(u: UserUse): Meter {
    const pace = (n: number) => this.pace(u, n);
    const perHour = this.settings.bytesPerHour;
    const counts = { sent: 0, received: 0 };
    let ended = false;
    return {
      get sentBytes() {
        return counts.sent;
      },
      get receivedBytes() {
        return counts.received;
      },
      get ended() {
        return ended;
      },
      sent(n) {
        counts.sent += n;
        pace(n);
      },
      received(n) {
        counts.received += n;
        pace(n);
      },
      pipe(from, to, direction) {
        from.on('data', (chunk: Buffer) => {
          counts[direction] += chunk.length;
          const wait = pace(chunk.length);
          if (u.hourBytes > perHour) {
            from.destroy();
            to.destroy();
            return;
          }
          const more = to.write(chunk);
          if (!more || wait) {
            from.pause();
            let waited = !wait;
            let drained = more;
            const go = () => {
              if (waited && drained && !ended) from.resume();
            };
            if (wait) setTimeout(() => ((waited = true), go()), wait).unref();
            if (!more) to.once('drain', () => ((drained = true), go()));
          }
        });
        from.on('end', () => to.end());
      },
      end() {
        if (ended) return;
        ended = true;
        u.open--;
      },
    };
  }
}
