/**
 * The in-sandbox libraries end to end, on the host: Deno and Python code call the real
 * server-memory and server-everything through /tools (generated for the user), over a
 * Unix socket that plays the runner's part, into the gateway's bridge handler and hub.
 * Also: the generated /tools tree type-checks and compiles, users see only their
 * servers' wrappers, every call is audited, and search_tools' catalogue ranks sensibly.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import type { Store } from '../src/store/store.js';
import { MemoryRateLimiter } from '../src/limits/rate-limit.js';
import { createBridgeHandler, type UpstreamAuditEntry } from '../src/upstream/bridge.js';
import { createToolCatalog } from '../src/upstream/catalog.js';
import { createCredentialStore, loadOrCreateCredentialsKey } from '../src/upstream/credentials.js';
import { UpstreamHub } from '../src/upstream/hub.js';
import {
  DENO_BIN,
  EVERYTHING_SERVER,
  MEMORY_SERVER,
  nodeServer,
  serversFrom,
  startBridgeSocket,
  openStoreWithUsers,
  hubHomes,
} from './support/upstream.js';
import { createToolsDirs, type ToolsDirs } from '../src/upstream/tools-dir.js';

const run = promisify(execFile);

let dataDir: string;
let store: Store;
let hub: UpstreamHub;
let dirs: ToolsDirs;
let alice: SandboxOwner;
let bob: SandboxOwner;
let aliceTools: string;
let bridge: { path: string; close(): Promise<void> };
const audit: UpstreamAuditEntry[] = [];
const EXEC_ID = 'exec-42';

beforeAll(async () => {
  ({ dataDir, store, owners: [alice, bob] } = await openStoreWithUsers('libs', ['alice', 'bob']));
  hub = new UpstreamHub({
    servers: serversFrom({
      memory: nodeServer(MEMORY_SERVER, [], {
        env: { MEMORY_FILE_PATH: '${SANDGATE_WORKDIR}/memory.jsonl' },
        sandgate: { scope: 'per-user', allowUsers: ['*'], description: 'A knowledge graph that remembers things' },
      }),
      everything: nodeServer(EVERYTHING_SERVER, ['stdio'], { sandgate: { allowUsers: ['alice'], denyTools: ['get-env'] } }),
    }),
    dataDir,
    ...hubHomes(dataDir, store.db),
    credentials: createCredentialStore(store.db, loadOrCreateCredentialsKey(dataDir)),
  });
  dirs = createToolsDirs({ hub, dataDir, regenerateDelayMs: 50 });
  aliceTools = await dirs.toolsDirFor(alice);
  const handler = createBridgeHandler(hub, (e) => void audit.push(e));
  bridge = await startBridgeSocket(handler, alice, EXEC_ID, path.join(dataDir, 'bridge.sock'));
});

afterAll(async () => {
  await bridge?.close();
  dirs?.close();
  await hub?.close();
  await store?.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

const sandboxEnv = () => ({
  PATH: process.env.PATH ?? '/usr/bin:/bin',
  HOME: dataDir,
  SANDGATE_BRIDGE: bridge.path,
  SANDGATE_EXEC_ID: EXEC_ID,
  DENO_DIR: path.join(dataDir, 'deno'),
  DENO_NO_UPDATE_CHECK: '1',
  NO_COLOR: '1',
  PYTHONPATH: path.join(aliceTools, 'python'),
  PYTHONDONTWRITEBYTECODE: '1',
});

async function deno(code: string): Promise<string> {
  const file = path.join(dataDir, `main-${Math.random().toString(36).slice(2)}.ts`);
  // Inside a sandbox /tools is the mount; here it is the user's generated directory.
  fs.writeFileSync(file, code.replaceAll('/tools/', `${aliceTools}/`));
  const sock = bridge.path;
  const { stdout } = await run(
    DENO_BIN,
    [
      'run',
      '--no-prompt',
      `--allow-read=${aliceTools},${file},${sock}`,
      `--allow-write=${sock}`,
      `--allow-net=unix:${sock}`,
      '--allow-env=SANDGATE_BRIDGE,SANDGATE_EXEC_ID',
      file,
    ],
    { env: sandboxEnv() },
  );
  return stdout;
}

async function python(code: string): Promise<string> {
  const { stdout } = await run('python3', ['-c', code], { env: sandboxEnv() });
  return stdout;
}

describe('in-sandbox tool libraries against real npm MCP servers', () => {
  it('generates /tools with only the servers the user may use, and it type-checks and compiles', async () => {
    const servers = fs.readdirSync(path.join(aliceTools, 'servers')).sort();
    expect(servers).toEqual(['README.md', 'everything', 'memory']);
    expect(fs.existsSync(path.join(aliceTools, 'servers/memory/create_entities.ts'))).toBe(true);
    expect(fs.existsSync(path.join(aliceTools, 'servers/everything/get-env.ts'))).toBe(false); // denied tool: no wrapper
    expect(fs.existsSync(path.join(aliceTools, 'sandgate.ts'))).toBe(true);
    expect(fs.statSync(path.join(aliceTools, 'servers/memory/index.ts')).mode & 0o777).toBe(0o644);

    const bobTools = await dirs.toolsDirFor(bob);
    expect(fs.readdirSync(path.join(bobTools, 'servers')).sort()).toEqual(['README.md', 'memory']);
    expect(fs.existsSync(path.join(bobTools, 'python/sandgate_tools/servers/everything'))).toBe(false);

    const indexes = ['memory', 'everything'].map((s) => path.join(aliceTools, 'servers', s, 'index.ts'));
    await run(DENO_BIN, ['check', '--quiet', ...indexes, path.join(aliceTools, 'sandgate.ts')], { env: sandboxEnv() });
    const py = ['python/sandgate_tools/__init__.py', 'python/sandgate_tools/servers/__init__.py', 'python/sandgate_tools/servers/memory/__init__.py', 'python/sandgate_tools/servers/everything/__init__.py'];
    await run('python3', ['-m', 'py_compile', ...py.map((p) => path.join(aliceTools, p))], { env: { ...sandboxEnv(), PYTHONPYCACHEPREFIX: path.join(dataDir, 'pyc') } });
  });

  it('calls server-memory from TypeScript through the typed wrappers', async () => {
    const out = await deno(`
      import { createEntities, readGraph, searchNodes } from "/tools/servers/memory/index.ts";
      import { callMCPTool, listTools, describeTool, ToolError } from "/tools/sandgate.ts";
      await createEntities({ entities: [{ name: "deno", entityType: "runtime", observations: ["runs TypeScript"] }] });
      const graph = await readGraph();
      const found = await searchNodes({ query: "TypeScript" });
      const tools = await listTools("memory");
      const d = await describeTool("memory", "create_entities");
      const echo = await callMCPTool("everything", "echo", { message: "hi from deno" });
      let err = "";
      try { await callMCPTool("everything", "get-sum", { a: "x", b: 1 }); } catch (e) { err = (e instanceof ToolError) + ":" + (e as Error).message; }
      let denied = "";
      try { await callMCPTool("everything", "get-env", {}); } catch (e) { denied = (e as Error).message; }
      console.log(JSON.stringify({ graph, found: found.entities.map((e: { name: string }) => e.name), tools: tools.map((t) => t.tool), d, echo, err, denied }));
    `);
    const r = JSON.parse(out);
    expect(r.graph.entities).toEqual([{ name: 'deno', entityType: 'runtime', observations: ['runs TypeScript'] }]);
    expect(r.found).toEqual(['deno']);
    expect(r.tools).toContain('create_entities');
    expect(r.d).toMatchObject({ server: 'memory', tool: 'create_entities', path: '/tools/servers/memory/create_entities.ts', function: 'createEntities', python: 'sandgate_tools.servers.memory.create_entities' });
    expect(r.d.inputSchema.properties.entities.type).toBe('array');
    expect(r.echo).toBe('Echo: hi from deno');
    expect(r.err).toMatch(/^true:everything\/get-sum: MCP error -32602: Input validation error: .*expected number/);
    expect(r.denied).toBe('tool "get-env" of upstream server "everything" is switched off by the admin');
  });

  it('calls server-memory from Python through the generated package', async () => {
    const out = await python(`
import json
from sandgate_tools import call_mcp_tool, list_tools, describe_tool, ToolError
from sandgate_tools.servers.memory import create_entities, read_graph, add_observations
from sandgate_tools.servers.everything import get_sum, get_structured_content
create_entities([{"name": "python", "entityType": "language", "observations": ["has a GIL"]}])
add_observations(observations=[{"entityName": "python", "contents": ["3.11 here"]}])
graph = read_graph()
names = sorted(e["name"] for e in graph["entities"])
obs = [e["observations"] for e in graph["entities"] if e["name"] == "python"][0]
weather = get_structured_content(location="New York")
errors = []
for bad in (lambda: get_sum(a="x", b=1), lambda: call_mcp_tool("nope", "x", {}), lambda: call_mcp_tool("memory", "drop_database", {})):
    try:
        bad()
    except ToolError as e:
        errors.append(str(e))
listed = sorted({t["server"] for t in list_tools()})
d = describe_tool("everything", "get-sum")
print(json.dumps({"names": names, "obs": obs, "weather": sorted(weather), "sum": get_sum(a=2, b=3), "errors": errors, "listed": listed, "d": d["python"]}))
`);
    const r = JSON.parse(out);
    expect(r.names).toEqual(['deno', 'python']); // alice's per-user graph, shared by her TS and Python code
    expect(r.obs).toEqual(['has a GIL', '3.11 here']);
    expect(r.weather).toEqual(['conditions', 'humidity', 'temperature']);
    expect(r.sum).toBe('The sum of 2 and 3 is 5.');
    expect(r.errors[0]).toMatch(/^everything\/get-sum: .*expected number/);
    expect(r.errors[1]).toBe('there is no upstream server named "nope"; listTools() shows the servers you may use');
    expect(r.errors[2]).toMatch(/^upstream server "memory" has no tool "drop_database"; its tools are: create_entities/);
    expect(r.listed).toEqual(['everything', 'memory']);
    expect(r.d).toBe('sandgate_tools.servers.everything.get_sum');
  });

  it('refuses calls from outside the running execution, and reports an unreachable bridge readably', async () => {
    const { stdout } = await run('python3', ['-c', 'from sandgate_tools import call_mcp_tool, ToolError\ntry:\n  call_mcp_tool("memory", "read_graph", {})\nexcept ToolError as e:\n  print(e)'], {
      env: { ...sandboxEnv(), SANDGATE_EXEC_ID: 'stale' },
    });
    expect(stdout.trim()).toBe('no running execution "stale"');
    const gone = await run('python3', ['-c', 'from sandgate_tools import call_mcp_tool, ToolError\ntry:\n  call_mcp_tool("memory", "read_graph", {})\nexcept ToolError as e:\n  print(e)'], {
      env: { ...sandboxEnv(), SANDGATE_BRIDGE: path.join(dataDir, 'absent.sock') },
    });
    expect(gone.stdout.trim()).toMatch(/^cannot reach the sandgate bridge at .*absent\.sock: No such file or directory$/);
  });

  it('audits every upstream call with argument shapes, never values', () => {
    const calls = audit.map((a) => `${a.tool}:${a.outcome}`);
    expect(calls).toContain('memory/create_entities:ok');
    expect(calls).toContain('everything/get-sum:error');
    expect(calls).toContain('everything/get-env:denied');
    // A server that does not exist is named by code, not by the admin: the log keeps no such name.
    expect(calls).toContain('?/?:denied');
    expect(JSON.stringify(audit.map((a) => [a.method, a.tool]))).not.toContain('nope');
    const create = audit.find((a) => a.tool === 'memory/create_entities')!;
    expect(create).toMatchObject({ userId: alice.userId, kind: 'upstream', method: 'memory' });
    expect(JSON.stringify(create.argsShape)).not.toContain('runs TypeScript');
    expect(create.durationMs).toBeGreaterThan(0);
    expect(audit.find((a) => a.tool === 'everything/get-env')).toMatchObject({ errorClass: 'denied' });
  });

  it('limits upstream calls per user, and audits a run of refusals as one row', async () => {
    const rows: UpstreamAuditEntry[] = [];
    const limited = createBridgeHandler(hub, (e) => void rows.push(e), { rateLimiter: new MemoryRateLimiter({ perMinute: 60, burst: 2 }) });
    const call = (owner: SandboxOwner) => limited(owner, 'tools/call', { server: 'memory', tool: 'read_graph', arguments: {} });
    await call(alice);
    await call(alice);
    for (let i = 0; i < 5; i++) await expect(call(alice)).rejects.toThrow(/too many upstream calls: retry after \d+ s/);
    await call(bob); // another user's calls are their own
    expect(rows.map((r) => r.outcome)).toEqual(['ok', 'ok', 'rate_limited', 'ok']);
  });

  it('ranks catalogue searches and respects who may see what', async () => {
    const catalog = createToolCatalog(hub);
    const hits = await catalog.search(alice, 'add observations to an entity', 'descriptions', 3);
    expect(hits[0]).toMatchObject({ server: 'memory', tool: 'add_observations', path: '/tools/servers/memory/add_observations.ts' });
    expect(hits[0]!.description).toContain('observations');
    expect(hits[0]!.inputSchema).toBeUndefined();

    const sum = await catalog.search(alice, 'sum two numbers', 'schemas', 1);
    expect(sum).toEqual([expect.objectContaining({ server: 'everything', tool: 'get-sum', inputSchema: expect.objectContaining({ type: 'object' }) })]);
    expect((await catalog.search(alice, 'echo', 'names', 5))[0]).toEqual({ server: 'everything', tool: 'echo', path: '/tools/servers/everything/echo.ts' });
    expect(await catalog.search(bob, 'echo', 'names', 5)).not.toContainEqual(expect.objectContaining({ server: 'everything' }));
    expect((await catalog.search(bob, '', 'names', 100)).every((e) => e.server === 'memory')).toBe(true);
    expect(await catalog.search(alice, 'get env', 'names', 20)).not.toContainEqual(expect.objectContaining({ tool: 'get-env' }));
  });
});
