/**
 * A recognizer finds candidate spans of one kind in a block of text.
 *
 * Contract (the streaming tokenizer relies on it): a recognizer is newline-local, so
 * no match and no lookaround crosses a `\n`. Running it on a block of whole lines must
 * give the same spans as running it on each line alone. Spans are pushed onto `out`
 * with offsets relative to `text`; they may overlap other recognizers' spans (the
 * detector resolves that).
 */
import type { PiiEntityType, Span } from '../entities.js';

export interface Recognizer {
  type: PiiEntityType | 'TOKEN';
  find(text: string, out: Span[]): void;
}
