/**
 * The internal hop's credential: how one replica proves to another that a request comes
 * from a gateway of the same installation, and for that replica only.
 *
 * A request carries `sandgate-hop: <claims>.<mac>`, where claims (base64url JSON) name
 * the sender, the replica and endpoint it is for, the time, a random nonce and the SHA-256 of the body,
 * and mac is their HMAC-SHA256 under the installation's replica key (`replicas.key` in
 * the data directory, or SANDGATE_REPLICA_KEY: the same on every replica, like the PII
 * and upstream keys). The receiver checks the mac, that the request is for it, that it
 * is at most `maxSkewMs` old or early, that the body is the one signed, and that the
 * nonce was not seen before within that window: a request copied off the wire cannot be
 * replayed, sent to another replica or endpoint, or given another body.
 *
 * The key never leaves the gateways: the database alone (which holds no copy of it) is
 * not enough to forge a hop.
 *
 * The bodies are sealed too, both ways (AES-256-GCM under a key derived from the same
 * one): the code a request carries, and each line of the answer, bound to the request's
 * nonce and its place in the answer (on a run channel, each frame to the channel's nonce,
 * its direction and its place). Someone on the network between replicas, or who
 * points a replica's internal URL in the database at a server of theirs, reads neither
 * the code nor its output, and cannot forge, reorder or replay a line of an answer.
 */
import crypto from 'node:crypto';
import { open, seal } from '../secrets/aead.js';

export const HOP_HEADER = 'sandgate-hop';

/** A key for one purpose, derived (HKDF-SHA256) from the installation's replica key: the hop's signatures, the live updates' seal. */
export function replicaSubkey(replicaKey: Buffer, purpose: 'internal hop' | 'live updates'): Buffer {
  return Buffer.from(crypto.hkdfSync('sha256', replicaKey, '', `sandgate ${purpose}`, 32));
}

export interface HopClaims {
  /** The sending replica's id. */
  from: string;
  /** The replica the request is for. */
  to: string;
  /** The path it is sent to (its endpoint). */
  path: string;
  /** Epoch ms at which it was signed. */
  ts: number;
  nonce: string;
  /** SHA-256 of the request body, hex. */
  body: string;
}

/** A hop credential that does not hold: the request is refused (401), and nothing in it is used. */
export class HopAuthError extends Error {
  override name = 'HopAuthError';
}

const answerAad = (nonce: string, index: number) => Buffer.from(`sandgate hop answer|${nonce}|${index}`);
const frameAad = (nonce: string, from: ChannelEnd, index: number) => Buffer.from(`sandgate hop channel|${nonce}|${from}|${index}`);

/** Which end of a run channel sent a frame: the replica sending runs, or the one holding the sandboxes. */
export type ChannelEnd = 'sender' | 'holder';

/** Seals and opens the frames of one run channel (`HopSigner.channel`). */
export interface ChannelSeal {
  /** Frame `index` from `from`, sealed. */
  seal(from: ChannelEnd, index: number, text: string): Buffer;
  /** Frame `index` from `from`, opened; HopAuthError when it is not that frame sealed for this channel. */
  open(from: ChannelEnd, index: number, frame: Buffer): string;
}
const sha256 = (body: Buffer | string) => crypto.createHash('sha256').update(body).digest('hex');
const mac = (key: Buffer, claims: string) => crypto.createHmac('sha256', key).update(claims).digest();

export interface HopSignerOptions {
  /** 32 bytes shared by every replica of the installation. */
  key: Buffer;
  /** How far a request's time may be from the receiver's clock. Default 30 s. */
  maxSkewMs?: number;
  now?: () => number;
}

export class HopSigner {
  private readonly key: Buffer;
  /** Seals the bodies: a key of its own, derived from the signing key. */
  private readonly sealKey: Buffer;
  private readonly maxSkewMs: number;
  private readonly now: () => number;
  /** Nonces seen within the window, with when they stop mattering. */
  private readonly seen = new Map<string, number>();

  constructor(opts: HopSignerOptions) {
    if (opts.key.length < 32) throw new Error('HopSigner: the key must be at least 32 bytes');
    this.key = opts.key;
    this.sealKey = Buffer.from(crypto.hkdfSync('sha256', opts.key, '', 'sandgate hop bodies', 32));
    this.maxSkewMs = opts.maxSkewMs ?? 30_000;
    this.now = opts.now ?? Date.now;
  }

  /** The header value for a request from `from` to `to`'s endpoint `path` with `body`. */
  sign(from: string, to: string, path: string, body: Buffer | string): string {
    return this.signRequest(from, to, path, body).header;
  }

  /** `sign`, with the request's nonce: its answer's lines are sealed to it (`openAnswer`). */
  signRequest(from: string, to: string, path: string, body: Buffer | string): { header: string; nonce: string } {
    const claims: HopClaims = { from, to, path, ts: this.now(), nonce: crypto.randomBytes(16).toString('base64url'), body: sha256(body) };
    const encoded = Buffer.from(JSON.stringify(claims)).toString('base64url');
    return { header: `${encoded}.${mac(this.key, encoded).toString('base64url')}`, nonce: claims.nonce };
  }

  /** A request's body sealed for endpoint `path` (then signed with `signRequest`). */
  sealRequest(path: string, text: string): Buffer {
    return seal(this.sealKey, text, Buffer.from(`sandgate hop request|${path}`));
  }

  /** The text of a request's sealed body, once its credential held; HopAuthError when it does not open. */
  openRequest(claims: HopClaims, body: Buffer): string {
    try {
      return open(this.sealKey, body, Buffer.from(`sandgate hop request|${claims.path}`)).toString('utf8');
    } catch {
      throw new HopAuthError('hop body does not open with this installation’s key');
    }
  }

  /** Line `index` of the answer to the request of `claims`, sealed (base64, no newline). */
  sealAnswer(claims: Pick<HopClaims, 'nonce'>, index: number, text: string): string {
    return seal(this.sealKey, text, answerAad(claims.nonce, index)).toString('base64');
  }

  /** Line `index` of the answer to the request with `nonce`, opened; HopAuthError when it is not that line sealed under this key. */
  openAnswer(nonce: string, index: number, line: string): string {
    try {
      return open(this.sealKey, Buffer.from(line, 'base64'), answerAad(nonce, index)).toString('utf8');
    } catch {
      throw new HopAuthError('an answer line that does not open with this installation’s key, or out of its place');
    }
  }

  /**
   * The seal of the run channel opened with `nonce`: frames under a key of the channel's
   * own (derived from the nonce, so no key seals more than one channel's frames), each
   * bound to its direction and place: a frame read off the wire cannot be replayed,
   * reordered, sent back the other way or onto another channel.
   */
  channel(nonce: string): ChannelSeal {
    const key = Buffer.from(crypto.hkdfSync('sha256', this.sealKey, nonce, 'sandgate hop channel', 32));
    return {
      seal: (from, index, text) => seal(key, text, frameAad(nonce, from, index)),
      open: (from, index, frame) => {
        try {
          return open(key, frame, frameAad(nonce, from, index)).toString('utf8');
        } catch {
          throw new HopAuthError('a channel frame that does not open with this installation’s key, or out of its place');
        }
      },
    };
  }

  /** The claims of a request for replica `self`'s endpoint `path` with `body`, or HopAuthError saying why not. */
  verify(header: string | undefined, self: string, path: string, body: Buffer): HopClaims {
    return this.verifyBody(this.verifyHeader(header, self, path), body);
  }

  /**
   * The first half of `verify`, before the body is read: the credential's MAC, target,
   * endpoint and time. A request that fails it is refused without its body being read.
   */
  verifyHeader(header: string | undefined, self: string, path: string): HopClaims {
    if (!header || header.length > 2048) throw new HopAuthError('no hop credential');
    const dot = header.indexOf('.');
    if (dot < 0) throw new HopAuthError('malformed hop credential');
    const encoded = header.slice(0, dot);
    const given = Buffer.from(header.slice(dot + 1), 'base64url');
    const expected = mac(this.key, encoded);
    if (given.length !== expected.length || !crypto.timingSafeEqual(given, expected)) throw new HopAuthError('hop credential does not verify');
    let claims: HopClaims;
    try {
      claims = JSON.parse(Buffer.from(encoded, 'base64url').toString('utf8')) as HopClaims;
    } catch {
      throw new HopAuthError('malformed hop claims');
    }
    if (typeof claims !== 'object' || claims === null || typeof claims.from !== 'string' || typeof claims.nonce !== 'string' || typeof claims.ts !== 'number' || typeof claims.body !== 'string') {
      throw new HopAuthError('malformed hop claims');
    }
    if (claims.to !== self) throw new HopAuthError('hop meant for another replica');
    if (claims.path !== path) throw new HopAuthError('hop meant for another endpoint');
    const now = this.now();
    if (!(Math.abs(now - claims.ts) <= this.maxSkewMs)) throw new HopAuthError('hop credential expired (or the replicas’ clocks differ by more than the allowed skew)');
    return claims;
  }

  /** The second half of `verify`: the body is the one signed, and the credential was not used before. */
  verifyBody(claims: HopClaims, body: Buffer): HopClaims {
    if (claims.body !== sha256(body)) throw new HopAuthError('hop body differs from the one signed');
    const now = this.now();
    this.forgetOld(now);
    if (this.seen.has(claims.nonce)) throw new HopAuthError('hop credential used twice');
    this.seen.set(claims.nonce, claims.ts + this.maxSkewMs);
    return claims;
  }

  private forgetOld(now: number): void {
    // Insertion order is nearly time order: stop at the first that could still be replayed
    // (one out of order stays a little longer; none is forgotten early).
    for (const [nonce, until] of this.seen) {
      if (until >= now) break;
      this.seen.delete(nonce);
    }
  }
}
