/**
 * The one way to the gateway's tools: an McpServer bound to one caller, with the audit
 * log attached to its transport. The /mcp endpoint builds one per HTTP request
 * (src/http/mcp-endpoint.ts); the built-in agent holds one per conversation, reached by
 * an MCP client in the same process over the SDK's in-memory transport
 * (`connectInProcess`). Both get the same tools, checks, PII boundary (the caller's
 * scope), audit rows and cancellation: the agent is one more client of the same server.
 */
import { Client, InMemoryTransport, LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/client';
import type { McpServer } from '@modelcontextprotocol/server';
import { callerColumns, recordAudit } from '../audit/audit.js';
import type { Caller } from '../auth/caller.js';
import { auditTransport, type Outcome, type Timing } from './audited-transport.js';
import type { McpDeps } from './context.js';
import { createMcpServer, instructionsFor, toolContext, toolInputSchema, type ServerParts } from './server.js';

export interface ServeOptions {
  /** MCP-Protocol-Version the client negotiated (resource links need 2025-06-18 or later). */
  protocolVersion?: string;
  /** Whether the server must carry its instructions (it answers `initialize` or `server/discover`). */
  withInstructions?: boolean;
  /** What the requests can reach (src/mcp/server.ts `partsFor`); everything when absent. */
  parts?: ServerParts;
  /** When the HTTP exchange arrived: audit durations then include authentication. */
  arrival?: { at: number; t0: number };
}

/** Writes one tool-path audit row for a caller; a failing write is logged, never thrown: the returned promise always resolves. */
export async function auditFor(deps: Pick<McpDeps, 'db' | 'logger'>, caller: Caller, o: Outcome, timing: Timing): Promise<void> {
  try {
    await recordAudit(deps.db, { ...o, ...callerColumns(caller), kind: 'mcp', ts: timing.ts, durationMs: timing.durationMs });
  } catch (err) {
    deps.logger.error({ err }, 'could not write an audit entry');
  }
}

/** The McpServer for one caller, audited. */
export async function serverForCaller(deps: McpDeps, caller: Caller, opts: ServeOptions = {}): Promise<McpServer> {
  const ctx = toolContext(deps, caller, opts.protocolVersion);
  const schemaOf = (tool: string) => toolInputSchema(deps.config, tool);
  return createMcpServer(ctx, {
    instructions: opts.withInstructions ? await instructionsFor(ctx) : undefined,
    parts: opts.parts,
    beforeConnect: (transport) => auditTransport(transport, (o, timing) => void auditFor(deps, caller, o, timing), { schemaOf, arrival: opts.arrival }),
  });
}

export interface InProcessConnection {
  /** An MCP client of the caller's own server: listTools, callTool (with an AbortSignal to cancel), resources. */
  client: Client;
  /** The instructions the server gave at connect (skills index included). */
  instructions?: string;
  close(): Promise<void>;
}

/**
 * Connects an MCP client in this process to a server for `caller` (typically a
 * conversation of the built-in agent): the same tools, checks and audit as over /mcp,
 * without HTTP in between.
 */
export async function connectInProcess(deps: McpDeps, caller: Caller, clientInfo = { name: 'sandgate-agent', version: '1' }): Promise<InProcessConnection> {
  const server = await serverForCaller(deps, caller, { protocolVersion: LATEST_PROTOCOL_VERSION, withInstructions: true });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client(clientInfo, { capabilities: {} });
  await client.connect(clientSide);
  return {
    client,
    instructions: client.getInstructions(),
    async close() {
      await client.close();
      await server.close();
    },
  };
}
