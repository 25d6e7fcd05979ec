import type { ModelMessage } from 'ai';
import { describe, expect, it } from 'vitest';
import { estimateTokens, fitToContext } from './context.js';

const user = (text: string): ModelMessage => ({ role: 'user', content: text });
const call = (id: string, code: string): ModelMessage => ({ role: 'assistant', content: [{ type: 'tool-call', toolCallId: id, toolName: 'execute_code', input: { language: 'python', code } }] });
const result = (id: string, value: string): ModelMessage => ({ role: 'tool', content: [{ type: 'tool-result', toolCallId: id, toolName: 'execute_code', output: { type: 'text', value } }] });

describe('fitToContext', () => {
  it('sends everything when it fits', () => {
    const h = [user('hi'), call('a', 'print(1)'), result('a', '1')];
    expect(fitToContext(h, 100, 1000, 1)).toMatchObject({ messages: h, trimmed: 0, fits: true });
  });

  it('trims old tool output first, oldest first, keeping the round in progress and every user message', () => {
    const big = 'y'.repeat(30_000);
    const h = [user('one'), call('a', 'print(big)'), result('a', big), user('two'), call('b', 'print(big)'), result('b', big)];
    const f = fitToContext(h, 0, estimateTokens(45_000), 4);
    expect(f.fits).toBe(true);
    expect(f.trimmed).toBe(1);
    const first = (f.messages[2] as { content: { output: { value: string } }[] }).content[0]!.output.value;
    expect(first).toMatch(/^\[earlier output trimmed to keep the conversation within the model's context: 30000 characters; it began: "yyy/);
    expect(f.messages[5]).toBe(h[5]);
    expect(f.messages.filter((m) => m.role === 'user')).toEqual([user('one'), user('two')]);
    // The stored history is left as it was.
    expect((h[2] as { content: { output: { value: string } }[] }).content[0]!.output.value).toBe(big);
  });

  it('cuts long arguments of old calls next', () => {
    const code = 'x = 1\n'.repeat(5000);
    const h = [user('one'), call('a', code), result('a', 'ok'), user('two')];
    const f = fitToContext(h, 0, estimateTokens(5_000), 3);
    expect(f.fits).toBe(true);
    expect(JSON.stringify(f.messages[1])).toMatch(/more characters trimmed from this earlier call/);
  });

  it('says it does not fit rather than dropping what the user wrote', () => {
    const h = [user('z'.repeat(60_000)), user('and more')];
    const f = fitToContext(h, 0, estimateTokens(10_000), 1);
    expect(f.fits).toBe(false);
    expect(f.messages).toEqual(h);
  });
});
