/**
 * A model's tool call, checked before anything runs, is shown or is stored: its
 * arguments are bounded in size and depth, and match the tool's input schema with no key
 * the schema does not name. A call that fails becomes a tool error the model reads and
 * can fix (tool failures are data, as MCP treats them); what is kept of it is bounded, so
 * neither the store nor a page that shows the call grows with what a model sends.
 *
 * Size and depth are checked twice: on the arguments' text as the provider sent it, before
 * the AI SDK parses it (boundedInputText, in the model middleware of model-bounds.ts: the
 * SDK parses and serialises arguments recursively, and fails on a few thousand levels),
 * and on the parsed value (vetToolCall), where the round's allowance and the schema are
 * known too.
 *
 * The schema check covers what the gateway's own tools' schemas use (type, properties,
 * required, enum, anyOf, items, string and number bounds, pattern); a keyword it does not
 * know is left to the tool's own validation, which still runs when the call is made.
 */
import { jsonExtent, nestsDeeperThan } from '../bounded-json.js';

/** Longest arguments one call may have (characters of JSON), and all calls of one round together. */
export const MAX_TOOL_INPUT_CHARS = 200_000;
/** Deepest nesting of one call's arguments. */
export const MAX_TOOL_INPUT_DEPTH = 32;
/** Calls one model round may make; the rest are answered as not run. */
export const MAX_TOOL_CALLS_PER_ROUND = 32;
/** Longest tool name or call id kept (a provider's ids can hold anything). */
export const MAX_TOOL_ID_CHARS = 200;

export type JsonSchema = {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  enum?: unknown[];
  const?: unknown;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  items?: JsonSchema;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minItems?: number;
  maxItems?: number;
  pattern?: string;
};

const typeOf = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v);
const fits = (type: string, v: unknown) => type === typeOf(v) || (type === 'number' && typeof v === 'number' && Number.isFinite(v));
const at = (path: string) => (path ? `"${path}"` : 'the arguments');
const described = (v: unknown) => {
  const s = JSON.stringify(v) ?? String(v);
  return s.length > 40 ? `${s.slice(0, 40)}…` : s;
};

/** A schema's pattern as a regular expression; undefined when it is not one this engine reads (the tool's own check still runs). */
function patternOf(source: string): RegExp | undefined {
  try {
    return new RegExp(source, 'u');
  } catch {
    return undefined;
  }
}

/** The first way `value` fails `schema`, in words a model can act on; undefined when it fits. */
export function schemaProblem(schema: JsonSchema, value: unknown, path = ''): string | undefined {
  if (schema.anyOf || schema.oneOf) {
    const options = (schema.anyOf ?? schema.oneOf)!;
    const problems = options.map((o) => schemaProblem(o, value, path));
    if (problems.every((p) => p !== undefined)) {
      // The option of the value's own type says best what is wrong with it.
      const sameType = options.findIndex((o) => o.type !== undefined && [o.type].flat().some((t) => fits(t, value)));
      return problems[Math.max(0, sameType)];
    }
  }
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => fits(t, value))) return `${at(path)} must be ${types.join(' or ')}, not ${typeOf(value)}`;
  }
  if (schema.enum && !schema.enum.some((e) => e === value)) return `${at(path)} must be one of ${schema.enum.map((e) => JSON.stringify(e)).join(', ')}, not ${described(value)}`;
  if ('const' in schema && schema.const !== value) return `${at(path)} must be ${JSON.stringify(schema.const)}`;
  if (typeof value === 'string') {
    if (schema.minLength !== undefined && value.length < schema.minLength) return `${at(path)} must have at least ${schema.minLength} characters`;
    if (schema.maxLength !== undefined && value.length > schema.maxLength) return `${at(path)} must have at most ${schema.maxLength} characters`;
    if (schema.pattern !== undefined && patternOf(schema.pattern)?.test(value) === false) return `${at(path)} must match ${schema.pattern}`;
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) return `${at(path)} must be at least ${schema.minimum}`;
    if (schema.maximum !== undefined && value > schema.maximum) return `${at(path)} must be at most ${schema.maximum}`;
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) return `${at(path)} must be more than ${schema.exclusiveMinimum}`;
    if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) return `${at(path)} must be less than ${schema.exclusiveMaximum}`;
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) return `${at(path)} must have at least ${schema.minItems} items`;
    if (schema.maxItems !== undefined && value.length > schema.maxItems) return `${at(path)} must have at most ${schema.maxItems} items`;
    if (schema.items) {
      for (let i = 0; i < value.length; i++) {
        const p = schemaProblem(schema.items, value[i], `${path}[${i}]`);
        if (p) return p;
      }
    }
  }
  if (value !== null && typeof value === 'object' && !Array.isArray(value) && (schema.properties || schema.additionalProperties !== undefined)) {
    const properties = schema.properties ?? {};
    for (const key of schema.required ?? []) if (!Object.hasOwn(value, key)) return `${at(path)} must have "${key}"`;
    for (const [key, v] of Object.entries(value)) {
      const sub = path ? `${path}.${key}` : key;
      const own = Object.hasOwn(properties, key) ? properties[key] : undefined;
      // A key the schema does not name is refused unless the schema gives it a schema of its own.
      const extra = typeof schema.additionalProperties === 'object' ? schema.additionalProperties : undefined;
      if (!own && !extra) {
        const names = Object.keys(properties);
        return `${at(path)} may not have "${described(key).slice(1, -1)}"${names.length ? ` (the ${path ? 'keys' : 'arguments'} are: ${names.join(', ')})` : ''}`;
      }
      const p = schemaProblem((own ?? extra)!, v, sub);
      if (p) return p;
    }
  }
  return undefined;
}

/** What is kept in place of arguments too large or deep to keep. */
const CUT_KEY = '_cut';
const cutArguments = (why: string) => ({ [CUT_KEY]: `These arguments were not kept: ${why}.` });
const cutRefusal = (toolName: string, why: string) =>
  `This ${toolName} call was not run: its arguments were refused, as ${why}. Put large data in a file in /workspace (execute_code can write it) and pass its path.`;
const TOO_DEEP = `they are nested more than ${MAX_TOOL_INPUT_DEPTH} levels deep`;
const TOO_LONG = `they are over ${MAX_TOOL_INPUT_CHARS} characters long`;

/** Arguments' text as the provider sent it, or the note kept in its place when it is too long or too deep (see model-bounds.ts). */
export function boundedInputText(text: string): string {
  const why = text.length > MAX_TOOL_INPUT_CHARS ? TOO_LONG : nestsDeeperThan(text, MAX_TOOL_INPUT_DEPTH) ? TOO_DEEP : undefined;
  return why ? JSON.stringify(cutArguments(why)) : text;
}

export interface VettedCall {
  /** The arguments as they are kept in the conversation: the model's, or a note when they were too large to keep. */
  stored: Record<string, unknown>;
  /** Why the call is not run (a tool error for the model), or undefined to run it. */
  refusal?: string;
  /** Characters of arguments this call takes of the round's allowance. */
  chars: number;
}

export interface CallToVet {
  toolName: string;
  input: unknown;
  invalid?: boolean;
  error?: unknown;
}

/**
 * Checks one call of a round: a known tool, arguments within MAX_TOOL_INPUT_DEPTH and
 * within `allowance` characters (what is left of the round's MAX_TOOL_INPUT_CHARS), and
 * that match the tool's schema. Arguments too large or deep to keep are replaced by a
 * note saying so; arguments that are kept are bounded by the same limits.
 */
export function vetToolCall(call: CallToVet, schemas: ReadonlyMap<string, JsonSchema>, allowance: number): VettedCall {
  const limit = Math.min(MAX_TOOL_INPUT_CHARS, allowance);
  const extent = jsonExtent(call.input, { maxDepth: MAX_TOOL_INPUT_DEPTH, maxChars: limit });
  if (extent.over) {
    const why = extent.depth > MAX_TOOL_INPUT_DEPTH ? TOO_DEEP : limit < MAX_TOOL_INPUT_CHARS ? `with the other calls of this round they are over ${MAX_TOOL_INPUT_CHARS} characters of arguments` : TOO_LONG;
    return { stored: cutArguments(why), refusal: cutRefusal(call.toolName, why), chars: 0 };
  }
  const object = call.input !== null && typeof call.input === 'object' && !Array.isArray(call.input) ? (call.input as Record<string, unknown>) : undefined;
  // Cut before they were parsed (boundedInputText): the note is kept, the call refused.
  const note = object && Object.keys(object).length === 1 && typeof object[CUT_KEY] === 'string' ? /^These arguments were not kept: (.*)\.$/.exec(object[CUT_KEY])?.[1] : undefined;
  if (note) return { stored: object!, refusal: cutRefusal(call.toolName, note), chars: extent.chars };
  const stored = object ?? {};
  const schema = schemas.get(call.toolName);
  if (!schema) return { stored, chars: extent.chars, refusal: `There is no tool named "${call.toolName}". The tools are: ${[...schemas.keys()].join(', ')}.` };
  if (call.invalid || !object) {
    const why = String((call.error as Error | undefined)?.message ?? 'they are not a JSON object').slice(0, 500);
    return { stored, chars: extent.chars, refusal: `The arguments of this ${call.toolName} call could not be used (${why}). Call it again with a JSON object that matches its input schema.` };
  }
  const problem = schemaProblem({ ...schema, additionalProperties: schema.additionalProperties ?? false }, object);
  if (problem) return { stored, chars: extent.chars, refusal: `The arguments of this ${call.toolName} call do not match its input schema: ${problem}. Call it again with arguments that match it.` };
  return { stored, chars: extent.chars };
}
