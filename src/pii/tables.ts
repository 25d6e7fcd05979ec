/**
 * CSV and TSV tables in tool output: a header line names the columns, and each row's
 * cells are read by their column. A column header is context the way a JSON key is
 * (`phone`, `last_name`, `order_number`), but it sits lines away from the value, so the
 * tracker keeps it as state; the detector feeds it every record in order, in batch and
 * streaming alike.
 *
 * A header is a line of two or more identifier-like cells, one of which names a column
 * the detector cares about. A row is any later line with the same number of cells; the
 * first line that has another count ends the table.
 */
import { keyWords } from './recognizers/context.js';
import { isAddressField } from './recognizers/address.js';
import { isBirthField } from './recognizers/dob.js';
import { fieldCue } from './recognizers/name-context.js';
import { splitCells } from './cells.js';

export interface TableCell {
  /** Offsets of the cell's content within the line (inside quotes, if quoted). */
  start: number;
  end: number;
  field: string;
}

const SEPARATORS = [',', ';', '\t', '|'];
/** Characters a header line may hold; one linear test rules out almost every other line. */
const HEADER_CHARS = /^[A-Za-z0-9_ .\-",;\t|]+$/;
const HEADER_CELL = /^[ \t]*"?[A-Za-z_][A-Za-z0-9_ .-]{0,40}"?[ \t]*$/;
/** A cell of five or more words, or one ending a sentence: a line of prose with a comma in it, not a header. */
const PROSE_CELL = /(?:\S+ +){4}\S|\.[ \t]*$/;
const PHONE_WORDS = new Set(['phone', 'tel', 'telephone', 'mobile', 'cell', 'fax', 'msisdn', 'telefon']);
const ID_WORDS = new Set(['id', 'ids', 'uid', 'guid', 'seq', 'ts', 'timestamp', 'time', 'count', 'size', 'bytes']);
/** These end an identifier's key only after a qualifier: `order_number`, not a bare `number`. */
const QUALIFIED_ID_WORDS = new Set(['number', 'num', 'no', 'nr']);
const PAYMENT_WORDS = new Set(['card', 'pan', 'cc', 'iban', 'account']);

/** Whether a key or column holds a phone number. */
export function isPhoneField(field: string): boolean {
  return keyWords(field).some((w) => PHONE_WORDS.has(w));
}

/** Whether a key or column holds identifiers, which look like cards or phones only by chance. */
export function isIdentifierField(field: string): boolean {
  const words = keyWords(field);
  if (words.some((w) => PAYMENT_WORDS.has(w) || PHONE_WORDS.has(w))) return false;
  const last = words[words.length - 1] ?? '';
  return ID_WORDS.has(last) || (QUALIFIED_ID_WORDS.has(last) && words.length > 1);
}

function isKnownField(field: string): boolean {
  const cue = fieldCue(field);
  return cue !== 'none' || isPhoneField(field) || isIdentifierField(field) || isBirthField(field) || isAddressField(field) || /e-?mail/i.test(field);
}

interface Header {
  sep: string;
  fields: string[];
}

function parseHeader(line: string): Header | undefined {
  if (line.length > 2000 || !HEADER_CHARS.test(line)) return undefined;
  let best: Header | undefined;
  for (const sep of SEPARATORS) {
    if (!line.includes(sep)) continue;
    const cells = line.split(sep);
    if (cells.length < 2 || !cells.every((c) => HEADER_CELL.test(c) && !PROSE_CELL.test(c))) continue;
    const fields = cells.map((c) => c.replace(/"/g, '').trim().replace(/\s+/g, '_'));
    if (!fields.some(isKnownField)) continue;
    if (!best || fields.length > best.fields.length) best = { sep, fields };
  }
  return best;
}

export class TableTracker {
  private header: Header | undefined;

  /** The line's cells with their columns if it is a table row; updates the table state. */
  observe(line: string): TableCell[] | undefined {
    if (this.header) {
      const cells = splitCells(line, this.header.sep);
      if (cells && cells.length === this.header.fields.length) {
        const fields = this.header.fields;
        return cells.map((c, i) => ({ start: c.start, end: c.end, field: fields[i] }));
      }
      this.header = undefined;
    }
    this.header = parseHeader(line);
    return undefined;
  }

  /** The header's fields, when a table is open (for tests and name cues). */
  get fields(): readonly string[] | undefined {
    return this.header?.fields;
  }
}
