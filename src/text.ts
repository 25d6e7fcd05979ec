/**
 * Deciding whether bytes are text a model should see, and cutting byte ranges on
 * character boundaries so a page of a large file never ends in half a character, and
 * where a value cannot continue (a line break) when it can, so a page does not end in
 * part of a value (half an email address or card number would not be recognised, and
 * would reach the model as it is).
 */

const decoder = new TextDecoder('utf-8', { fatal: true });

const isContinuation = (b: number) => (b & 0xc0) === 0x80;

/**
 * Decodes a chunk read at `offset` from a file. Leading continuation bytes (the chunk
 * began inside a character) are skipped; when the chunk does not reach the end of the
 * file, a trailing partial character is left for the next page. Returns undefined when
 * the bytes are not UTF-8 text (a NUL byte, or invalid sequences).
 */
export function decodeChunk(data: Buffer, offset: number, reachesEnd: boolean): { text: string; start: number; end: number } | undefined {
  let from = 0;
  if (offset > 0) while (from < Math.min(3, data.length) && isContinuation(data[from]!)) from++;
  let to = data.length;
  if (!reachesEnd && to > from) {
    // Walk back to the start of the last character; drop it unless it is complete.
    let i = to - 1;
    while (i > from && i > to - 4 && isContinuation(data[i]!)) i--;
    const lead = data[i]!;
    const need = lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (to - i < need) to = i;
  }
  const slice = data.subarray(from, to);
  if (slice.includes(0)) return undefined;
  try {
    return { text: decoder.decode(slice), start: offset + from, end: offset + to };
  } catch {
    return undefined;
  }
}

const NEWLINE = 0x0a;
/** `,` `;` `}` `]` `>` and tab: where a value rarely continues (as records.ts cuts over-long lines). */
const CUT_AFTER = new Set([0x2c, 0x3b, 0x7d, 0x5d, 0x3e, 0x09]);

/**
 * How many bytes of a page read at `offset` to show, so that the page does not end
 * inside a value: up to its last line break, else its last separator in the second
 * half of the page (a line longer than a page), else all of it. A page that reaches the
 * end of the file (`size`) is shown whole. Every cut byte is ASCII, so the cut also
 * falls between characters. The next page, at offset + the returned length, then
 * starts where a value may start too.
 */
export function pageLength(data: Buffer, offset: number, size: number): number {
  if (offset + data.length >= size) return data.length;
  const nl = data.lastIndexOf(NEWLINE);
  if (nl >= 0) return nl + 1;
  for (let i = data.length - 1; i > data.length / 2; i--) if (CUT_AFTER.has(data[i]!)) return i + 1;
  return data.length;
}

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[u]}`;
}
