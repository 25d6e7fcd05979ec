/**
 * Deciding whether bytes are text a model should see, and cutting byte ranges on
 * character boundaries so a page of a large file never ends in half a character, and
 * on line boundaries where it can, so a page never holds part of a value (half an email
 * address or card number would not be recognised, and would reach the model as it is).
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

/**
 * Narrows a page of a file to whole lines where it can. `data` was read at `readAt`,
 * which is one byte before the offset asked for (`wanted`) when that is not 0, so the
 * byte before the page shows whether the page starts a line. The page then starts
 * after its first line break unless it starts a line, and ends after its last line
 * break unless it reaches the end of the file (`size`). A page with no line break
 * where one is needed keeps that end as it is (a line longer than a page).
 * A line break is one byte that is never part of another UTF-8 character, so the cuts
 * also fall between characters.
 */
export function wholeLines(data: Buffer, readAt: number, wanted: number, size: number): { data: Buffer; offset: number } {
  let from = wanted - readAt;
  if (from > 0 && data[from - 1] !== NEWLINE) {
    const nl = data.indexOf(NEWLINE, from);
    if (nl >= 0 && nl + 1 < data.length) from = nl + 1;
  }
  let to = data.length;
  if (readAt + to < size) {
    const last = data.lastIndexOf(NEWLINE, to - 1);
    if (last >= from) to = last + 1;
  }
  return { data: data.subarray(from, to), offset: readAt + from };
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
