import type { Request } from 'express';
import { describe, expect, it } from 'vitest';
import { WorkspaceError } from '../../sandboxes/workspace.js';
import { pathParam, pathQuery, shownPath } from './paths.js';

const requestFor = (originalUrl: string) => ({ originalUrl }) as Request;

describe('workspace paths in addresses and pages', () => {
  it('put a stray byte of a name into an address as itself, and read it back as the same string', () => {
    for (const rel of ['notes.txt', 'd\udcfe/t\udcfa.csv', 'café ☕/a+b&c=d#e%f.txt', '\udcff'.repeat(3), 'emoji 😀 \udc80x']) {
      const q = pathQuery(rel);
      expect(q).toMatch(/^[A-Za-z0-9\-_.!~*'()%/]*$/);
      expect(pathParam(requestFor(`/files?x=1&path=${q}&dir=elsewhere`), 'path')).toBe(rel);
    }
    expect(pathQuery('d\udcfe/t\udcfa.csv')).toBe('d%FE/t%FA.csv');
  });

  it('read what browsers and older links send: %2F, + as a space, an empty or missing value', () => {
    expect(pathParam(requestFor('/files?path=a%2Fmy+file.txt'), 'path')).toBe('a/my file.txt');
    expect(pathParam(requestFor('/files?dir='), 'dir')).toBe('');
    expect(pathParam(requestFor('/files?dir'), 'dir')).toBe('');
    expect(pathParam(requestFor('/files?dir=a'), 'path')).toBeUndefined();
    expect(pathParam(requestFor('/files'), 'path')).toBeUndefined();
  });

  it('refuse a malformed escape as the user’s error', () => {
    expect(() => pathParam(requestFor('/files?path=%zz'), 'path')).toThrow(WorkspaceError);
  });

  it('show each stray byte as U+FFFD and keep every character', () => {
    expect(shownPath('bad\udcff.txt')).toBe('bad\ufffd.txt');
    expect(shownPath('d\udcfe/😀\ud800')).toBe('d\ufffd/😀\ufffd');
    expect(shownPath('café')).toBe('café');
  });
});
