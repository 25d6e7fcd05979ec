/**
 * Turning upstream names into safe identifiers and paths. Server names come from the
 * admin's config; tool names come from upstream servers and are treated as untrusted:
 * whatever they contain, a generated file name stays one plain path segment and a
 * generated function name stays a valid TypeScript and Python identifier.
 */

const PYTHON_KEYWORDS = new Set(
  (
    'False None True and as assert async await break class continue def del elif else except finally for from ' +
    'global if import in is lambda nonlocal not or pass raise return try while with yield match case type'
  ).split(' '),
);

const TS_RESERVED = new Set(
  (
    'break case catch class const continue debugger default delete do else enum export extends false finally for ' +
    'function if import in instanceof new null return super switch this throw true try typeof var void while with ' +
    'yield let static implements interface package private protected public await arguments eval'
  ).split(' '),
);

/** Words of a name: split on anything not a letter or digit, and at camelCase humps. */
export function words(name: string): string[] {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1 $2')
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean);
}

/** `get-sum` → `getSum`, `API-post-page` → `apiPostPage`. Never empty, never reserved. */
export function camelCase(name: string): string {
  const w = words(name).map((x) => x.toLowerCase());
  let out = w.map((x, i) => (i === 0 ? x : x[0]!.toUpperCase() + x.slice(1))).join('');
  if (!out) out = 'tool';
  if (/^[0-9]/.test(out)) out = `t${out}`;
  if (TS_RESERVED.has(out)) out = `${out}Tool`;
  return out;
}

/** `getSum` → `GetSum`. */
export function pascalCase(name: string): string {
  const c = camelCase(name);
  return c[0]!.toUpperCase() + c.slice(1);
}

/** `API-post-page` → `api_post_page`, `getSum` → `get_sum`. Never empty, never a keyword. */
export function snakeCase(name: string): string {
  let out = words(name)
    .map((x) => x.toLowerCase())
    .join('_');
  if (!out) out = 'tool';
  if (/^[0-9]/.test(out)) out = `t_${out}`;
  if (PYTHON_KEYWORDS.has(out)) out = `${out}_`;
  return out;
}

/** A valid Python identifier that is also a valid TS identifier and a plain path segment. */
export function isPlainIdentifier(name: string): boolean {
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(name) && !PYTHON_KEYWORDS.has(name) && !TS_RESERVED.has(name);
}

/**
 * The directory / Python package name of a server: `github-tools` → `github_tools`.
 * Server names are validated by the config (config.ts), so this only maps separators.
 */
export function serverId(name: string): string {
  let out = name.replace(/[^A-Za-z0-9_]/g, '_');
  if (/^[0-9]/.test(out)) out = `s_${out}`;
  if (!isPlainIdentifier(out)) out = `${out}_`;
  return out;
}

/** Generated names of one tool. */
export interface ToolNames {
  /** The upstream tool name, as called. */
  tool: string;
  /** File name without extension: one safe path segment, e.g. `create_entities`. */
  file: string;
  /** TypeScript function name, e.g. `createEntities`. */
  tsName: string;
  /** TypeScript input type name, e.g. `CreateEntitiesInput`. */
  tsType: string;
  /** Python function name, e.g. `create_entities`. */
  pyName: string;
}

/**
 * Assigns names to every tool of one server, in the server's order. Names that collide
 * after sanitizing get a numeric suffix (`_2`, `_3`, …), so the same tool list always
 * yields the same names.
 */
export function assignToolNames(toolNames: readonly string[]): Map<string, ToolNames> {
  const files = new Set<string>(['index', 'README']);
  const ts = new Set<string>();
  const py = new Set<string>();
  const unique = (base: string, taken: Set<string>, sep: string): string => {
    let name = base;
    for (let i = 2; taken.has(name.toLowerCase()); i++) name = `${base}${sep}${i}`;
    taken.add(name.toLowerCase());
    return name;
  };
  const out = new Map<string, ToolNames>();
  for (const tool of toolNames) {
    if (out.has(tool)) continue;
    const fileBase = tool.replace(/[^A-Za-z0-9_-]+/g, '_').replace(/^[-_]+/, '').slice(0, 100) || 'tool';
    const file = unique(fileBase, files, '_');
    const tsName = unique(camelCase(tool), ts, '');
    const pyName = unique(snakeCase(tool), py, '_');
    out.set(tool, { tool, file, tsName, tsType: `${tsName[0]!.toUpperCase()}${tsName.slice(1)}Input`, pyName });
  }
  return out;
}
