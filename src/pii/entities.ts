/**
 * The kinds of sensitive value the PII layer knows, and the span type every recognizer
 * returns. Kept free of detection logic so the vault, the settings and the corpus can
 * share it.
 */

/** Entity types a deployment can switch on or off (SANDGATE_PII_ENTITIES). */
export const PII_ENTITY_TYPES = ['EMAIL', 'PHONE', 'CARD', 'IBAN', 'IP', 'SSN', 'SECRET', 'NAME', 'ADDRESS', 'DOB'] as const;
export type PiiEntityType = (typeof PII_ENTITY_TYPES)[number];

/**
 * Every type a token can carry. `TOKEN` is not a kind of PII: it marks text that
 * already looked like one of our tokens before tokenization (say, a document quoting
 * `[EMAIL_3]`). Tokenizing such text too is what keeps `detokenize(tokenize(x)) === x`
 * for every x, and it means a token a model sees was always issued for the value at
 * that very place. It cannot be switched off.
 */
export const TOKEN_TYPES = [...PII_ENTITY_TYPES, 'TOKEN'] as const;
export type TokenType = (typeof TOKEN_TYPES)[number];

/** A detected value: `text.slice(start, end)` is the raw value. */
export interface Span {
  type: TokenType;
  start: number;
  end: number;
}

/**
 * Which span wins when two overlap (lower wins). An escaped token literal must always
 * win (round-trip exactness depends on it); a secret beats the email-shaped
 * `password@host` inside a connection string; a street address beats a number in it
 * that could pass for a phone, and the name in it (`12 Grant Street`); names come last because they are the least
 * certain.
 */
export const TYPE_PRIORITY: Readonly<Record<TokenType, number>> = {
  TOKEN: 0,
  SECRET: 1,
  EMAIL: 2,
  IBAN: 3,
  CARD: 4,
  SSN: 5,
  ADDRESS: 6,
  DOB: 7,
  PHONE: 8,
  IP: 9,
  NAME: 10,
};
