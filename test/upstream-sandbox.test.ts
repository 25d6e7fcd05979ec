/**
 * The whole path in a real sandbox: code in a gVisor container (Python and TypeScript)
 * calls the real npm server-memory and server-everything through /tools, over the
 * runner's channel, into the gateway's bridge handler and upstream hub, and gets the
 * result (or a readable error) back. Users see only the wrappers of servers they may use.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import { createHarness, type Harness } from './support/harness.js';
import { createBridgeHandler, type UpstreamAuditEntry } from '../src/upstream/bridge.js';
import { createCredentialStore, loadOrCreateCredentialsKey } from '../src/upstream/credentials.js';
import { UpstreamHub } from '../src/upstream/hub.js';
import { EVERYTHING_SERVER, hubHomes, MEMORY_SERVER, nodeServer, serversFrom } from './support/upstream.js';
import { createToolsDirs, type ToolsDirs } from '../src/upstream/tools-dir.js';

describe('upstream MCP tools called from code in a real sandbox', () => {
  let h: Harness;
  let hub: UpstreamHub;
  let dirs: ToolsDirs;
  let alice: SandboxOwner;
  let bob: SandboxOwner;
  const audit: UpstreamAuditEntry[] = [];

  beforeAll(async () => {
    h = await createHarness({
      prepareTools: (dir, owner) => dirs.prepareTools(dir, owner),
      bridgeHandler: (owner, method, params) => bridge(owner, method, params),
    });
    hub = new UpstreamHub({
      servers: serversFrom({
        memory: nodeServer(MEMORY_SERVER, [], {
          env: { MEMORY_FILE_PATH: '${SANDGATE_WORKDIR}/memory.jsonl' },
          sandgate: { scope: 'per-user', allowUsers: ['*'] },
        }),
        everything: nodeServer(EVERYTHING_SERVER, ['stdio'], { sandgate: { allowUsers: ['alice'] } }),
      }),
      dataDir: h.dataDir,
      ...hubHomes(h.dataDir, h.store.db),
      credentials: createCredentialStore(h.store.db, loadOrCreateCredentialsKey(h.dataDir)),
      logger: h.logger,
    });
    dirs = createToolsDirs({ hub, dataDir: h.dataDir, logger: h.logger });
    const handler = createBridgeHandler(hub, (e) => void audit.push(e), { logger: h.logger });
    bridge = handler;
    alice = await h.user('alice');
    bob = await h.user('bob');
  });
  let bridge: ReturnType<typeof createBridgeHandler>;

  afterAll(async () => {
    await h?.close();
    dirs?.close();
    await hub?.close();
  });

  it('calls server-memory from Python', async () => {
    const r = await h.manager.execute(alice, {
      language: 'python',
      code: [
        'import json',
        'from sandgate_tools.servers.memory import create_entities, read_graph, search_nodes',
        'from sandgate_tools.servers.everything import get_sum',
        'from sandgate_tools import ToolError, list_tools',
        'create_entities([{"name": "gvisor", "entityType": "sandbox", "observations": ["user-space kernel"]}])',
        'found = [e["name"] for e in search_nodes(query="kernel")["entities"]]',
        'try:',
        '    get_sum(a="not a number", b=1)',
        '    err = None',
        'except ToolError as e:',
        '    err = str(e)',
        'print(json.dumps({"found": found, "graph": read_graph(), "err": err, "servers": sorted({t["server"] for t in list_tools()})}))',
      ].join('\n'),
    });
    expect(r.stderr).toBe('');
    const out = JSON.parse(r.stdout);
    expect(out.found).toEqual(['gvisor']);
    expect(out.graph.entities[0]).toMatchObject({ name: 'gvisor', observations: ['user-space kernel'] });
    expect(out.err).toMatch(/^everything\/get-sum: .*expected number/);
    expect(out.servers).toEqual(['everything', 'memory']);
  });

  it('calls server-memory from TypeScript', async () => {
    const r = await h.manager.execute(alice, {
      language: 'typescript',
      code: [
        'import { createEntities, openNodes } from "/tools/servers/memory/index.ts";',
        'import { echo } from "/tools/servers/everything/index.ts";',
        'import { describeTool } from "/tools/sandgate.ts";',
        'await createEntities({ entities: [{ name: "deno", entityType: "runtime", observations: ["typed wrappers"] }] });',
        'const nodes = await openNodes({ names: ["deno", "gvisor"] });',
        'const d = await describeTool("memory", "open_nodes");',
        'console.log(JSON.stringify({ names: nodes.entities.map((e: { name: string }) => e.name).sort(), echo: await echo({ message: "from gVisor" }), path: d.path }));',
      ].join('\n'),
    });
    expect(r.stderr).toBe('');
    const out = JSON.parse(r.stdout);
    expect(out.names).toEqual(['deno', 'gvisor']); // alice's graph holds what her Python code stored
    expect(out.echo).toBe('Echo: from gVisor');
    expect(out.path).toBe('/tools/servers/memory/open_nodes.ts');
  });

  it('calls the typed wrappers from TypeScript twice in a row, the second time without importing them again', async () => {
    const first = await h.manager.execute(alice, {
      language: 'typescript',
      code: 'import { echo, getSum } from "/tools/servers/everything/index.ts";\nawait echo({ message: "first" })',
    });
    expect(first.stderr).toBe('');
    expect(first.result).toBe('"Echo: first"');
    // No import: the names the first run imported are still there, with their module loaded.
    const second = await h.manager.execute(alice, {
      language: 'typescript',
      code: '[await echo({ message: "second" }), await getSum({ a: 2, b: 3 })]',
    });
    expect(second.stderr).toBe('');
    expect(second.result).toMatch(/^\[ "Echo: second", .*5/s);
  });

  it('shows a user only the servers they may use, and a denied call is a readable error', async () => {
    const r = await h.manager.execute(bob, {
      language: 'python',
      code: [
        'import os, json',
        'from sandgate_tools import call_mcp_tool, ToolError',
        'try:',
        '    call_mcp_tool("everything", "echo", {"message": "x"})',
        'except ToolError as e:',
        '    err = str(e)',
        'print(json.dumps({"servers": sorted(os.listdir("/tools/servers")), "err": err}))',
      ].join('\n'),
    });
    expect(r.stderr).toBe('');
    const out = JSON.parse(r.stdout);
    expect(out.servers).toEqual(['README.md', 'memory']);
    expect(out.err).toBe('bob may not use upstream server "everything": an admin can add you to its sandgate.allowUsers or sandgate.allowTeams');
  });

  it('audited every call', () => {
    const calls = audit.map((a) => `${a.userId}:${a.tool}:${a.outcome}`);
    expect(calls).toContain(`${alice.userId}:memory/create_entities:ok`);
    expect(calls).toContain(`${alice.userId}:everything/get-sum:error`);
    expect(calls).toContain(`${bob.userId}:everything/echo:denied`);
  });
});
