/**
 * Tool input schemas whose JSON Schema is computed once. Every request gets a new
 * McpServer (the SDK's per-request model), and the SDK asks each new server for the
 * JSON form of a tool's schema (tools/list, and the header checks before tools/call);
 * zod converts anew each time, which cost about 0.2 ms per request.
 */
import type { z } from 'zod';

/** `schema` with `~standard.jsonSchema` answering from a cache; parsing is still zod's. */
export function jsonSchemaOnce<S extends z.ZodType>(schema: S): S {
  const std = schema['~standard'];
  const convert = std.jsonSchema;
  const cache = new Map<string, Record<string, unknown>>();
  const cached =
    (io: 'input' | 'output') =>
    (options: Parameters<typeof convert.input>[0]): Record<string, unknown> => {
      const key = `${io} ${JSON.stringify(options)}`;
      let json = cache.get(key);
      if (!json) cache.set(key, (json = deepFreeze(convert[io](options))));
      return json;
    };
  const wrapped = Object.create(schema) as S;
  Object.defineProperty(wrapped, '~standard', {
    value: {
      ...std,
      jsonSchema: { input: cached('input'), output: cached('output') },
    },
  });
  return wrapped;
}

/** Frozen, so a caller that tried to change the shared copy would fail loudly. */
function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}
