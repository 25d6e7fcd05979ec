import { describe, expect, it } from 'vitest';
import { indentedExtent, jsonExtent, nestsDeeperThan, prettyJson } from './bounded-json.js';

const nested = (depth: number, inner: unknown): unknown => {
  let v = inner;
  for (let i = 0; i < depth; i++) v = [v];
  return v;
};

describe('prettyJson', () => {
  it('is JSON.stringify(value, null, 2) within its limits', () => {
    const values = [{ a: 1, b: [1, 'two', { c: null }], d: {}, e: [], f: 'x"y', g: true, h: undefined }, [], {}, 'text', 3.5, null, [[[]]], { 'k"ey': [{}] }];
    for (const v of values) expect(prettyJson(v, { maxDepth: 10, maxChars: 10_000 })).toEqual({ text: JSON.stringify(v, null, 2), deeper: false, longer: false });
  });

  it('shows what is deeper than its depth as a count, and says so', () => {
    const r = prettyJson({ a: nested(3, [1, 2, 3]), b: { c: { x: 1, y: 2 } } }, { maxDepth: 2, maxChars: 10_000 });
    expect(r.deeper).toBe(true);
    expect(r.longer).toBe(false);
    expect(r.text).toBe('{\n  "a": [\n    [… 1 item]\n  ],\n  "b": {\n    "c": {… 2 keys}\n  }\n}');
  });

  it('stops at its length and says so: a value nested thousands deep is cut, not multiplied', () => {
    // JSON.stringify would throw on this one, and would make 430 MB of a shallower one.
    const deep = JSON.parse('['.repeat(4000) + '0,'.repeat(50_000) + '0' + ']'.repeat(4000)) as unknown;
    const r = prettyJson(deep, { maxDepth: 64, maxChars: 20_000 });
    expect(r).toMatchObject({ deeper: true, longer: false });
    expect(r.text.length).toBeLessThan(10_000);
    expect(r.text).toContain('[… 1 item]');
    const wide = Array.from({ length: 100_000 }, (_, i) => i);
    const w = prettyJson(nested(60, wide), { maxDepth: 64, maxChars: 20_000 });
    expect(w).toMatchObject({ longer: true, deeper: false });
    expect(w.text.length).toBe(20_000);
  });
});

describe('jsonExtent', () => {
  it('measures size and depth of what fits', () => {
    const v = { a: [1, 2, { b: 'xyz' }], c: true };
    expect(jsonExtent(v, { maxDepth: 10, maxChars: 1000 })).toEqual({ chars: JSON.stringify(v).length, depth: 3, over: false });
    expect(jsonExtent({}, { maxDepth: 0, maxChars: 10 })).toEqual({ chars: 2, depth: 0, over: false });
  });

  it('stops at the first limit it passes', () => {
    expect(jsonExtent(nested(100_000, 1), { maxDepth: 32, maxChars: 1_000_000 })).toMatchObject({ depth: 33, over: true });
    const long = jsonExtent(Array.from({ length: 100_000 }, () => 'abcdefgh'), { maxDepth: 32, maxChars: 1000 });
    expect(long.over).toBe(true);
    expect(long.chars).toBeLessThan(1100);
  });
});

describe('nestsDeeperThan', () => {
  it('counts brackets outside strings only', () => {
    expect(nestsDeeperThan('{"a": "[[[[[[[[\\"[[[["}', 2)).toBe(false);
    expect(nestsDeeperThan('[[[1]]]', 2)).toBe(true);
    expect(nestsDeeperThan('[[[1]]]', 3)).toBe(false);
    expect(nestsDeeperThan('['.repeat(100_000), 64)).toBe(true);
  });
});

describe('indentedExtent', () => {
  it('estimates the indented length from the text, never short, and stops at the depth', () => {
    const values = [{ a: [1, 2, { b: 'x,y:[z]' }], c: 'q"\\"' }, Array.from({ length: 500 }, (_, i) => ({ i, v: [i, [i]] })), JSON.parse(`${'['.repeat(30)}${'1,'.repeat(300)}1${']'.repeat(30)}`) as unknown];
    for (const v of values) {
      const pretty = JSON.stringify(v, null, 2).length;
      const text = JSON.stringify(v);
      expect(indentedExtent(text, { maxDepth: 64, maxChars: pretty })).toEqual({ deeper: false, longer: false });
      expect(indentedExtent(text, { maxDepth: 64, maxChars: Math.floor(pretty * 0.98) })).toEqual({ deeper: false, longer: true });
    }
    expect(indentedExtent('[[[1]]]', { maxDepth: 2, maxChars: 1000 })).toEqual({ deeper: true, longer: false });
    expect(indentedExtent(`${'['.repeat(60)}${'0,'.repeat(100_000)}0${']'.repeat(60)}`, { maxDepth: 64, maxChars: 512 * 1024 })).toEqual({ deeper: false, longer: true });
  });
});
