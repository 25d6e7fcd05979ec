/**
 * Payment card numbers: 12-19 digits, either unbroken or in groups separated by one
 * kind of separator, passing Luhn and starting like a card brand of that length. A
 * digit run is never cut to find a card inside it ("no matching of any long digit
 * run"); whole groups around a card may be left out (`4111 1111 1111 1111 20 items`).
 */
import type { Span } from '../entities.js';
import { cardBrandValid, luhnValid } from '../checksums.js';
import { isIdentifierField } from '../tables.js';
import { keyBefore, type KeyContext } from './context.js';
import { acceptRuns, splitGroups } from './groups.js';
import { eachMatch } from './scan.js';
import type { Recognizer } from './types.js';

// The look-ahead makes the regex give up at once on the short numbers logs are full of.
const CANDIDATE = /(?<![\w.\-+/])(?=\d[\d -]{11})\d{1,19}(?:[ -]\d{1,19}){0,7}(?![\w]|[.-]\d)/g;
function isIdKey(ctx: KeyContext | undefined): boolean {
  return ctx !== undefined && isIdentifierField(ctx.parent ? `${ctx.parent}_${ctx.key}` : ctx.key);
}

export const cardRecognizer: Recognizer = {
  type: 'CARD',
  find(text: string, out: Span[]) {
    eachMatch(CANDIDATE, text, (m) => {
      const cand = m[0];
      if (cand.length < 12 || isIdKey(keyBefore(text, m.index))) return;
      const groups = splitGroups(cand);
      const accept = (first: number, last: number) => {
        const sep = first < last ? cand[groups[first].end] : '';
        let digits = '';
        for (let i = first; i <= last; i++) {
          if (i > first && (cand[groups[i].start - 1] !== sep || groups[i].start - groups[i - 1].end !== 1)) return false;
          digits += cand.slice(groups[i].start, groups[i].end);
        }
        return digits.length >= 12 && digits.length <= 19 && cardBrandValid(digits) && luhnValid(digits);
      };
      for (const [first, last] of acceptRuns(groups, accept)) {
        out.push({ type: 'CARD', start: m.index + groups[first].start, end: m.index + groups[last].end });
      }
    });
  },
};
