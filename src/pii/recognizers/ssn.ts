/**
 * US Social Security numbers: redact-pii's own pattern, kept as it is, plus the SSA's
 * validity rules and one separator throughout (so `123-45 6789` is not one).
 */
import { usSocialSecurityNumber } from 'redact-pii/lib/built-ins/simple-regexp-patterns.js';
import type { Span } from '../entities.js';
import { ssnValid } from '../checksums.js';
import { eachMatch } from './scan.js';
import type { Recognizer } from './types.js';

const SSN = new RegExp(usSocialSecurityNumber.source, 'g');

export const ssnRecognizer: Recognizer = {
  type: 'SSN',
  find(text: string, out: Span[]) {
    eachMatch(SSN, text, (m) => {
      const v = m[0];
      // redact-pii's separator class `[ -.]` is a range that also admits `,` `(` `+` and
      // more; an SSN is written with dashes or spaces.
      if ((v[3] !== '-' && v[3] !== ' ') || v[3] !== v[6]) return;
      // Glued to more digits or a dash, it is part of a longer number (an ISBN, a date).
      const before = text[m.index - 1];
      const after = text[m.index + v.length];
      if (before === '-' || before === '.' || after === '-' || (after === '.' && /\d/.test(text[m.index + v.length + 1] ?? ''))) return;
      if (!ssnValid(v[0] + v[1] + v[2] + v[4] + v[5] + v[7] + v[8] + v[9] + v[10])) return;
      out.push({ type: 'SSN', start: m.index, end: m.index + v.length });
    });
  },
};
