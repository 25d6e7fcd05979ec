/**
 * JSON looked at and formatted within bounds. What a model or a workspace file hands the
 * gateway may be nested thousands of levels deep or wide enough that indenting it
 * multiplies its size (a 100 KB array nested 4,000 deep pretty-prints to 430 MB), and
 * the standard functions recurse (and throw past a few thousand levels) and finish the
 * whole value before returning. Everything here walks iteratively and stops at a depth
 * and a length, and says that it stopped.
 */

export interface JsonLimits {
  /** Containers nested deeper than this are not entered. */
  maxDepth: number;
  /** Characters of JSON (or of formatted text) after which the walk stops. */
  maxChars: number;
}

export interface JsonExtent {
  /** Characters of the value's JSON (about: escapes are not counted); when `over`, how far the walk got. */
  chars: number;
  /** Deepest nesting seen (1: a non-empty object or array of scalars). */
  depth: number;
  /** The value is nested deeper than `maxDepth` or longer than `maxChars` (the walk stopped there). */
  over: boolean;
}

const isContainer = (v: unknown): v is Record<string, unknown> | unknown[] => v !== null && typeof v === 'object';

/** Characters a scalar takes in JSON, without building the text of long strings. */
function scalarChars(v: unknown): number {
  if (typeof v === 'string') return v.length + 2;
  if (v === undefined || typeof v === 'function' || typeof v === 'symbol') return 4;
  return String(v).length;
}

/** How large and deep `value` is as JSON, looking no further than the limits. */
export function jsonExtent(value: unknown, limits: JsonLimits): JsonExtent {
  let chars = 0;
  let depth = 0;
  const stack: { keys: string[] | undefined; values: unknown[]; i: number; level: number }[] = [];
  /** Counts a scalar, or enters a container; false once over a limit. */
  const visit = (v: unknown, level: number): boolean => {
    if (!isContainer(v)) {
      chars += scalarChars(v);
      return chars <= limits.maxChars;
    }
    chars += 2;
    const keys = Array.isArray(v) ? undefined : Object.keys(v);
    const values = Array.isArray(v) ? v : keys!.map((k) => (v as Record<string, unknown>)[k]);
    if (!values.length) return chars <= limits.maxChars;
    depth = Math.max(depth, level + 1);
    if (depth > limits.maxDepth) return false;
    stack.push({ keys, values, i: 0, level: level + 1 });
    return chars <= limits.maxChars;
  };
  if (!visit(value, 0)) return { chars, depth, over: true };
  while (stack.length) {
    const top = stack[stack.length - 1]!;
    if (top.i >= top.values.length) {
      stack.pop();
      continue;
    }
    const i = top.i++;
    // The separator, and a key with its quotes and colon.
    chars += (i ? 1 : 0) + (top.keys ? top.keys[i]!.length + 3 : 0);
    if (!visit(top.values[i], top.level)) return { chars, depth, over: true };
  }
  return { chars, depth, over: false };
}

export interface PrettyJson {
  text: string;
  /** Containers deeper than the limit were shown as a count of what they hold. */
  deeper: boolean;
  /** The text stops at the length limit. */
  longer: boolean;
}

/**
 * `JSON.stringify(value, null, 2)` within limits: containers nested deeper than
 * `maxDepth` are shown as `[… 3 items]` / `{… 2 keys}`, and the text stops after
 * `maxChars` characters. Within the limits the text is exactly JSON.stringify's.
 */
export function prettyJson(value: unknown, limits: JsonLimits): PrettyJson {
  const out: string[] = [];
  let length = 0;
  let deeper = false;
  const write = (s: string) => {
    out.push(s);
    length += s.length;
  };
  // Containers are read in place (no copy of their entries): a wide array is not duplicated to show its head.
  type Frame = { container: unknown[] | Record<string, unknown>; keys: string[] | undefined; i: number; level: number; close: string };
  const stack: Frame[] = [];
  const pad = (level: number) => '\n' + '  '.repeat(level);
  const skipped = (x: unknown) => x === undefined || typeof x === 'function' || typeof x === 'symbol';
  /** Writes a scalar, or opens a container (pushing its frame). */
  const open = (v: unknown, level: number) => {
    if (v !== null && typeof v === 'object' && typeof (v as { toJSON?: unknown }).toJSON === 'function') v = (v as { toJSON: () => unknown }).toJSON();
    if (!isContainer(v)) {
      write(skipped(v) ? 'null' : (JSON.stringify(v) ?? 'null'));
      return;
    }
    const keys = Array.isArray(v) ? undefined : Object.keys(v).filter((k) => !skipped((v as Record<string, unknown>)[k]));
    const count = keys ? keys.length : (v as unknown[]).length;
    if (!count) return write(keys ? '{}' : '[]');
    if (level >= limits.maxDepth) {
      deeper = true;
      return write(keys ? `{… ${count} key${count === 1 ? '' : 's'}}` : `[… ${count} item${count === 1 ? '' : 's'}]`);
    }
    write(keys ? '{' : '[');
    stack.push({ container: v, keys, i: 0, level: level + 1, close: keys ? '}' : ']' });
  };
  open(value, 0);
  while (stack.length && length < limits.maxChars) {
    const top = stack[stack.length - 1]!;
    const count = top.keys ? top.keys.length : (top.container as unknown[]).length;
    if (top.i >= count) {
      stack.pop();
      write(pad(top.level - 1) + top.close);
      continue;
    }
    const i = top.i++;
    const key = top.keys?.[i];
    const v = key === undefined ? (top.container as unknown[])[i] : (top.container as Record<string, unknown>)[key];
    write((i ? ',' : '') + pad(top.level) + (key === undefined ? '' : `${JSON.stringify(key)}: `));
    open(key === undefined && skipped(v) ? null : v, top.level);
  }
  const longer = stack.length > 0 || length > limits.maxChars;
  const text = out.join('');
  return { text: longer ? text.slice(0, limits.maxChars) : text, deeper, longer };
}

/**
 * Whether JSON text nests deeper than `max` (brackets inside strings do not count),
 * found by scanning the text, before any parse: parsing a value nested 100,000 deep
 * takes tens of milliseconds on its own.
 */
export function nestsDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: the next character is escaped
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

/**
 * Whether JSON text, indented as prettyJson indents it, would nest deeper than
 * `maxDepth` or run past about `maxChars` characters, found by one scan of the text
 * before any parse (an empty container counts as if it held something: the estimate
 * errs long). A wide value nested a few dozen deep can grow twentyfold when indented.
 */
export function indentedExtent(text: string, limits: JsonLimits): { deeper: boolean; longer: boolean } {
  let depth = 0;
  let length = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      length++;
      if (c === 0x5c) {
        i++;
        length++;
      } else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) {
      inString = true;
      length++;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > limits.maxDepth) return { deeper: true, longer: false };
      length += 2 + 2 * depth; // the bracket, a line break and the first item's indent
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
      length += 2 + 2 * depth;
    } else if (c === 0x2c) length += 2 + 2 * depth;
    else if (c === 0x3a) length += 2;
    else if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) length++;
    if (length > limits.maxChars) return { deeper: false, longer: true };
  }
  return { deeper: false, longer: false };
}
