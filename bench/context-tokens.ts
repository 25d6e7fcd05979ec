/**
 * Context tokens: what an MCP client puts in the model's context when it connects to
 * sandgate, against connecting to every upstream server directly.
 *   node --import tsx bench/context-tokens.ts
 *
 * Upstream side: real MCP servers from npm (dev dependencies), started over stdio
 * offline; for each, the server's instructions plus the JSON of its complete tools/list
 * result (every page), which is what a client loads. Sandgate side: sandgate's own
 * tools/list and instructions (with the built-in skills index), taken from its real MCP
 * server over an in-memory transport. Tokens are counted with the o200k_base encoding.
 *
 * It also prints what discovering tools on demand costs: one search_tools answer at
 * each detail level, through the real catalogue over the same upstream tools.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client as SandgateClient, InMemoryTransport } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { configFor } from '../src/config.js';
import type { ToolContext } from '../src/mcp/context.js';
import { buildInstructions } from '../src/skills/instructions.js';
import { createMcpServer } from '../src/mcp/server.js';
import { SkillsDir } from '../src/skills/skills.js';
import { formatEntries } from '../src/mcp/tools/search-tools.js';
import { createToolCatalog } from '../src/upstream/catalog.js';
import { UpstreamHub } from '../src/upstream/hub.js';
import { hubHomes, packageFile, serversFrom } from '../test/support/upstream.js';
import { openStore } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-tokens-'));
// Through the hub, each server runs as a uid of its own: it must reach its allowed folder.
fs.chmodSync(work, 0o711);
const allowedDir = path.join(work, 'files');
fs.mkdirSync(allowedDir, { mode: 0o755 });

/**
 * Real npm MCP servers (dev dependencies) that start offline and list their tools
 * without network access. Where a server insists on a credential at start, a dummy one
 * is given: listing tools never uses it.
 */
const DUMMY_SID = `AC${'0'.repeat(32)}/SK${'0'.repeat(32)}:dummy-secret`;
const UPSTREAM: Record<string, { pkg: string; file: string; args?: string[]; env?: Record<string, string> }> = {
  memory: { pkg: '@modelcontextprotocol/server-memory', file: 'dist/index.js' },
  everything: { pkg: '@modelcontextprotocol/server-everything', file: 'dist/index.js', args: ['stdio'] },
  filesystem: { pkg: '@modelcontextprotocol/server-filesystem', file: 'dist/index.js', args: [allowedDir] },
  'sequential-thinking': { pkg: '@modelcontextprotocol/server-sequential-thinking', file: 'dist/index.js' },
  github: { pkg: '@modelcontextprotocol/server-github', file: 'dist/index.js' },
  playwright: { pkg: '@playwright/mcp', file: 'cli.js', args: ['--headless', '--isolated'] },
  'chrome-devtools': { pkg: 'chrome-devtools-mcp', file: 'build/src/bin/chrome-devtools-mcp.js', args: ['--headless'] },
  notion: { pkg: '@notionhq/notion-mcp-server', file: 'bin/cli.mjs' },
  hubspot: { pkg: '@hubspot/mcp-server', file: 'dist/index.js', env: { PRIVATE_APP_ACCESS_TOKEN: 'dummy' } },
  tavily: { pkg: 'tavily-mcp', file: 'build/index.js', env: { TAVILY_API_KEY: 'tvly-dummy' } },
  twilio: { pkg: '@twilio-alpha/mcp', file: 'build/index.js', args: [DUMMY_SID] },
  digitalocean: { pkg: '@digitalocean/mcp', file: 'index.js', env: { DIGITALOCEAN_API_TOKEN: 'dummy' } },
};

/** The first servers, on their own: the smallest catalogue of >= 100 tools. */
const BASE = ['memory', 'everything', 'filesystem', 'github', 'playwright', 'notion'];

const mcpServers = Object.fromEntries(
  Object.entries(UPSTREAM).map(([name, s]) => [
    name,
    { command: process.execPath, args: [packageFile(s.pkg, s.file), ...(s.args ?? [])], env: s.env ?? {}, sandgate: { allowUsers: ['*'] } },
  ]),
);

interface Loaded {
  name: string;
  tools: Tool[];
  instructions: string;
}

/** What a client loads from one server it connects to directly. */
async function loadDirect(name: string, cfg: { command: string; args: string[]; env: Record<string, string> }): Promise<Loaded> {
  const client = new Client({ name: 'bench', version: '0' });
  const home = path.join(work, 'home', name);
  fs.mkdirSync(home, { recursive: true });
  await client.connect(new StdioClientTransport({ command: cfg.command, args: cfg.args, env: { PATH: process.env.PATH ?? '', HOME: home, ...cfg.env }, stderr: 'ignore', cwd: home }));
  const tools: Tool[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.listTools(cursor ? { cursor } : undefined);
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  const instructions = client.getInstructions() ?? '';
  await client.close();
  return { name, tools, instructions };
}

const tok = (value: unknown) => countTokens(typeof value === 'string' ? value : JSON.stringify(value));

async function main(): Promise<void> {
  // ---- upstream, loaded directly
  const direct: Loaded[] = [];
  for (const [name, cfg] of Object.entries(mcpServers)) {
    const t0 = performance.now();
    try {
      direct.push(await loadDirect(name, cfg));
    } catch (e) {
      console.log(`  ${name}: could not be listed (${(e as Error).message}); left out of both sides`);
      delete mcpServers[name];
    }
    if (process.env.BENCH_DEBUG) console.error(`${name}: ${Math.round(performance.now() - t0)} ms`);
  }
  const toolCount = direct.reduce((n, s) => n + s.tools.length, 0);

  console.log('Upstream MCP servers loaded directly (instructions + JSON of tools/list, o200k_base tokens):');
  let upstreamTokens = 0;
  for (const s of direct) {
    const t = tok({ tools: s.tools }) + (s.instructions ? tok(s.instructions) : 0);
    upstreamTokens += t;
    console.log(`  ${s.name.padEnd(20)} ${String(s.tools.length).padStart(4)} tools ${String(t).padStart(8)} tokens`);
  }
  console.log(`  ${'total'.padEnd(20)} ${String(toolCount).padStart(4)} tools ${String(upstreamTokens).padStart(8)} tokens`);

  // ---- sandgate: its own server, over the same upstream servers
  const store = await openStore({ dataDir: path.join(work, 'data') }, MIGRATIONS);
  const hub = new UpstreamHub({ servers: serversFrom(mcpServers), dataDir: path.join(work, 'data'), ...hubHomes(path.join(work, 'data'), store.db) });
  const catalog = createToolCatalog(hub);
  const config = configFor({ SANDGATE_DATA_DIR: work });
  const skills = await new SkillsDir().skills();
  const instructions = buildInstructions(skills);
  // Listing tools touches only the config; nothing here executes code or reads files.
  const ctx = { config, catalog } as unknown as ToolContext;
  const server = createMcpServer(ctx, { instructions });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new SandgateClient({ name: 'bench', version: '0' });
  await client.connect(clientSide);
  const own = await client.listTools();
  const sandgateInstructions = client.getInstructions() ?? '';
  const sandgateTokens = tok({ tools: own.tools }) + tok(sandgateInstructions);
  console.log('');
  console.log(`sandgate (what a client loads): ${own.tools.length} tools (${own.tools.map((t) => t.name).join(', ')}) + instructions with ${skills.length} skills`);
  console.log(`  tools/list ${tok({ tools: own.tools })} tokens + instructions ${tok(sandgateInstructions)} tokens = ${sandgateTokens} tokens`);

  const pct = (upstream: number) => (100 * (1 - sandgateTokens / upstream)).toFixed(2);
  const base = direct.filter((s) => BASE.includes(s.name));
  const baseTools = base.reduce((n, s) => n + s.tools.length, 0);
  const baseTokens = base.reduce((n, s) => n + tok({ tools: s.tools }) + (s.instructions ? tok(s.instructions) : 0), 0);
  console.log('');
  console.log(`Context tokens at connect, all ${direct.length} servers: ${upstreamTokens} (${toolCount} upstream tools) -> ${sandgateTokens} (sandgate): ${pct(upstreamTokens)}% fewer`);
  console.log(`  the first ${base.length} servers only: ${baseTokens} (${baseTools} tools) -> ${sandgateTokens}: ${pct(baseTokens)}% fewer`);
  console.log(`  sandgate's cost is fixed: >= 99% fewer holds from ${Math.ceil(sandgateTokens / 0.01)} upstream tokens on`);
  if (toolCount < 100) console.log(`WARNING: only ${toolCount} upstream tools (the figure is meant for >= 100)`);

  // ---- on demand: what discovering the tools for one task costs
  const owner = { userId: 1, name: 'bench' };
  console.log('');
  console.log('On demand (search_tools answers through the real catalogue):');
  for (const [query, detail, limit] of [
    ['create a github issue', 'names', 10],
    ['create a github issue', 'descriptions', 10],
    ['create a github issue', 'schemas', 2],
    ['take a screenshot of a web page', 'descriptions', 5],
  ] as const) {
    const entries = await catalog.search(owner, query, detail, limit);
    const text = formatEntries(entries, detail);
    console.log(`  "${query}" ${detail}/${limit}: ${String(tok(text)).padStart(5)} tokens; top hit ${entries[0] ? `${entries[0].server}/${entries[0].tool}` : '(none)'}`);
  }

  await client.close();
  await server.close();
  await hub.close();
  await store.close();
  fs.rmSync(work, { recursive: true, force: true });
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
