/**
 * IPv4 and IPv6 addresses. The look-arounds keep version strings
 * (`Chrome/120.0.0.0`, `v10.0.0.1`, OIDs like `1.3.6.1.4.1`) and hex-pair runs (MACs,
 * key fingerprints, times) from being read as addresses. IPv6 candidates are confirmed
 * by node:net and must carry some substance: `::1`-style one-group forms are skipped
 * because `a[1::2]`-style code slices look the same.
 */
import { isIPv6 } from 'node:net';
import type { Span } from '../entities.js';
import { eachMatch } from './scan.js';
import type { Recognizer } from './types.js';

const OCTET = '(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)';
const IPV4 = new RegExp(`(?<![\\w.]|[A-Za-z]\\/)${OCTET}(?:\\.${OCTET}){3}(?![\\w]|\\.\\d)`, 'g');
/** Tried only where a run of hex digits, colons and dots starts (see below). */
const IPV6 = /(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{1,4})?(?![\w:]|\.\w)/y;

function isHexColonDot(c: number): boolean {
  return (c >= 48 && c <= 58) /* 0-9 : */ || (c >= 65 && c <= 70) || (c >= 97 && c <= 102) || c === 46;
}

function substantialIPv6(v: string): boolean {
  if (!isIPv6(v)) return false;
  const groups = v.split(':').filter(Boolean);
  if (!v.includes('::')) return true;
  return groups.length >= 2 && groups.some((g) => g.length >= 3 || g.includes('.'));
}

function findIPv6(text: string, out: Span[]): void {
  // An address starts where a run of [0-9A-Fa-f:.] starts (the look-behind forbids any
  // of those before it), so each run is tried once, at its start.
  for (let colon = text.indexOf(':'); colon >= 0; ) {
    let start = colon;
    while (start > 0 && isHexColonDot(text.charCodeAt(start - 1))) start--;
    let end = colon + 1;
    while (end < text.length && isHexColonDot(text.charCodeAt(end))) end++;
    IPV6.lastIndex = start;
    const m = IPV6.exec(text);
    if (m && substantialIPv6(m[0])) out.push({ type: 'IP', start, end: start + m[0].length });
    colon = text.indexOf(':', end);
  }
}

export const ipRecognizer: Recognizer = {
  type: 'IP',
  find(text: string, out: Span[]) {
    if (text.includes('.')) eachMatch(IPV4, text, (m) => out.push({ type: 'IP', start: m.index, end: m.index + m[0].length }));
    if (text.includes(':')) findIPv6(text, out);
  },
};
