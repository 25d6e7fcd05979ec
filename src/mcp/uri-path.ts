/**
 * Path segments of workspace URIs (file:///workspace/…) that keep a file name's bytes.
 *
 * File names are bytes, and code in a sandbox may write names that are not UTF-8. Such a
 * name reaches the gateway with each byte that is not part of a UTF-8 character as a lone
 * surrogate U+DC80–U+DCFF (Python's `surrogateescape`, which the runner and the workspace
 * helper both speak), a string `encodeURIComponent` refuses. Here that byte is
 * percent-encoded as itself (`bad\udcff.txt` ↔ `bad%FF.txt`), so the URI names the very
 * file, and decoding gives back the string the workspace helper opens it by.
 */

/** Whether `b` at `i` starts a well-formed UTF-8 sequence (Unicode Table 3-7): its length, or 0. */
function sequenceLength(b: Uint8Array, i: number): number {
  const lead = b[i]!;
  const cont = (k: number, lo = 0x80, hi = 0xbf) => i + k < b.length && b[i + k]! >= lo && b[i + k]! <= hi;
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead <= 0xdf) return cont(1) ? 2 : 0;
  if (lead === 0xe0) return cont(1, 0xa0) && cont(2) ? 3 : 0;
  if (lead === 0xed) return cont(1, 0x80, 0x9f) && cont(2) ? 3 : 0;
  if (lead >= 0xe1 && lead <= 0xef) return cont(1) && cont(2) ? 3 : 0;
  if (lead === 0xf0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (lead >= 0xf1 && lead <= 0xf3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (lead === 0xf4) return cont(1, 0x80, 0x8f) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

/** UTF-8 bytes as text, each byte outside a well-formed character as its lone surrogate U+DC80–U+DCFF. */
function decodeBytes(b: Uint8Array): string {
  let out = '';
  for (let i = 0; i < b.length; ) {
    const n = sequenceLength(b, i);
    if (n) {
      out += Buffer.from(b.subarray(i, i + n)).toString('utf8');
      i += n;
    } else {
      out += String.fromCharCode(0xdc00 + b[i]!);
      i++;
    }
  }
  return out;
}

/**
 * `encodeURIComponent` for one segment of a workspace path, except that a lone surrogate
 * U+DC80–U+DCFF is percent-encoded as the byte it stands for; any other lone surrogate
 * (no file name holds one) becomes U+FFFD. Never throws.
 */
export function encodePathSegment(segment: string): string {
  let out = '';
  for (const ch of segment) {
    const code = ch.charCodeAt(0);
    if (ch.length === 1 && code >= 0xd800 && code <= 0xdfff) {
      out += code >= 0xdc80 && code <= 0xdcff ? `%${(code - 0xdc00).toString(16).toUpperCase()}` : '%EF%BF%BD';
    } else out += encodeURIComponent(ch);
  }
  return out;
}

/**
 * The inverse of `encodePathSegment`: percent-escapes become bytes, read as UTF-8 with a
 * byte that is not part of a character as its lone surrogate. Throws a URIError on a `%`
 * not followed by two hex digits.
 */
export function decodePathSegment(segment: string): string {
  if (/%(?![0-9a-f]{2})/i.test(segment)) throw new URIError(`bad percent-encoding in "${segment}"`);
  return segment.replace(/(?:%[0-9a-f]{2})+/gi, (run) => decodeBytes(Buffer.from(run.replace(/%/g, ''), 'hex')));
}
