/**
 * Turns one TypeScript or JavaScript execution into a module whose top-level names
 * outlive it, like a notebook cell (and like Deno's own REPL and Jupyter kernel):
 *
 * - TypeScript is stripped to JavaScript by sucrase, which keeps every line where it was
 *   (stack traces point at the user's lines) and keeps imports whether or not this cell
 *   uses them (a later cell may). Code without a `<` that parses as JavaScript is taken
 *   as it is (with one, `f<T>(x)` would be read as comparisons).
 * - acorn finds the top-level declarations. Each `const`, `let`, `var` and `class` becomes
 *   an assignment to a property of the global object, declared first; each function
 *   declaration is copied there; each `import` becomes a dynamic import whose bindings
 *   are copied there (an `import` of a name that only exists as a type gives undefined
 *   instead of failing). Later cells find them all as globals.
 * - A final expression statement is returned: its value is the execution's result, as in
 *   a notebook.
 * - The whole is the body of an async function (top-level `await` works) that the worker
 *   evaluates, named `cell-<n>.ts` in stack traces: evaluating a script costs far less
 *   than loading a module. `import.meta` is therefore not available in a cell.
 *
 * `const` is not constant across cells: a later cell may declare the same name again, as
 * in Deno's REPL. What runs here is the gateway's own code in the Deno host's main
 * thread; the user's code never runs in it.
 */
import { parse, type Node } from 'acorn';
import { transform } from 'sucrase';

/** Where relative imports of a cell are resolved from: the working directory. */
const WORKSPACE_URL = 'file:///workspace/';

type AnyNode = Node & Record<string, any>;

interface Edit {
  start: number;
  end: number;
  text: string;
}

/** Names bound by a declaration pattern (`{a, b: [c, ...d]} = …` binds a, c, d). */
function patternNames(p: AnyNode, out: string[]): void {
  switch (p.type) {
    case 'Identifier':
      out.push(p.name);
      break;
    case 'ObjectPattern':
      for (const prop of p.properties) patternNames(prop.type === 'RestElement' ? prop.argument : prop.value, out);
      break;
    case 'ArrayPattern':
      for (const el of p.elements) if (el) patternNames(el, out);
      break;
    case 'RestElement':
      patternNames(p.argument, out);
      break;
    case 'AssignmentPattern':
      patternNames(p.left, out);
      break;
  }
}

/** An import specifier as the cell's code means it: relative to /workspace, not to the cell's own file. */
function resolveSpecifier(spec: string): string {
  if (spec.startsWith('./') || spec.startsWith('../') || spec.startsWith('/')) return new URL(spec, WORKSPACE_URL).href;
  return spec;
}

const str = (s: string) => JSON.stringify(s);

/**
 * The script for one cell: it evaluates to a promise of the cell's result. `name` appears
 * in stack traces. Throws SyntaxError (with line and column) for code that does not parse.
 */
export function compileCell(code: string, language: 'typescript' | 'javascript', name: string): string {
  const parseJs = (text: string) => parse(text, { ecmaVersion: 'latest', sourceType: 'module', allowHashBang: true }) as AnyNode;
  let js = code;
  let ast: AnyNode | undefined;
  if (language === 'typescript') {
    // TypeScript without type syntax is JavaScript already: stripping it would change
    // nothing and costs more than parsing. But not where a `<` is: `f<T>(x)` is a generic
    // call in TypeScript and valid JavaScript too, `(f < T) > x`.
    if (!code.includes('<')) {
      try {
        ast = parseJs(code);
      } catch {
        /* type syntax: stripped below */
      }
    }
    if (!ast) {
      try {
        js = transform(code, { transforms: ['typescript'], disableESTransforms: true, keepUnusedImports: true }).code;
      } catch (e) {
        throw new SyntaxError((e as Error).message);
      }
    }
  }
  if (!ast) {
    try {
      ast = parseJs(js);
    } catch (e) {
      throw new SyntaxError((e as Error).message);
    }
  }
  const declared: string[] = []; // become properties of the global object
  const functions: string[] = []; // function declarations, copied there first thing
  const imports: string[] = []; // the dynamic imports, run first like static ones
  const edits: Edit[] = [];
  const src = (n: AnyNode) => js.slice(n.start, n.end);

  const declaration = (stmt: AnyNode, node: AnyNode) => {
    if (node.type === 'FunctionDeclaration') {
      if (node.id) functions.push(node.id.name);
      if (stmt !== node) edits.push({ start: stmt.start, end: node.start, text: '' }); // `export`
    } else if (node.type === 'ClassDeclaration' && node.id) {
      declared.push(node.id.name);
      edits.push({ start: stmt.start, end: node.end, text: `;${node.id.name} = ${src(node)};` });
    } else if (node.type === 'VariableDeclaration' && ['var', 'let', 'const'].includes(node.kind)) {
      const parts: string[] = [];
      for (const d of node.declarations as AnyNode[]) {
        const names: string[] = [];
        patternNames(d.id, names);
        declared.push(...names);
        if (d.init) parts.push(`;(${src(d.id)} = ${src(d.init)});`);
        // `let x;` starts over at undefined; `var x;` keeps what x held, as var does.
        else if (node.kind !== 'var') parts.push(names.map((n) => `${n} = undefined;`).join(' '));
      }
      edits.push({ start: stmt.start, end: stmt.end, text: parts.join(' ') });
    }
  };

  const body = ast.body as AnyNode[];
  for (const [i, stmt] of body.entries()) {
    switch (stmt.type) {
      case 'ImportDeclaration': {
        const attrs = stmt.attributes?.length ? `, { with: { ${stmt.attributes.map((a: AnyNode) => `${src(a.key)}: ${src(a.value)}`).join(', ')} } }` : '';
        const load = `await import(${str(resolveSpecifier(stmt.source.value))}${attrs})`;
        if (!stmt.specifiers.length) {
          imports.push(`${load};`);
        } else {
          const copies = (stmt.specifiers as AnyNode[]).map((s) => {
            declared.push(s.local.name);
            if (s.type === 'ImportNamespaceSpecifier') return `${s.local.name} = __sandgate_m;`;
            const name = s.type === 'ImportDefaultSpecifier' ? 'default' : s.imported.type === 'Identifier' ? s.imported.name : s.imported.value;
            return `${s.local.name} = __sandgate_m[${str(name)}];`;
          });
          imports.push(`{ const __sandgate_m = ${load}; ${copies.join(' ')} }`);
        }
        edits.push({ start: stmt.start, end: stmt.end, text: '' });
        break;
      }
      case 'ExportNamedDeclaration':
        if (stmt.declaration) declaration(stmt, stmt.declaration);
        else edits.push({ start: stmt.start, end: stmt.end, text: '' });
        break;
      case 'ExportAllDeclaration':
        edits.push({ start: stmt.start, end: stmt.end, text: '' });
        break;
      case 'ExportDefaultDeclaration': {
        const d = stmt.declaration as AnyNode;
        if ((d.type === 'FunctionDeclaration' || d.type === 'ClassDeclaration') && d.id) declaration(stmt, d);
        else if (i === body.length - 1) edits.push({ start: stmt.start, end: stmt.end, text: `return (${src(d)});` });
        else edits.push({ start: stmt.start, end: d.start, text: ';' });
        break;
      }
      case 'ExpressionStatement':
        if (i === body.length - 1) {
          edits.push({ start: stmt.start, end: stmt.end, text: `return (${src(stmt.expression)});` });
        }
        break;
      default:
        declaration(stmt, stmt);
    }
  }

  // Apply from the end; each replacement keeps the line count of what it replaced, so
  // the lines after it stay where they were.
  let out = js;
  for (const e of edits.sort((a, b) => b.start - a.start)) {
    const lost = (js.slice(e.start, e.end).match(/\n/g)?.length ?? 0) - (e.text.match(/\n/g)?.length ?? 0);
    out = out.slice(0, e.start) + e.text + '\n'.repeat(Math.max(0, lost)) + out.slice(e.end);
  }
  if (out.startsWith('#!')) out = '//' + out.slice(2);
  const names = [...new Set(declared)];
  // All on the cell's first line, so line numbers stay the user's. The block keeps its
  // helper names out of the cell's scope.
  const prologue = [
    names.length
      ? `{ const __sandgate_g = globalThis; for (const __sandgate_n of ${JSON.stringify(names)}) { const __sandgate_p = Object.getOwnPropertyDescriptor(__sandgate_g, __sandgate_n); if (!__sandgate_p || !("value" in __sandgate_p) || !__sandgate_p.writable) Object.defineProperty(__sandgate_g, __sandgate_n, { value: undefined, writable: true, enumerable: true, configurable: true }); } }`
      : '',
    ...imports,
    ...functions.map((f) => `globalThis[${str(f)}] = ${f};`),
  ].join(' ');
  return `(async () => { "use strict"; ${prologue}${out}\n})()\n//# sourceURL=${name}\n`;
}
