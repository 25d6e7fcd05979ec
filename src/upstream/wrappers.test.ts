import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { STATIC_TOOLS_DIR, syncDir } from './tools-dir.js';
import { DENO_BIN as DENO } from '../../test/support/upstream.js';
import { generateServerFiles, generateServersIndex, toolLocations } from './wrappers.js';

/** Tools written to break naive generators: odd names, comment and string terminators, odd property names. */
const HOSTILE: Tool[] = [
  {
    name: 'get-sum',
    description: 'Adds two numbers. */ export const pwned = 1; /*\nSecond line with """ triple quotes """ and a \\ backslash.',
    inputSchema: { type: 'object', properties: { a: { type: 'number', description: 'first */ number' }, b: { type: 'number' } }, required: ['a', 'b'] },
  },
  { name: 'get_sum', description: 'Collides with get-sum after sanitizing.\u0000 NUL and \u001b escape.', inputSchema: { type: 'object', properties: {} } },
  {
    name: '../../escape/attempt',
    description: 'A path in the name.',
    inputSchema: {
      type: 'object',
      properties: {
        'user-id': { type: 'string', description: 'not an identifier' },
        class: { type: 'string', enum: ['a', 'b"c'] },
        _private: { type: 'integer' },
        extra: { type: ['string', 'null'] },
        nested: { type: 'object', properties: { deep: { type: 'array', items: { $ref: '#/$defs/item' } } } },
      },
      required: ['user-id'],
      $defs: { item: { type: 'object', properties: { k: { type: 'string' } }, required: ['k'] } },
    },
  },
  {
    name: 'index',
    title: 'Named like the index file',
    inputSchema: { type: 'object', properties: { q: { type: 'string', default: 'x' } } },
    outputSchema: { type: 'object', properties: { hits: { type: 'array', items: { type: 'string' } } }, required: ['hits'] },
  },
  { name: 'class', inputSchema: { type: 'object' } },
  { name: 'ünïcode tool ☃', description: 'Non-ASCII name.', inputSchema: { type: 'object', properties: { 'naïve': { type: 'boolean' } } } },
];

const server = { name: 'my-server.v2', id: 'my_server_v2', description: 'A server */ with """ odd text' };
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-wrappers-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

async function writeTree(): Promise<string> {
  const dir = path.join(tmp, 'tools');
  const files = new Map<string, string>([
    ['sandgate.ts', fs.readFileSync(path.join(STATIC_TOOLS_DIR, 'sandgate.ts'), 'utf8')],
    ['python/sandgate_tools/__init__.py', fs.readFileSync(path.join(STATIC_TOOLS_DIR, 'python/sandgate_tools/__init__.py'), 'utf8')],
  ]);
  for (const [k, v] of await generateServerFiles(server, HOSTILE)) files.set(k, v);
  for (const [k, v] of generateServersIndex([{ server, tools: HOSTILE }], [])) files.set(k, v);
  syncDir(dir, files);
  return dir;
}

describe('wrapper generation', () => {
  it('keeps every generated path inside the server directory', async () => {
    const files = await generateServerFiles(server, HOSTILE);
    for (const rel of files.keys()) {
      expect(rel).toMatch(/^(servers\/my_server_v2\/[A-Za-z0-9][A-Za-z0-9_-]*\.ts|python\/sandgate_tools\/servers\/my_server_v2\/__init__\.py)$/);
    }
    expect(files.size).toBe(HOSTILE.length + 2);
    const locs = toolLocations(server, HOSTILE);
    expect(locs.get('get-sum')).toEqual({ path: '/tools/servers/my_server_v2/get-sum.ts', python: 'sandgate_tools.servers.my_server_v2.get_sum', function: 'getSum' });
    expect(locs.get('index')!.path).not.toBe('/tools/servers/my_server_v2/index.ts');
  });

  it('writes TypeScript that type-checks with Deno and cannot be escaped by a description', async () => {
    const dir = await writeTree();
    const sum = fs.readFileSync(path.join(dir, 'servers/my_server_v2/get-sum.ts'), 'utf8');
    expect(sum).toContain('export interface GetSumInput');
    expect(sum).toContain('export async function getSum(input: GetSumInput): Promise<any>');
    expect(sum).toContain('callMCPTool("my-server.v2", "get-sum", input)');
    expect(sum).not.toMatch(/^\s*export const pwned/m);
    const index = fs.readFileSync(path.join(dir, 'servers/my_server_v2/index.ts'), 'utf8');
    expect(index).toContain('export { index, type IndexInput, type IndexOutput } from "./index_2.ts";');
    execFileSync(DENO, ['check', '--quiet', ...fs.readdirSync(path.join(dir, 'servers/my_server_v2')).map((f) => path.join(dir, 'servers/my_server_v2', f))], {
      env: { ...process.env, DENO_DIR: path.join(tmp, 'deno'), DENO_NO_UPDATE_CHECK: '1', NO_COLOR: '1' },
      stdio: 'pipe',
    });
  });

  it('writes Python that compiles, imports, and documents every parameter', async () => {
    const dir = await writeTree();
    const pkg = path.join(dir, 'python/sandgate_tools/servers/my_server_v2/__init__.py');
    execFileSync('python3', ['-m', 'py_compile', pkg, path.join(dir, 'python/sandgate_tools/servers/__init__.py')], {
      env: { ...process.env, PYTHONPYCACHEPREFIX: path.join(tmp, 'pycache') },
    });
    const script = [
      'import inspect, json',
      'import sandgate_tools.servers.my_server_v2 as s',
      'from sandgate_tools.servers import SERVERS',
      'out = {"all": s.__all__, "servers": SERVERS}',
      'for name in s.__all__:',
      '    f = getattr(s, name)',
      '    out[name] = {"sig": str(inspect.signature(f)), "doc": f.__doc__}',
      'out["module_doc"] = s.__doc__',
      'print(json.dumps(out))',
    ].join('\n');
    const out = JSON.parse(
      execFileSync('python3', ['-c', script], { env: { ...process.env, PYTHONPATH: path.join(dir, 'python'), PYTHONDONTWRITEBYTECODE: '1' } }).toString(),
    );
    expect(out.all).toEqual(['get_sum', 'get_sum_2', 'escape_attempt', 'index', 'class_', 'n_code_tool']);
    expect(out.servers).toEqual({ my_server_v2: 'my-server.v2' });
    expect(out.get_sum.sig).toBe('(a: float, b: float, **extra: Any) -> Any');
    expect(out.get_sum.doc).toContain('Second line with """ triple quotes """ and a \\ backslash.');
    expect(out.get_sum.doc).toContain('a (number, required): first */ number');
    // Required "user-id", keyword "class" and "_private" cannot be parameters: they travel in **extra, as the docstring says.
    expect(out.escape_attempt.sig).toBe('(*, extra: str | None = OMIT, nested: dict[str, typing.Any] = OMIT, **extra_: Any) -> Any');
    expect(out.escape_attempt.doc).toContain('user-id (string, required): not an identifier (Pass as **{"user-id": ...}.)');
    expect(out.escape_attempt.doc).toContain('class (string, optional) One of: "a", "b\\"c". (Pass as **{"class": ...}.)');
    expect(out.escape_attempt.doc).toMatch(/deep \(list of object, optional\)\n\s+k \(string, required\)/);
    expect(out.index.doc).toContain('q (string, optional) Default: "x".');
    expect(out.module_doc).toContain('A server */ with """ odd text');
  });
});
