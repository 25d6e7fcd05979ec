/**
 * People's names. Candidates are runs of one to four capitalized words (with initials,
 * hyphenated parts and particles like `van`); each is judged by what the words are
 * (word-knowledge.ts: a known given/family name, an unknown proper noun, or an ordinary
 * English word) and by its context (name-context.ts: a person-like key or CSV column,
 * a mail header, a greeting, a sign-off, an address spelling the name, what follows
 * the run: `, born`, `signed`), and in a table without a header by what the column's
 * earlier cells were. The stronger the context, the less the words must prove.
 *
 * Unlike the other recognizers this one keeps state across lines (a sign-off line) and
 * reads table rows by their column (tables.ts), so it runs once per record, in order,
 * inside a detection session.
 * It never looks at lower-case text: `jane doe` is not found.
 */
import type { Span } from '../entities.js';
import { keyBefore } from './context.js';
import { eachMatch } from './scan.js';
import {
  emailSpellsRun, fieldCue, followingCue, nextCellEmailSpellsRun, PERSON_HEADER, precedingCue, SIGN_OFF, STRONG_PRECEDERS, type Cue,
} from './name-context.js';
import { knownAsOther, phraseVerdict, wordInfo } from './word-knowledge.js';
import { splitCells } from '../cells.js';
import type { TableCell } from '../tables.js';

// Letters by case, as explicit ranges over the Latin, Greek and Cyrillic blocks rather
// than \p{Lu}/\p{Ll}: V8 runs these ten times faster (the run regex is most of the
// name finder's time), and capitalization only marks names in cased scripts anyway.
// Latin Extended and Greek count as both cases: a superset is harmless here.
export const UP = 'A-Z\\u00C0-\\u00D6\\u00D8-\\u00DE\\u0100-\\u024F\\u0370-\\u03FF\\u0400-\\u042F\\u0460-\\u052F\\u1E00-\\u1FFF';
export const LOW = 'a-z\\u00DF-\\u00F6\\u00F8-\\u00FF\\u0100-\\u024F\\u0370-\\u03FF\\u0430-\\u045F\\u0460-\\u052F\\u1E00-\\u1FFF';
export const LETTER = 'A-Za-z\\u00C0-\\u00D6\\u00D8-\\u00F6\\u00F8-\\u024F\\u0370-\\u052F\\u1E00-\\u1FFF';
// A name word: capitalized, ending in lower case; inner capitals only after a short
// prefix (McLaughlin, O'Connell, DeShawn), so CamelCase identifiers (UserService) are not.
const WORD = `[${UP}][${LOW}]{0,2}(?:['’]?[${UP}])?[${LOW}]+`;
const HYPHENATED = `${WORD}(?:-${WORD})*`;
const PARTICLE = '(?:[Vv]an|[Vv]on|[Dd]e|[Dd]er|[Dd]en|[Dd]a|[Dd]i|[Dd]u|[Dd]el|[Dd]ella|[Ll]a|[Ll]e|bin|ibn|al|ter|ten|[Dd]os|[Dd]as)';
// The Arabic article joined to a surname (`al-Tamimi`, `El-Sayed`).
const ARTICLE = '(?:[Aa]l|[Ee]l)-';
// Further words of a run: a particle and a word that may then be lower case
// (`van der Berg`, `Da silva`, `E. bin Leila`), or a capitalized word, optionally after
// an initial or with an article (`al-Tamimi`).
const NEXT_WORD = `(?:[ ](?:[${UP}]\\.[ ])?${PARTICLE}(?:[ ]${PARTICLE})?[ ](?:${HYPHENATED}|[${LOW}]{2,})|[ ](?:[${UP}]\\.[ ])?(?:${ARTICLE})?${HYPHENATED})`;
// A run may open with an initial (`C. Gupta`, `Š. Huzanić`) and a surname with its
// article (`al Rashid`, `ibn Suha`, `al-Hakim`).
const RUN_SOURCE = `(?<![${LETTER}0-9_@.\\-]|[${LETTER}]['’])(?:[${UP}]\\.[ ])?(?:${ARTICLE}|(?:al|bin|ibn)[ ])?${HYPHENATED}${NEXT_WORD}{0,3}(?![${LETTER}0-9_@\\-]|['’.][${LETTER}])`;
const RUN = new RegExp(RUN_SOURCE, 'g');
const HAS_UPPER = new RegExp(`[${UP}]`);
const WHOLE_RUN = new RegExp(`^${RUN_SOURCE}$`);
const NAME_WORD = new RegExp(`^${HYPHENATED}$`);
/** A person column's value: one to five words of letters, with `'`, `-` and `.` inside. */
const FIELD_VALUE = new RegExp(`^[${LETTER}][${LETTER}'’.\\-]*(?: [${LETTER}][${LETTER}'’.\\-]*){0,4}$`);

/** P: a known person name; U: unknown (a rare proper noun); C: an ordinary or otherwise-known word. */
type WordClass = 'P' | 'U' | 'C';

function classify(word: string): WordClass {
  const parts = word.split('-');
  if (parts.length > 1) {
    // Double-barrelled surnames: one part that could be a name is enough.
    return parts.some((p) => classify(p) !== 'C') ? 'P' : 'C';
  }
  const info = wordInfo(word);
  if (info.person) return 'P';
  return info.common || info.otherKnown ? 'C' : 'U';
}

const PARTICLE_WORD = new RegExp(`^${PARTICLE}$`);
const INITIAL_FIRST = new RegExp(`^[${UP}]\\. `);
/** Endings of English, German and Dutch place names (`Bradtkeford`, `Neustadt`): a lone such word in a row is a town. */
const PLACE_ENDING = /(?:ford|ton|thorpe|stone|well|worth|don|dale|ridge|ville|burg|burgh|borough|bury|ham|field|land|mouth|chester|caster|cester|shire|stad|stadt|dorf|heim|furt|haven|side|view|port|town|wick|ing|by|dam|berg|hausen|ingen|gen|wood|fort|mount|wald|feld|(?:upon|on|under|over)-.+)$/;

/** The words of a run that carry evidence: capitalized, not initials, not particles. */
function nameWords(run: string): string[] {
  const words: string[] = [];
  for (const part of run.split(' ')) {
    const w = part.startsWith('al-') || part.startsWith('el-') || part.startsWith('Al-') || part.startsWith('El-') ? part.slice(3) : part;
    if (NAME_WORD.test(w) && !PARTICLE_WORD.test(w)) words.push(w);
  }
  return words;
}

/**
 * Whether a run is a name, given the context's cue. The lexicon decides the clear
 * cases; compromise's tagger settles runs that mix ordinary words with name-like ones
 * (`Lake Lea` is a place, `Brice Cousin` a person, `Adams Group` a company).
 */
function runSaysName(run: string, words: readonly string[], cue: Cue, greeting: boolean | 'salutation'): boolean {
  if (cue === 'field') return true;
  if (cue === 'negative' || words.length === 0) return false;
  const classes = words.map(classify);
  // An initial and a surname (`C. Gupta`) is how people, not places, are abbreviated.
  if (words.length === 1 && INITIAL_FIRST.test(run) && classes[0] !== 'C') return true;
  if (words.length === 1) {
    if (cue !== 'strong') return false;
    // An ordinary word after a greeting is a name only as a salutation (`Dear Reed,`),
    // not in `Hello World`.
    return classes[0] !== 'C' || (greeting === 'salutation' && !wordInfo(words[0]).functionWord);
  }
  if (cue !== 'strong' && knownAsOther(words)) return false;
  const ordinary = classes.filter((c) => c === 'C').length;
  if (ordinary === 0) return true;
  // After `customer`, `assigned to`: a word that is no ordinary one makes it a person
  // (`Verona Satterfield`, though Verona is a city).
  if (cue === 'strong' && classes.some((c) => c !== 'C')) return true;
  if (ordinary === words.length && cue !== 'strong') return false;
  const verdict = phraseVerdict(run);
  if (verdict !== 'unknown') return verdict === 'person';
  return cue === 'strong';
}

function isLeadingCueWord(word: string): 'greeting' | 'strong' | 'drop' | undefined {
  const lower = word.toLowerCase();
  if (['hi', 'hello', 'hey', 'dear', 'thanks'].includes(lower)) return 'greeting';
  if (['mr', 'mrs', 'ms', 'mx', 'dr', 'prof', 'sir'].includes(lower) || STRONG_PRECEDERS.has(lower)) return 'strong';
  return wordInfo(word).functionWord ? 'drop' : undefined;
}

/** Keys whose values are sentences, where a word like `Called` may introduce a person. */
const FREE_TEXT_KEY = /(?:^|[_.-])(?:notes?|comments?|message|msg|description|summary|text|body|subject|reason|remarks?)$/i;

/** A bare `name` column beside an email or a customer id names people. */
const PERSON_ROW_HINT = /e-?mail|phone|mobile|customer|user|employee|contact|patient|member|ssn/i;

/** The name cue of each column of a table. */
function columnCues(fields: readonly string[]): Cue[] {
  const cues = fields.map(fieldCue);
  return fields.some((f) => PERSON_ROW_HINT.test(f)) ? cues.map((c) => (c === 'weak' ? 'field' : c)) : cues;
}

/** A line of separated cells with an email address or an international phone number in it. */
function personRow(line: string): boolean {
  return /[,;\t|]/.test(line) && (line.includes('@') || /(?:^|[,;\t|])[ \t]*"?\+\d/.test(line));
}

/** Whether line[start, end) is a whole separated cell (`,` `;` tab or `|` on both sides). */
function wholeCell(line: string, start: number, end: number): boolean {
  let i = start - 1;
  while (i >= 0 && (line[i] === ' ' || line[i] === '"')) i--;
  let j = end;
  while (j < line.length && (line[j] === ' ' || line[j] === '"')) j++;
  return (i < 0 || ',;\t|'.includes(line[i])) && (j >= line.length || ',;\t|'.includes(line[j]));
}

/** A cell that could hold a name: words of letters, at least one capitalized, no digits. */
function nameShaped(value: string): boolean {
  return value.length <= 60 && FIELD_VALUE.test(value) && HAS_UPPER_WORD.test(value);
}
const HAS_UPPER_WORD = new RegExp(`(?:^|[ '’.\\-])[${UP}]`);

/**
 * Whether a cell reads as a name by its words alone: each a known or unknown name word,
 * none an ordinary word or a town's ending. Independent of any column verdict, so a
 * column's tally cannot feed on itself.
 */
function nameLikeCell(value: string): boolean {
  const words = nameWords(value);
  return words.length > 0 && words.length <= 4 && words.every((w) => classify(w) !== 'C' && !PLACE_ENDING.test(w.toLowerCase()));
}

/** Name evidence gathered on a column of a headerless table. */
interface ColumnTally {
  /** Earlier cells that could have held a name, */
  shaped: number;
  /** and those of them whose words read as a name. */
  names: number;
}

/**
 * The columns of a headerless table (`C2824,Brown,Bob,+44 7591 349243,Leeds`): runs of
 * lines that one separator splits into the same number (three or more) of cells. The
 * earlier rows' cells are evidence for the next row's: a column whose name-shaped cells
 * mostly read as names is a name column, where `Brown`, `Bob` and `Chip Wise` are names
 * too; one whose cells mostly did not (towns, products) is no place to look for names
 * without other context. Only earlier rows count, so streamed and batch detection agree.
 */
class BareColumns {
  private sep = '';
  private tallies: ColumnTally[] = [];
  /** The current line's cells, when it is a row. */
  cells: Array<{ start: number; end: number }> | undefined;

  /** Reads a line: its cells, if it continues (or may start) a table. */
  begin(line: string): void {
    const sep = this.sep && line.includes(this.sep) ? this.sep : SEPARATOR_ORDER.find((c) => line.includes(c));
    const cells = sep ? splitCells(line, sep) : undefined;
    if (!sep || !cells || cells.length < 3) {
      this.cells = undefined;
      this.sep = '';
      this.tallies = [];
      return;
    }
    if (sep !== this.sep || cells.length !== this.tallies.length) {
      this.sep = sep;
      this.tallies = cells.map(() => ({ shaped: 0, names: 0 }));
    }
    this.cells = cells;
  }

  /** The cue earlier rows give column `i`: `field`, `negative`, or `none` while undecided. */
  cue(i: number): Cue {
    const t = this.tallies[i];
    if (t.shaped < 2) return 'none';
    if (t.names >= 0.6 * t.shaped) return 'field';
    return t.shaped >= 3 && t.names <= 0.15 * t.shaped ? 'negative' : 'none';
  }

  /** The index of the cell holding line[start, end), if any. */
  cellOf(start: number, end: number): number {
    const cells = this.cells!;
    for (let i = 0; i < cells.length; i++) {
      if (start >= cells[i].start && end <= cells[i].end) return i;
    }
    return -1;
  }

  /**
   * Adds the current row's cells to the tallies: a cell counts as a name if its words
   * read as one or another rule found one in it (`found`, line offsets; not the
   * column's own verdict, which would only feed on itself).
   */
  end(line: string, found: ReadonlyArray<{ start: number; end: number }>): void {
    this.cells?.forEach((c, i) => {
      const value = line.slice(c.start, c.end).trim();
      if (!nameShaped(value)) return;
      this.tallies[i].shaped++;
      if (nameLikeCell(value) || found.some((s) => s.start >= c.start && s.end <= c.end)) this.tallies[i].names++;
    });
  }
}
const SEPARATOR_ORDER = [',', '\t', ';', '|'];

/**
 * Whether the cell before the one at `start` opens with a house number (`42 Wallaby Way,
 * Sydney`): the word after a street is its town.
 */
function afterStreetCell(line: string, start: number): boolean {
  let i = start - 1;
  while (i >= 0 && (line[i] === ' ' || line[i] === '"')) i--;
  if (i < 0) return false;
  const sep = line[i];
  const from = Math.max(line.lastIndexOf(sep, i - 1), line.lastIndexOf(' - ', i - 1) + 2) + 1;
  return /^[ \t"]*\d+[A-Za-z]?[ ]+[A-Za-z]/.test(line.slice(from, i));
}

/** A stateful name finder: feed it every record of a text, in order. */
export class NameFinder {
  private afterSignOff = false;
  private readonly bare = new BareColumns();
  /** Where the current line's spans begin in the output, */
  private lineFirstSpan = 0;
  /** and those found by rules other than a name column's verdict. */
  private byRules = 0;
  private cueCache: { fields: readonly string[]; cues: Cue[] } | undefined;

  /**
   * Pushes the names in `record` onto `out`, offsets relative to `base`. `row` is the
   * record's cells when the table tracker says it is a table row.
   */
  find(record: string, base: number, out: Span[], row?: readonly TableCell[], fields?: readonly string[]): void {
    if (row && fields) {
      this.bare.begin('');
      if (this.cueCache?.fields !== fields) this.cueCache = { fields, cues: columnCues(fields) };
      row.forEach((c, i) => this.judgeValue(record, c.start, c.end, this.cueCache!.cues[i], base, out));
      return;
    }
    if (!record.includes('\n')) return this.findInLine(record, base, out);
    let lineStart = 0;
    while (lineStart <= record.length) {
      let lineEnd = record.indexOf('\n', lineStart);
      if (lineEnd < 0) lineEnd = record.length;
      this.findInLine(record.slice(lineStart, lineEnd), base + lineStart, out);
      lineStart = lineEnd + 1;
    }
  }

  private findInLine(line: string, base: number, out: Span[]): void {
    if (!HAS_UPPER.test(line)) {
      if (line.trim()) this.afterSignOff = false;
      this.bare.begin(line);
      return;
    }
    this.bare.begin(line);
    this.findRuns(line, base, out);
    if (this.bare.cells) {
      const found: Array<{ start: number; end: number }> = [];
      for (let i = this.byRules; i < out.length; i++) found.push({ start: out[i].start - base, end: out[i].end - base });
      this.bare.end(line, found);
    }
  }

  private findRuns(line: string, base: number, out: Span[]): void {
    this.lineFirstSpan = out.length;
    this.byRules = out.length;
    if (this.afterSignOff && line.trim()) {
      this.afterSignOff = false;
      const start = line.length - line.trimStart().length;
      const end = line.trimEnd().length;
      if (WHOLE_RUN.test(line.slice(start, end))) {
        out.push({ type: 'NAME', start: base + start, end: base + end });
        return;
      }
    }
    if (SIGN_OFF.test(line)) {
      this.afterSignOff = true;
      return;
    }
    const cells = this.bare.cells;
    // In a name column every name-shaped cell is a name (`Brown`, `al Khalil`).
    cells?.forEach((c, i) => {
      if (this.bare.cue(i) !== 'field') return;
      const raw = line.slice(c.start, c.end);
      const value = raw.trim();
      if (!nameShaped(value)) return;
      const start = c.start + raw.indexOf(value);
      out.push({ type: 'NAME', start: base + start, end: base + start + value.length });
    });
    this.byRules = out.length;
    if (cells && personRow(line)) this.findNamePairs(line, cells, base, out);
    const onPersonHeader = PERSON_HEADER.test(line);
    eachMatch(RUN, line, (m) => this.judgeRun(line, m.index, m[0], onPersonHeader, base, out));
  }

  /** A table cell: the whole (trimmed) value must be a name run. */
  private judgeValue(line: string, start: number, end: number, cue: Cue, base: number, out: Span[]): void {
    if (cue === 'none' || cue === 'negative') return;
    while (start < end && line[start] === ' ') start++;
    while (end > start && line[end - 1] === ' ') end--;
    const value = line.slice(start, end);
    // Under a person column any name-shaped value counts, lower case included (`Da silva`).
    const shaped = cue === 'field' ? FIELD_VALUE.test(value) : WHOLE_RUN.test(value);
    if (shaped && runSaysName(value, nameWords(value), cue, false)) out.push({ type: 'NAME', start: base + start, end: base + end });
  }

  /**
   * Two neighbouring one-word cells of a person's row (`C2824,Satterfield,Randal,+44 …`)
   * are a surname and a given name: one that reads as a name vouches for the other,
   * though it is an ordinary word (`Price,Bill`) or ends like a town.
   */
  private findNamePairs(line: string, cells: ReadonlyArray<{ start: number; end: number }>, base: number, out: Span[]): void {
    const word = (i: number) => {
      const raw = line.slice(cells[i].start, cells[i].end);
      const value = raw.trim();
      return NAME_WORD.test(value) && this.bare.cue(i) !== 'negative' ? { value, start: cells[i].start + raw.indexOf(value) } : undefined;
    };
    let prev = word(0);
    for (let i = 1; i < cells.length; i++) {
      const cur = word(i);
      if (prev && cur && (nameLikeCell(prev.value) || nameLikeCell(cur.value))) {
        for (const w of [prev, cur]) out.push({ type: 'NAME', start: base + w.start, end: base + w.start + w.value.length });
      }
      prev = cur;
    }
  }

  /**
   * Whether a name found earlier on this line starts with `word`: `"account_manager":
   * "Reed Silver", "notes": "Called Reed about …"` speaks of the same person.
   */
  private namedOnLine(line: string, base: number, word: string, out: readonly Span[]): boolean {
    for (let i = out.length - 1; i >= this.lineFirstSpan; i--) {
      const s = out[i];
      if (s.type === 'NAME' && s.start >= base && s.end - s.start > word.length && line.startsWith(`${word} `, s.start - base)) return true;
    }
    return false;
  }

  private judgeRun(line: string, index: number, run: string, onPersonHeader: boolean, base: number, out: Span[]): void {
    let words = run.split(' ');
    let start = index;
    let cue: Cue = 'none';
    let greeting = false;
    // A whole value under a key is judged as it stands (`"name": "May Daniel"`);
    // elsewhere leading greetings, titles and function words are context, not the name.
    const keyOfRun = keyBefore(line, index);
    const keyed = keyOfRun !== undefined;
    // `"product": "Customer Identity Orchestrator"`: a key that is never a person's wins,
    // unless its value is free text (`"notes": "Called Ann"`).
    if (keyed && fieldCue(keyOfRun.key) === 'negative' && !FREE_TEXT_KEY.test(keyOfRun.key)) return;
    while (words.length > 1) {
      const lead = isLeadingCueWord(words[0]);
      // Inside a keyed value only a word that introduces a person (`"notes": "Called Ann"`) is context.
      if (!lead || (keyed && lead !== 'strong')) break;
      if (lead === 'greeting') greeting = true;
      if (lead !== 'drop') cue = 'strong';
      start += words[0].length + 1;
      words = words.slice(1);
    }
    const end = start + words.join(' ').length;
    if (cue === 'none') {
      const key = keyBefore(line, start);
      // The run must be the whole value: `"name": "Lang - Adams"` is not a name `Lang`.
      const closesValue = end === line.length || /^["',;}\]]/.test(line[end]) || /^[ \t]*$/.test(line.slice(end));
      if (key !== undefined && closesValue) cue = fieldCue(key.key === 'name' && key.parent ? `${key.parent}_name` : key.key);
      // A bare `name` beside an email address (`{"name": …, "email": …}`), or a `Name:`
      // label in a list someone wrote, names a person.
      if (cue === 'weak' && key !== undefined && /^name$/i.test(key.key) && (key.key === 'Name' || line.includes('@'))) cue = 'field';
      if (cue === 'none' || (key === undefined && cue !== 'negative')) {
        const p = precedingCue(line, start);
        if (p.cue !== 'none') ({ cue, greeting } = p);
      }
      // `340 Prohaska Dale`: a house number makes it a street.
      if (cue !== 'field' && cue !== 'strong' && /\d[A-Za-z]?[ ]$/.test(line.slice(Math.max(0, start - 3), start))) cue = 'negative';
    }
    const phrase = words.join(' ');
    const names = nameWords(phrase);
    if (cue !== 'negative' && cue !== 'field') {
      if ((onPersonHeader && /^ ?</.test(line.slice(end, end + 2))) || emailSpellsRun(line, end, names) || nextCellEmailSpellsRun(line, end, names)) {
        cue = 'field';
      }
    }
    // A whole cell of a column of a headerless table whose earlier cells were not names.
    const cells = this.bare.cells;
    if (cells && (cue === 'none' || cue === 'weak')) {
      const i = this.bare.cellOf(start, end);
      if (i >= 0 && this.bare.cue(i) === 'negative') return;
    }
    // A whole cell of a headerless row that also holds an email address or a phone number
    // (`1016,Lera West,lera@x.com`, `C12,Ha,Ham,+44 7700 900123`): a person's row.
    if (
      cue === 'none' && personRow(line) && wholeCell(line, start, end) && !(names.length === 1 && PLACE_ENDING.test(names[0].toLowerCase())) &&
      !afterStreetCell(line, start)
    ) {
      cue = 'strong';
    }
    // What follows: `Rose Page, born 1984`, `Rui Wang will send`.
    if (cue === 'none' || cue === 'weak') {
      const after = followingCue(line, end);
      if (after === 'born' || (after === 'verb' && names.some((w) => classify(w) !== 'C'))) cue = 'strong';
    }
    const salutation = greeting && line[end] === ',' ? 'salutation' : greeting;
    if (runSaysName(phrase, names, cue, salutation) || (cue === 'strong' && names.length === 1 && this.namedOnLine(line, base, names[0], out))) {
      out.push({ type: 'NAME', start: base + start, end: base + end });
      return;
    }
    // A longer run may be a name followed by other capitalized words: try its prefixes.
    const prefixCue: Cue = cue === 'field' || cue === 'strong' ? 'weak' : cue;
    for (let n = words.length - 1; n >= 2 && cue !== 'negative'; n--) {
      const prefix = words.slice(0, n).join(' ');
      if (runSaysName(prefix, nameWords(prefix), prefixCue, false)) {
        out.push({ type: 'NAME', start: base + start, end: base + start + prefix.length });
        return;
      }
    }
  }
}
