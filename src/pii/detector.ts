/**
 * The detector: every enabled recognizer over a text, overlaps resolved by type
 * priority, allow-listed values dropped. It works on records (records.ts) in order,
 * which gives batch and streaming detection the same result by construction:
 * `detect(text)` is a session fed the whole text at once.
 */
import { PII_ENTITY_TYPES, TYPE_PRIORITY, type PiiEntityType, type Span } from './entities.js';
import { MAX_RECORD, nextRecord } from './records.js';
import { ADDRESS_VALUE, addressRecognizer, isAddressField } from './recognizers/address.js';
import { cardRecognizer } from './recognizers/card.js';
import { dobRecognizer, isBirthField, WHOLE_DATE } from './recognizers/dob.js';
import { emailRecognizer } from './recognizers/email.js';
import { ibanRecognizer } from './recognizers/iban.js';
import { ipRecognizer } from './recognizers/ip.js';
import { NameFinder } from './recognizers/names.js';
import { phoneRecognizer } from './recognizers/phone.js';
import { findPrivateKeyBlocks, secretRecognizer } from './recognizers/secrets.js';
import { ssnRecognizer } from './recognizers/ssn.js';
import { tokenLiteralRecognizer } from './recognizers/token-literal.js';
import type { Recognizer } from './recognizers/types.js';
import { isIdentifierField, isPhoneField, TableTracker, type TableCell } from './tables.js';

export interface DetectorOptions {
  /** Entity types to find; default all. Token literals are always escaped. */
  entities?: readonly PiiEntityType[];
  /** Values left as they are wherever found (compared case-insensitively). */
  allow?: readonly string[];
}

/** Text that detection has finished with, and the spans in it (offsets into `text`). */
export interface Segment {
  text: string;
  spans: Span[];
}

/**
 * Incremental detection over a text that arrives in chunks. The concatenation of the
 * segments returned by `push` and `end` is the concatenation of the chunks, and their
 * spans are exactly those `detect` finds in the whole text. At most one record
 * (MAX_RECORD characters) is held back between calls.
 */
export interface DetectionSession {
  push(chunk: string): Segment;
  end(): Segment;
}

export interface Detector {
  readonly entities: ReadonlySet<PiiEntityType>;
  /** Spans in `text`, sorted by start, non-overlapping. */
  detect(text: string): Span[];
  session(): DetectionSession;
}

const ALL_RECOGNIZERS: readonly Recognizer[] = [
  emailRecognizer, phoneRecognizer, cardRecognizer, ibanRecognizer, ipRecognizer, ssnRecognizer, secretRecognizer, addressRecognizer, dobRecognizer,
];

type ColumnRole = 'phone' | 'id' | 'dob' | 'address' | undefined;

function columnRole(field: string): ColumnRole {
  if (isPhoneField(field)) return 'phone';
  if (isBirthField(field)) return 'dob';
  if (isAddressField(field)) return 'address';
  return isIdentifierField(field) ? 'id' : undefined;
}

const byRank = (a: Span, b: Span) =>
  TYPE_PRIORITY[a.type] - TYPE_PRIORITY[b.type] || b.end - b.start - (a.end - a.start) || a.start - b.start;

/** Ranks one group of mutually overlapping spans: highest priority, then longest, then first. */
function resolveCluster(cluster: Span[], out: Span[]): void {
  const kept: Span[] = [];
  for (const s of cluster.sort(byRank)) {
    if (!kept.some((k) => k.start < s.end && s.start < k.end)) kept.push(s);
  }
  out.push(...kept.sort((a, b) => a.start - b.start));
}

/**
 * Keeps the highest-priority (then longest, then first) of overlapping spans; returns
 * them sorted by start. Conflicts only arise within a cluster of spans that overlap
 * one another, so lone spans (nearly all of them) skip the ranking.
 */
export function resolveOverlaps(spans: Span[]): Span[] {
  if (spans.length < 2) return spans;
  const sorted = [...spans].sort((a, b) => a.start - b.start || b.end - a.end);
  const out: Span[] = [];
  let cluster: Span[] = [sorted[0]];
  let clusterEnd = sorted[0].end;
  for (let i = 1; i < sorted.length; i++) {
    const s = sorted[i];
    if (s.start < clusterEnd) {
      cluster.push(s);
      if (s.end > clusterEnd) clusterEnd = s.end;
      continue;
    }
    if (cluster.length === 1) out.push(cluster[0]);
    else resolveCluster(cluster, out);
    cluster = [s];
    clusterEnd = s.end;
  }
  if (cluster.length === 1) out.push(cluster[0]);
  else resolveCluster(cluster, out);
  return out;
}

/** Whether a card or phone span lies in an identifier column's cell (cells sorted, disjoint). */
function inIdCell(s: Span, cells: ReadonlyArray<[number, number]>): boolean {
  if (s.type !== 'CARD' && s.type !== 'PHONE') return false;
  let lo = 0;
  let hi = cells.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (cells[mid][1] <= s.start) lo = mid + 1;
    else hi = mid;
  }
  return lo < cells.length && s.start >= cells[lo][0] && s.end <= cells[lo][1];
}

/** Moves spans found in a slice to the enclosing text's offsets (they are fresh objects). */
function shift(spans: Span[], from: number, by: number): void {
  if (!by) return;
  for (let i = from; i < spans.length; i++) {
    spans[i].start += by;
    spans[i].end += by;
  }
}

const EMPTY: Segment = { text: '', spans: [] };

class Session implements DetectionSession {
  private buf = '';
  /** Whether `buf` holds a line break; without one, small pushes cannot complete a record. */
  private bufHasNewline = false;
  private readonly names: NameFinder | undefined;
  private readonly tables = new TableTracker();
  private columnRoles: { fields: readonly string[]; roles: ColumnRole[] } | undefined;

  constructor(
    private readonly recognizers: readonly Recognizer[],
    private readonly options: { names: boolean; secrets: boolean; phones: boolean; dobs: boolean; addresses: boolean; allow: ReadonlySet<string> },
  ) {
    this.names = options.names ? new NameFinder() : undefined;
  }

  push(chunk: string): Segment {
    this.buf += chunk;
    // Skipping the scan here keeps many small chunks of one long line linear in time.
    if (!this.bufHasNewline && !chunk.includes('\n') && this.buf.length <= MAX_RECORD) return { ...EMPTY, spans: [] };
    return this.drain(false);
  }

  end(): Segment {
    return this.drain(true);
  }

  private drain(final: boolean): Segment {
    const text = this.buf;
    const found: Span[] = [];
    const idCells: Array<[number, number]> = [];
    let pos = 0;
    let blockStart = 0;
    for (let cut = nextRecord(text, pos, final); cut; cut = nextRecord(text, pos, final)) {
      const record = text.slice(pos, cut.end);
      const row = this.tables.observe(record);
      if (row) this.readColumns(record, pos, row, found, idCells);
      if (this.names && record.length) this.names.find(record, pos, found, row, this.tables.fields);
      if (this.options.secrets && record.includes('PRIVATE KEY')) {
        const before = found.length;
        findPrivateKeyBlocks(record, found);
        shift(found, before, pos);
      }
      pos = cut.next;
      // Newline-local recognizers run on runs of whole lines; a cut without a line
      // break (an over-long line) ends the run so no match spans the cut.
      if (cut.next === cut.end || pos - blockStart > MAX_RECORD) {
        this.runBlock(text, blockStart, cut.end, found);
        blockStart = pos;
      }
    }
    if (pos > blockStart) this.runBlock(text, blockStart, pos, found);
    this.buf = text.slice(pos);
    this.bufHasNewline = this.buf.includes('\n');
    const segment = text.slice(0, pos);
    let spans = resolveOverlaps(idCells.length ? found.filter((s) => !inIdCell(s, idCells)) : found);
    if (this.options.allow.size) {
      spans = spans.filter((s) => s.type === 'TOKEN' || !this.options.allow.has(segment.slice(s.start, s.end).toLowerCase()));
    }
    return { text: segment, spans };
  }

  /**
   * Column context in a table row: a cell under a phone column is a phone number when it
   * has a phone's digits (`500893004` is one only there), a date under a birth column is
   * a date of birth, a cell under an address column with a house number is one address,
   * and cards or phones found in an identifier column (`order_number`) are taken back.
   */
  private readColumns(line: string, base: number, row: readonly TableCell[], out: Span[], idCells: Array<[number, number]>): void {
    const fields = this.tables.fields!;
    if (this.columnRoles?.fields !== fields) {
      this.columnRoles = { fields, roles: fields.map(columnRole) };
    }
    row.forEach((cell, i) => {
      const role = this.columnRoles!.roles[i];
      if (role === 'id') idCells.push([base + cell.start, base + cell.end]);
      if (role === 'dob' || role === 'address') {
        if (!(role === 'dob' ? this.options.dobs : this.options.addresses)) return;
        const raw = line.slice(cell.start, cell.end);
        const value = raw.trim();
        if (role === 'dob' ? WHOLE_DATE.test(value) : ADDRESS_VALUE.test(value)) {
          const start = base + cell.start + raw.indexOf(value);
          out.push({ type: role === 'dob' ? 'DOB' : 'ADDRESS', start, end: start + value.length });
        }
        return;
      }
      if (role !== 'phone' || !this.options.phones) return;
      const value = line.slice(cell.start, cell.end).trim();
      const digits = value.replace(/\D/g, '').length;
      if (digits >= 7 && digits <= 15 && /^\+?[\d ().-]+(?: ?(?:x|ext\.?) ?\d{1,6})?$/.test(value)) {
        const start = base + cell.start + line.slice(cell.start, cell.end).indexOf(value);
        out.push({ type: 'PHONE', start, end: start + value.length });
      }
    });
  }

  private runBlock(text: string, start: number, end: number, out: Span[]): void {
    if (end <= start) return;
    const block = text.slice(start, end);
    const before = out.length;
    for (const r of this.recognizers) r.find(block, out);
    shift(out, before, start);
  }
}

export function createDetector(options: DetectorOptions = {}): Detector {
  const entities = new Set<PiiEntityType>(options.entities ?? PII_ENTITY_TYPES);
  const recognizers = [tokenLiteralRecognizer, ...ALL_RECOGNIZERS.filter((r) => r.type !== 'TOKEN' && entities.has(r.type))];
  const sessionOptions = {
    names: entities.has('NAME'),
    secrets: entities.has('SECRET'),
    phones: entities.has('PHONE'),
    dobs: entities.has('DOB'),
    addresses: entities.has('ADDRESS'),
    allow: new Set((options.allow ?? []).map((v) => v.toLowerCase())),
  };
  const session = () => new Session(recognizers, sessionOptions);
  return {
    entities,
    session,
    detect(text: string): Span[] {
      const s = session();
      const a = s.push(text);
      const b = s.end();
      return [...a.spans, ...b.spans.map((x) => ({ ...x, start: x.start + a.text.length, end: x.end + a.text.length }))];
    },
  };
}
