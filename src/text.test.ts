import { describe, expect, it } from 'vitest';
import { decodeChunk, formatBytes, pageLength } from './text.js';

describe('decodeChunk', () => {
  const text = 'héllo wörld — ✓ 😀 end';
  const bytes = Buffer.from(text);

  it('decodes a whole file', () => {
    expect(decodeChunk(bytes, 0, true)).toEqual({ text, start: 0, end: bytes.length });
  });

  it('never splits a character across pages, and pages cover the file', () => {
    for (const size of [1, 2, 3, 5, 7]) {
      let offset = 0;
      let out = '';
      while (offset < bytes.length) {
        const chunk = bytes.subarray(offset, offset + size);
        const d = decodeChunk(Buffer.from(chunk), offset, offset + chunk.length >= bytes.length);
        expect(d, `size ${size} at ${offset}`).toBeDefined();
        if (d!.end === d!.start) {
          // A page smaller than one character: read a bigger one.
          const bigger = decodeChunk(Buffer.from(bytes.subarray(offset, offset + 4)), offset, offset + 4 >= bytes.length)!;
          out += bigger.text;
          offset = bigger.end;
          continue;
        }
        expect(d!.start).toBe(offset);
        out += d!.text;
        offset = d!.end;
      }
      expect(out).toBe(text);
    }
  });

  it('skips the tail of a character a page starts inside', () => {
    const i = bytes.indexOf(Buffer.from('✓'));
    const d = decodeChunk(bytes.subarray(i + 1), i + 1, true)!;
    expect(d.start).toBe(i + 3);
    expect(d.text.startsWith(' 😀')).toBe(true);
  });

  it('calls NUL bytes and invalid UTF-8 binary', () => {
    expect(decodeChunk(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0]), 0, true)).toBeUndefined();
    expect(decodeChunk(Buffer.from('abc\0def'), 0, true)).toBeUndefined();
    expect(decodeChunk(Buffer.from([0xff, 0xfe, 0x41]), 0, true)).toBeUndefined();
  });
});

describe('pageLength', () => {
  const file = Buffer.from('id,email\n1,ann@example.com\n2,bob@example.org\n3,cy@example.net\n');
  /** The page read_file shows for (offset, length). */
  const page = (offset: number, length: number) => {
    const data = file.subarray(offset, offset + length);
    return data.subarray(0, pageLength(data, offset, file.length)).toString();
  };

  it('ends a page after its last line break unless it reaches the end of the file', () => {
    expect(page(0, 20)).toBe('id,email\n');
    expect(page(0, file.length)).toBe(file.toString());
    const tail = file.indexOf('3,');
    expect(page(tail, 100)).toBe('3,cy@example.net\n');
  });

  it('in a line longer than the page, ends after a separator in its second half, else where asked', () => {
    const json = Buffer.from('{"a":"ann@example.com","b":"bob@example.org","c":"cy@example.net"}');
    const cut = (offset: number, length: number) => {
      const data = json.subarray(offset, offset + length);
      return data.subarray(0, pageLength(data, offset, json.length)).toString();
    };
    expect(cut(0, 30)).toBe('{"a":"ann@example.com",');
    expect(cut(0, 10)).toBe('{"a":"ann@');
  });

  it('pages that follow each other cover the file exactly', () => {
    for (const length of [1, 7, 10, 17, 25, 40]) {
      let offset = 0;
      let out = '';
      while (offset < file.length) {
        const p = page(offset, length);
        expect(p.length, `length ${length} at ${offset}`).toBeGreaterThan(0);
        out += p;
        offset += Buffer.byteLength(p);
      }
      expect(out).toBe(file.toString());
    }
  });
});

describe('formatBytes', () => {
  it('is short', () => {
    expect(formatBytes(12)).toBe('12 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(50 * 1024 * 1024)).toBe('50 MiB');
  });
});
