/**
 * Dates of birth. A date alone is not personal data (tool output is full of them), so a
 * date counts only where its context says birth: a key (`"dob": "1984-03-14"`,
 * `DateOfBirth=…`, `Date of birth: …`), the words right before it (`born 3 May 1990`,
 * `DOB 14/03/1984`, `né le 14.03.1984`), or a CSV column so named (detector.ts reads
 * columns). Every other date stays as it is.
 *
 * The date forms: ISO (`1984-03-14`), numeric with `/` `.` or `-` in either order
 * (`03/14/1984`, `14.03.1984`), and with the month's English name (`March 14, 1984`,
 * `14 Mar 1984`, `14-Mar-1984`).
 */
import type { Span } from '../entities.js';
import { keyBefore, keyWords } from './context.js';
import { eachMatch } from './scan.js';
import type { Recognizer } from './types.js';

const MONTH = '(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\\.?';
export const DATE_SOURCE =
  `(?:(?:19|20)\\d{2}-[01]?\\d-[0-3]?\\d|[0-3]?\\d([/.-])[0-3]?\\d\\1(?:19|20)\\d{2}|${MONTH} [0-3]?\\d(?:st|nd|rd|th)?,? (?:19|20)\\d{2}` +
  `|[0-3]?\\d(?:st|nd|rd|th)?\\.? ${MONTH},? (?:19|20)\\d{2}|[0-3]?\\d-${MONTH}-(?:19|20)\\d{2})`;
const DATE = new RegExp(`(?<![\\w/.-])${DATE_SOURCE}(?![\\w/-]|\\.\\d)`, 'g');
/** A whole cell or value that is a date. */
export const WHOLE_DATE = new RegExp(`^${DATE_SOURCE}$`);
/** Words right before a date that make it a birthday (English, German, French, Spanish, Portuguese, Italian, Dutch). */
const BIRTH_BEFORE =
  /(?:\bborn(?: on| in)?|\bb\.|\bD\.?O\.?B\.?|\bdate of birth|\bbirth ?date|\bbirthday|\bbday|\bgeboren(?: am)?|\bgeb\.|\bGeburtsdatum|\bnée? le|\bdate de naissance|\bfecha de nacimiento|\bnacid[oa] el|\bdata de nascimento|\bnascid[oa] em|\bdata di nascita|\bnato il|\bnata il|\bgeboortedatum)[ \t]*[:=,(-]?[ \t]*(?:on[ \t]+)?$/i;
/** Key words that name a birth date (`dob`, `date_of_birth`, `birthDate`, `geburtsdatum`). */
const BIRTH_KEY_WORDS = new Set(['dob', 'birth', 'birthdate', 'birthday', 'bday', 'born', 'geburtsdatum', 'nacimiento', 'nascimento', 'naissance', 'geboortedatum']);

export function isBirthField(field: string): boolean {
  return keyWords(field).some((w) => BIRTH_KEY_WORDS.has(w));
}

function birthContext(text: string, start: number): boolean {
  const ctx = keyBefore(text, start);
  if (ctx && isBirthField(ctx.key)) return true;
  return BIRTH_BEFORE.test(text.slice(Math.max(0, start - 40), start));
}

export const dobRecognizer: Recognizer = {
  type: 'DOB',
  find(text: string, out: Span[]) {
    if (!BIRTH_HINT.test(text)) return;
    eachMatch(DATE, text, (m) => {
      if (birthContext(text, m.index)) out.push({ type: 'DOB', start: m.index, end: m.index + m[0].length });
    });
  },
};

/** Every birth context holds one of these; without one, no date in the block is looked at. */
const BIRTH_HINT = /b(?:orn|irth|day|\.)|dob|d\.o\.b|geb|n(?:ée?|aci|asc|ato|ata|aiss)|geboorte/i;
