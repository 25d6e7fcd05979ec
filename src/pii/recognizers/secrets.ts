/**
 * Credentials: well-known token formats (each with a prefix its issuer chose so that
 * scanners can find it), values assigned to secret-sounding keys, passwords in URLs,
 * and HTTP authorization headers. Private-key blocks span lines and are found by
 * `findPrivateKeyBlocks` per record instead (see the newline-local contract).
 */
import type { Span } from '../entities.js';
import { keyWords } from './context.js';
import { eachMatch } from './scan.js';
import type { Recognizer } from './types.js';

/** Token formats with a distinctive prefix. Edges: not glued to other token characters. */
const PREFIXED = new RegExp(
  [
    // AWS access key ids (long-term AKIA, temporary ASIA, and other principal ids).
    '(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}',
    // GitHub personal, OAuth, user-to-server, server-to-server and refresh tokens.
    'gh[pousr]_[A-Za-z0-9]{36,251}',
    'github_pat_[A-Za-z0-9_]{22,255}',
    // Slack bot/user/app tokens.
    'xox[abposre]-[A-Za-z0-9\\-]{10,250}',
    // npm access tokens.
    'npm_[A-Za-z0-9]{36}',
    // Google API keys.
    'AIza[0-9A-Za-z_\\-]{35}',
    // Stripe secret and restricted keys (publishable pk_ keys are public).
    '(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,247}',
    // OpenAI and Anthropic API keys.
    'sk-(?:ant-[a-z]+\\d*-|proj-|svcacct-|admin-)?[A-Za-z0-9_\\-]{32,}',
    // sandgate's own API tokens.
    'sgp_[A-Za-z0-9]{30,}',
    // JSON Web Tokens: header and payload are base64url JSON objects (`{"` = eyJ).
    'eyJ[A-Za-z0-9_\\-]{8,}\\.eyJ[A-Za-z0-9_\\-]{8,}\\.[A-Za-z0-9_\\-]{10,}',
    // Slack incoming webhooks carry their secret in the path.
    'https://hooks\\.slack\\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{16,}',
  ]
    .map((p) => `(?:${p})`)
    .join('|'),
  'g',
);
const TOKEN_EDGE = /[A-Za-z0-9_-]/;

/** `scheme://user:password@host`, tried at each `://`: group 1 is the password. */
const URL_USERINFO = /:\/\/[^\s:@/]{1,64}:([^\s@/]{1,128})@/y;

/** `Authorization: Bearer <credential>` and friends: group 1 is the credential. */
const AUTH_HEADER = /\bAuthorization["']?[ \t]*[:=][ \t]*["']?(?:Bearer|Basic|Token|Digest)[ \t]+([A-Za-z0-9._~+/=-]{8,})/gi;

/** Key words that make a key secret-bearing when they end it. */
const SECRET_KEY_PATTERN =
  /(?<![A-Za-z])(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|secret[_-]?key|credentials?|auth[_-]?key)["']?[ \t]*(?:[:=]|=>)[ \t]*/gi;
/** Keys that end in a secret word but hold something else. */
const NOT_SECRET_KEY_WORDS = new Set(['page', 'next', 'continuation', 'cursor', 'type', 'csrf']);
/** A dependency version, as package manifests put under keys like `"jwt-token"`. */
const VERSION = /^[\^~<>=v]*\d+(?:\.\d+){1,3}(?:[-+.][\w.]+)?$/;
const CODE_EXPRESSION = /^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+\(?$|^[A-Za-z_$][\w$.]*\($/;
const PLACEHOLDER = /^(?:\*+|x+|•+|null|none|nil|true|false|undefined|redacted|<[^>]*>|\$\{?[A-Za-z_][\w]*\}?|\{\{.*\}\}|%\(.*\)s|\[[A-Z]+_\d+\])$/i;

function keyAt(text: string, keyEnd: number): string {
  let i = keyEnd - 1;
  while (i >= 0 && /[\w.-]/.test(text[i])) i--;
  return text.slice(i + 1, keyEnd);
}

function findKeyedSecrets(text: string, out: Span[]): void {
  eachMatch(SECRET_KEY_PATTERN, text, (m) => {
    let start = m.index + m[0].length;
    // The key word must end the key (`password:` but not `password_policy:`), and the key
    // must not be a known non-secret (`next_page_token`).
    const keyEnd = m.index + m[0].search(/["' \t:=]/);
    const words = keyWords(keyAt(text, keyEnd));
    if (words.some((w) => NOT_SECRET_KEY_WORDS.has(w))) return;
    let end: number;
    const q = text[start];
    if (q === '"' || q === "'") {
      start++;
      end = start;
      while (end < text.length && text[end] !== q && text[end] !== '\n') end += text[end] === '\\' ? 2 : 1;
      if (text[end] !== q) return;
    } else {
      end = start;
      while (end < text.length && !/[\s,;}\])"']/.test(text[end])) end++;
    }
    const value = text.slice(start, end);
    if (value.length < 6 || PLACEHOLDER.test(value) || /^(.)\1*$/.test(value) || VERSION.test(value)) return;
    // Unquoted, a member chain or a call is code (`password: config.db.password()`).
    if (q !== '"' && q !== "'" && CODE_EXPRESSION.test(value)) return;
    out.push({ type: 'SECRET', start, end });
  });
}

function findUrlPasswords(text: string, out: Span[]): void {
  for (let i = text.indexOf('://'); i >= 0; i = text.indexOf('://', i + 3)) {
    if (!/[A-Za-z0-9+.-]/.test(text[i - 1] ?? '')) continue;
    URL_USERINFO.lastIndex = i;
    const m = URL_USERINFO.exec(text);
    if (m) out.push({ type: 'SECRET', start: i + m[0].length - 1 - m[1].length, end: i + m[0].length - 1 });
  }
}

export const secretRecognizer: Recognizer = {
  type: 'SECRET',
  find(text: string, out: Span[]) {
    eachMatch(PREFIXED, text, (m) => {
      const before = text[m.index - 1];
      const after = text[m.index + m[0].length];
      if ((before !== undefined && TOKEN_EDGE.test(before)) || (after !== undefined && TOKEN_EDGE.test(after))) return;
      out.push({ type: 'SECRET', start: m.index, end: m.index + m[0].length });
    });
    findUrlPasswords(text, out);
    eachMatch(AUTH_HEADER, text, (m) => {
      const end = m.index + m[0].length;
      out.push({ type: 'SECRET', start: end - m[1].length, end });
    });
    findKeyedSecrets(text, out);
  },
};

const PEM_BEGIN = /-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----/g;
const PEM_END = /-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----/g;
/** A complete key body: anything key-like up to the next `-----`. */
const PEM_BODY = /(?:(?!-----)[A-Za-z0-9+/=\s:,-]|\\[rn])*/y;
/** A truncated key body: header lines and base64 lines, joined by real or escaped breaks. */
const PEM_PARTIAL_BODY = /(?:(?:\r?\n|\\r?\\n|[ \t]+)(?:[A-Za-z0-9+/=]+|[A-Za-z-]+: [^\n\\]*))*/y;

/** Whether a line opens a private-key block that it does not close. */
export function opensPrivateKeyBlock(line: string): boolean {
  const b = line.lastIndexOf('-----BEGIN ');
  return b >= 0 && /PRIVATE KEY/.test(line.slice(b)) && line.indexOf('-----END ', b) < 0;
}

/**
 * Private-key blocks, BEGIN line through END line. This one is not newline-local: the
 * detector runs it on whole records, and the record scanner keeps a block in one
 * record (within its size bound). A block cut short (output truncated) is taken up to
 * where its body ends, so a partial key still never reaches a model.
 */
export function findPrivateKeyBlocks(text: string, out: Span[]): void {
  if (!text.includes('PRIVATE KEY')) return;
  PEM_BEGIN.lastIndex = 0;
  for (let m = PEM_BEGIN.exec(text); m; m = PEM_BEGIN.exec(text)) {
    const bodyStart = m.index + m[0].length;
    PEM_END.lastIndex = bodyStart;
    const endMatch = PEM_END.exec(text);
    PEM_BODY.lastIndex = bodyStart;
    const bodyEnd = bodyStart + PEM_BODY.exec(text)![0].length;
    let end: number;
    if (endMatch && endMatch.index === bodyEnd) {
      end = endMatch.index + endMatch[0].length;
    } else {
      PEM_PARTIAL_BODY.lastIndex = bodyStart;
      end = bodyStart + PEM_PARTIAL_BODY.exec(text)![0].length;
    }
    out.push({ type: 'SECRET', start: m.index, end });
    PEM_BEGIN.lastIndex = end;
  }
}
