/**
 * The /mcp endpoint: Streamable HTTP through the SDK's `createMcpHandler`, which serves
 * protocol 2026-07-28 (stateless by design: every request carries its `_meta` envelope)
 * and, for clients on 2025 versions, falls back to stateless Streamable HTTP. Each POST
 * is checked (Host and Origin, then the bearer token, then its user's rate limit), then
 * answered by a fresh McpServer bound to the token's user; nothing survives between
 * requests but the user's own state (sandbox, files), which is keyed by user id, never
 * by an MCP session id. Neither era has a server-to-client stream here, so GET and
 * DELETE answer 405 (clients take that as "no stream", as the transport spec allows).
 *
 * Order matters: Host/Origin before anything else (DNS rebinding), authentication before
 * the body is parsed, the rate limit before any work is done for the request.
 */
import express, { type ErrorRequestHandler, type Request, type RequestHandler, type Response } from 'express';
import { createMcpHandler, type AuthInfo, type McpServerFactory } from '@modelcontextprotocol/server';
import { toNodeHandler } from '@modelcontextprotocol/node';
import type { Caller } from '../auth/caller.js';
import { budgetSpentMessage, MemoryRateLimiter, OncePer, userBudgetKey, type RateLimiter } from '../limits/rate-limit.js';
import { describeRequest } from '../mcp/audited-transport.js';
import type { McpDeps } from '../mcp/context.js';
import { auditFor, serverForCaller } from '../mcp/serve.js';
import { partsFor, toolInputSchema, type ServerParts } from '../mcp/server.js';
import { IDENTITY_BOUNDARY, type ModelBoundary } from '../pii/boundary.js';
import { SkillsDir } from '../skills/skills.js';
import { bearerAuth, bearerToken, callerOf } from '../auth/bearer.js';
import { nestsDeeperThan } from '../bounded-json.js';
import { hostAndOriginValidation } from './host-origin.js';

/** Largest JSON body accepted (write_file content is the big one). */
export const MAX_BODY = '4mb';
/**
 * Deepest nesting a body may have: far beyond any MCP message (the tools' arguments are
 * flat), far below where the SDK, which serialises the body again, runs out of stack
 * (a few thousand levels: an internal error for everyone's requests to see in the log).
 */
const MAX_BODY_DEPTH = 100;

export interface McpRouterDeps extends Omit<McpDeps, 'skills' | 'boundary'> {
  skills?: SkillsDir;
  boundary?: ModelBoundary;
  /**
   * The users' request budget, shared with /v1 and the web pages (the gateway passes
   * its one limiter); defaults to one of this endpoint's own, from
   * SANDGATE_RATE_LIMIT_PER_MIN / _BURST.
   */
  rateLimiter?: RateLimiter;
}

function jsonRpcError(code: number, message: string, id: string | number | null = null) {
  return { jsonrpc: '2.0' as const, error: { code, message }, id };
}

type Message = { method?: unknown; id?: unknown; params?: unknown };

/** The JSON-RPC requests (not notifications or responses) in a body. */
function requestsIn(body: unknown): { method: string; params?: unknown }[] {
  const messages = (Array.isArray(body) ? body : [body]) as Message[];
  return messages.filter((m): m is { method: string; id: string | number; params?: unknown } => !!m && typeof m.method === 'string' && m.id !== undefined);
}

/** Audit durations run from the request's arrival, so they include authentication. */
const markArrival: RequestHandler = function markArrival(_req, res, next) {
  res.locals.arrival = { at: Date.now(), t0: performance.now() };
  next();
};
const arrivalOf = (res: Response): { at: number; t0: number } => res.locals.arrival as { at: number; t0: number };

/** Methods whose answer carries the instructions: 2025 `initialize`, 2026-07-28 `server/discover`. */
const ANSWERED_WITH_INSTRUCTIONS = new Set(['initialize', 'server/discover']);

/**
 * What the server factory needs to know about one HTTP request. The SDK hands the
 * factory only the request and its AuthInfo, so it travels in `AuthInfo.extra`.
 */
interface Exchange {
  caller: Caller & { via: { kind: 'token' } };
  arrival: { at: number; t0: number };
  wantsInstructions: boolean;
  parts: ServerParts;
}
const EXCHANGE = 'org.sandgate/exchange';

function authInfoFor(req: Request, exchange: Exchange): AuthInfo {
  return { token: bearerToken(req) ?? '', clientId: `sandgate-token-${exchange.caller.via.tokenId}`, scopes: [], extra: { [EXCHANGE]: exchange } };
}

function exchangeOf(authInfo: AuthInfo | undefined): Exchange {
  const x = authInfo?.extra?.[EXCHANGE] as Exchange | undefined;
  if (!x) throw new Error('the MCP handler was called without the exchange the /mcp router attaches');
  return x;
}

export function mcpRouter(input: McpRouterDeps): RequestHandler {
  const deps: McpDeps = { ...input, skills: input.skills ?? new SkillsDir(), boundary: input.boundary ?? IDENTITY_BOUNDARY };
  const limiter = input.rateLimiter ?? new MemoryRateLimiter({ perMinute: deps.config.rateLimitPerMin, burst: deps.config.rateLimitBurst });
  const log = deps.logger.child({ module: 'mcp' });
  const schemaOf = (tool: string) => toolInputSchema(deps.config, tool);


  /**
   * A refused request costs its sender nothing, so its audit row must not cost the
   * gateway much either. One row per refused POST (the batch as one), at most one a
   * second per user.
   */
  const refusalAudit = new OncePer(1000);
  const rateLimit: RequestHandler = async function rateLimitPerUser(req, res, next) {
    const caller = callerOf(req);
    const requests = requestsIn(req.body);
    // Every message of a batch is charged, notifications and responses too.
    const messages = Array.isArray(req.body) ? req.body.length : 1;
    // One budget per user: a second token (or the web pages) takes from the same one.
    const decision = await limiter.take(userBudgetKey(caller.user.id), Math.max(1, messages));
    if (decision.ok) return next();
    const { at, t0 } = arrivalOf(res);
    if (refusalAudit.due(caller.user.id, at)) {
      const first = requests[0];
      // Written before the 429 goes out, so the log has it by then (auditFor never rejects: a failed write is logged).
      await auditFor(
        deps,
        caller,
        {
          ...(first ? describeRequest(first, schemaOf) : { method: 'other', tool: null, argsShape: undefined }),
          ...(messages > 1 ? { argsShape: { batch: messages } } : {}),
          outcome: 'rate_limited',
          errorClass: 'rate_limited',
        },
        { ts: at, durationMs: performance.now() - t0 },
      );
    }
    res
      .status(429)
      .set('Retry-After', String(decision.retryAfterSec))
      .json(jsonRpcError(-32000, budgetSpentMessage(limiter, caller.user.name, decision, messages)));
  };

  /** One McpServer per request, for either protocol era, bound to the caller. */
  const serverFor: McpServerFactory = async ({ authInfo, requestInfo }) => {
    const { caller, arrival, wantsInstructions, parts } = exchangeOf(authInfo);
    // Both eras send MCP-Protocol-Version after the handshake (2026-07-28 requires it on every request).
    const protocolVersion = requestInfo?.headers.get('mcp-protocol-version') ?? undefined;
    return serverForCaller(deps, caller, { protocolVersion, withInstructions: wantsInstructions, parts, arrival });
  };
  const handler = toNodeHandler(
    createMcpHandler(serverFor, {
      onerror: (err) => log.warn({ err }, 'MCP request rejected or failed'),
    }),
    {
      // A client that leaves while its body is still being read (a body sent without a JSON
      // type is read by the SDK itself) is not the gateway's failure.
      onerror: (err) => ((err as NodeJS.ErrnoException).code === 'ECONNRESET' ? log.debug({ err }, 'MCP client went away mid-request') : log.error({ err }, 'MCP handler failed')),
    },
  );

  const serve: RequestHandler = async function serveMcp(req, res) {
    // Method checks, not the SDK's schema check: the SDK validates messages anyway.
    const requests = requestsIn(req.body);
    const exchange: Exchange = {
      caller: callerOf(req),
      arrival: arrivalOf(res),
      wantsInstructions: requests.some((r) => ANSWERED_WITH_INSTRUCTIONS.has(r.method)),
      parts: partsFor(requests),
    };
    await handler(Object.assign(req, { auth: authInfoFor(req, exchange) }), res, req.body);
  };

  const noStream: RequestHandler = function statelessHasNoStream(_req, res) {
    res
      .status(405)
      .set('Allow', 'POST')
      .json(jsonRpcError(-32000, 'Method not allowed: this server is stateless (no sessions, no server-initiated stream); send requests with POST.'));
  };

  const badBody: ErrorRequestHandler = function badJsonBody(err: { type?: string; status?: number; message?: string }, _req, res, next) {
    if (err.type === 'entity.parse.failed') return void res.status(400).json(jsonRpcError(-32700, 'Parse error: the body is not valid JSON'));
    if (err.type === 'entity.too.large') return void res.status(413).json(jsonRpcError(-32000, `The request body is larger than ${MAX_BODY}; send large files from code instead.`));
    if (err.type === 'entity.too.deep') return void res.status(400).json(jsonRpcError(-32600, `Invalid Request: the body nests deeper than ${MAX_BODY_DEPTH} levels`));
    next(err);
  };

  const checks = [markArrival, ...hostAndOriginValidation(deps.config), bearerAuth(deps, { oauth: true })];
  const json = express.json({
    limit: MAX_BODY,
    // Looked at before it is parsed, as text: '[', '{' and '"' are single bytes in UTF-8.
    verify: (_req, _res, buf) => {
      if (nestsDeeperThan(buf.toString('utf8'), MAX_BODY_DEPTH)) throw Object.assign(new Error('the body nests too deeply'), { status: 400, type: 'entity.too.deep' });
    },
  });
  const post = inSequence([...checks, json, rateLimit, serve], badBody);
  const withoutStream = inSequence([...checks, noStream], badBody);
  const checksOnly = inSequence(checks, badBody);
  return function mcpEndpoint(req, res, next) {
    // Case-insensitive, as Express routes are by default.
    const path = req.path.toLowerCase();
    if (path !== '/mcp' && path !== '/mcp/') return path.startsWith('/mcp/') ? checksOnly(req, res, next) : next();
    if (req.method === 'POST') return post(req, res, next);
    if (req.method === 'GET' || req.method === 'DELETE') return withoutStream(req, res, next);
    checksOnly(req, res, next);
  };
}

/**
 * Runs `handlers` in order, as a Router would for one route, handing errors to `onError`;
 * calls `next` when the last one passes the request on. /mcp is served this way, from one
 * handler mounted first, because an Express Router walk per request (layers, path
 * matching, a closure per step) cost about 0.1 ms and 20 KB of garbage per MCP call.
 */
function inSequence(handlers: RequestHandler[], onError: ErrorRequestHandler): RequestHandler {
  return function sequence(req, res, next) {
    let i = 0;
    const step = (err?: unknown): void => {
      if (err !== undefined && err !== null) {
        try {
          void onError(err, req, res, next);
        } catch (e) {
          next(e);
        }
        return;
      }
      const handler = handlers[i++];
      if (!handler) return next();
      try {
        const r = handler(req, res, step) as unknown;
        if (r instanceof Promise) r.catch(step);
      } catch (e) {
        step(e);
      }
    };
    step();
  };
}
