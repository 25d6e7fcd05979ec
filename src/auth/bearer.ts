/**
 * Bearer-token authentication for /mcp and the /v1 API. A missing, malformed, unknown, expired or
 * revoked token gets 401 with a `WWW-Authenticate: Bearer` challenge (RFC 6750) and a
 * body that says what to do. A valid token then answers to its user's membership check
 * (src/auth/membership.ts), as a browser session does: a member GitHub no longer
 * lists gets 401, and while GitHub cannot confirm a membership past its grace, 503.
 * Denials of a known token are audited for its user; tokens nobody owns are only logged,
 * so garbage cannot fill the audit log.
 */
import type { Request, RequestHandler, Response } from 'express';
import type { Caller } from './caller.js';
import { membershipFor } from './membership.js';
import { recordAudit } from '../audit/audit.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { OncePer } from '../limits/rate-limit.js';
import type { Db } from '../store/store.js';
import { verifyToken, type Principal, type TokenFailure, type TokenRecord, type VerifyResult } from '../tokens/tokens.js';
import { isAccessToken, verifyAccessToken } from '../oauth/grants.js';
import { mcpResource, resourceMetadataUrl } from '../oauth/urls.js';

export const REALM = 'sandgate';

/** Why a token was not let in: its own state, or its user's (`unconfirmed`: GitHub could not be asked). */
export type BearerFailure = TokenFailure | 'unconfirmed';

const SHORT_REASON: Record<Exclude<BearerFailure, 'missing'>, string> = {
  malformed: 'The token is malformed',
  unknown: 'The token is not recognised',
  expired: 'The token has expired',
  revoked: 'The token has been revoked',
  disabled: 'The account is disabled',
  suspended: 'The account lost access at a GitHub membership check',
  unverified: 'The account has not signed in with GitHub yet',
  unconfirmed: 'GitHub could not confirm the membership just now',
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

export type TokenAuthentication =
  | { ok: true; principal: Principal }
  | { ok: false; status: 401 | 503; reason: BearerFailure; message: string; /** Set when the token is known. */ token?: Pick<TokenRecord, 'id' | 'name' | 'userId' | 'userName'> };

/**
 * A presented token, checked and then confirmed: its user is a member now (re-checked
 * with GitHub when due) and the principal's user carries the admin flag the settings
 * give now. Every door that takes a token goes through here.
 */
export async function authenticateToken(deps: { config: Config; db: Db; logger: Logger }, presented: string | undefined, opts: { oauth?: boolean } = {}): Promise<TokenAuthentication> {
  const result = await verifyPresented(deps, presented, opts.oauth ?? false);
  if (!result.ok) return { ok: false, status: 401, reason: result.reason, message: result.message, ...(result.token ? { token: result.token } : {}) };
  const p = result.principal;
  const membership = membershipFor(deps);
  // Without GitHub there is nothing more to ask: the token's own row said the account is not disabled.
  if (!membership.github) return result;
  const member = await membership.confirm(p.user.id);
  if (member.ok) return { ok: true, principal: { ...p, user: member.user } };
  return {
    ok: false,
    status: member.status,
    reason: member.reason,
    message: member.message,
    token: { id: p.tokenId, name: p.tokenName, userId: p.user.id, userName: p.user.name },
  };
}

/**
 * A personal token, or (where `oauth` says a door takes them: /mcp) an OAuth access token
 * bound to this gateway's /mcp. An access token elsewhere is refused with why.
 */
async function verifyPresented(deps: { config: Config; db: Db }, presented: string | undefined, oauth: boolean): Promise<VerifyResult> {
  if (presented && isAccessToken(presented)) {
    if (!oauth) return { ok: false, reason: 'unknown', message: 'This is an OAuth access token of an app connected to this gateway: it works only on /mcp. Use a personal API token from the tokens page here.' };
    return verifyAccessToken(deps.db, presented, mcpResource(deps.config));
  }
  return verifyToken(deps.db, presented);
}

/** How a refusal is written: JSON-RPC for /mcp by default; the /v1 API answers in OpenAI's error shape. */
export type Refusal = (res: Response, message: string, reason: BearerFailure) => void;

const jsonRpcRefusal: Refusal = (res, message) => void res.json({ jsonrpc: '2.0', error: { code: -32001, message }, id: null });

export function bearerAuth(deps: { config: Config; db: Db; logger: Logger }, opts: { refuse?: Refusal; auditKind?: 'mcp' | 'agent'; what?: string; oauth?: boolean } = {}): RequestHandler {
  const refuse = opts.refuse ?? jsonRpcRefusal;
  // Where OAuth access tokens are taken (/mcp), every challenge names the resource's metadata (RFC 9728 §5.1), where a client finds how to sign in.
  const metadata = opts.oauth ? `, resource_metadata="${resourceMetadataUrl(deps.config)}", scope="mcp"` : '';
  // A known token refused (an old one that leaked, sent in a loop) is audited at most once
  // a second, as rate-limited requests are.
  const refusalAudit = new OncePer(1000);
  return async function authenticateBearer(req, res, next) {
    const started = performance.now();
    const header = req.headers.authorization;
    const result = await authenticateToken(deps, bearerToken(req), { oauth: opts.oauth });
    if (result.ok) {
      (req as Request & { principal?: Principal }).principal = result.principal;
      return next();
    }
    // RFC 6750 §3.1: no error code when the request carried no credentials.
    const challenge =
      result.reason !== 'missing'
        ? `Bearer realm="${REALM}"${metadata}, error="invalid_token", error_description="${SHORT_REASON[result.reason]}"`
        : header
          ? `Bearer realm="${REALM}"${metadata}, error="invalid_request", error_description="The Authorization header must be: Bearer <token>"`
          : `Bearer realm="${REALM}"${metadata}`;
    // GitHub not answering is nobody's doing: logged, not audited against the member.
    if (result.token && result.reason !== 'unconfirmed' && refusalAudit.due(result.token.id, Date.now())) {
      // Written before the refusal is answered, so the log has it by then; a failed write is only logged.
      try {
        await recordAudit(deps.db, {
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
    deps.logger.warn({ reason: result.reason, ip: req.ip, user: result.token?.userName }, `${opts.what ?? 'MCP'} request refused: ${result.status === 503 ? 'membership not confirmed' : 'bad token'}`);
    if (result.status === 503) {
      res.status(503).set('Retry-After', '30');
      return refuse(res, result.message, result.reason);
    }
    refuse(res.status(401).set('WWW-Authenticate', challenge), result.message, result.reason);
  };
}
