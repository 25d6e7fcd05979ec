import { describe, expect, it } from 'vitest';
import { partsFor, TOOL_NAMES } from './server.js';

const call = (name: unknown) => ({ method: 'tools/call', params: { name, arguments: {} } });

describe('partsFor', () => {
  it('builds only the tool a call names', () => {
    expect(partsFor([call('execute_code')])).toEqual({ tools: new Set(['execute_code']), resources: false, skills: false });
    expect(partsFor([call('read_file'), call('search_tools')])).toEqual({ tools: new Set(['read_file', 'search_tools']), resources: false, skills: false });
  });

  it('builds the resources (workspace files, skill files) for resource and completion requests only', () => {
    expect(partsFor([{ method: 'resources/read', params: { uri: 'x' } }])).toEqual({ tools: new Set(), resources: true, skills: true });
    expect(partsFor([{ method: 'completion/complete' }, call('list_files')])).toEqual({ tools: new Set(['list_files']), resources: true, skills: true });
  });

  it('builds everything for listings, discovery and anything else, so those answers are whole', () => {
    for (const method of ['tools/list', 'resources/templates/list', 'initialize', 'server/discover', 'ping', 'prompts/list', 'prompts/get', 'skills/list', 'something/new']) {
      const parts = partsFor(method === 'resources/templates/list' ? [{ method }, call('execute_code')] : [{ method }]);
      if (method.startsWith('resources/')) expect(parts.resources).toBe(true);
      else expect(parts).toEqual({ tools: new Set(TOOL_NAMES), resources: true, skills: true, tasks: true });
    }
    expect(partsFor([])).toEqual({ tools: new Set(TOOL_NAMES), resources: true, skills: true, tasks: true });
  });

  it('builds only the tasks extension for tasks/* requests', () => {
    expect(partsFor([{ method: 'tasks/get', params: { taskId: 'x' } }, { method: 'tasks/cancel' }])).toEqual({ tools: new Set(), resources: false, tasks: true });
    expect(partsFor([{ method: 'tasks/get' }, call('read_file')]).tools).toEqual(new Set(TOOL_NAMES));
  });

  it('builds no tool for a call of one it does not have (the SDK says it is not found)', () => {
    expect(partsFor([call('nope')])).toEqual({ tools: new Set(), resources: false });
    expect(partsFor([call(42)])).toEqual({ tools: new Set(), resources: false });
  });
});
