import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { TOKEN_TYPES } from './entities.js';
import { formatToken, parseToken, tokenRegex } from './token-format.js';

describe('token format', () => {
  const token = formatToken('EMAIL', 3);

  it('is `[TYPE_n]` and parses back', () => {
    expect(token).toBe('[EMAIL_3]');
    expect(parseToken(token)).toEqual({ type: 'EMAIL', n: 3 });
    expect(parseToken('[EMAIL_03]')).toBeUndefined();
    expect(parseToken('[EMAIL_3')).toBeUndefined();
    for (const type of TOKEN_TYPES) expect(parseToken(formatToken(type, 12345))).toEqual({ type, n: 12345 });
  });

  it('survives being quoted by JSON, JS/Python string literals and shell quoting', () => {
    expect(JSON.stringify({ to: token })).toContain(`"${token}"`);
    expect(JSON.stringify(`hi ${token}`).slice(1, -1)).toBe(`hi ${token}`);
    expect(encodeURIComponent(token)).not.toBe(token); // why tokens must be detokenized before, not after, code runs
    const quoted = JSON.stringify(token);
    expect(quoted.match(tokenRegex())).toEqual([token]);
  });

  it('comes out of a shell double-quoted string and a Python f-string unchanged', () => {
    expect(execFileSync('bash', ['-c', `x="${token}"; printf '%s' "to: $x"`]).toString()).toBe(`to: ${token}`);
    let python = '';
    try {
      python = execFileSync('python3', ['-c', `n = 1\nprint(f"{n} {'${token}'} ${token}", end="")`]).toString();
    } catch {
      return; // no python on this machine; the JSON and shell checks above still hold
    }
    expect(python).toBe(`1 ${token} ${token}`);
  });
});
