/**
 * The /mcp endpoint: Streamable HTTP in stateless mode. Each POST is checked (Host and
 * Origin, then the bearer token, then the token's rate limit), then answered by a fresh
 * McpServer bound to the token's user; nothing survives between requests but the user's
 * own state (sandbox, files), which is keyed by user id, never by an MCP session id.
 * Stateless mode has no server-to-client stream, so GET and DELETE answer 405 (clients
 * take that as "no stream", as the transport spec allows).
 *
 * Order matters: Host/Origin before anything else (DNS rebinding), authentication before
 * the body is parsed, the rate limit before any work is done for the request.
 */
import express, { Router, type ErrorRequestHandler, type RequestHandler, type Response } from 'express';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { recordAudit, type AuditEntry } from '../audit/audit.js';
import type { Principal } from '../tokens/tokens.js';
import { AuditedTransport, describeRequest } from './audited-transport.js';
import { bearerAuth, principalOf } from './bearer-auth.js';
import { IDENTITY_BOUNDARY, type ModelBoundary } from './boundary.js';
import type { McpDeps } from './context.js';
import { hostAndOriginValidation } from './host-origin.js';
import { RateLimiter } from './rate-limit.js';
import { createMcpServer, instructionsFor, toolContext } from './server.js';
import { SkillsDir } from './skills.js';

/** Largest JSON body accepted (write_file content is the big one). */
export const MAX_BODY = '4mb';

export interface McpRouterDeps extends Omit<McpDeps, 'skills' | 'boundary'> {
  skills?: SkillsDir;
  boundary?: ModelBoundary;
  /** Defaults to one built from SANDGATE_RATE_LIMIT_PER_MIN / _BURST. */
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

export function mcpRouter(input: McpRouterDeps): Router {
  const deps: McpDeps = { ...input, skills: input.skills ?? new SkillsDir(), boundary: input.boundary ?? IDENTITY_BOUNDARY };
  const limiter = input.rateLimiter ?? new RateLimiter({ perMinute: deps.config.rateLimitPerMin, burst: deps.config.rateLimitBurst });
  const log = deps.logger.child({ module: 'mcp' });

  const audit = (p: Principal, e: Omit<AuditEntry, 'userId' | 'tokenId' | 'tokenName' | 'kind'>) => {
    try {
      recordAudit(deps.db, { ...e, userId: p.user.id, tokenId: p.tokenId, tokenName: p.tokenName, kind: 'mcp' });
    } catch (err) {
      log.error({ err }, 'could not write an audit entry');
    }
  };

  const rateLimit: RequestHandler = function rateLimitPerToken(req, res, next) {
    const p = principalOf(req);
    const requests = requestsIn(req.body);
    const decision = limiter.take(String(p.tokenId), Math.max(1, requests.length));
    if (decision.ok) return next();
    const { at, t0 } = arrivalOf(res);
    for (const r of requests) audit(p, { ...describeRequest(r), ts: at, durationMs: performance.now() - t0, outcome: 'rate_limited', errorClass: 'rate_limited' });
    res
      .status(429)
      .set('Retry-After', String(decision.retryAfterSec))
      .json(
        jsonRpcError(
          -32000,
          `Rate limit exceeded for token "${p.tokenName}": retry after ${decision.retryAfterSec} s. ` +
            `The limit is ${limiter.opts.perMinute} requests per minute (bursts of ${limiter.opts.burst}); an operator can raise SANDGATE_RATE_LIMIT_PER_MIN.`,
        ),
      );
  };

  const serve: RequestHandler = async function serveMcp(req, res) {
    const { at, t0 } = arrivalOf(res);
    const principal = principalOf(req);
    const protocolVersion = typeof req.headers['mcp-protocol-version'] === 'string' ? req.headers['mcp-protocol-version'] : undefined;
    const ctx = toolContext(deps, { principal, protocolVersion });
    const requests = requestsIn(req.body);
    // A method check, not the SDK's schema check: the transport validates messages anyway.
    const instructions = requests.some((r) => r.method === 'initialize') ? await instructionsFor(ctx) : undefined;
    const server = createMcpServer(ctx, { instructions });
    // A plain JSON answer is cheaper than an SSE stream; stream only when the client asked for progress.
    const wantsProgress = requests.some((r) => (r.params as { _meta?: { progressToken?: unknown } } | undefined)?._meta?.progressToken !== undefined);
    const http = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: !wantsProgress });
    const transport = new AuditedTransport(http, (o, sentAt) => audit(principal, { ...o, ts: at, durationMs: sentAt - t0 }));
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await http.handleRequest(req, res, req.body);
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
    next(err);
  };

  const router = Router();
  router.use('/mcp', markArrival, ...hostAndOriginValidation(deps.config), bearerAuth(deps));
  router.post('/mcp', express.json({ limit: MAX_BODY }), badBody, rateLimit, serve);
  router.get('/mcp', noStream);
  router.delete('/mcp', noStream);
  return router;
}
