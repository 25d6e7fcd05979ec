/**
 * Text that already has the shape of one of our tokens. It is tokenized like a value
 * (type TOKEN), so a model never sees a token the vault did not issue for the text at
 * that place, and `detokenize(tokenize(x)) === x` holds even for text quoting tokens.
 */
import type { Span } from '../entities.js';
import { tokenRegex } from '../token-format.js';
import { eachMatch } from './scan.js';
import type { Recognizer } from './types.js';

const TOKEN_LITERAL = tokenRegex();

export const tokenLiteralRecognizer: Recognizer = {
  type: 'TOKEN',
  find(text: string, out: Span[]) {
    if (!text.includes('_')) return;
    eachMatch(TOKEN_LITERAL, text, (m) => out.push({ type: 'TOKEN', start: m.index, end: m.index + m[0].length }));
  },
};
