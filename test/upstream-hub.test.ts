/**
 * UpstreamHub against real MCP servers from npm (server-memory, server-everything),
 * started over stdio: lazy connection, sharing, per-user isolation and credentials,
 * access checks, timeouts, readable failures and reconnection after the upstream
 * process is killed.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import type { Store } from '../src/store/store.js';
import { createCredentialStore, loadOrCreateCredentialsKey } from '../src/upstream/credentials.js';
import { UpstreamError } from '../src/upstream/errors.js';
import { UpstreamHub, type UpstreamHubOptions } from '../src/upstream/hub.js';
import { EVERYTHING_SERVER, hubHomes, MEMORY_SERVER, nodeServer, serversFrom, openStoreWithUsers } from './support/upstream.js';
import { until } from './support/until.js';

let dataDir: string;
let store: Store;
let alice: SandboxOwner;
let bob: SandboxOwner;
let carol: SandboxOwner;
const hubs: UpstreamHub[] = [];

beforeAll(async () => {
  ({ dataDir, store, owners: [alice, bob, carol] } = await openStoreWithUsers('hub', ['alice', 'bob', 'carol']));
});
afterEach(async () => {
  await Promise.all(hubs.splice(0).map((h) => h.close()));
});
afterAll(async () => {
  await store.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

function hub(mcpServers: Record<string, unknown>, opts: Partial<UpstreamHubOptions> = {}): UpstreamHub {
  const h = new UpstreamHub({
    servers: serversFrom(mcpServers),
    dataDir,
    ...hubHomes(dataDir, store.db),
    credentials: createCredentialStore(store.db, loadOrCreateCredentialsKey(dataDir)),
    backoff: { initialMs: 2000, maxMs: 10_000 },
    ...opts,
  });
  hubs.push(h);
  return h;
}

const memory = (sandgate: Record<string, unknown>) =>
  nodeServer(MEMORY_SERVER, [], { env: { MEMORY_FILE_PATH: '${SANDGATE_WORKDIR}/memory.jsonl' }, sandgate });
const everything = (sandgate: Record<string, unknown>) => nodeServer(EVERYTHING_SERVER, ['stdio'], { sandgate });

const text = (r: CallToolResult) =>
  r.content
    .filter((c) => c.type === 'text')
    .map((c) => (c as { text: string }).text)
    .join('\n');

/** The processes below `pid` (from /proc). */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return out;
}

const commandLine = (pid: number): string => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
  } catch {
    return '';
  }
};

async function rejection(p: Promise<unknown>): Promise<UpstreamError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(UpstreamError);
    return e as UpstreamError;
  }
  throw new Error('expected the call to fail');
}

describe('UpstreamHub with real npm MCP servers', () => {
  it('connects lazily, shares one connection for a shared server, and calls tools', async () => {
    const h = hub({ memory: memory({ scope: 'shared', allowUsers: ['*'] }) });
    expect(h.status()).toEqual([]);
    const listing = await h.listTools(alice);
    expect(listing.unavailable).toEqual([]);
    expect(listing.tools.map((t) => t.tool.name)).toEqual(expect.arrayContaining(['create_entities', 'read_graph', 'search_nodes']));

    await h.callTool(alice, 'memory', 'create_entities', {
      entities: [{ name: 'sandgate', entityType: 'project', observations: ['runs code in gVisor'] }],
    });
    const graph = await h.callTool(bob, 'memory', 'read_graph', {});
    expect(JSON.stringify(graph.structuredContent ?? text(graph))).toContain('runs code in gVisor');
    expect(h.status()).toHaveLength(1);
    expect(h.status()[0]).toMatchObject({ server: 'memory', connected: true, failures: 0 });
  });

  it('gives each user their own connection on a per-user server', async () => {
    const h = hub({ memory: memory({ scope: 'per-user', allowUsers: ['*'] }) });
    await h.callTool(alice, 'memory', 'create_entities', { entities: [{ name: 'alice-only', entityType: 'note', observations: ['x'] }] });
    const bobs = await h.callTool(bob, 'memory', 'read_graph', {});
    const alices = await h.callTool(alice, 'memory', 'read_graph', {});
    expect(JSON.stringify(bobs)).not.toContain('alice-only');
    expect(JSON.stringify(alices)).toContain('alice-only');
    const pids = h.status().map((s) => s.pid);
    expect(new Set(pids).size).toBe(2);
    expect(h.status().map((s) => s.userId).sort()).toEqual([alice.userId, bob.userId].sort());

    // Once the tools are known, listing them for another user starts no process of theirs.
    const before = h.status().length;
    expect((await h.listTools(carol, 'memory')).tools.length).toBe(9);
    expect(h.status()).toHaveLength(before);
  });

  it('opens one connection per user and server when first calls come at once', async () => {
    const h = hub({ memory: memory({ scope: 'per-user', allowUsers: ['*'] }), everything: everything({ allowUsers: ['*'] }) });
    await Promise.all([
      ...[alice, alice, bob, alice, bob].map((o) => h.callTool(o, 'memory', 'read_graph', {})),
      ...[alice, bob, alice].map((o) => h.callTool(o, 'everything', 'echo', { message: 'x' })),
    ]);
    const opened = h.status().map((s) => `${s.server}/${s.userId ?? 'shared'}`).sort();
    expect(opened).toEqual(['everything/shared', `memory/${alice.userId}`, `memory/${bob.userId}`].sort());
    // No connection was opened beside those: exactly one server process each.
    const servers = descendants(process.pid)
      .map(commandLine)
      .filter((c) => c.startsWith(`${process.execPath} `));
    expect(servers.filter((c) => c.includes(MEMORY_SERVER))).toHaveLength(2);
    expect(servers.filter((c) => c.includes(EVERYTHING_SERVER))).toHaveLength(1);
  });

  it('reconnects after the upstream process is killed, and reports a call cut short readably', async () => {
    const h = hub({ everything: everything({ allowUsers: ['*'] }) });
    expect(text(await h.callTool(alice, 'everything', 'echo', { message: 'one' }))).toContain('one');
    const pid1 = h.status()[0]!.pid!;
    process.kill(pid1, 'SIGKILL');
    await until(() => h.status()[0]!.connected === false);
    expect(text(await h.callTool(alice, 'everything', 'echo', { message: 'two' }))).toContain('two');
    const pid2 = h.status()[0]!.pid!;
    expect(pid2).not.toBe(pid1);
    expect(h.status()[0]!.failures).toBe(0);

    // Killed in the middle of a call: the call fails with a message, the hub survives.
    const slow = h.callTool(alice, 'everything', 'trigger-long-running-operation', { duration: 5, steps: 5 });
    await new Promise((r) => setTimeout(r, 300));
    process.kill(pid2, 'SIGKILL');
    const err = await rejection(slow);
    expect(err.reason).toBe('unavailable');
    expect(err.message).toMatch(/everything\/trigger-long-running-operation failed: .*closed/);
    await until(() => h.status()[0]!.connected === false);
    expect(text(await h.callTool(alice, 'everything', 'echo', { message: 'three' }))).toContain('three');
  });

  it('checks who may use a server and which tools are offered', async () => {
    const h = hub(
      {
        onlyAlice: everything({ allowUsers: ['Alice'] }),
        team: everything({ allowTeams: ['acme/dev'], denyTools: ['get-env'] }),
        picky: everything({ allowUsers: ['*'], allowTools: ['echo'] }),
      },
      { teamsOf: async (o) => (o.name === 'carol' ? ['Acme/Dev'] : []) },
    );
    const denied = await rejection(h.callTool(bob, 'onlyAlice', 'echo', { message: 'x' }));
    expect(denied.reason).toBe('denied');
    expect(denied.message).toBe('bob may not use upstream server "onlyAlice": an admin can add you to its sandgate.allowUsers or sandgate.allowTeams');
    expect(text(await h.callTool(alice, 'onlyAlice', 'echo', { message: 'hi' }))).toContain('hi');

    expect((await rejection(h.callTool(alice, 'team', 'echo', { message: 'x' }))).reason).toBe('denied');
    expect(text(await h.callTool(carol, 'team', 'echo', { message: 'team' }))).toContain('team');
    const off = await rejection(h.callTool(carol, 'team', 'get-env', {}));
    expect(off.message).toBe('tool "get-env" of upstream server "team" is switched off by the admin');
    expect((await h.listTools(carol, 'team')).tools.map((t) => t.tool.name)).not.toContain('get-env');

    expect((await h.listTools(bob, 'picky')).tools.map((t) => t.tool.name)).toEqual(['echo']);
    expect((await rejection(h.callTool(bob, 'picky', 'get-sum', { a: 1, b: 2 }))).reason).toBe('denied');

    expect((await h.serversFor(bob)).map((s) => s.name)).toEqual(['picky']);
    const listing = await h.listTools(bob);
    expect(new Set(listing.tools.map((t) => t.server.name))).toEqual(new Set(['picky']));

    const unknown = await rejection(h.callTool(alice, 'nope', 'echo', {}));
    expect(unknown.reason).toBe('unknown_server');
    const noTool = await rejection(h.callTool(alice, 'onlyAlice', 'ech0', {}));
    expect(noTool.reason).toBe('unknown_tool');
    expect(noTool.message).toContain('upstream server "onlyAlice" has no tool "ech0"; its tools are: echo');
  });

  it('returns tool errors as results and enforces the time limit', async () => {
    const h = hub({ everything: everything({ allowUsers: ['*'], timeoutSec: 1 }) });
    const bad = await h.callTool(alice, 'everything', 'get-sum', { a: 'x', b: 2 });
    expect(bad.isError).toBe(true);
    expect(text(bad)).toContain('expected number');

    const slow = await rejection(h.callTool(alice, 'everything', 'trigger-long-running-operation', { duration: 5, steps: 5 }));
    expect(slow.reason).toBe('timeout');
    expect(slow.message).toBe(
      'everything/trigger-long-running-operation timed out after 1 s (the limit is sandgate.timeoutSec in the server\'s config)',
    );
    expect(text(await h.callTool(alice, 'everything', 'get-sum', { a: 1, b: 2 }))).toContain('3');
  });

  it('turns a server that cannot start into readable errors, with backoff', async () => {
    const h = hub({
      missing: { command: 'sandgate-no-such-command', sandgate: { allowUsers: ['*'] } },
      crashing: {
        command: process.execPath,
        args: ['-e', 'console.error("boom: MEMORY_FILE_PATH is not writable"); process.exit(3)'],
        sandgate: { allowUsers: ['*'] },
      },
    });
    const e1 = await rejection(h.callTool(alice, 'missing', 'x', {}));
    expect(e1.reason).toBe('unavailable');
    expect(e1.message).toBe(
      'upstream server "missing" could not be reached: cannot start "sandgate-no-such-command": not found on PATH, or not executable by the server\'s unprivileged user',
    );
    // The first retry is immediate; the next waits.
    await rejection(h.callTool(alice, 'missing', 'x', {}));
    const e3 = await rejection(h.callTool(alice, 'missing', 'x', {}));
    expect(e3.message).toMatch(/^upstream server "missing" is unavailable \(2 failed attempts; last error: .*\); sandgate tries again in \d+ s$/);

    const crash = await rejection(h.callTool(alice, 'crashing', 'x', {}));
    expect(crash.message).toContain('server said: boom: MEMORY_FILE_PATH is not writable');

    const listing = await h.listTools(alice);
    expect(listing.tools).toEqual([]);
    expect(listing.unavailable.map((u) => u.server).sort()).toEqual(['crashing', 'missing']);
  });

  it('passes only PATH and the configured env to stdio servers, plus the user\'s own credentials', async () => {
    process.env.SANDGATE_TEST_GATEWAY_SECRET = 'must-not-leak';
    try {
      const h = hub({
        envy: nodeServer(EVERYTHING_SERVER, ['stdio'], {
          env: { CONFIGURED: 'yes', WHO: '${SANDGATE_USER}' },
          sandgate: { scope: 'per-user', allowUsers: ['*'], userCredentials: ['API_TOKEN'] },
        }),
      });
      const missing = await rejection(h.callTool(alice, 'envy', 'get-env', {}));
      expect(missing.reason).toBe('missing_credential');
      expect(missing.message).toContain('yours are not set: API_TOKEN');
      await expect(h.setUserCredential(alice, 'envy', 'OTHER', 'x')).rejects.toThrow('takes no credential named OTHER; it takes: API_TOKEN');

      await h.setUserCredential(alice, 'envy', 'API_TOKEN', 'alice-token-1');
      expect(await h.credentialStatus(alice, 'envy')).toEqual([{ name: 'API_TOKEN', set: true }]);
      const env = JSON.parse(text(await h.callTool(alice, 'envy', 'get-env', {}))) as Record<string, string>;
      expect(env.API_TOKEN).toBe('alice-token-1');
      expect(env.CONFIGURED).toBe('yes');
      expect(env.WHO).toBe('alice');
      expect(env.PATH).toBe(process.env.PATH);
      expect(env.HOME).toBe(path.join(`${dataDir}-homes`, 'envy', `user-${alice.userId}`));
      expect(env.SANDGATE_TEST_GATEWAY_SECRET).toBeUndefined();
      expect(Object.keys(env).sort()).toEqual(['API_TOKEN', 'CONFIGURED', 'HOME', 'PATH', 'WHO']);

      // A new value restarts the user's connection with it.
      await h.setUserCredential(alice, 'envy', 'API_TOKEN', 'alice-token-2');
      expect(JSON.parse(text(await h.callTool(alice, 'envy', 'get-env', {}))).API_TOKEN).toBe('alice-token-2');

      // Bob has none: he cannot call, but sees the tool list alice's connection found.
      expect((await rejection(h.callTool(bob, 'envy', 'echo', { message: 'x' }))).reason).toBe('missing_credential');
      expect((await h.listTools(bob, 'envy')).tools.length).toBeGreaterThan(5);

      await h.deleteUserCredential(alice, 'envy');
      expect((await rejection(h.callTool(alice, 'envy', 'get-env', {}))).reason).toBe('missing_credential');
    } finally {
      delete process.env.SANDGATE_TEST_GATEWAY_SECRET;
    }
  });

  it('reports tool list changes once per change', async () => {
    const h = hub({ memory: memory({ allowUsers: ['*'] }) });
    const changes: string[] = [];
    h.onCatalogChange((s) => changes.push(s));
    await h.listTools(alice);
    await h.listTools(bob);
    expect(changes).toEqual(['memory']);
    expect(h.toolsHash('memory')).toMatch(/^[0-9a-f]{16}$/);
  });
});
