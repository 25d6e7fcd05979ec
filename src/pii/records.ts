/**
 * Where one unit of detection ends: the record scanner. Detection runs on records, and a
 * record boundary depends only on the text, never on how it arrived in chunks; that is
 * what makes streamed tokenization equal to tokenizing the whole text at once.
 *
 * A record is one line, except that
 * - a line that opens a private-key block without closing it extends over the
 *   following lines up to the END line (a key must not be split), and
 * - no record exceeds MAX_RECORD characters: an over-long line is cut after the last
 *   `,` `;` `}` `]` `>` or tab before the limit (where a value rarely continues), or at
 *   the limit if there is none. A value straddling such a cut may be missed; a whole
 *   line of that size (minified JSON) is rarely a sentence a name could straddle.
 */
import { opensPrivateKeyBlock } from './recognizers/secrets.js';

/** Longest record; also the most a stream holds back. Larger than any PEM key. */
export const MAX_RECORD = 64 * 1024;

export interface RecordCut {
  /** Record is text.slice(start, end). */
  end: number;
  /** Where the next record starts: after the line break, or `end` after a cut. */
  next: number;
}

const CUT_AFTER = new Set([',', ';', '}', ']', '>', '\t']);

function cutLongLine(text: string, from: number): RecordCut {
  const limit = from + MAX_RECORD;
  for (let i = limit - 1; i > from + MAX_RECORD / 2; i--) {
    if (CUT_AFTER.has(text[i])) return { end: i + 1, next: i + 1 };
  }
  // Never split a surrogate pair.
  const code = text.charCodeAt(limit - 1);
  const end = code >= 0xd800 && code <= 0xdbff ? limit - 1 : limit;
  return { end, next: end };
}

/**
 * The record starting at `from`, or undefined when more text is needed to decide.
 * With `final`, the text is complete and a record is always returned (if any text is
 * left). A returned cut is the same whatever text follows what it needed to see.
 */
export function nextRecord(text: string, from: number, final: boolean): RecordCut | undefined {
  if (from >= text.length) return undefined;
  const nl = text.indexOf('\n', from);
  if (nl < 0 || nl - from > MAX_RECORD) {
    if (text.length - from > MAX_RECORD) return cutLongLine(text, from);
    if (nl < 0) return final ? { end: text.length, next: text.length } : undefined;
  }
  if (!opensPrivateKeyBlock(text.slice(from, nl))) return { end: nl, next: nl + 1 };
  // Extend over whole lines until the END line, the size bound, or the end of the text.
  let end = nl;
  while (end < text.length) {
    const lineEnd = text.indexOf('\n', end + 1);
    if (lineEnd < 0) {
      if (!final) return text.length - from > MAX_RECORD ? { end, next: end + 1 } : undefined;
      if (text.length - from > MAX_RECORD) break;
      end = text.length;
      break;
    }
    if (lineEnd - from > MAX_RECORD) break;
    const line = text.slice(end + 1, lineEnd);
    end = lineEnd;
    if (line.includes('-----END ')) break;
  }
  return { end, next: end < text.length ? end + 1 : end };
}
