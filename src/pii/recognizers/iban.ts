/**
 * IBANs, printed (groups of four separated by spaces) or electronic (unbroken), checked
 * against the country's registered length and the ISO 13616 mod-97 check digits.
 */
import type { Span } from '../entities.js';
import { ibanChecksumValid, ibanLength } from '../checksums.js';
import { eachMatch } from './scan.js';
import type { Recognizer } from './types.js';

const CANDIDATE = /(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){10,36}/g;

export const ibanRecognizer: Recognizer = {
  type: 'IBAN',
  find(text: string, out: Span[]) {
    eachMatch(CANDIDATE, text, (m) => {
      const cand = m[0];
      const len = ibanLength(cand.slice(0, 2));
      if (!len) return;
      // Walk the candidate until `len` alphanumerics are taken: the rest is what follows
      // the IBAN (`DE89 3704 0044 0532 0130 00 EUR`).
      let taken = 0;
      let end = 0;
      while (end < cand.length && taken < len) {
        if (cand[end] !== ' ') taken++;
        end++;
      }
      if (taken < len) return;
      const after = text[m.index + end];
      if (after !== undefined && /[A-Za-z0-9]/.test(after)) return;
      if (!ibanChecksumValid(cand.slice(0, end).replaceAll(' ', ''))) return;
      out.push({ type: 'IBAN', start: m.index, end: m.index + end });
    });
  },
};
