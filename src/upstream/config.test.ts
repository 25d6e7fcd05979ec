import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { configFor } from '../config.js';
import { fillConnectionPlaceholders, loadUpstreamConfig, parseUpstreamConfig, upstreamConfigFile, UpstreamConfigError } from './config.js';

const parse = (mcpServers: Record<string, unknown>, env: Record<string, string> = {}) => parseUpstreamConfig({ mcpServers }, { source: 'test.json', env });
const errorOf = (fn: () => unknown): string => {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(UpstreamConfigError);
    return (e as Error).message;
  }
  throw new Error('expected an UpstreamConfigError');
};

describe('parseUpstreamConfig', () => {
  it('accepts the mcpServers format of MCP clients plus a sandgate block', () => {
    const servers = parse(
      {
        memory: {
          command: 'npx',
          args: ['-y', '@modelcontextprotocol/server-memory'],
          env: { MEMORY_FILE_PATH: '${SANDGATE_WORKDIR}/memory.jsonl' },
          sandgate: { scope: 'per-user', allowUsers: ['*'] },
        },
        'github-tools': {
          type: 'stdio',
          command: 'node',
          args: ['server.js'],
          sandgate: { scope: 'per-user', allowTeams: ['Acme/Dev'], userCredentials: ['GITHUB_TOKEN'], timeoutSec: 5, description: 'GitHub' },
        },
        docs: {
          type: 'http',
          url: 'https://mcp.example.com/mcp',
          headers: { Authorization: 'Bearer ${DOCS_TOKEN}' },
          sandgate: { allowUsers: ['alice'], denyTools: ['delete_page'] },
        },
        legacy: { type: 'sse', url: 'http://127.0.0.1:9/sse', sandgate: { allowUsers: ['bob'], allowTools: ['search'] } },
        off: { command: 'whatever', disabled: true },
      },
      { DOCS_TOKEN: 's3cret' },
    );
    expect(servers.map((s) => [s.name, s.id, s.scope, s.transport.type])).toEqual([
      ['memory', 'memory', 'per-user', 'stdio'],
      ['github-tools', 'github_tools', 'per-user', 'stdio'],
      ['docs', 'docs', 'shared', 'http'],
      ['legacy', 'legacy', 'shared', 'sse'],
    ]);
    const [memory, github, docs, legacy] = servers;
    // Connection placeholders stay for the connection to fill in.
    expect(memory!.transport).toMatchObject({ env: { MEMORY_FILE_PATH: '${SANDGATE_WORKDIR}/memory.jsonl' } });
    expect(memory!.timeoutMs).toBe(60_000);
    expect(github).toMatchObject({ allowTeams: ['acme/dev'], userCredentials: ['GITHUB_TOKEN'], timeoutMs: 5000, description: 'GitHub' });
    expect(docs!.transport).toEqual({ type: 'http', url: 'https://mcp.example.com/mcp', headers: { Authorization: 'Bearer s3cret' } });
    expect(docs!.denyTools).toEqual(['delete_page']);
    expect(legacy!.allowTools).toEqual(['search']);
  });

  it('names the server and the field of every problem', () => {
    const msg = errorOf(() =>
      parse({
        a: { command: 'x', url: 'http://h/', sandgate: { allowUsers: ['*'] } },
        b: { args: ['x'], sandgate: { allowUsers: ['*'] } },
        c: { command: 'x', arg: ['typo'], sandgate: { allowUsers: ['*'] } },
        d: { command: 'x' },
        e: { command: 'x', sandgate: {} },
        f: { command: 'x', sandgate: { allowUsers: ['*'], userCredentials: ['TOKEN'] } },
        g: { url: 'ftp://h/x', sandgate: { allowUsers: ['*'] } },
        h: { command: 'x', sandgate: { allowTeams: ['no-slash'] } },
        i: { command: 'x', sandgate: { scope: 'per-user', allowUsers: ['*'], userCredentials: ['not valid'] } },
        j: { command: 'x', sandgate: { scope: 'everyone', allowUsers: ['*'] } },
        k: { url: 'http://h/', env: { A: '1' }, sandgate: { allowUsers: ['*'] } },
        'bad name!': { command: 'x', sandgate: { allowUsers: ['*'] } },
      }),
    );
    expect(msg).toContain('test.json');
    expect(msg).toContain('mcpServers.a: give either "command" (stdio) or "url" (http), not both');
    expect(msg).toContain('mcpServers.b: needs "command"');
    expect(msg).toContain('mcpServers.c: unknown field(s) "arg"');
    expect(msg).toContain('mcpServers.d.sandgate: missing: say who may use this server');
    expect(msg).toContain('mcpServers.e.sandgate: nobody may use this server');
    expect(msg).toContain('mcpServers.f.sandgate.userCredentials: users can only supply credentials to a "per-user" server');
    expect(msg).toContain('mcpServers.g.url: must be an http:// or https:// URL');
    expect(msg).toContain('mcpServers.h.sandgate.allowTeams.0: must be "org/team"');
    expect(msg).toContain('mcpServers.i.sandgate.userCredentials.0: "not valid" is not a valid environment variable name');
    expect(msg).toContain('mcpServers.j.sandgate.scope');
    expect(msg).toContain('mcpServers.k.env: "env" only applies to stdio servers');
    expect(msg).toContain('mcpServers.bad name!: server names are');
  });

  it('gives stdio servers no network unless their network policy says otherwise', () => {
    const servers = parse({
      quiet: { command: 'x', sandgate: { allowUsers: ['*'] } },
      web: { command: 'x', sandgate: { allowUsers: ['*'], network: 'public' } },
      gh: { command: 'x', sandgate: { allowUsers: ['*'], network: { allow: ['api.github.com', '*.Example.com:8443', '10.0.0.5:80', '[::1]:9000'] } } },
      raw: { command: 'x', sandgate: { allowUsers: ['*'], network: 'host' } },
    });
    expect(servers.map((s) => s.network)).toEqual([
      { kind: 'none' },
      { kind: 'public' },
      { kind: 'allow', hosts: [{ host: 'api.github.com' }, { host: '*.example.com', port: 8443 }, { host: '10.0.0.5', port: 80 }, { host: '::1', port: 9000 }] },
      { kind: 'host' },
    ]);
    const msg = errorOf(() =>
      parse({
        a: { command: 'x', sandgate: { allowUsers: ['*'], network: 'everything' } },
        b: { command: 'x', sandgate: { allowUsers: ['*'], network: { allow: ['http://evil.com/'] } } },
        c: { url: 'http://h/', sandgate: { allowUsers: ['*'], network: 'public' } },
        d: { command: 'x', sandgate: { allowUsers: ['*'], network: { allow: [] } } },
      }),
    );
    expect(msg).toContain('mcpServers.a.sandgate.network');
    expect(msg).toContain('mcpServers.b.sandgate.network.allow.0: must be a host name, *.domain or IP address, with an optional :port');
    expect(msg).toContain('mcpServers.c.sandgate.network: applies to stdio servers only');
    expect(msg).toContain('mcpServers.d.sandgate.network');
  });

  it('rejects a ${VAR} the gateway does not have, unless it has a default', () => {
    expect(errorOf(() => parse({ s: { command: 'x', env: { T: '${NOPE}' }, sandgate: { allowUsers: ['*'] } } }))).toContain(
      'mcpServers.s.env.T: ${NOPE} is not set',
    );
    const [s] = parse({ s: { command: 'x', env: { T: '${NOPE:-fallback}' }, sandgate: { allowUsers: ['*'] } } });
    expect(s!.transport).toMatchObject({ env: { T: 'fallback' } });
  });

  it('refuses two servers that map to the same directory', () => {
    expect(
      errorOf(() => parse({ 'a-b': { command: 'x', sandgate: { allowUsers: ['*'] } }, a_b: { command: 'x', sandgate: { allowUsers: ['*'] } } })),
    ).toContain('directory name "a_b" is the same as server "a-b"');
  });

  it('rejects a file without mcpServers', () => {
    expect(errorOf(() => parseUpstreamConfig({ servers: {} }, { source: 'x.json' }))).toContain('x.json: expected {"mcpServers"');
  });
});

describe('loadUpstreamConfig', () => {
  it('treats a missing file as no servers and reports bad JSON with the file name', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-upcfg-'));
    expect(loadUpstreamConfig(path.join(dir, 'absent.json'))).toEqual([]);
    fs.writeFileSync(path.join(dir, 'bad.json'), '{ nope');
    expect(errorOf(() => loadUpstreamConfig(path.join(dir, 'bad.json')))).toContain('bad.json is not valid JSON');
  });

  it('finds the file from SANDGATE_MCP_SERVERS_FILE, else in the data directory', () => {
    const config = configFor({ SANDGATE_DATA_DIR: '/srv/sandgate' });
    expect(upstreamConfigFile(config)).toBe('/srv/sandgate/mcp-servers.json');
    expect(upstreamConfigFile(configFor({ SANDGATE_DATA_DIR: '/srv/sandgate', SANDGATE_MCP_SERVERS_FILE: '/etc/sandgate/servers.json' }))).toBe(
      '/etc/sandgate/servers.json',
    );
  });

  it('fills connection placeholders', () => {
    expect(fillConnectionPlaceholders('${SANDGATE_WORKDIR}/m-${SANDGATE_USER}-${SANDGATE_USER_ID}', { SANDGATE_WORKDIR: '/w', SANDGATE_USER: 'al', SANDGATE_USER_ID: '7' })).toBe(
      '/w/m-al-7',
    );
  });
});
