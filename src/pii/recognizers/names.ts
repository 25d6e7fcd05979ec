/**
 * People's names. Candidates are runs of one to four capitalized words (with initials,
 * hyphenated parts and particles like `van`); each is judged by what the words are
 * (word-knowledge.ts: a known given/family name, an unknown proper noun, or an ordinary
 * English word) and by its context (name-context.ts: a person-like key or CSV column,
 * a mail header, a greeting, a sign-off, an address spelling the name). The stronger
 * the context, the less the words must prove.
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
  emailSpellsRun, fieldCue, nextCellEmailSpellsRun, PERSON_HEADER, precedingCue, SIGN_OFF, STRONG_PRECEDERS, type Cue,
} from './name-context.js';
import { knownAsOther, phraseVerdict, wordInfo } from './word-knowledge.js';
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
// Further words of a run: a particle and a word that may then be lower case
// (`van der Berg`, `Da silva`), or a capitalized word, optionally after an initial.
const NEXT_WORD = `(?:[ ]${PARTICLE}(?:[ ]${PARTICLE})?[ ](?:${HYPHENATED}|[${LOW}]{2,})|[ ](?:[${UP}]\\.[ ])?${HYPHENATED})`;
// A run may open with an initial (`C. Gupta`, `Š. Huzanić`).
const RUN_SOURCE = `(?<![${LETTER}0-9_@.\\-]|[${LETTER}]['’])(?:[${UP}]\\.[ ])?${HYPHENATED}${NEXT_WORD}{0,3}(?![${LETTER}0-9_@\\-]|['’.][${LETTER}])`;
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
  return run.split(' ').filter((w) => NAME_WORD.test(w) && !PARTICLE_WORD.test(w));
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

/** A stateful name finder: feed it every record of a text, in order. */
export class NameFinder {
  private afterSignOff = false;
  private cueCache: { fields: readonly string[]; cues: Cue[] } | undefined;

  /**
   * Pushes the names in `record` onto `out`, offsets relative to `base`. `row` is the
   * record's cells when the table tracker says it is a table row.
   */
  find(record: string, base: number, out: Span[], row?: readonly TableCell[], fields?: readonly string[]): void {
    if (row && fields) {
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
      return;
    }
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

  private judgeRun(line: string, index: number, run: string, onPersonHeader: boolean, base: number, out: Span[]): void {
    let words = run.split(' ');
    let start = index;
    let cue: Cue = 'none';
    let greeting = false;
    // A whole value under a key is judged as it stands (`"name": "May Daniel"`);
    // elsewhere leading greetings, titles and function words are context, not the name.
    const keyed = keyBefore(line, index) !== undefined;
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
    // A whole cell of a headerless row that also holds an email address or a phone number
    // (`1016,Lera West,lera@x.com`, `C12,Ha,Ham,+44 7700 900123`): a person's row.
    if (cue === 'none' && personRow(line) && wholeCell(line, start, end) && !(names.length === 1 && PLACE_ENDING.test(names[0].toLowerCase()))) {
      cue = 'strong';
    }
    const salutation = greeting && line[end] === ',' ? 'salutation' : greeting;
    if (runSaysName(phrase, names, cue, salutation)) {
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
