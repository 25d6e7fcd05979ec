/**
 * sandgate's tool library for TypeScript / JavaScript code in the sandbox (Deno).
 *
 * ```ts
 * import { callMCPTool, listTools, describeTool } from "/tools/sandgate.ts";
 * const tools = await listTools();                       // what you may call
 * const info = await describeTool("memory", "read_graph"); // its description and input schema
 * const graph = await callMCPTool("memory", "read_graph", {});
 * ```
 *
 * Typed wrappers for every tool live in /tools/servers/<server>/ (see
 * /tools/servers/README.md); they call `callMCPTool` for you.
 *
 * How it works: each call sends one JSON line to the sandgate runner over the Unix socket
 * at $SANDGATE_BRIDGE; the gateway checks that you may call the tool, calls the upstream
 * MCP server (with credentials that never enter this sandbox), records the call and
 * answers with one JSON line. Every failure arrives here as a thrown ToolError whose
 * message says what went wrong.
 */

const DEFAULT_BRIDGE = "/tmp/.sandgate/bridge.sock";

/** A failed tool call: the upstream tool's own error, or the gateway's reason. */
export class ToolError extends Error {
  override name = "ToolError";
  constructor(
    message: string,
    /** Server and tool of a failed call, when known. */
    readonly server?: string,
    readonly tool?: string,
    /** The tool's result when the tool itself reported the error (`isError: true`). */
    readonly result?: CallToolResult,
  ) {
    super(message);
  }
}

/** One content block of an MCP tool result. */
export type ContentBlock =
  | { type: "text"; text: string }
  | { type: "image" | "audio"; data: string; mimeType: string }
  | { type: "resource"; resource: { uri: string; mimeType?: string; text?: string; blob?: string } }
  | { type: "resource_link"; uri: string; name: string; mimeType?: string; description?: string }
  | { type: string; [key: string]: unknown };

/** An MCP tool result, as the upstream server sent it. */
export interface CallToolResult {
  content: ContentBlock[];
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
  [key: string]: unknown;
}

/** A tool you may call. */
export interface ToolInfo {
  server: string;
  tool: string;
  title?: string;
  description?: string;
  /** Its typed wrapper, e.g. /tools/servers/memory/read_graph.ts */
  path: string;
  /** TypeScript function name exported by `path`. */
  function: string;
  /** The Python function, e.g. sandgate_tools.servers.memory.read_graph */
  python: string;
}

/** A tool with its JSON schemas. */
export interface ToolDescription extends ToolInfo {
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
}

function env(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined; // no --allow-env for it: fall back to the default
  }
}

/** Sends one request over the bridge and returns its result; throws ToolError on failure. */
export async function bridgeRequest(method: string, params: unknown): Promise<unknown> {
  const path = env("SANDGATE_BRIDGE") || DEFAULT_BRIDGE;
  let conn: Deno.Conn;
  try {
    conn = await Deno.connect({ transport: "unix", path });
  } catch (e) {
    throw new ToolError(`cannot reach the sandgate bridge at ${path}: ${(e as Error).message}`);
  }
  const chunks: Uint8Array[] = [];
  try {
    const line = JSON.stringify({ method, params, execId: env("SANDGATE_EXEC_ID") ?? "" }) + "\n";
    const bytes = new TextEncoder().encode(line);
    for (let off = 0; off < bytes.length;) off += await conn.write(bytes.subarray(off));
    const buf = new Uint8Array(64 * 1024);
    while (true) {
      const n = await conn.read(buf);
      if (n === null) break;
      const chunk = buf.slice(0, n);
      chunks.push(chunk);
      if (chunk.includes(10)) break;
    }
  } finally {
    try {
      conn.close();
    } catch {
      // already closed by the other side
    }
  }
  const text = new TextDecoder().decode(concat(chunks));
  const first = text.split("\n", 1)[0]!;
  if (!first.trim()) throw new ToolError("the sandgate bridge closed the connection without an answer");
  let reply: { ok: boolean; result?: unknown; error?: string };
  try {
    reply = JSON.parse(first);
  } catch {
    throw new ToolError(`the sandgate bridge sent something that is not JSON: ${first.slice(0, 200)}`);
  }
  if (!reply.ok) throw new ToolError(reply.error || "the gateway reported an error without a message");
  return reply.result;
}

function concat(chunks: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/**
 * The useful value of a tool result: its structured content when there is some, else
 * the parsed JSON of a single text block (or the text itself), else the content list.
 */
export function toolResultValue(result: CallToolResult): unknown {
  if (result.structuredContent !== undefined) return result.structuredContent;
  const content = result.content ?? [];
  if (content.length === 0) return null;
  if (content.length === 1 && content[0]!.type === "text") {
    const text = (content[0] as { text: string }).text;
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  }
  return content;
}

function errorText(result: CallToolResult): string {
  const texts = (result.content ?? []).filter((c) => c.type === "text").map((c) => (c as { text: string }).text);
  return texts.join("\n").trim() || "the tool reported an error without a message";
}

/**
 * Calls a tool of an upstream MCP server. Returns `toolResultValue` of its result, or
 * the full result with `{ raw: true }`. Throws ToolError when the tool reports an error,
 * when you may not call it, or when the server cannot be reached.
 */
// deno-lint-ignore no-explicit-any
export async function callMCPTool<T = any>(
  server: string,
  tool: string,
  args: object = {},
  options: { raw?: boolean } = {},
): Promise<T> {
  let result: CallToolResult;
  try {
    result = (await bridgeRequest("tools/call", { server, tool, arguments: args })) as CallToolResult;
  } catch (e) {
    if (e instanceof ToolError) throw new ToolError(e.message, server, tool);
    throw e;
  }
  if (options.raw) return result as T;
  if (result.isError) throw new ToolError(`${server}/${tool}: ${errorText(result)}`, server, tool, result);
  return toolResultValue(result) as T;
}

/** The tools you may call, of one server or of all. Servers that cannot be reached now are reported on stderr. */
export async function listTools(server?: string): Promise<ToolInfo[]> {
  const r = (await bridgeRequest("tools/list", server === undefined ? {} : { server })) as {
    tools: ToolInfo[];
    unavailable?: { server: string; error: string }[];
  };
  for (const u of r.unavailable ?? []) console.warn(`sandgate: upstream server "${u.server}" is unavailable: ${u.error}`);
  return r.tools;
}

/** One tool's description and JSON schemas. */
export async function describeTool(server: string, tool: string): Promise<ToolDescription> {
  return (await bridgeRequest("tools/describe", { server, tool })) as ToolDescription;
}
