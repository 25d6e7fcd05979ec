/**
 * Phone numbers in the shapes tool output carries: international (`+49 30 1234567`,
 * `+15551234567`), North American (`(555) 123-4567`, `555.123.4567 x12`), and national
 * numbers with a trunk prefix (`0146280645`, `01632 960123`). A bare digit run counts
 * only with a leading `+` or `0`, or under a phone-like key or CSV column, because ids, amounts and
 * timestamps are bare digit runs too.
 *
 * redact-pii's pattern also finds any 10-digit run and any `ddd-dddd` pair; bench/pii.ts
 * shows what that costs in precision.
 */
import type { Span } from '../entities.js';
import { keyBefore, keyWords } from './context.js';
import { acceptRuns, splitGroups, type Group } from './groups.js';
import { eachMatch } from './scan.js';
import type { Recognizer } from './types.js';

/** Chains of digit groups joined by single separators; `(area)` groups allowed. */
// The look-ahead wants seven phone characters before trying the chain at all.
const CHAIN = /(?<![\w+\-./])(?=[+(]?\d[\d .()-]{6})\+?\(?\d{1,15}\)?(?:[ .-]?\(\d{1,5}\)|[ .-]\d{1,15}|(?<=\))\d{1,15})*/g;
const PHONE_SHAPE = /[+(]|(?:^|[ ])0|\d{3}[ .-]\d{3}[ .-]\d{4}/;
const EXTENSION = /^ ?(?:x|ext\.?|#) ?\d{1,6}(?!\w)/;
const NANP = /^(?:\+?1[ .-])?(?:\(\d{3}\) ?|\d{3}([ .-]))\d{3}[ .-]\d{4}$/;
const PHONE_KEY_WORDS = new Set(['phone', 'tel', 'telephone', 'mobile', 'cell', 'fax', 'msisdn', 'telefon', 'telefono', 'telephone']);

function digitCount(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) >= 48 && s.charCodeAt(i) <= 57) n++;
  return n;
}

function hasPhoneKey(text: string, pos: number): boolean {
  const ctx = keyBefore(text, pos);
  return ctx !== undefined && keyWords(ctx.key).some((w) => PHONE_KEY_WORDS.has(w));
}

/** Whether `v` (no extension) is a phone number by shape alone, or `keyed` says so. */
function looksLikePhone(v: string, keyed: boolean): boolean {
  const d = digitCount(v);
  if (keyed) return d >= 7 && d <= 15;
  if (v[0] === '+') return d >= 8 && d <= 15;
  if (NANP.test(v)) return true;
  if (v[0] === '(') return d >= 9 && d <= 13;
  // International dialling prefix (`0049 30 1234567`).
  if (v[0] === '0' && v[1] === '0' && v[2] !== '0') return d >= 10 && d <= 15;
  // National number with a trunk prefix, unbroken or in space-separated groups.
  if (v[0] === '0' && v[1] !== '0' && d >= 9 && d <= 13) return !/[.-]/.test(v);
  return false;
}

export const phoneRecognizer: Recognizer = {
  type: 'PHONE',
  find(text: string, out: Span[]) {
    eachMatch(CHAIN, text, (m) => {
      const chain = m[0];
      if (digitCount(chain) < 7) return;
      const after = text[m.index + chain.length];
      // Glued to letters or another number shape (`12.5`, `1-800-FLOWERS`), it is not a phone.
      if (after !== undefined && (/[\w]/.test(after) || ((after === '.' || after === '-' || after === ':') && /\d/.test(text[m.index + chain.length + 1] ?? '')))) return;
      // Cheap test first: without a `+`, a `(`, a group starting with 0 or a North
      // American shape, only a phone-like key can make this a phone (dates, amounts and
      // addresses end here).
      const shaped = PHONE_SHAPE.test(chain);
      const keyed = hasPhoneKey(text, m.index);
      if (!shaped && !keyed) return;
      const groups: Group[] = splitGroups(chain);
      // A value starts at the chain's start or after a space, never after a dash or dot.
      const canStart = (i: number) => i === 0 || chain[groups[i].start - 1] === ' ';
      const accept = (first: number, last: number) =>
        looksLikePhone(chain.slice(groups[first].start, groups[last].end), keyed && first === 0);
      for (const [first, last] of acceptRuns(groups, accept, canStart)) {
        let end = m.index + groups[last].end;
        if (last === groups.length - 1) {
          const ext = EXTENSION.exec(text.slice(end, end + 12));
          if (ext) end += ext[0].length;
        }
        out.push({ type: 'PHONE', start: m.index + groups[first].start, end });
      }
    });
  },
};
