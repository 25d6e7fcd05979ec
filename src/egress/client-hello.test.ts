import net from 'node:net';
import tls from 'node:tls';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_HELLO_BYTES, readClientHello, sameHost } from './client-hello.js';

/** The first bytes Node's TLS client sends to a server, as a tunnel would carry them. */
function captureHello(servername: string | undefined, server: net.Server): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    server.once('connection', (s) => {
      let got = Buffer.alloc(0);
      s.on('data', (d: Buffer) => {
        got = Buffer.concat([got, d]);
        if (readClientHello(got).kind !== 'more') {
          s.destroy();
          resolve(got);
        }
      });
    });
    const { port } = server.address() as net.AddressInfo;
    const c = tls.connect({ host: '127.0.0.1', port, ...(servername !== undefined && { servername }), rejectUnauthorized: false });
    c.on('error', () => undefined);
    setTimeout(() => reject(new Error('no ClientHello')), 5000).unref();
  });
}

/** The same handshake message cut into records of at most `size` bytes. */
function refragment(hello: Buffer, size: number): Buffer {
  const message = hello.subarray(5, 5 + hello.readUInt16BE(3));
  const records: Buffer[] = [];
  for (let at = 0; at < message.length; at += size) {
    const part = message.subarray(at, at + size);
    const header = Buffer.from([0x16, 0x03, 0x01, 0, 0]);
    header.writeUInt16BE(part.length, 3);
    records.push(header, part);
  }
  return Buffer.concat(records);
}

describe('reading the name a TLS client asks for', () => {
  const server = net.createServer();
  beforeAll(() => new Promise<void>((r) => server.listen(0, '127.0.0.1', r)));
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it("reads the server name of a real client's hello, whole, byte by byte or in many records", async () => {
    const hello = await captureHello('Pkgs.Example.test', server);
    expect(readClientHello(hello)).toEqual({ kind: 'hello', serverName: 'Pkgs.Example.test' });
    for (let n = 0; n < hello.length; n += 37) expect(readClientHello(hello.subarray(0, n)).kind).toBe('more');
    expect(readClientHello(refragment(hello, 100))).toEqual({ kind: 'hello', serverName: 'Pkgs.Example.test' });
    expect(readClientHello(refragment(hello, 1))).toEqual({ kind: 'hello', serverName: 'Pkgs.Example.test' });
  });

  it('finds no name in a hello without one, and says which bytes are not TLS', async () => {
    // Node sends no server name for an address.
    const hello = await captureHello(undefined, server);
    expect(readClientHello(hello)).toEqual({ kind: 'hello' });
    expect(readClientHello(Buffer.from('GET / HTTP/1.1\r\n\r\n'))).toEqual({ kind: 'not-tls' });
    expect(readClientHello(Buffer.from('SSH-2.0-x\r\n'))).toEqual({ kind: 'not-tls' });
  });

  it('refuses what a server might read differently: cut, another message, a NUL in the name, never ending', async () => {
    const hello = await captureHello('a.test', server);
    const body = hello.subarray(5);
    // A handshake length longer than its records, then records of another type.
    const alert = Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]);
    const longer = Buffer.from(hello);
    longer.writeUIntBE(body.length + 10, 6, 3);
    expect(readClientHello(Buffer.concat([longer, alert])).kind).toBe('malformed');
    // Not a ClientHello (a ServerHello's type).
    const other = Buffer.from(hello);
    other[5] = 0x02;
    expect(readClientHello(other).kind).toBe('malformed');
    // A name with a NUL in it (read as "a.tes" by a C server).
    const at = hello.indexOf(Buffer.from('a.test'));
    const twice = Buffer.from(hello);
    twice.write('a.tes\x00', at, 'latin1');
    expect(readClientHello(twice)).toMatchObject({ kind: 'malformed' });
    // Never-ending: more than MAX_HELLO_BYTES of records that do not finish it.
    const huge = Buffer.from([0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0, 0, 0]);
    huge.writeUIntBE(MAX_HELLO_BYTES * 2, 6, 3);
    expect(readClientHello(huge).kind).toBe('malformed');
  });

  it('never throws, whatever the bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), fc.boolean(), (bytes, handshake) => {
        const data = Buffer.from(bytes);
        if (handshake && data.length > 0) data[0] = 0x16;
        const r = readClientHello(data);
        expect(['more', 'not-tls', 'hello', 'malformed']).toContain(r.kind);
      }),
      { numRuns: 2000 },
    );
  });

  it('compares names without case and a trailing dot', () => {
    expect(sameHost('PyPI.org.', 'pypi.org')).toBe(true);
    expect(sameHost('evil.org', 'pypi.org')).toBe(false);
  });
});
