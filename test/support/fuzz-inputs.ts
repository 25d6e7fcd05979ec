/**
 * What the fuzzer (test/fuzz.test.ts) sends, as fast-check arbitraries: JSON-RPC messages
 * and batches for /mcp, with the `initialize` and 2026-07-28 envelopes' client
 * capabilities and versions, tool arguments shaped by each tool's input schema and
 * bent out of it; HTTP requests written byte for byte (methods, paths, headers, bodies);
 * form fields; multipart uploads; socket.io events and raw engine.io frames. Valid and
 * invalid are mixed on purpose: a request that gets past the first check reaches the
 * code behind it.
 */
import fc from 'fast-check';

// ---------------------------------------------------------------- building blocks

/** A string's UTF-8 bytes, each percent-encoded: any string becomes a valid path segment or query value. */
export function pct(s: string): string {
  return [...Buffer.from(s, 'utf8')].map((b) => `%${b.toString(16).padStart(2, '0').toUpperCase()}`).join('');
}

/** Short strings of every kind: printable ASCII, any code unit (lone surrogates too), graphemes. */
export const shortText: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 24 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 24 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 24 }) },
);

/** `shortText`, and a long one now and then. */
export const anyText: fc.Arbitrary<string> = fc.oneof({ weight: 8, arbitrary: shortText }, { weight: 1, arbitrary: fc.integer({ min: 1000, max: 70_000 }).map((n) => 'x'.repeat(n)) });

/** Mostly what fits, now and then anything: `fit` nine times in ten. */
const mostly = <T>(fit: fc.Arbitrary<T>): fc.Arbitrary<T | unknown> => fc.oneof({ weight: 9, arbitrary: fit }, { weight: 1, arbitrary: anyValue });

/**
 * File names and paths where a client names a file: `..` climbs, absolute paths into the
 * host, NUL, backslashes, encodings a decoder might undo, names past ext4's 255 bytes and
 * PATH_MAX, and any unicode.
 */
export const fileName: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      '..',
      '../..',
      '../../../../etc/passwd',
      '/etc/passwd',
      '/workspace/../../etc/shadow',
      '/workspace/../workspace/./a',
      '.',
      '',
      '/',
      '//',
      '/workspace',
      '/workspace/',
      '/skills/../../proc/self/environ',
      '/tools/servers/../../..',
      '/proc/self/environ',
      'a/../../b',
      'a\\..\\..\\b',
      'a\0b',
      '\0',
      '%2e%2e/%2e%2e/etc',
      '..%2f..%2fetc',
      'file:///etc/passwd',
      '~/.ssh/id_rsa',
      '.git/config',
      '-rf',
      ' ',
      'a\nb',
      'CON',
      'x'.repeat(255),
      'x'.repeat(256),
      'é'.repeat(128),
      `${'d/'.repeat(2100)}f`,
      'a/./b//c/',
      '\u202egnp.exe',
      '\ud800',
      'skills/x/../../..',
    ),
  },
  { weight: 2, arbitrary: fc.array(fc.oneof(fc.constantFrom('..', '.', '', 'a', '\0', '%00', '\\', '..\\', '~'), fc.string({ maxLength: 8 })), { maxLength: 6 }).map((p) => p.join('/')) },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.integer({ min: 250, max: 6000 }).map((n) => 'n'.repeat(n)) },
);

/** Anything JSON can carry, and the values JSON.stringify bends (NaN, -0, huge numbers). */
export const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.anything({ maxDepth: 3, maxKeys: 5 }) },
  { weight: 1, arbitrary: fc.constantFrom(Number.MAX_VALUE, -Number.MAX_VALUE, 2 ** 53 + 2, -(2 ** 63), 1e21, -0, 0.5, NaN, Infinity, '', [], {}, null, true) },
  { weight: 1, arbitrary: fileName },
  { weight: 1, arbitrary: anyText },
);

// ---------------------------------------------------------------- MCP

export const PROTOCOL_VERSIONS = ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05', '2024-10-07'] as const;
const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
const UI_EXTENSION = 'io.modelcontextprotocol/ui';

export const protocolVersion: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 5, arbitrary: fc.constantFrom(...PROTOCOL_VERSIONS) },
  { weight: 1, arbitrary: fc.constantFrom('2099-01-01', '2024-10-06', '', '2025-13-45', '1.0', 'latest') },
  { weight: 1, arbitrary: anyValue },
);

/** A client's capabilities: the spec's fields with odd values, extensions of ours and others, or not an object at all. */
export const clientCapabilities: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 2, arbitrary: fc.constant({}) },
  {
    weight: 5,
    arbitrary: fc.record(
      {
        roots: fc.oneof(fc.record({ listChanged: anyValue }, { requiredKeys: [] }), anyValue),
        sampling: fc.oneof(fc.record({ context: anyValue, tools: anyValue }, { requiredKeys: [] }), anyValue),
        elicitation: fc.oneof(fc.record({ form: anyValue, url: anyValue }, { requiredKeys: [] }), anyValue),
        experimental: fc.dictionary(anyText, anyValue, { maxKeys: 3 }),
        extensions: fc.oneof(fc.dictionary(fc.oneof(fc.constantFrom(TASKS_EXTENSION, UI_EXTENSION, 'io.modelcontextprotocol/skills', '__proto__', 'constructor'), anyText), anyValue, { maxKeys: 3 }), anyValue),
        tasks: anyValue,
      },
      { requiredKeys: [] },
    ),
  },
  { weight: 1, arbitrary: anyValue },
);

/** Capabilities as the schema has them (any extension names, settings that are objects): what a client that follows the spec may declare. */
export const fittingCapabilities: fc.Arbitrary<unknown> = fc.record(
  {
    roots: fc.record({ listChanged: fc.boolean() }, { requiredKeys: [] }),
    sampling: fc.record({ context: fc.constant({}), tools: fc.constant({}) }, { requiredKeys: [] }),
    elicitation: fc.record({ form: fc.constant({}), url: fc.constant({}) }, { requiredKeys: [] }),
    experimental: fc.dictionary(shortText, fc.dictionary(shortText, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 2 }), { maxKeys: 2 }),
    extensions: fc.dictionary(fc.oneof(fc.constantFrom(TASKS_EXTENSION, UI_EXTENSION, 'io.modelcontextprotocol/skills'), shortText), fc.dictionary(shortText, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 2 }), { maxKeys: 3 }),
  },
  { requiredKeys: [] },
);

const clientInfo = fc.oneof({ weight: 3, arbitrary: fc.record({ name: anyText, version: anyText }) }, { weight: 1, arbitrary: anyValue });

/** The 2026-07-28 per-request envelope: mostly as a client sends it (any capabilities), now and then partial or wrong. */
export const metaEnvelope: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record(
      {
        'io.modelcontextprotocol/protocolVersion': fc.constant('2026-07-28'),
        'io.modelcontextprotocol/clientInfo': fc.record({ name: shortText, version: shortText }),
        'io.modelcontextprotocol/clientCapabilities': fc.oneof({ weight: 3, arbitrary: fittingCapabilities }, { weight: 1, arbitrary: clientCapabilities }),
        progressToken: fc.oneof(fc.integer(), fc.string({ maxLength: 10 })),
      },
      { requiredKeys: ['io.modelcontextprotocol/protocolVersion', 'io.modelcontextprotocol/clientInfo', 'io.modelcontextprotocol/clientCapabilities'] },
    ),
  },
  {
    weight: 2,
    arbitrary: fc.record(
      {
        'io.modelcontextprotocol/protocolVersion': protocolVersion,
        'io.modelcontextprotocol/clientInfo': clientInfo,
        'io.modelcontextprotocol/clientCapabilities': clientCapabilities,
        'io.modelcontextprotocol/logLevel': mostly(fc.constantFrom('debug', 'info', 'error', 'emergency')),
        progressToken: mostly(fc.oneof(fc.integer(), fc.string({ maxLength: 10 }))),
        traceparent: anyText,
      },
      { requiredKeys: [] },
    ),
  },
  { weight: 1, arbitrary: anyValue },
);

/** A JSON-RPC id: the valid kinds, the edges of numbers, and what is no id at all. */
export const rpcId: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.integer() },
  { weight: 2, arbitrary: fc.string({ maxLength: 16 }) },
  { weight: 1, arbitrary: fc.constantFrom(2 ** 53, 2 ** 53 + 2, -(2 ** 63), 1e308, -0, 0.5, 1e21, 'x'.repeat(100_000)) },
  { weight: 1, arbitrary: anyValue },
);

export const MCP_METHODS = [
  'initialize',
  'ping',
  'server/discover',
  'tools/list',
  'tools/call',
  'resources/list',
  'resources/read',
  'resources/templates/list',
  'resources/subscribe',
  'resources/unsubscribe',
  'prompts/list',
  'prompts/get',
  'completion/complete',
  'logging/setLevel',
  'tasks/get',
  'tasks/list',
  'tasks/cancel',
  'tasks/update',
  'tasks/result',
  'skills/list',
  'skills/get',
  'subscriptions/listen',
  'sampling/createMessage',
  'elicitation/create',
  'roots/list',
  'notifications/initialized',
  'notifications/cancelled',
  'notifications/progress',
  'notifications/roots/list_changed',
  'notifications/message',
] as const;

/** A tool as tools/list describes it. */
export interface ToolInfo {
  name: string;
  inputSchema: JsonSchema;
}
interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  enum?: unknown[];
  items?: JsonSchema;
  minimum?: number;
  maximum?: number;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
}

/** A value that fits `schema` (as a fuzzer sees fit: a string named like a path is a file name). */
function fitting(name: string, schema: JsonSchema | undefined, depth = 0): fc.Arbitrary<unknown> {
  if (!schema || depth > 3) return anyValue;
  if (schema.enum) return fc.constantFrom(...schema.enum);
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives?.length) return fc.oneof(...alternatives.map((s) => fitting(name, s, depth + 1)));
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  switch (type) {
    case 'string':
      return /path|file|dir|name|uri/i.test(name) ? fileName : anyText;
    case 'integer': {
      const min = schema.minimum ?? -(2 ** 31);
      const max = schema.maximum ?? 2 ** 31;
      // The edges and just past them, and some number inside.
      return fc.oneof(fc.integer({ min, max }), fc.constantFrom(min, max, min - 1, max + 1));
    }
    case 'number':
      return fc.double();
    case 'boolean':
      return fc.boolean();
    case 'array':
      return fc.array(fitting(name, schema.items, depth + 1), { maxLength: 4 });
    case 'object':
      return fc.record(Object.fromEntries(Object.entries(schema.properties ?? {}).map(([k, s]) => [k, fitting(k, s, depth + 1)])), { requiredKeys: [] });
    default:
      return anyValue;
  }
}

/**
 * Arguments for `tool`: fitting its schema field by field, each field now and then of a
 * wrong type or missing, keys it does not know, or no object at all. execute_code's code
 * is kept to short programs that end at once (the fuzzer is about the gateway, and a
 * random program's run is about the sandbox).
 */
export function toolArguments(tool: ToolInfo): fc.Arbitrary<unknown> {
  const props = tool.inputSchema.properties ?? {};
  const required = (tool.inputSchema.required ?? []).filter((k) => Object.hasOwn(props, k));
  const fit = (k: string, s: JsonSchema): fc.Arbitrary<unknown> => {
    if (tool.name === 'execute_code' && k === 'code') return fc.oneof(fc.constantFrom('1', 'print(1)', 'echo hi', 'x = ', '\0', 'import os; os.listdir("..")', 'console.log(1)', 'open("/workspace/../../etc/passwd").read()[:10]'), fc.string({ minLength: 1, maxLength: 40 }));
    if (tool.name === 'execute_code' && k === 'timeout_seconds') return fc.integer({ min: 1, max: 5 });
    if (tool.name === 'execute_code' && k === 'background') return fc.constant(false);
    return fitting(k, s);
  };
  const entries = Object.entries(props);
  // Its required fields there and each field fitting (file names odd, but strings): the call reaches the tool.
  const fitted = fc.record(Object.fromEntries(entries.map(([k, s]) => [k, fit(k, s)])), { requiredKeys: required });
  // Any field missing, any of a wrong type, edges of numbers: the call meets the schema check, or gets past it bent.
  const bent = fc.record(Object.fromEntries(entries.map(([k, s]) => [k, fc.oneof({ weight: 4, arbitrary: fit(k, s) }, { weight: 1, arbitrary: anyValue }, { weight: 1, arbitrary: fitting(k, s) })])), { requiredKeys: [] });
  const extra = fc.dictionary(fc.oneof(fc.constantFrom('__proto__', 'constructor', 'prototype', '_meta', ''), shortText), anyValue, { maxKeys: 3 });
  return fc.oneof(
    { weight: 6, arbitrary: fitted },
    { weight: 3, arbitrary: bent },
    { weight: 1, arbitrary: fc.tuple(fitted, extra).map(([a, b]) => ({ ...b, ...(a as object) })) },
    { weight: 1, arbitrary: anyValue },
  );
}

/** Params for `method`, shaped as its requests carry them or not at all. */
function paramsFor(method: string, tools: readonly ToolInfo[], toolNames: readonly string[], envelope = true): fc.Arbitrary<unknown> {
  const shaped = ((): fc.Arbitrary<unknown> => {
    switch (method) {
      case 'initialize':
        return fc.record({ protocolVersion, capabilities: clientCapabilities, clientInfo }, { requiredKeys: [] });
      case 'tools/call':
        return fc.oneof(
          ...tools.map((t) => fc.record({ name: fc.constant(t.name), arguments: toolArguments(t), task: anyValue }, { requiredKeys: ['name'] })),
          fc.record({ name: fc.oneof(fc.constantFrom(...toolNames, 'nope', '__proto__', 'constructor', 'toString', ''), anyValue), arguments: anyValue }, { requiredKeys: [] }),
        );
      case 'resources/read':
      case 'resources/subscribe':
      case 'resources/unsubscribe':
        return fc.record({
          uri: fc.oneof(
            fileName.map((f) => `file:///workspace/${f}`),
            fileName.map((f) => `file:///workspace/${pct(f)}`),
            fileName.map((f) => `skill://builtin/${f}`),
            fc.constantFrom('ui://sandgate/run.html', 'file:///etc/passwd', 'file://host/workspace/a', 'skill://', 'file:', 'http://127.0.0.1/', ''),
            anyValue,
          ),
        });
      case 'prompts/get':
      case 'skills/get':
        return fc.record({ name: fc.oneof(fc.constantFrom('data-analysis', '../x', ''), fileName, anyValue), arguments: fc.oneof(fc.dictionary(anyText, anyText, { maxKeys: 3 }), anyValue) }, { requiredKeys: [] });
      case 'completion/complete':
        return fc.record(
          {
            ref: fc.oneof(fc.record({ type: fc.constant('ref/resource'), uri: fc.constantFrom('file:///workspace/{+path}', 'skill://{+path}', 'x') }), fc.record({ type: fc.constant('ref/prompt'), name: anyText }), anyValue),
            argument: fc.oneof(fc.record({ name: fc.oneof(fc.constant('path'), anyText), value: fileName }), anyValue),
            context: anyValue,
          },
          { requiredKeys: [] },
        );
      case 'tasks/get':
      case 'tasks/cancel':
      case 'tasks/update':
      case 'tasks/result':
        return fc.record({ taskId: fc.oneof(fc.uuid(), fc.string({ maxLength: 80 }), anyValue) }, { requiredKeys: [] });
      case 'logging/setLevel':
        return fc.record({ level: fc.oneof(fc.constantFrom('debug', 'info', 'warning', 'error', 'emergency'), anyValue) });
      case 'notifications/cancelled':
        return fc.record({ requestId: rpcId, reason: anyValue }, { requiredKeys: [] });
      case 'notifications/progress':
        return fc.record({ progressToken: rpcId, progress: anyValue, total: anyValue }, { requiredKeys: [] });
      default:
        return fc.oneof(fc.record({ cursor: anyValue }, { requiredKeys: [] }), anyValue);
    }
  })();
  if (!envelope) return shaped;
  // Now and then with the 2026-07-28 envelope in `_meta`, or a `_meta` that is no object.
  return fc.oneof(
    { weight: 4, arbitrary: shaped },
    {
      weight: 3,
      arbitrary: fc.tuple(shaped, metaEnvelope).map(([p, meta]) => (p && typeof p === 'object' && !Array.isArray(p) ? { ...p, _meta: meta } : p)),
    },
  );
}

/**
 * One JSON-RPC message: a request, a notification, a response from the "client", or a
 * broken one. `legacy`: a request or notification of a known method with a valid id, as
 * a 2025 client batches them (its params still anything, no 2026-07-28 envelope).
 */
export function rpcMessage(tools: readonly ToolInfo[], legacy = false): fc.Arbitrary<unknown> {
  const toolNames = tools.map((t) => t.name);
  if (legacy) {
    return fc.constantFrom(...MCP_METHODS).chain((method) =>
      fc.record({ jsonrpc: fc.constant('2.0'), id: fc.oneof(fc.nat(), fc.string({ maxLength: 8 })), method: fc.constant(method), params: paramsFor(method, tools, toolNames, false) }, { requiredKeys: ['jsonrpc', 'method'] }),
    );
  }
  const known = fc.constantFrom(...MCP_METHODS).chain((method) =>
    fc.record(
      { jsonrpc: fc.oneof({ weight: 8, arbitrary: fc.constant('2.0') }, { weight: 1, arbitrary: anyValue }), id: rpcId, method: fc.constant(method), params: paramsFor(method, tools, toolNames) },
      // A request without an id is a notification; now and then without jsonrpc or method.
      { requiredKeys: ['method'] },
    ),
  );
  const other = fc.record({ jsonrpc: fc.constant('2.0'), id: rpcId, method: fc.oneof(anyText, anyValue), params: anyValue }, { requiredKeys: [] });
  const response = fc.record({ jsonrpc: fc.constant('2.0'), id: rpcId, result: anyValue, error: fc.record({ code: anyValue, message: anyValue }, { requiredKeys: [] }) }, { requiredKeys: ['id'] });
  return fc.oneof({ weight: 8, arbitrary: known }, { weight: 1, arbitrary: other }, { weight: 1, arbitrary: response }, { weight: 1, arbitrary: anyValue });
}

/**
 * A body for POST /mcp: one message, a batch (empty, or up to six), anything, or text
 * that is not quite JSON. `legacy`: a batch as a 2025 client sends it, to go with a 2025
 * version header (one malformed message, or a 2026-07-28 request, refuses a whole batch).
 */
export function rpcBody(tools: readonly ToolInfo[]): fc.Arbitrary<{ json: unknown; legacy?: true } | { text: string }> {
  const message = rpcMessage(tools);
  const legacy = rpcMessage(tools, true);
  return fc.oneof(
    { weight: 6, arbitrary: message.map((json) => ({ json })) },
    { weight: 3, arbitrary: fc.array(legacy, { minLength: 1, maxLength: 6 }).map((json) => ({ json, legacy: true as const })) },
    { weight: 1, arbitrary: fc.array(message, { maxLength: 6 }).map((json) => ({ json })) },
    { weight: 1, arbitrary: anyValue.map((json) => ({ json })) },
    {
      weight: 1,
      arbitrary: fc.oneof(
        fc.constantFrom(
          '',
          '{',
          '[',
          '[]',
          '[[]]',
          'null',
          '"2.0"',
          '{"jsonrpc":"2.0","id":1,"method":"tools/list"}{"jsonrpc":"2.0","id":2,"method":"ping"}',
          '{"__proto__":{"polluted":1},"jsonrpc":"2.0","id":1,"method":"tools/list"}',
          '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_files","arguments":{"__proto__":{"path":"/etc"}}}}',
          '{"constructor":{"prototype":{"polluted":1}},"jsonrpc":"2.0","id":1,"method":"ping"}',
          '{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}',
          `${'['.repeat(5000)}${']'.repeat(5000)}`,
          `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":${'{"a":'.repeat(3000)}1${'}'.repeat(3000)}}`,
          '\ufeff{"jsonrpc":"2.0","id":1,"method":"ping"}',
        ),
        fc.string({ unit: 'binary', maxLength: 60 }),
      ).map((text) => ({ text })),
    },
  );
}

/** Headers of an MCP request besides its token: versions, the 2026-07-28 routing headers, what it accepts. */
export const mcpHeaders: fc.Arbitrary<Record<string, string>> = fc.record(
  {
    'mcp-protocol-version': fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...PROTOCOL_VERSIONS) }, { weight: 1, arbitrary: headerValue() }),
    'mcp-method': fc.oneof(fc.constantFrom(...MCP_METHODS), headerValue()),
    'mcp-name': fc.oneof(fc.constantFrom('execute_code', 'read_file', 'nope'), headerValue()),
    'mcp-session-id': headerValue(),
    accept: fc.oneof({ weight: 6, arbitrary: fc.constant('application/json, text/event-stream') }, { weight: 1, arbitrary: fc.constantFrom('application/json', 'text/event-stream', '*/*', 'text/html', '') }),
    'content-type': fc.oneof({ weight: 6, arbitrary: fc.constant('application/json') }, { weight: 1, arbitrary: fc.constantFrom('text/plain', 'application/json; charset=latin1', 'application/json; charset=utf-16', 'application/x-www-form-urlencoded', 'multipart/form-data', '') }),
    'last-event-id': headerValue(),
  },
  { requiredKeys: ['accept', 'content-type'] },
);

// ---------------------------------------------------------------- HTTP

/**
 * A header value: visible ASCII, now and then a long one. `dirty`: also Latin-1 bytes,
 * control characters and values past Node's 16 kB of headers, which its parser refuses
 * before the gateway sees them.
 */
export function headerValue(dirty = true): fc.Arbitrary<string> {
  const clean = [
    { weight: 8, arbitrary: fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 40 }) },
    { weight: 1, arbitrary: fc.integer({ min: 500, max: 3000 }).map((n) => 'v'.repeat(n)) },
  ];
  if (!dirty) return fc.oneof(...clean);
  return fc.oneof(
    ...clean,
    { weight: 1, arbitrary: fc.string({ unit: fc.integer({ min: 0x80, max: 0xff }).map((c) => String.fromCharCode(c)), maxLength: 10 }) },
    { weight: 1, arbitrary: fc.constantFrom('\t', 'a\rb', 'a\0b', '\x7f', '', ' '.repeat(100)) },
    { weight: 1, arbitrary: fc.integer({ min: 10_000, max: 20_000 }).map((n) => 'v'.repeat(n)) },
  );
}

/** Where requests go: each door, some with a segment that is an id or a name. */
export const HTTP_PREFIXES = [
  '/',
  '/mcp',
  '/mcp/',
  '/MCP',
  '/mcp/x',
  '/v1',
  '/v1/models',
  '/v1/chat/completions',
  '/v1/x',
  '/chat',
  '/chat/new',
  '/c/x',
  '/c/x/send',
  '/c/x/transcript',
  '/files',
  '/files/tree',
  '/files/open',
  '/files/preview',
  '/files/table',
  '/files/raw',
  '/files/upload',
  '/files/mkdir',
  '/tokens',
  '/tokens/1/revoke',
  '/settings',
  '/settings/keys/openai',
  '/admin',
  '/admin/users',
  '/admin/api/users',
  '/admin/audit.csv',
  '/login',
  '/login/link/x',
  '/login/link',
  '/logout',
  '/auth/github',
  '/auth/github/callback',
  '/auth/x',
  '/oauth/authorize',
  '/oauth/token',
  '/oauth/register',
  '/oauth/revoke',
  '/.well-known/oauth-authorization-server',
  '/.well-known/oauth-protected-resource/mcp',
  '/.well-known/openid-configuration',
  '/healthz',
  '/readyz',
  '/static/sandgate.css',
  '/static/',
  '/vendor/htmx.min.js',
  '/vendor/constructor',
  '/socket.io/',
  '/internal/run',
  '/favicon.ico',
] as const;

/** A path segment, percent-encoded; `dirty`: now and then raw bytes that have no place on a request line, for Node's parser to refuse. */
function segment(dirty: boolean): fc.Arbitrary<string> {
  const clean = [
    {
      weight: 3,
      arbitrary: fc.constantFrom('..', '.', '%2e%2e', '%2E%2e%2F', '%2f', '%5c', '%00', '%', '%zz', '%c0%ae', '%ff', '%e2%80%ae', '~', '', ';', 'a;b=c', '%0d%0aX-Injected:%201', 'constructor', '__proto__', 'prototype', 'toString', 'hasOwnProperty', '*', '@', '..;', 'index.html'),
    },
    { weight: 3, arbitrary: shortText.map(pct) },
    { weight: 2, arbitrary: fc.string({ maxLength: 12 }).map(encodeURIComponent) },
    { weight: 1, arbitrary: fc.integer({ min: 200, max: 4000 }).map((n) => 'a'.repeat(n)) },
  ];
  if (!dirty) return fc.oneof(...clean);
  return fc.oneof(...clean, { weight: 2, arbitrary: fc.string({ unit: fc.constantFrom('a', '/', ' ', '\t', '#', '?', '\\', '"', '<', '\x01', '\x7f', 'é', '%'), maxLength: 8 }) });
}

export const QUERY_NAMES = ['dir', 'path', 'offset', 'first', 'download', 'page', 'period', 'before', 'why', 'user', 'tool', 'outcome', 'q', 'response_type', 'client_id', 'redirect_uri', 'state', 'code_challenge', 'code_challenge_method', 'scope', 'resource', 'EIO', 'transport', 'sid', 't', 'code', 'error'] as const;

const query: fc.Arbitrary<string> = fc.oneof(
  { weight: 2, arbitrary: fc.constant('') },
  {
    weight: 3,
    arbitrary: fc
      .array(fc.tuple(fc.oneof(fc.constantFrom(...QUERY_NAMES), shortText.map(pct), fc.constantFrom('dir[]', 'path[a]', '__proto__[x]', 'a[b][c]')), fc.oneof(fileName.map(pct), shortText.map(pct), fc.constantFrom('', '-1', '1e309', 'NaN', '99999999999999999999', '4', 'polling', 'websocket'))), { maxLength: 5 })
      .map((pairs) => `?${pairs.map(([k, v]) => `${k}=${v}`).join('&')}`),
  },
  { weight: 1, arbitrary: fc.constantFrom('?', '??', '?&&', '?a', '?%', '?a=%zz', `?${'a=1&'.repeat(2000)}`) },
);

/** The doors that read what they are sent: asked for more often. */
const BUSY_PREFIXES = ['/mcp', '/v1/chat/completions', '/v1/models', '/files/raw', '/files/preview', '/files/table', '/files/tree', '/oauth/token', '/oauth/register', '/oauth/revoke', '/oauth/authorize', '/login/link'] as const;

/** A request target: a door's path, as it is half of the time (so that a route answers it) or with more segments, and a query. */
export function target(dirty: boolean): fc.Arbitrary<string> {
  return fc
    .tuple(
      fc.oneof({ weight: 2, arbitrary: fc.constantFrom(...HTTP_PREFIXES) }, { weight: 1, arbitrary: fc.constantFrom(...BUSY_PREFIXES) }),
      fc.oneof(fc.constant([]), fc.array(segment(dirty), { minLength: 1, maxLength: 4 })),
      query,
    )
    .map(([prefix, rest, q]) => `${prefix}${rest.length ? `${prefix.endsWith('/') ? '' : '/'}${rest.join('/')}` : ''}${q}`);
}

export function httpMethod(dirty: boolean): fc.Arbitrary<string> {
  const usual = fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD');
  return dirty ? fc.oneof({ weight: 3, arbitrary: usual }, { weight: 1, arbitrary: fc.constantFrom('TRACE', 'CONNECT', 'PROPFIND', 'get', 'G ET', 'BREW', '', 'POST\0') }) : usual;
}

export const HEADER_NAMES = [
  'content-type',
  'content-length',
  'accept',
  'accept-encoding',
  'accept-language',
  'authorization',
  'cookie',
  'origin',
  'host',
  'referer',
  'user-agent',
  'hx-request',
  'hx-current-url',
  'hx-target',
  'x-csrf-token',
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-forwarded-host',
  'forwarded',
  'mcp-protocol-version',
  'mcp-session-id',
  'mcp-method',
  'mcp-name',
  'transfer-encoding',
  'content-encoding',
  'expect',
  'range',
  'if-none-match',
  'if-modified-since',
  'upgrade',
  'connection',
  'sec-websocket-key',
  'sec-websocket-version',
  'traceparent',
  'x-sandgate-replica',
] as const;

/** Values worth sending under each header besides random text. */
function valuesFor(name: string, ctx: HttpContext, dirty: boolean): fc.Arbitrary<string> {
  const special: Record<string, string[]> = {
    'content-type': ['application/json', 'application/x-www-form-urlencoded', 'multipart/form-data', 'multipart/form-data; boundary=', 'multipart/form-data; boundary=x', 'text/plain', 'application/json; charset=utf-32', 'application/*', '*/*; q=0'],
    'content-length': ['0', '-1', '1', '99999999999999999999', '0x10', ' 5', '5, 6', '1e3'],
    accept: ['text/html', 'application/json', 'text/event-stream', '*/*', 'application/json, text/event-stream', 'text/html;q=0.1, application/json;q=0.2', 'image/*'],
    'accept-encoding': ['gzip', 'br', 'identity;q=0', '*'],
    authorization: [`Bearer ${ctx.token}`, 'Bearer ', 'Bearer', 'Bearer sgp_', `Bearer ${ctx.token}x`, `bearer ${ctx.token}`, 'Basic YWxpY2U6cHc=', 'Basic !!!', `Bearer ${ctx.token} ${ctx.token}`, `Bearer sgo_${'a'.repeat(60)}`, 'Bearer eyJhbGciOiJub25lIn0.e30.'],
    cookie: [ctx.cookie, `${ctx.cookie}; ${ctx.cookie}`, 'sandgate.sid=s%3Agarbage.sig', 'sandgate.sid=', 'sandgate.sid=%', `${ctx.cookie}x`, 'a=b; c', '=;;=', `sandgate.sid=${'a'.repeat(5000)}`],
    origin: [ctx.url, 'null', 'https://evil.example', 'http://localhost:1', 'file://', '', 'http://127.0.0.1'],
    host: [new URL(ctx.url).host, 'evil.example', '', 'localhost', '127.0.0.1:1', '[::1]', 'a b', `${new URL(ctx.url).host}:80`],
    referer: [`${ctx.url}/files?dir=a`, `${ctx.url}//evil.example/x`, 'https://evil.example/', 'javascript:alert(1)', `${ctx.url}/\\evil`],
    'hx-request': ['true', 'false', ''],
    'x-csrf-token': [ctx.csrf, `${ctx.csrf}x`, '', 'undefined'],
    'transfer-encoding': ['chunked', 'gzip, chunked', 'identity', 'chunked, chunked', 'x'],
    'content-encoding': ['gzip', 'deflate', 'br', 'identity', 'x'],
    expect: ['100-continue', 'x'],
    range: ['bytes=0-1', 'bytes=-1', 'bytes=5-1', 'bytes=0-1,2-3', 'bytes=99999999999999-'],
    upgrade: ['websocket', 'h2c', 'x'],
    connection: ['close', 'keep-alive', 'upgrade', 'Upgrade, HTTP2-Settings'],
    'sec-websocket-version': ['13', '8', 'x'],
    'mcp-protocol-version': [...PROTOCOL_VERSIONS],
  };
  const own = special[name];
  return own ? fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...own) }, { weight: 1, arbitrary: headerValue(dirty) }) : headerValue(dirty);
}

/** What the HTTP arbitraries need to send credentials that work now and then. */
export interface HttpContext {
  url: string;
  token: string;
  cookie: string;
  csrf: string;
}

/** A body as the named content type would carry it, or any bytes. */
export const httpBody: fc.Arbitrary<Buffer> = fc.oneof(
  { weight: 2, arbitrary: fc.constant(Buffer.alloc(0)) },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => Buffer.from(JSON.stringify(v) ?? 'null')) },
  { weight: 2, arbitrary: fc.array(fc.tuple(anyText, fileName), { maxLength: 5 }).map((pairs) => Buffer.from(new URLSearchParams(pairs).toString())) },
  { weight: 2, arbitrary: fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)) },
  { weight: 1, arbitrary: fc.constantFrom('{', 'a=%zz&b', '__proto__[x]=1&constructor[prototype][y]=2', 'a[b][c][d][e][f][g]=1', `${'a=1&'.repeat(5000)}`, '--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--x--\r\n', '\x1f\x8b\x08\x00garbage').map((s) => Buffer.from(s, 'latin1')) },
);

/** A body for /v1/chat/completions: OpenAI's shape with odd roles, contents and options. */
export const chatCompletion: fc.Arbitrary<Buffer> = fc
  .record(
    {
      model: fc.oneof(fc.constantFrom('openai:gpt-test', 'openai:nope', 'gpt-4', '', 'x'.repeat(201)), anyText),
      messages: fc.oneof(
        {
          weight: 4,
          arbitrary: fc.array(
            fc.record(
              {
                role: fc.oneof({ weight: 4, arbitrary: fc.constantFrom('system', 'developer', 'user', 'assistant', 'tool', 'function') }, { weight: 1, arbitrary: anyValue }),
                content: fc.oneof(anyText, fc.array(fc.record({ type: fc.constantFrom('text', 'image_url', 'input_audio', 'file', ''), text: anyValue, image_url: anyValue }, { requiredKeys: ['type'] }), { maxLength: 3 }), fc.constant(null), anyValue),
                name: anyText,
                tool_calls: anyValue,
                tool_call_id: anyText,
              },
              { requiredKeys: ['role'] },
            ),
            { maxLength: 4 },
          ),
        },
        { weight: 1, arbitrary: anyValue },
      ),
      stream: fc.oneof(fc.boolean(), anyValue),
      stream_options: anyValue,
      tools: anyValue,
      temperature: anyValue,
      max_tokens: anyValue,
      user: anyText,
    },
    { requiredKeys: ['model', 'messages'] },
  )
  .map((v) => Buffer.from(JSON.stringify(v)));

export interface FuzzedHttp {
  method: string;
  target: string;
  headers: [string, string][];
  body: Buffer;
  /** How the Content-Length relates to the body: true, absent, or a lie either way. */
  length: 'true' | 'none' | 'short' | 'long';
  /** Whether the fuzzer's working session cookie, CSRF token and API token go with it (where the fuzzed headers name none of their own). */
  credentials: boolean;
}

/**
 * One HTTP request to any door: method, target, up to six headers (credentials that
 * work now and then), body and its length. One in five is dirty: bytes Node's HTTP
 * parser refuses (raw control characters, header names that are no tokens), to show
 * that such a request ends there; the others are well-formed HTTP, so that they reach
 * the gateway's own code.
 */
export function httpRequest(ctx: HttpContext): fc.Arbitrary<FuzzedHttp> {
  const build = (dirty: boolean) => {
    const names = dirty ? fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...HEADER_NAMES) }, { weight: 1, arbitrary: fc.oneof(anyText, fc.constantFrom('x-a', ' content-type', 'content-type ', 'a:b', '', '\0')) }) : fc.constantFrom(...HEADER_NAMES);
    const header = names.chain((name) => valuesFor(name.toLowerCase().trim(), ctx, dirty).map((v): [string, string] => [name, v]));
    return fc.record({
      method: httpMethod(dirty),
      target: target(dirty),
      headers: fc.array(header, { maxLength: 6 }),
      // Where a door takes a shaped body (/v1/chat/completions), often that shape.
      body: fc.oneof(httpBody, chatCompletion),
      length: fc.constantFrom<FuzzedHttp['length']>('true', 'true', 'true', 'none', 'short', 'long'),
      credentials: fc.boolean(),
    });
  };
  return fc.oneof({ weight: 4, arbitrary: build(false) }, { weight: 1, arbitrary: build(true) });
}

// ---------------------------------------------------------------- forms

/** A form field's value: text, file names, encodings, and a long one now and then. */
export const formValue: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: anyText },
  { weight: 2, arbitrary: fileName },
  { weight: 1, arbitrary: fc.constantFrom('never', '30d', '12h', '1y', '9999y', '2099-01-01', '1970-01-01', '-1d', '0d', 'openai:gpt-test', 'openai:', ':', 'anthropic:x', 'yes', 'on', 'allow', 'deny', '{}', '[]', '*', 'all', 'net: *', 'read: /') },
);

/** Encodings of a form: as a browser sends it, and as nobody should. */
export type FormEncoding = 'urlencoded' | 'multipart' | 'json' | 'none' | 'garbage';

// ---------------------------------------------------------------- uploads

export interface FuzzedUpload {
  /** The boundary named in the Content-Type, and the one the body uses (they may differ). */
  boundary: string;
  bodyBoundary: string;
  /** The `dir` field (before the file), or none. */
  dir?: string;
  /** How the file's name is written in its Content-Disposition. */
  filenameParam: string;
  content: Buffer;
  /** Ways the form is broken: cut short, without its closing boundary, a second file, fields after the file. */
  cut: 'none' | 'no-close' | 'truncated' | 'two-files' | 'no-file' | 'header-garbage';
  /** ?dir= in the address, or none. */
  dirQuery?: string;
}

const quoted = (s: string) => `"${s.replace(/"/g, '%22')}"`;

/** A name as people give files and folders, so that an upload also gets as far as being written. */
const plainName = fc.stringMatching(/^[a-z0-9][a-z0-9 _-]{0,11}(\.[a-z]{1,4})?$/);

/** A multipart upload: odd names written every way Content-Disposition allows, any bytes, forms broken in the ways forms break. */
export const upload: fc.Arbitrary<FuzzedUpload> = fc.record(
  {
    boundary: fc.oneof({ weight: 6, arbitrary: fc.constant('fuzzboundary') }, { weight: 1, arbitrary: fc.constantFrom('', '"quoted"', 'a'.repeat(80), 'a b', '--', 'é') }),
    bodyBoundary: fc.constant('fuzzboundary'),
    dir: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: plainName }, { weight: 1, arbitrary: fileName }),
    filenameParam: fc.oneof(plainName, fileName).chain((f) =>
      fc.oneof(
        { weight: 4, arbitrary: fc.constant(`filename=${quoted(f)}`) },
        { weight: 2, arbitrary: fc.constant(`filename*=UTF-8''${pct(f)}`) },
        {
          weight: 2,
          arbitrary: fc.constantFrom(
            `filename=${f.replace(/[\r\n]/g, '')}`,
            `filename=${quoted(f)}; filename*=utf-8''${pct(`${f}2`)}`,
            `filename*=iso-8859-1'en'${pct(f)}`,
            'filename=',
            'filename',
            `filename="${f.replace(/[\r\n]/g, '')}`,
          ),
        },
      ),
    ),
    content: fc.oneof(fc.uint8Array({ maxLength: 4096 }).map((b) => Buffer.from(b)), fc.constantFrom(Buffer.alloc(0), Buffer.from('\r\n--fuzzboundary\r\n'), Buffer.alloc(3 * 1024 * 1024, 1))),
    cut: fc.oneof({ weight: 6, arbitrary: fc.constant('none' as const) }, { weight: 4, arbitrary: fc.constantFrom('no-close', 'truncated', 'two-files', 'no-file', 'header-garbage') }),
    dirQuery: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: plainName.map(pct) }, { weight: 1, arbitrary: fileName.map(pct) }),
  },
  { requiredKeys: ['boundary', 'bodyBoundary', 'filenameParam', 'content', 'cut'] },
);

/** The upload's Content-Type and body bytes. */
export function uploadBytes(u: FuzzedUpload): { contentType: string; body: Buffer } {
  const b = u.bodyBoundary;
  const parts: Buffer[] = [];
  if (u.dir !== undefined) parts.push(Buffer.from(`--${b}\r\nContent-Disposition: form-data; name="dir"\r\n\r\n${u.dir}\r\n`));
  const file = (name: string) => [Buffer.from(`--${b}\r\nContent-Disposition: form-data; name="file"; ${name}\r\nContent-Type: application/octet-stream\r\n\r\n`), u.content, Buffer.from('\r\n')];
  if (u.cut === 'header-garbage') parts.push(Buffer.from(`--${b}\r\nContent-Disposition: form-data; name="file"; ${u.filenameParam}\r\nX: \0\r\n: no name\r\n\r\n`), u.content, Buffer.from('\r\n'));
  else if (u.cut !== 'no-file') parts.push(...file(u.filenameParam));
  if (u.cut === 'two-files') parts.push(...file('filename="second.txt"'), Buffer.from(`--${b}\r\nContent-Disposition: form-data; name="dir"\r\n\r\nafter\r\n`));
  if (u.cut !== 'no-close') parts.push(Buffer.from(`--${b}--\r\n`));
  let body = Buffer.concat(parts);
  if (u.cut === 'truncated') body = body.subarray(0, Math.floor(body.length / 2));
  return { contentType: `multipart/form-data; boundary=${u.boundary}`, body };
}

// ---------------------------------------------------------------- socket.io

/** An event a page's socket might emit: the hub's own names, socket.io's reserved ones, any name; any arguments, an acknowledgement or not. */
export const socketEvent: fc.Arbitrary<{ name: string; args: unknown[]; ack: boolean }> = fc.record({
  name: fc.oneof({ weight: 3, arbitrary: fc.constantFrom('watch', 'watch-admin', 'sandgate:stop-turn', 'message', 'disconnecting', 'error', '__proto__', 'constructor', 'toString', 'hasOwnProperty', '') }, { weight: 2, arbitrary: anyText }),
  args: fc.array(fc.oneof({ weight: 4, arbitrary: anyValue }, { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)) }, { weight: 1, arbitrary: fc.oneof(fc.uuid(), fc.string({ maxLength: 70 })) }), { maxLength: 4 }),
  ack: fc.boolean(),
});

/**
 * A raw frame on the engine.io websocket, after the socket.io connect: socket.io
 * packets (event, ack, binary event with a wrong attachment count, connect to another
 * namespace, disconnect) with JSON that is broken, deep or huge, and engine.io's own
 * packet types.
 */
export const rawFrame: fc.Arbitrary<string | Buffer> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      '42',
      '42[',
      '42[]',
      '42{}',
      '42["watch"]',
      '42["watch",null]',
      '42["watch",{"toString":1}]',
      '420["watch-admin"]',
      '42999999999999999999["watch","x"]',
      '43',
      '431[]',
      '451-["watch",{"_placeholder":true,"num":0}]',
      '451-["watch",{"_placeholder":true,"num":5}]',
      '45999-["x"]',
      '451-["x",{"_placeholder":true,"num":"__proto__"}]',
      '46',
      '40/admin,',
      '40/nope,{"csrf":1}',
      '41',
      '4',
      '2',
      '3',
      '5',
      '6',
      '1',
      '0',
      '9',
      '',
      `42["x",${'['.repeat(3000)}${']'.repeat(3000)}]`,
      `42["x","${'a'.repeat(20_000)}"]`,
      '42["__proto__",{"polluted":1}]',
    ),
  },
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom('42', '43', '45', '46', '40', '41', '4', ''), fc.jsonValue({ maxDepth: 3 })).map(([p, v]) => `${p}${JSON.stringify(v)}`) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 40 }).map((b) => Buffer.from(b)) },
);
