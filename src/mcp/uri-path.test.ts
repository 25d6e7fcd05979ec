import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { decodePathSegment, encodePathSegment } from './uri-path.js';

describe('workspace URI path segments', () => {
  it('encode a UTF-8 name as encodeURIComponent does', () => {
    for (const name of ['report.csv', 'a b&c?d#e', 'café ☕ 𝄞.txt', "it's (1).md", '%41']) {
      expect(encodePathSegment(name)).toBe(encodeURIComponent(name));
      expect(decodePathSegment(encodePathSegment(name))).toBe(name);
    }
  });

  it('encode an undecodable byte as itself and decode it back to the string the sandbox side uses', () => {
    expect(encodePathSegment('bad\udcff.txt')).toBe('bad%FF.txt');
    expect(decodePathSegment('bad%FF.txt')).toBe('bad\udcff.txt');
    expect(decodePathSegment('bad%ff.txt')).toBe('bad\udcff.txt');
    // A surrogate that no file name holds is shown as U+FFFD.
    expect(encodePathSegment('x\ud800y')).toBe('x%EF%BF%BDy');
  });

  it('agree with Python’s surrogateescape on random byte names', () => {
    const names = Array.from({ length: 300 }, () => crypto.randomBytes(1 + crypto.randomInt(12)));
    // Python reads each name as the runner and the workspace helper do; JSON with ASCII escapes keeps lone surrogates.
    const script = 'import json,sys\nfor line in sys.stdin:\n    print(json.dumps(bytes.fromhex(line.strip()).decode("utf-8", "surrogateescape")))';
    const decoded = execFileSync('python3', ['-c', script], { input: names.map((n) => n.toString('hex')).join('\n') + '\n' })
      .toString()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as string);
    expect(decoded).toHaveLength(names.length);
    names.forEach((bytes, i) => {
      const fromPython = decoded[i]!;
      const uri = encodePathSegment(fromPython);
      // The URI names exactly the file's bytes…
      expect(Buffer.from(decodeURIComponentBytes(uri))).toEqual(bytes);
      // …and decodes to the very string Python opens that file by.
      expect(decodePathSegment(uri)).toBe(fromPython);
    });
  });

  it('refuses a stray percent sign', () => {
    expect(() => decodePathSegment('50%.txt')).toThrow(URIError);
    expect(() => decodePathSegment('%G1')).toThrow(URIError);
  });
});

/** The bytes a percent-encoded segment names (unreserved characters are ASCII). */
function decodeURIComponentBytes(s: string): number[] {
  const out: number[] = [];
  for (let i = 0; i < s.length; ) {
    if (s[i] === '%') {
      out.push(parseInt(s.slice(i + 1, i + 3), 16));
      i += 3;
    } else out.push(s.charCodeAt(i++));
  }
  return out;
}
