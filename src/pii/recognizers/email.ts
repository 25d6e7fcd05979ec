/**
 * Email addresses. redact-pii's pattern (`([a-z0-9_\-.+]+)@\w+(\.\w+)*`) is the shape
 * we started from, but its domain part cannot contain `-` (so `jo@my-firm.com` becomes
 * `jo@my`) and it takes `pkg@1.2.3` for an address; bench/pii.ts measures both. Here
 * the domain is a sequence of DNS labels ending in an alphabetic TLD.
 *
 * The scan is anchored on `@` (a regex starting with the local part would be tried at
 * every letter of the text) and the local part is walked back from there.
 */
import type { Span } from '../entities.js';
import type { Recognizer } from './types.js';

const MAX_LOCAL = 64;
const DOMAIN = /(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-]|\.[A-Za-z0-9]|:[\w~/])/y;
/** Mail headers whose values are message identifiers written like addresses. */
const MESSAGE_ID_HEADER = /^(?:Message-ID|In-Reply-To|References|Content-ID|X-Message-ID)[ \t]*:/i;
const MESSAGE_ID_HEADER_ANYWHERE = /(?:^|\n)(?:Message-ID|In-Reply-To|References|Content-ID|X-Message-ID)[ \t]*:/i;

function isLocalChar(c: number): boolean {
  return (
    (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c === 46 /* . */ || c === 95 /* _ */ ||
    c === 37 /* % */ || c === 43 /* + */ || c === 45 /* - */
  );
}

export const emailRecognizer: Recognizer = {
  type: 'EMAIL',
  find(text: string, out: Span[]) {
    // Finding each address's line start is only worth it when a header could be there.
    const headers = MESSAGE_ID_HEADER_ANYWHERE.test(text);
    for (let at = text.indexOf('@'); at >= 0; at = text.indexOf('@', at + 1)) {
      let start = at;
      while (start > 0 && at - start < MAX_LOCAL && isLocalChar(text.charCodeAt(start - 1))) start--;
      // An empty local part, one longer than allowed, or one that starts or ends with a
      // dot is an `@` handle or punctuation, not an address.
      if (start === at || (start > 0 && isLocalChar(text.charCodeAt(start - 1)))) continue;
      if (text[start] === '.' || text[at - 1] === '.') continue;
      DOMAIN.lastIndex = at + 1;
      const domain = DOMAIN.exec(text);
      if (!domain) continue;
      if (headers) {
        const lineStart = text.lastIndexOf('\n', start) + 1;
        if (MESSAGE_ID_HEADER.test(text.slice(lineStart, lineStart + 20))) continue;
      }
      const end = at + 1 + domain[0].length;
      out.push({ type: 'EMAIL', start, end });
      at = end - 1;
    }
  },
};
