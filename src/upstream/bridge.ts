/**
 * The gateway's side of the in-sandbox tool channel: answers `call` events that code in
 * a sandbox raises through the runner (tools/sandgate.ts, tools/python/sandgate_tools).
 *
 *   tools/call      {server, tool, arguments}  → the upstream CallToolResult
 *   tools/list      {server?}                  → {tools: ToolInfo[], unavailable: [...]}
 *   tools/describe  {server, tool}             → ToolInfo + inputSchema, outputSchema
 *
 * A thrown error becomes `{ok: false, error: message}` inside the sandbox, so every
 * message here is written for the code that made the call. Every tools/call is audited
 * (argument shapes, never values), denied and failed ones included.
 */
import { z } from 'zod';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { argsShape } from '../audit/audit.js';
import type { Logger } from '../logger.js';
import type { BridgeHandler, SandboxOwner } from '../sandboxes/types.js';
import { userBudgetKey, type RateLimiter } from '../limits/rate-limit.js';
import { UpstreamError } from './errors.js';
import type { UpstreamHub } from './hub.js';
import type { UpstreamServerConfig } from './config.js';
import { toolLocations } from './wrappers.js';

export interface UpstreamAuditEntry {
  userId: number;
  kind: 'upstream';
  /** The server name (the audit log's `method` for upstream calls). */
  method: string;
  /** `server/tool` */
  tool: string;
  /** Shape of the arguments (src/audit/audit.ts `argsShape`); never their values. */
  argsShape: unknown;
  durationMs: number;
  outcome: 'ok' | 'error' | 'denied' | 'rate_limited';
  /** The readable message the sandbox got. */
  error?: string;
  /** A class, not a message: an UpstreamErrorReason, or `tool_error` for `isError` results. */
  errorClass?: string;
}

/** Where upstream calls are recorded; a write it returns runs on its own, off the call's path. */
export type UpstreamAudit = (entry: UpstreamAuditEntry) => void | Promise<void>;

/** A tool as `tools/list` reports it to code in the sandbox. */
export interface BridgeToolInfo {
  server: string;
  tool: string;
  title?: string;
  description?: string;
  path: string;
  function: string;
  python: string;
}

const callParams = z.object({
  server: z.string().min(1),
  tool: z.string().min(1),
  arguments: z.record(z.string(), z.unknown()).optional(),
});
const listParams = z.object({ server: z.string().min(1).optional() }).optional();
const describeParams = z.object({ server: z.string().min(1), tool: z.string().min(1) });

function parse<T>(schema: z.ZodType<T>, params: unknown, method: string, usage: string): T {
  const r = schema.safeParse(params ?? undefined);
  if (!r.success) throw new Error(`bad parameters for ${method}: expected ${usage}`);
  return r.data;
}

export interface BridgeOptions {
  logger?: Logger;
  /**
   * Upstream calls each user may make, as MCP requests are limited per token: code in a
   * loop would otherwise call (and fill the audit log) without bound. Absent: no limit.
   */
  rateLimiter?: RateLimiter;
}

export function createBridgeHandler(hub: UpstreamHub, audit: UpstreamAudit, opts: BridgeOptions = {}): BridgeHandler {
  const info = (server: UpstreamServerConfig, tool: Tool, all: readonly Tool[]): BridgeToolInfo => {
    const loc = toolLocations(server, all).get(tool.name)!;
    return {
      server: server.name,
      tool: tool.name,
      ...(tool.title ? { title: tool.title } : {}),
      ...(tool.description ? { description: tool.description } : {}),
      path: loc.path,
      function: loc.function,
      python: loc.python,
    };
  };

  const lastRefusal = new Map<number, number>();
  return async function upstreamBridge(owner: SandboxOwner, method: string, params: unknown): Promise<unknown> {
    switch (method) {
      case 'tools/call': {
        const p = parse(callParams, params, method, '{server, tool, arguments}');
        const allowed = (await opts.rateLimiter?.take(userBudgetKey(owner.userId))) ?? { ok: true };
        if (!allowed.ok) {
          // A refused call costs the caller nothing: one audit row a second at most.
          const now = Date.now();
          if (now - (lastRefusal.get(owner.userId) ?? 0) >= 1000) {
            lastRefusal.set(owner.userId, now);
            safeAudit(audit, opts.logger, { userId: owner.userId, kind: 'upstream', method: hub.isServer(p.server) ? p.server : '?', tool: '?', argsShape: {}, durationMs: 0, outcome: 'rate_limited', errorClass: 'rate_limited' });
          }
          throw new UpstreamError(
            `too many upstream calls: retry after ${allowed.retryAfterSec} s (the limit is ${opts.rateLimiter!.opts.perMinute} a minute, ` +
              `bursts of ${opts.rateLimiter!.opts.burst}; an operator can raise SANDGATE_RATE_LIMIT_PER_MIN)`,
            'rate_limited',
          );
        }
        const args = p.arguments ?? {};
        const started = performance.now();
        // Names and keys come from code in the sandbox: the log keeps a server's name only
        // if it is configured, a tool's only if the server listed it, and only the argument
        // keys that tool's schema declares.
        const entry = (outcome: UpstreamAuditEntry['outcome'], extra: Partial<UpstreamAuditEntry> = {}) => {
          const server = hub.isServer(p.server) ? p.server : '?';
          const tool = server === '?' ? undefined : hub.knownTool(p.server, p.tool);
          safeAudit(audit, opts.logger, {
            userId: owner.userId,
            kind: 'upstream',
            method: server,
            tool: `${server}/${tool ? tool.name : '?'}`,
            argsShape: argsShape(args, tool?.inputSchema),
            durationMs: Math.round((performance.now() - started) * 1000) / 1000,
            outcome,
            ...extra,
          });
        };
        try {
          const result = await hub.callTool(owner, p.server, p.tool, args);
          if (result.isError) {
            const text = (result.content ?? [])
              .filter((c) => c.type === 'text')
              .map((c) => (c as { text: string }).text)
              .join('\n');
            entry('error', { error: text.slice(0, 500), errorClass: 'tool_error' });
          } else entry('ok');
          return result;
        } catch (e) {
          const err = e instanceof UpstreamError ? e : new UpstreamError(`${p.server}/${p.tool} failed: ${(e as Error).message}`, 'failed');
          const denied = ['denied', 'unknown_server', 'unknown_tool', 'missing_credential'].includes(err.reason);
          entry(denied ? 'denied' : 'error', { error: err.message, errorClass: err.reason });
          throw err;
        }
      }
      case 'tools/list': {
        const p = parse(listParams, params, method, '{server?}');
        const listing = await hub.listTools(owner, p?.server);
        const byServer = new Map<UpstreamServerConfig, Tool[]>();
        for (const t of listing.tools) byServer.set(t.server, [...(byServer.get(t.server) ?? []), t.tool]);
        return {
          tools: listing.tools.map((t) => info(t.server, t.tool, byServer.get(t.server)!)),
          unavailable: listing.unavailable,
        };
      }
      case 'tools/describe': {
        const p = parse(describeParams, params, method, '{server, tool}');
        const { server, tool } = await hub.describeTool(owner, p.server, p.tool);
        const all = (await hub.listTools(owner, p.server)).tools.map((t) => t.tool);
        return {
          ...info(server, tool, all),
          inputSchema: tool.inputSchema,
          ...(tool.outputSchema ? { outputSchema: tool.outputSchema } : {}),
        };
      }
      default:
        throw new Error(`unknown bridge method "${method}": use tools/call, tools/list or tools/describe`);
    }
  };
}

function safeAudit(audit: UpstreamAudit, logger: Logger | undefined, entry: UpstreamAuditEntry): void {
  // A failing audit sink must not turn a finished upstream call into an error; say so loudly instead.
  const failed = (e: unknown) => logger?.error({ err: (e as Error).message, tool: entry.tool, userId: entry.userId }, 'audit of an upstream call failed');
  try {
    const written = audit(entry);
    if (written) written.catch(failed);
  } catch (e) {
    failed(e);
  }
}
