/**
 * The name a TLS client asks for (SNI), read from the first bytes it sends through a
 * tunnel (RFC 8446 §4.1.2, RFC 6066 §3), so the proxy can refuse a tunnel opened to one
 * allowed host whose TLS asks a server on the same address for another. Strict on
 * purpose: a handshake this cannot read is refused, never waved through, since a server
 * may read what this does not.
 */

/** What the first bytes of a tunnel say. */
export type Hello =
  | { kind: 'more' } // not enough bytes yet
  | { kind: 'not-tls' } // the first byte is not a TLS handshake record
  | { kind: 'hello'; serverName?: string }
  | { kind: 'malformed'; detail: string };

/** Bytes read before giving up on a ClientHello (a real one is a few KiB, post-quantum ones included). */
export const MAX_HELLO_BYTES = 64 * 1024;

const HANDSHAKE_RECORD = 0x16;
const CLIENT_HELLO = 0x01;
const SERVER_NAME_EXTENSION = 0x0000;
const HOST_NAME = 0x00;

/** Reads the ClientHello in `data` (the tunnel's first bytes, possibly several records). */
export function readClientHello(data: Buffer): Hello {
  if (data.length === 0) return { kind: 'more' };
  if (data[0] !== HANDSHAKE_RECORD) return { kind: 'not-tls' };
  // The handshake message may span records: join their fragments.
  const fragments: Buffer[] = [];
  let joined = 0;
  let at = 0;
  let needed = -1;
  while (needed < 0 || joined < needed) {
    if (at + 5 > data.length) return data.length >= MAX_HELLO_BYTES ? { kind: 'malformed', detail: 'too long' } : { kind: 'more' };
    if (data[at] !== HANDSHAKE_RECORD) return { kind: 'malformed', detail: 'a record other than a handshake before the ClientHello ended' };
    if (data[at + 1] !== 0x03) return { kind: 'malformed', detail: 'not a TLS record version' };
    const length = data.readUInt16BE(at + 3);
    if (length === 0 || length > 16384 + 2048) return { kind: 'malformed', detail: 'record length' };
    if (at + 5 + length > data.length) return data.length >= MAX_HELLO_BYTES ? { kind: 'malformed', detail: 'too long' } : { kind: 'more' };
    fragments.push(data.subarray(at + 5, at + 5 + length));
    joined += length;
    at += 5 + length;
    if (needed < 0 && joined >= 4) {
      const head = Buffer.concat(fragments);
      if (head[0] !== CLIENT_HELLO) return { kind: 'malformed', detail: 'the first handshake message is not a ClientHello' };
      needed = 4 + head.readUIntBE(1, 3);
      if (needed > MAX_HELLO_BYTES) return { kind: 'malformed', detail: 'too long' };
    }
  }
  const message = Buffer.concat(fragments).subarray(4, needed);
  try {
    return { kind: 'hello', serverName: serverName(message) };
  } catch (e) {
    return { kind: 'malformed', detail: (e as Error).message };
  }
}

/** The host_name of the server_name extension of a ClientHello body, if it has one. */
function serverName(body: Buffer): string | undefined {
  const r = new Reader(body);
  r.skip(2 + 32); // legacy_version, random
  r.skip(r.u8()); // legacy_session_id
  r.skip(r.u16()); // cipher_suites
  r.skip(r.u8()); // legacy_compression_methods
  if (r.done()) return undefined; // no extensions at all (an old client)
  const extensions = new Reader(r.take(r.u16()));
  if (!r.done()) throw new Error('bytes after the extensions');
  let name: string | undefined;
  let seen = false;
  while (!extensions.done()) {
    const type = extensions.u16();
    const data = extensions.take(extensions.u16());
    if (type !== SERVER_NAME_EXTENSION) continue;
    if (seen) throw new Error('two server_name extensions');
    seen = true;
    const list = new Reader(data);
    const names = new Reader(list.take(list.u16()));
    if (!list.done()) throw new Error('bytes after the server name list');
    while (!names.done()) {
      const nameType = names.u8();
      const value = names.take(names.u16());
      if (nameType !== HOST_NAME) continue;
      // One host_name only (RFC 6066 §3), in ASCII: anything else is not a name we can compare.
      if (name !== undefined) throw new Error('two host names');
      if (!/^[\x21-\x7e]+$/.test(value.toString('latin1'))) throw new Error('a host name that is not printable ASCII');
      name = value.toString('latin1');
    }
  }
  return name;
}

class Reader {
  private at = 0;
  constructor(private readonly buf: Buffer) {}
  done(): boolean {
    return this.at === this.buf.length;
  }
  private need(n: number): void {
    if (this.at + n > this.buf.length) throw new Error('a ClientHello cut short');
  }
  u8(): number {
    this.need(1);
    return this.buf[this.at++]!;
  }
  u16(): number {
    this.need(2);
    const v = this.buf.readUInt16BE(this.at);
    this.at += 2;
    return v;
  }
  skip(n: number): void {
    this.need(n);
    this.at += n;
  }
  take(n: number): Buffer {
    this.need(n);
    const v = this.buf.subarray(this.at, this.at + n);
    this.at += n;
    return v;
  }
}

/** Whether a ClientHello's name is the tunnel's host (case and a trailing dot aside). */
export function sameHost(serverName: string, host: string): boolean {
  const norm = (h: string) => h.toLowerCase().replace(/\.$/, '');
  return norm(serverName) === norm(host);
}
