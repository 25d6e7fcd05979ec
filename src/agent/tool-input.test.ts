import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { configFor } from '../config.js';
import { executeCodeInput } from '../mcp/tools/execute-code.js';
import { READ_FILE_INPUT } from '../mcp/tools/files.js';
import { boundedInputText, MAX_TOOL_INPUT_CHARS, MAX_TOOL_INPUT_DEPTH, vetToolCall, type JsonSchema } from './tool-input.js';

// The schemas as the gateway's MCP server lists them.
const schemas = new Map<string, JsonSchema>([
  ['execute_code', z.toJSONSchema(executeCodeInput(configFor({})), { io: 'input' }) as JsonSchema],
  ['read_file', z.toJSONSchema(READ_FILE_INPUT, { io: 'input' }) as JsonSchema],
]);
const vet = (toolName: string, input: unknown, allowance = MAX_TOOL_INPUT_CHARS) => vetToolCall({ toolName, input }, schemas, allowance);

describe('vetToolCall', () => {
  it('runs a call that matches its schema, and keeps its arguments', () => {
    const input = { language: 'python', code: 'print(1)', permissions: { read: ['/workspace'] } };
    expect(vet('execute_code', input)).toEqual({ stored: input, chars: JSON.stringify(input).length });
  });

  it('refuses keys the schema does not name, at the top and inside', () => {
    expect(vet('execute_code', { language: 'python', code: 'print(1)', extra: 1 }).refusal).toBe(
      'The arguments of this execute_code call do not match its input schema: the arguments may not have "extra" (the arguments are: language, code, timeout_seconds, permissions, reset, background). Call it again with arguments that match it.',
    );
    expect(vet('execute_code', { language: 'python', code: 'x', permissions: { sys: true } }).refusal).toMatch(/"permissions" may not have "sys" \(the keys are: read, write, net, env, run\)/);
  });

  it('refuses wrong types, missing keys, values out of range and patterns not matched', () => {
    expect(vet('execute_code', { language: 'cobol', code: 'x' }).refusal).toMatch(/"language" must be one of "python", "typescript", "javascript", "bash", not "cobol"/);
    expect(vet('execute_code', { language: 'python' }).refusal).toMatch(/the arguments must have "code"/);
    expect(vet('execute_code', { language: 'python', code: 'x', timeout_seconds: 1.5 }).refusal).toMatch(/"timeout_seconds" must be integer, not number/);
    expect(vet('execute_code', { language: 'python', code: 'x', timeout_seconds: 100_000 }).refusal).toMatch(/must be at most 600/);
    expect(vet('execute_code', { language: 'python', code: 'x', permissions: { read: ['etc'] } }).refusal).toMatch(/"permissions.read\[0\]" must match/);
    expect(vet('read_file', { path: 'a', length: 'all' }).refusal).toMatch(/"length" must be integer, not string/);
  });

  it('refuses arguments too deep or too long, and keeps a note in their place', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = [deep];
    const d = vet('execute_code', { language: 'python', code: 'x', extra: deep });
    expect(d.stored).toEqual({ _cut: `These arguments were not kept: they are nested more than ${MAX_TOOL_INPUT_DEPTH} levels deep.` });
    expect(d.refusal).toMatch(/^This execute_code call was not run: its arguments were refused/);
    const long = vet('execute_code', { language: 'python', code: 'x'.repeat(MAX_TOOL_INPUT_CHARS) });
    expect(long.stored).toEqual({ _cut: `These arguments were not kept: they are over ${MAX_TOOL_INPUT_CHARS} characters long.` });
    // What earlier calls of the round took counts too.
    expect(vet('execute_code', { language: 'python', code: 'x'.repeat(1000) }, 500).refusal).toMatch(/with the other calls of this round/);
  });

  it('refuses arguments cut before they were parsed, keeping the note', () => {
    const cut = JSON.parse(boundedInputText(`{"language":"python","code":"x","extra":${'['.repeat(40)}${']'.repeat(40)}}`)) as Record<string, unknown>;
    expect(cut).toEqual({ _cut: `These arguments were not kept: they are nested more than ${MAX_TOOL_INPUT_DEPTH} levels deep.` });
    expect(vet('execute_code', cut)).toMatchObject({ stored: cut, refusal: expect.stringMatching(/^This execute_code call was not run: its arguments were refused, as they are nested more than 32 levels deep\./) });
    expect(boundedInputText('{"path":"a.txt"}')).toBe('{"path":"a.txt"}');
    expect(JSON.parse(boundedInputText(JSON.stringify({ path: 'x'.repeat(MAX_TOOL_INPUT_CHARS) })))).toEqual({ _cut: `These arguments were not kept: they are over ${MAX_TOOL_INPUT_CHARS} characters long.` });
  });

  it('refuses an unknown tool and arguments that are not an object', () => {
    expect(vet('nope', {}).refusal).toBe('There is no tool named "nope". The tools are: execute_code, read_file.');
    expect(vet('read_file', ['a']).refusal).toMatch(/could not be used \(they are not a JSON object\)/);
  });
});
