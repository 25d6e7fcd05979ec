/**
 * Times read back from the store, shown as text. A stored time may be anything an older
 * or damaged store holds (Infinity, a number beyond any date, text), and a page that
 * lists it must still render, so formatting never throws.
 */

/** Largest epoch ms a Date can hold (±100,000,000 days from 1970). */
const MAX_DATE_MS = 8.64e15;

/** Whether `ms` is an epoch ms a Date can hold. */
export function isInstant(ms: unknown): ms is number {
  return typeof ms === 'number' && Number.isFinite(ms) && Math.abs(ms) <= MAX_DATE_MS;
}

/** What a time that is no instant is shown as. */
export const UNKNOWN_TIME = 'unknown';

/**
 * `ms` as UTC text: `2026-01-31 12:00` (`minute`), `2026-01-31 12:00:05` (`second`) or
 * `2026-01-31T12:00:05Z` (`iso`); UNKNOWN_TIME for a value that is no instant.
 */
export function utcText(ms: unknown, precision: 'minute' | 'second' | 'iso'): string {
  if (!isInstant(ms)) return UNKNOWN_TIME;
  const iso = new Date(ms).toISOString();
  if (precision === 'iso') return iso.replace(/\.\d+Z$/, 'Z');
  return iso.slice(0, precision === 'minute' ? 16 : 19).replace('T', ' ');
}
