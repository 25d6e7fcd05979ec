/**
 * Which parts of streamed Markdown a client will read as an address: a link's or an
 * image's destination (`](…)`, a reference definition's `[ref]: …`), an autolink or an
 * HTML tag (`<…>`), and a bare URL a client linkifies (`scheme://…`, `www.…`, up to
 * whitespace). Tokens there must stay as the model wrote them: a value put back into an
 * address leaves with the request (an image loads without a click).
 *
 * It errs toward "address": code spans and fences are not told apart, and a `](` that
 * never becomes a link still starts a destination. Erring the other way would leak; this
 * way a token is shown where its value could have been.
 *
 * Text arrives in pieces; what cannot be decided yet (a token cut in two, a `]` whose
 * next character is not here, `ww` that may become `www.`) is held back until the next
 * piece or `end`.
 */
import { TOKEN_PATTERN_SOURCE } from '../pii/token-format.js';

/** A run of text, and whether a client reads it as (part of) an address. */
export interface Span {
  text: string;
  url: boolean;
}

/** Longer than any token literal ([SECRET_123456789]); a '[' further back than this is plain text. */
const MAX_TOKEN_CHARS = 24;
const TOKEN_AT = new RegExp(TOKEN_PATTERN_SOURCE, 'y');
const TOKEN_START = /^\[[A-Z]*(?:_\d*)?$/;
const TAG_START = /[A-Za-z/!?]/;
const SPACE = /\s/;

type Mode =
  /** Plain Markdown text: tokens here become values. */
  | { kind: 'text' }
  /** After `](` or `]:`, before the destination (spaces and one line break may come first). */
  | { kind: 'before-destination'; newlines: number }
  /** A destination without angle brackets: to whitespace, or the `)` that balances. */
  | { kind: 'destination'; depth: number }
  /** A destination in angle brackets, `](<…>)`. */
  | { kind: 'angle-destination' }
  /** An autolink or an HTML tag, to its `>` (quoted attribute values may hold one). */
  | { kind: 'tag'; quote: string; newline: boolean }
  /** A bare URL, to whitespace. */
  | { kind: 'bare' };

export class UrlSpans {
  private mode: Mode = { kind: 'text' };
  private held = '';
  /** Only blanks, '>' and list markers since the line began (where a reference definition may start). */
  private lineStart = true;

  /** What can be classified of the text so far; the rest waits for more. */
  push(piece: string): Span[] {
    return this.scan(this.held + piece, false);
  }

  /** The rest, classified as if the text ended here. */
  end(): Span[] {
    const rest = this.held;
    this.held = '';
    const spans = this.scan(rest, true);
    this.mode = { kind: 'text' };
    this.lineStart = true;
    return spans;
  }

  private scan(text: string, final: boolean): Span[] {
    const spans: Span[] = [];
    const add = (s: string, url: boolean) => {
      const last = spans.at(-1);
      if (last && last.url === url) last.text += s;
      else if (s) spans.push({ text: s, url });
    };
    let i = 0;
    this.held = '';
    /** True when the character at `at` is not here yet: hold from `from` and stop. */
    const waitFor = (at: number, from: number) => {
      if (at < text.length || final) return false;
      this.held = text.slice(from);
      return true;
    };

    scan: while (i < text.length) {
      const c = text[i]!;
      const m = this.mode;
      switch (m.kind) {
        case 'text': {
          if (c === '[') {
            TOKEN_AT.lastIndex = i;
            const token = TOKEN_AT.exec(text)?.[0];
            if (token) {
              // A token followed by '(' (or ':' where a definition may start) is read as a link label: an unknown token stays as it is.
              const after = i + token.length;
              if (waitFor(after, i)) break scan;
              add(token, false);
              const labelled = text[after] === '(' || (text[after] === ':' && this.lineStart);
              this.lineStart = false;
              i = after;
              if (labelled) {
                add(text[after]!, true);
                this.mode = { kind: 'before-destination', newlines: 0 };
                i++;
              }
              continue;
            }
            const rest = text.slice(i);
            if (!final && rest.length < MAX_TOKEN_CHARS && TOKEN_START.test(rest)) {
              this.held = rest;
              break scan;
            }
          } else if (c === ']') {
            if (waitFor(i + 1, i)) break scan;
            if (text[i + 1] === '(' || text[i + 1] === ':') {
              add(text.slice(i, i + 2), true);
              this.mode = { kind: 'before-destination', newlines: 0 };
              this.lineStart = false;
              i += 2;
              continue;
            }
          } else if (c === '<') {
            if (waitFor(i + 1, i)) break scan;
            if (TAG_START.test(text[i + 1]!)) {
              this.mode = { kind: 'tag', quote: '', newline: false };
              continue;
            }
          } else if (c === ':') {
            if (text.startsWith('//', i + 1)) {
              this.mode = { kind: 'bare' };
              continue;
            }
            if (!final && '//'.startsWith(text.slice(i + 1)) && i + 3 > text.length) {
              this.held = text.slice(i);
              break scan;
            }
          } else if (c === 'w' || c === 'W') {
            const next = text.slice(i, i + 4).toLowerCase();
            if (next === 'www.') {
              this.mode = { kind: 'bare' };
              continue;
            }
            if (!final && next.length < 4 && 'www.'.startsWith(next)) {
              this.held = text.slice(i);
              break scan;
            }
          }
          add(c, false);
          if (c === '\n') this.lineStart = true;
          else if (!' \t>-*+'.includes(c)) this.lineStart = false;
          i++;
          continue;
        }
        case 'before-destination': {
          if (c === '\n' && ++m.newlines > 1) {
            this.mode = { kind: 'text' };
            continue;
          }
          if (SPACE.test(c)) {
            add(c, true);
            i++;
            continue;
          }
          if (c === '<') {
            add(c, true);
            this.mode = { kind: 'angle-destination' };
            i++;
            continue;
          }
          this.mode = { kind: 'destination', depth: 0 };
          continue;
        }
        case 'destination':
        case 'angle-destination': {
          // A link's destination: `(dest)` ends at a space or its closing parenthesis,
          // `<dest>` at `>` or a line end; a backslash escapes the next character in both.
          if (m.kind === 'destination' ? SPACE.test(c) : c === '\n') {
            this.mode = { kind: 'text' };
            continue;
          }
          if (c === '\\') {
            if (waitFor(i + 1, i)) break scan;
            add(text.slice(i, i + 2), true);
            i += 2;
            continue;
          }
          add(c, true);
          i++;
          if (m.kind === 'angle-destination') {
            if (c === '>') this.mode = { kind: 'text' };
          } else if (c === '(') m.depth++;
          else if (c === ')' && m.depth-- === 0) this.mode = { kind: 'text' };
          continue;
        }
        case 'tag': {
          // A blank line ends what was never a tag ("x <y", no '>').
          if (c === '\n' && m.newline) {
            this.mode = { kind: 'text' };
            continue;
          }
          m.newline = c === '\n';
          add(c, true);
          i++;
          if (m.quote) {
            if (c === m.quote) m.quote = '';
          } else if (c === '"' || c === "'") {
            m.quote = c;
          } else if (c === '>') {
            this.mode = { kind: 'text' };
          }
          continue;
        }
        case 'bare': {
          if (SPACE.test(c)) {
            this.mode = { kind: 'text' };
            continue;
          }
          add(c, true);
          i++;
          continue;
        }
      }
    }
    return spans;
  }
}
