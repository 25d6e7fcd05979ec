/**
 * The shape of a personal API token: `sgp_` + 32 base62 characters of randomness
 * (≈190 bits) + a 6-character base62 CRC32 of those 32 characters.
 *
 * The fixed prefix and the checksum let secret scanners (GitHub's, gitleaks, …)
 * recognise a leaked token without asking us, and let the gateway reject a mistyped
 * one without a database lookup. Only `hashToken(token)` is ever stored.
 */
import crypto from 'node:crypto';

export const TOKEN_PREFIX = 'sgp_';
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
export const RANDOM_CHARS = 32;
export const CHECKSUM_CHARS = 6;
export const TOKEN_LENGTH = TOKEN_PREFIX.length + RANDOM_CHARS + CHECKSUM_CHARS;
/** For scanners and docs: the exact shape of a token. */
export const TOKEN_PATTERN = /^sgp_[0-9A-Za-z]{38}$/;

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

export function crc32(s: string): number {
  let c = 0xffffffff;
  for (let i = 0; i < s.length; i++) c = CRC_TABLE[(c ^ s.charCodeAt(i)) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function base62(n: number, width: number): string {
  let out = '';
  for (let i = 0; i < width; i++) {
    out = ALPHABET[n % 62]! + out;
    n = Math.floor(n / 62);
  }
  return out;
}

/** 62^6 > 2^32, so six characters hold any CRC32. */
export function checksum(random: string): string {
  return base62(crc32(random), CHECKSUM_CHARS);
}

/** Uniform base62 by rejection sampling: bytes >= 248 (= 4 * 62) are dropped. */
function randomBase62(count: number): string {
  let out = '';
  while (out.length < count) {
    for (const b of crypto.randomBytes(count * 2)) {
      if (b < 248 && out.length < count) out += ALPHABET[b % 62];
    }
  }
  return out;
}

export function generateToken(prefix: string = TOKEN_PREFIX): string {
  const random = randomBase62(RANDOM_CHARS);
  return prefix + random + checksum(random);
}

/** True when the string has a token's shape (with `prefix`, default a personal token's) and its checksum matches. */
export function isWellFormedToken(s: string, prefix: string = TOKEN_PREFIX): boolean {
  if (s.length !== prefix.length + RANDOM_CHARS + CHECKSUM_CHARS || !s.startsWith(prefix) || !/^[0-9A-Za-z]+$/.test(s.slice(prefix.length))) return false;
  const random = s.slice(prefix.length, prefix.length + RANDOM_CHARS);
  return s.slice(-CHECKSUM_CHARS) === checksum(random);
}

export function hashToken(token: string): Buffer {
  return crypto.createHash('sha256').update(token, 'utf8').digest();
}
