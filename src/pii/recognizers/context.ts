/**
 * Context cues shared by recognizers: the key a value is assigned to. Tool output is
 * mostly structured (JSON, YAML, env files, logfmt), and the key says more about a
 * value than its shape does: `"phone": "0146280645"` is a phone number, `"id":
 * 5105105105105100` is not a card.
 */

const MAX_KEY_LOOKBACK = 80;

function isKeyChar(c: number): boolean {
  return (
    (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 /* _ */ || c === 45 /* - */ || c === 46 /* . */
  );
}

export interface KeyContext {
  key: string;
  /** Where the key starts (its first character, after any quote). */
  start: number;
  /** For `"parent": {"key": value}` on one line, the parent key. */
  parent?: string;
}

/**
 * The key that the value starting at `pos` is assigned to, as in `key: value`,
 * `"key": "value"`, `key=value` or `'key' => 'value'`; undefined when the value does
 * not follow an assignment. Looks back at most 80 characters and never past a line
 * break (recognizers are newline-local).
 */
export function keyBefore(text: string, pos: number, withParent = true): KeyContext | undefined {
  const stop = Math.max(0, pos - MAX_KEY_LOOKBACK);
  let i = pos - 1;
  if (i >= stop && (text[i] === '"' || text[i] === "'")) i--;
  while (i >= stop && (text[i] === ' ' || text[i] === '\t')) i--;
  if (i >= stop && text[i] === '>' && text[i - 1] === '=') i--; // PHP/Ruby `=>`
  if (i < stop || (text[i] !== ':' && text[i] !== '=')) return undefined;
  i--;
  while (i >= stop && (text[i] === ' ' || text[i] === '\t')) i--;
  if (i >= stop && (text[i] === '"' || text[i] === "'")) i--;
  const end = i + 1;
  while (i >= stop && isKeyChar(text.charCodeAt(i))) i--;
  if (end <= i + 1) return undefined;
  const ctx: KeyContext = { key: text.slice(i + 1, end), start: i + 1 };
  if (withParent) {
    // `{"author":{"name":"…"}}`: the object's own key says whose name it is.
    if (text[i] === '"' || text[i] === "'") i--;
    while (i >= stop && (text[i] === ' ' || text[i] === '\t')) i--;
    if (i >= stop && text[i] === '{') ctx.parent = keyBefore(text, i, false)?.key;
  }
  return ctx;
}

const keyWordsCache = new Map<string, readonly string[]>();

/** Splits camelCase, snake_case, kebab-case and dotted keys into lower-case words. */
export function keyWords(key: string): readonly string[] {
  let words = keyWordsCache.get(key);
  if (!words) {
    words = key
      .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
      .toLowerCase()
      .split(/[^a-z0-9]+/)
      .filter(Boolean);
    // Keys repeat endlessly in tool output; bound the cache for the odd generated one.
    if (keyWordsCache.size > 10_000) keyWordsCache.clear();
    keyWordsCache.set(key, words);
  }
  return words;
}
