import { describe, expect, it } from 'vitest';
import { assignToolNames, camelCase, serverId, snakeCase } from './names.js';

describe('names', () => {
  it('turns tool names into identifiers of each language', () => {
    expect(camelCase('get-sum')).toBe('getSum');
    expect(camelCase('API-post-page')).toBe('apiPostPage');
    expect(camelCase('browser_take_screenshot')).toBe('browserTakeScreenshot');
    expect(snakeCase('getTinyImage')).toBe('get_tiny_image');
    expect(snakeCase('API-post-page')).toBe('api_post_page');
    expect(snakeCase('class')).toBe('class_');
    expect(camelCase('delete')).toBe('deleteTool');
    expect(camelCase('9lives')).toBe('t9lives');
    expect(snakeCase('!!!')).toBe('tool');
  });

  it('keeps file names one safe path segment and unique', () => {
    const names = assignToolNames(['../../etc/passwd', 'a/b', 'a_b', 'index', 'get-sum', 'get_sum', 'getSum', '']);
    const files = [...names.values()].map((n) => n.file);
    for (const f of files) expect(f).toMatch(/^[A-Za-z0-9][A-Za-z0-9_-]*$/);
    expect(new Set(files.map((f) => f.toLowerCase())).size).toBe(files.length);
    expect(names.get('index')!.file).not.toBe('index');
    const ts = [...names.values()].map((n) => n.tsName);
    const py = [...names.values()].map((n) => n.pyName);
    expect(new Set(ts).size).toBe(ts.length);
    expect(new Set(py).size).toBe(py.length);
    expect(names.get('get-sum')).toMatchObject({ tsName: 'getSum', pyName: 'get_sum', tsType: 'GetSumInput' });
    expect(names.get('get_sum')).toMatchObject({ tsName: 'getSum2', pyName: 'get_sum_2' });
  });

  it('maps server names to package names', () => {
    expect(serverId('github-tools')).toBe('github_tools');
    expect(serverId('my.server')).toBe('my_server');
    expect(serverId('1password')).toBe('s_1password');
    expect(serverId('class')).toBe('class_');
  });
});
