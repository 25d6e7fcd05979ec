/**
 * The token a model sees in place of a value: `[EMAIL_3]`.
 *
 * Why this shape: square brackets, upper-case letters, `_` and digits are never escaped
 * by JSON, by Python/JS/TS string literals (including f-strings and template literals,
 * whose specials are `{` and `${`), by shell double quotes, or by Markdown, so a model
 * quoting a token in code reproduces it byte for byte. A bracketed upper-case type with
 * a counter is rare in real text, and where it does occur the tokenizer escapes it (see
 * `TOKEN` in entities.ts). Numbers start at 1 with no leading zero, so there is exactly
 * one spelling per token.
 */
import { TOKEN_TYPES, type TokenType } from './entities.js';

/** Largest counter a token may carry; keeps the literal pattern bounded. */
const MAX_COUNTER_DIGITS = 9;

export function formatToken(type: TokenType, n: number): string {
  return `[${type}_${n}]`;
}

/** Matches any token literal; group 1 is the type, group 2 the counter. */
export const TOKEN_PATTERN_SOURCE = `\\[(${TOKEN_TYPES.join('|')})_([1-9]\\d{0,${MAX_COUNTER_DIGITS - 1}})\\]`;

/** A fresh global regex for token literals (callers own its lastIndex). */
export function tokenRegex(): RegExp {
  return new RegExp(TOKEN_PATTERN_SOURCE, 'g');
}

export function parseToken(literal: string): { type: TokenType; n: number } | undefined {
  const m = new RegExp(`^${TOKEN_PATTERN_SOURCE}$`).exec(literal);
  return m ? { type: m[1] as TokenType, n: Number(m[2]) } : undefined;
}
