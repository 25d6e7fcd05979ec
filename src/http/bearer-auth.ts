/**
 * Bearer-token authentication for /mcp and the /v1 API. A missing, malformed, unknown, expired or
 * revoked token gets 401 with a `WWW-Authenticate: Bearer` challenge (RFC 6750) and a
 * body that says what to do. Denials of a known token are audited for its user; tokens
 * nobody owns are only logged, so garbage cannot fill the audit log.
 */
import type { Request, RequestHandler, Response } from 'express';
import type { Caller } from '../identity/caller.js';
import { recordAudit } from '../audit/audit.js';
import type { Logger } from '../logger.js';
import { OncePer } from '../limits/rate-limit.js';
import type { Db } from '../store/store.js';
import { verifyToken, type Principal, type TokenFailure } from '../tokens/tokens.js';

export const REALM = 'sandgate';

const SHORT_REASON: Record<Exclude<TokenFailure, 'missing'>, string> = {
  malformed: 'The token is malformed',
  unknown: 'The token is not recognised',
  expired: 'The token has expired',
  revoked: 'The token has been revoked',
  disabled: 'The account is disabled',
};

/** The token of an `Authorization: Bearer <token>` header, if the request has one. */
export function bearerToken(req: Request): string | undefined {
  const header = req.headers.authorization;
  return header ? /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1] : undefined;
}

/** The caller `bearerAuth` attached to the request: its token's user, via that token. */
export function callerOf(req: Request): Caller & { via: { kind: 'token' } } {
  const p = (req as Request & { principal?: Principal }).principal;
  if (!p) throw new Error('callerOf() called on a request bearerAuth did not authenticate');
  return { user: p.user, via: { kind: 'token', tokenId: p.tokenId, tokenName: p.tokenName } };
}

/** How a refusal is written: JSON-RPC for /mcp by default; the /v1 API answers in OpenAI's error shape. */
export type Refusal = (res: Response, message: string, reason: TokenFailure) => void;

const jsonRpcRefusal: Refusal = (res, message) => void res.json({ jsonrpc: '2.0', error: { code: -32001, message }, id: null });

export function bearerAuth(deps: { db: Db; logger: Logger }, opts: { refuse?: Refusal; auditKind?: 'mcp' | 'agent'; what?: string } = {}): RequestHandler {
  const refuse = opts.refuse ?? jsonRpcRefusal;
  // A known token refused (an old one that leaked, sent in a loop) is audited at most once
  // a second, as rate-limited requests are.
  const refusalAudit = new OncePer(1000);
  return function authenticateBearer(req, res, next) {
    const started = performance.now();
    const header = req.headers.authorization;
    const result = verifyToken(deps.db, bearerToken(req));
    if (result.ok) {
      (req as Request & { principal?: Principal }).principal = result.principal;
      return next();
    }
    // RFC 6750 §3.1: no error code when the request carried no credentials.
    const challenge =
      result.reason !== 'missing'
        ? `Bearer realm="${REALM}", error="invalid_token", error_description="${SHORT_REASON[result.reason]}"`
        : header
          ? `Bearer realm="${REALM}", error="invalid_request", error_description="The Authorization header must be: Bearer <token>"`
          : `Bearer realm="${REALM}"`;
    if (result.token && refusalAudit.due(result.token.id, Date.now())) {
      try {
        recordAudit(deps.db, {
          userId: result.token.userId,
          tokenId: result.token.id,
          tokenName: result.token.name,
          kind: opts.auditKind ?? 'mcp',
          method: 'authenticate',
          durationMs: performance.now() - started,
          outcome: 'denied',
          errorClass: result.reason,
        });
      } catch (e) {
        deps.logger.error({ err: e }, 'could not write an audit entry');
      }
    }
    deps.logger.warn({ reason: result.reason, ip: req.ip, user: result.token?.userName }, `${opts.what ?? 'MCP'} request refused: bad token`);
    refuse(res.status(401).set('WWW-Authenticate', challenge), result.message, result.reason);
  };
}
