/**
 * One HTTP/1.1 request written byte for byte on a TCP connection, and its answer read
 * back as it came: for requests no HTTP client would send (a path with raw control
 * characters, a header with a bare CR, a Content-Length that lies, two requests in one
 * write). Node's own parser in the gateway answers what it cannot read (400, 431); what
 * it can read reaches the app.
 */
import net from 'node:net';

export interface WireAnswer {
  /** The status of the first answer; 0 when the connection closed without one. */
  status: number;
  /** Its headers, names in lower case (the last of a repeated name). */
  headers: Record<string, string>;
  /** The first answer's body, its chunks joined when it came chunked. */
  body: Buffer;
  /** Everything that came back, first answer or not, as text (for what it must never contain). */
  text: string;
  /** Whether the time ran out before the answer was complete. */
  timedOut: boolean;
}

export interface WireRequest {
  method: string;
  /** The request target as it goes on the request line, unchecked. */
  target: string;
  /** Header lines as they go, name and value unchecked. */
  headers: [string, string][];
  body?: Buffer;
}

/** The request's bytes: request line, header lines, an empty line, the body. */
export function wireBytes(r: WireRequest): Buffer {
  const head = `${r.method} ${r.target} HTTP/1.1\r\n${r.headers.map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
  return Buffer.concat([Buffer.from(head, 'latin1'), r.body ?? Buffer.alloc(0)]);
}

/**
 * Sends `bytes` to `port` on loopback and reads until the first answer is complete (by its
 * Content-Length, its last chunk, a status without a body) or the connection closes.
 * `halfCloseAfterMs`: end the sending side after this long (for a body shorter than its
 * Content-Length, which the server would otherwise wait for).
 */
export function sendWire(port: number, bytes: Buffer, opts: { timeoutMs?: number; halfCloseAfterMs?: number; head?: boolean } = {}): Promise<WireAnswer> {
  const timeoutMs = opts.timeoutMs ?? 20_000;
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    const chunks: Buffer[] = [];
    let done = false;
    const finish = (timedOut: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      clearTimeout(halfClose);
      socket.destroy();
      resolve({ ...parse(Buffer.concat(chunks)), timedOut });
    };
    const timer = setTimeout(() => finish(true), timeoutMs);
    const halfClose = opts.halfCloseAfterMs === undefined ? undefined : setTimeout(() => socket.end(), opts.halfCloseAfterMs);
    socket.on('connect', () => socket.write(bytes));
    socket.on('data', (d: Buffer) => {
      chunks.push(d);
      if (complete(Buffer.concat(chunks), !!opts.head)) finish(false);
    });
    // A reset after the server answered and closed is no failure of the request.
    socket.on('error', () => finish(false));
    socket.on('close', () => finish(false));
  });
}

function parse(buf: Buffer): Omit<WireAnswer, 'timedOut'> {
  const text = buf.toString('utf8');
  // An interim 100 Continue: the answer is the one after it.
  if (/^HTTP\/1\.[01] 100 /.test(text) && buf.indexOf('\r\n\r\n') >= 0) return { ...parse(buf.subarray(buf.indexOf('\r\n\r\n') + 4)), text };
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
  const headers: Record<string, string> = {};
  const end = buf.indexOf('\r\n\r\n');
  for (const line of buf.subarray(0, end < 0 ? buf.length : end).toString('latin1').split('\r\n').slice(1)) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const raw = end < 0 ? Buffer.alloc(0) : buf.subarray(end + 4);
  return { status: m ? Number(m[1]) : 0, headers, body: /chunked/i.test(headers['transfer-encoding'] ?? '') ? dechunk(raw) : raw, text };
}

/** A chunked body's chunks, joined (as far as they came). */
function dechunk(raw: Buffer): Buffer {
  const out: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = raw.indexOf('\r\n', at);
    if (eol < 0) break;
    const size = parseInt(raw.subarray(at, eol).toString('latin1'), 16);
    if (!(size > 0)) break;
    out.push(raw.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
  return Buffer.concat(out);
}

/** Whether `buf` holds a whole first answer. */
function complete(buf: Buffer, head: boolean): boolean {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return false;
  const { status, headers } = parse(buf.subarray(0, end + 4));
  // An interim answer (100 Continue) is followed by the real one.
  if (status === 100) return complete(buf.subarray(end + 4), head);
  if (head || status === 101 || status === 204 || status === 304) return true;
  const body = buf.subarray(end + 4);
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) return body.includes('\r\n0\r\n\r\n') || body.subarray(0, 5).toString() === '0\r\n\r\n';
  const length = headers['content-length'];
  if (length !== undefined) return body.length >= Number(length);
  // Neither: the body ends when the connection does.
  return false;
}
