/**
 * The MCP server one authenticated caller talks to: a small fixed set of tools
 * (execute_code, read_file, write_file, list_files, search_tools), their workspace as
 * resources, and instructions carrying the skills index. Everything is bound to the
 * caller's user, never to an MCP session, so a new server per request (stateless
 * Streamable HTTP) sees exactly the same sandbox and files as a long-lived one.
 */
import { traceTransport } from './traced-transport.js';
import { McpServer, ProtocolError, ProtocolErrorCode, Server, type Transport } from '@modelcontextprotocol/server';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/server/validators/ajv';
import { toModel, type McpDeps, type ToolContext } from './context.js';
import { buildInstructions } from '../skills/instructions.js';
import { registerWorkspaceResources } from './resources.js';
import { registerSkillPrompts, registerSkillsExtension } from './skills.js';
import { registerTasksExtension } from './tasks/extension.js';
import { registerRunView } from './ui/run-view.js';
import { skillsFor } from '../skills/skills.js';
import { executeCodeInput, registerExecuteCode } from './tools/execute-code.js';
import { LIST_FILES_INPUT, READ_FILE_INPUT, registerListFiles, registerReadFile, registerWriteFile, WRITE_FILE_INPUT } from './tools/files.js';
import { registerSearchTools, SEARCH_TOOLS_INPUT } from './tools/search-tools.js';
import type { Config } from '../config.js';
import { ownerOf, type Caller } from '../auth/caller.js';

export const SERVER_INFO = { name: 'sandgate', title: 'sandgate', version: '0.1.0' } as const;

/** One validator for every per-request server: building an Ajv instance costs ~1 ms. */
const SHARED_VALIDATOR = new AjvJsonSchemaValidator();

type Dispatch = (request: unknown, ctx: unknown) => Promise<unknown>;
type WrapsHandlers = { _wrapHandler(method: string, handler: Dispatch): Dispatch };

/**
 * A request whose params do not fit its method's schema is the client's mistake: -32602
 * Invalid params. The SDK (2.4) answers it -32603 Internal error for MCP's own methods
 * (resources/read without a uri, logging/setLevel with no level…): its parse throws a
 * plain Error out of the dispatch step it hands `_wrapHandler`
 * (modelcontextprotocol/typescript-sdk#2284). That step throws at once only for the
 * parse (every handler it goes on to call here is async or cannot throw); a handler's own
 * failure rejects and stays an internal error. Patched on the prototype, as the Server
 * registers initialize and logging/setLevel in its constructor. Remove once the SDK
 * answers -32602 itself.
 */
const sdkWrap = (Server.prototype as unknown as WrapsHandlers)._wrapHandler;
(Server.prototype as unknown as WrapsHandlers)._wrapHandler = function wrapHandler(this: WrapsHandlers, method, handler) {
  return sdkWrap.call(this, method, (request, ctx) => {
    try {
      return handler(request, ctx);
    } catch (e) {
      if (e instanceof ProtocolError) throw e;
      throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Invalid params for ${method}: ${issuesOf(e)}`);
    }
  });
};

/** A schema failure's issues as one line (`params.uri: Invalid input…`), or its message as it is. */
function issuesOf(e: unknown): string {
  const message = e instanceof Error ? e.message : String(e);
  try {
    const issues = JSON.parse(message) as { path?: unknown[]; message?: string }[];
    return issues.map((i) => `${(i.path ?? []).join('.') || '(request)'}: ${i.message}`).join('; ');
  } catch {
    return message;
  }
}

export const TOOL_NAMES = ['execute_code', 'read_file', 'write_file', 'list_files', 'search_tools'] as const;
export type ToolName = (typeof TOOL_NAMES)[number];

/** How one server registers each tool. */
const TOOLS: Record<ToolName, (server: McpServer, ctx: ToolContext) => void> = {
  execute_code: registerExecuteCode,
  read_file: registerReadFile,
  write_file: registerWriteFile,
  list_files: registerListFiles,
  search_tools: registerSearchTools,
};

/** Each tool's input schema (execute_code's limits come from the configuration). */
const INPUTS: Record<ToolName, (config: Config) => { '~standard': { jsonSchema: { input(o: { target: 'draft-2020-12' }): Record<string, unknown> } } }> = {
  execute_code: executeCodeInput,
  read_file: () => READ_FILE_INPUT,
  write_file: () => WRITE_FILE_INPUT,
  list_files: () => LIST_FILES_INPUT,
  search_tools: () => SEARCH_TOOLS_INPUT,
};

/**
 * The JSON Schema of a tool's input, for the audit log (which keeps the keys it declares
 * only); undefined for a name that is not one of the tools.
 */
export function toolInputSchema(config: Config, name: string): Record<string, unknown> | undefined {
  if (!Object.hasOwn(INPUTS, name)) return undefined;
  return INPUTS[name as ToolName](config)['~standard'].jsonSchema.input({ target: 'draft-2020-12' });
}

/** The context of one caller's requests; `protocolVersion` as the client negotiated it. */
export function toolContext(deps: McpDeps, caller: Caller, protocolVersion?: string): ToolContext {
  return { ...deps, caller, owner: ownerOf(caller), protocolVersion, unknownTokens: new Set() };
}

/**
 * The instructions for one user: the usage preamble and the index of built-in skills
 * plus the user's own (/workspace/skills). Text passes the model boundary.
 */
export async function instructionsFor(ctx: ToolContext): Promise<string> {
  return toModel(ctx, buildInstructions(await skillsFor(ctx, ctx.owner)));
}

/**
 * An McpServer that lets its owner see each transport before the server takes it over
 * (the audit log observes every message that way). Protocol.connect keeps callbacks
 * already set on a transport and calls them first.
 */
class ObservedMcpServer extends McpServer {
  constructor(
    options: ConstructorParameters<typeof McpServer>[1],
    private readonly beforeConnect?: (transport: Transport) => void,
  ) {
    super(SERVER_INFO, options);
  }

  override async connect(transport: Transport): Promise<void> {
    this.beforeConnect?.(transport);
    await super.connect(transport);
    traceTransport(transport);
  }
}

export interface CreateServerOptions {
  /**
   * Only needed when answering `initialize` (2025 protocol versions) or `server/discover`
   * (2026-07-28); computing it reads the skills, so callers pass it only then.
   */
  instructions?: string;
  /** Called with each transport the server is connected to, before it is started. */
  beforeConnect?: (transport: Transport) => void;
  /**
   * What the requests this server will answer can reach (see `partsFor`); everything
   * when undefined. A server lives for one HTTP request, so it need not build the rest.
   */
  parts?: ServerParts;
}

/** The tools, and whether the workspace resources, one server registers. */
export interface ServerParts {
  tools: ReadonlySet<ToolName>;
  resources: boolean;
  /** The skills as prompts and through the skills extension. */
  skills?: boolean;
  /** tasks/get, tasks/update, tasks/cancel (the tasks extension). */
  tasks?: boolean;
}

const EVERYTHING: ServerParts = { tools: new Set(TOOL_NAMES), resources: true, skills: true, tasks: true };
const TASKS_ONLY: ServerParts = { tools: new Set(), resources: false, tasks: true };
const NOTHING: ServerParts = { tools: new Set(), resources: false };

/**
 * What a set of JSON-RPC requests can reach: a tools/call needs its own tool only, and
 * resources/* and completion/complete need the resources (the workspace's, and skill:// files). Anything else (lists,
 * initialize, server/discover, ping) gets everything, so its answer is the full catalogue.
 * Registering all five tools and the resource template for each request cost about a
 * tenth of the gateway's CPU per MCP call.
 */
export function partsFor(requests: { method: string; params?: unknown }[]): ServerParts {
  const tools = new Set<ToolName>();
  let resources = false;
  if (requests.length && requests.every((r) => r.method.startsWith('tasks/'))) return TASKS_ONLY;
  for (const r of requests) {
    if (r.method === 'tools/call') {
      const name = (r.params as { name?: unknown } | undefined)?.name;
      if (typeof name === 'string' && Object.hasOwn(TOOLS, name)) tools.add(name as ToolName);
    } else if (r.method.startsWith('resources/') || r.method === 'completion/complete') {
      resources = true;
    } else {
      return EVERYTHING;
    }
  }
  return tools.size || resources ? { tools, resources, skills: resources } : requests.length ? NOTHING : EVERYTHING;
}

/**
 * How long a 2026-07-28 client may keep each list, and whether a shared cache may (cacheScope).
 * The tools and the resource templates are the same for every user of this gateway; the
 * files, the skills (as prompts) and the instructions in server/discover are the user's own.
 */
export const CACHE_HINTS = {
  'tools/list': { ttlMs: 300_000, cacheScope: 'public' },
  'resources/templates/list': { ttlMs: 3_600_000, cacheScope: 'public' },
  'prompts/list': { ttlMs: 60_000, cacheScope: 'private' },
  'resources/list': { ttlMs: 10_000, cacheScope: 'private' },
  'server/discover': { ttlMs: 60_000, cacheScope: 'private' },
  'resources/read': { ttlMs: 0, cacheScope: 'private' },
} as const;

/** Builds the server for one caller. */
export function createMcpServer(ctx: ToolContext, opts: CreateServerOptions = {}): McpServer {
  const server = new ObservedMcpServer(
    {
      capabilities: { tools: { listChanged: false }, resources: { listChanged: false }, completions: {} },
      instructions: opts.instructions,
      jsonSchemaValidator: SHARED_VALIDATOR,
      cacheHints: CACHE_HINTS,
    },
    opts.beforeConnect,
  );
  const { tools, resources, skills, tasks } = opts.parts ?? EVERYTHING;
  for (const name of tools) TOOLS[name](server, ctx);
  if (resources) {
    registerWorkspaceResources(server, ctx);
    registerRunView(server);
  }
  if (skills) {
    registerSkillPrompts(server, ctx);
    registerSkillsExtension(server, ctx);
  }
  if (tasks && ctx.tasks) registerTasksExtension(server, ctx, ctx.tasks);
  return server;
}
