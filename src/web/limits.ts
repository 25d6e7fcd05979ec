/**
 * The per-user limits on the web pages that cost work, as middleware placed after
 * `requireUser`: the user's one request budget (shared with their tokens on /mcp and
 * /v1) and, for a chat message, room in their store quota. A refusal is a GatewayError,
 * so the page shows it where htmx puts errors (or as an error page for a plain link).
 */
import type { RequestHandler } from 'express';
import type { Config } from '../config.js';
import { GatewayError } from '../errors.js';
import { budgetSpentMessage, userBudgetKey, type RateLimiter } from '../limits/rate-limit.js';
import { reserveStoreRoom } from '../limits/store-quota.js';
import type { Db } from '../store/store.js';
import { userOf } from '../auth/session-middleware.js';

/** Takes one request from the user's budget, or answers 429 with Retry-After. */
export function webRateLimit(limiter: RateLimiter): RequestHandler {
  return async function rateLimitPerUser(req, res, next) {
    const user = userOf(req);
    // A failure to ask (the store away) rejects: Express hands it to the error handler.
    const decision = await limiter.take(userBudgetKey(user.id));
    if (decision.ok) return next();
    res.set('Retry-After', String(decision.retryAfterSec));
    next(new GatewayError(budgetSpentMessage(limiter, user.name, decision), { reason: 'rate_limited', status: 429 }));
  };
}

/** Refuses a chat message (the form's `text`, so after the body is parsed) that the user's store quota has no room for. */
export function chatStoreRoom(deps: { db: Db; config: Pick<Config, 'storeQuotaMb' | 'apiConversationDays' | 'piiTtlHours' | 'publicUrl'> }): RequestHandler {
  return async function storeRoomForMessage(req, res, next) {
    const text = (req.body as { text?: unknown } | undefined)?.text;
    // A refusal rejects: Express hands it to the error handler.
    const release = await reserveStoreRoom(deps.db, deps.config, userOf(req).id, Buffer.byteLength(typeof text === 'string' ? text : ''));
    // The connection may have closed while the store was asked: then nothing will say so again.
    if (res.closed) return release();
    res.on('close', release);
    next();
  };
}
