/**
 * Whose tokens a vault scope holds, and dropping a scope without the vault: it needs no
 * key, so the command line can forget what a revoked token's client was shown. Kept
 * apart from vault.ts so that importing it loads no detector.
 */
import type Database from 'better-sqlite3';
import type { Caller } from '../auth/caller.js';

export interface PiiScopeRef {
  userId: number;
  kind: 'token' | 'conversation';
  /** The API token's or the conversation's stable id (never the token secret itself). */
  id: string;
}

/** The scope of what one conversation of the built-in agent showed its model. */
export function conversationScopeRef(userId: number, conversationId: string): PiiScopeRef {
  return { userId, kind: 'conversation', id: conversationId };
}

/**
 * The scope a caller's model text belongs to: its API token's, or its conversation's.
 * A signed-in person (`session`) has none: what they read is theirs, no model sees it.
 */
export function piiScopeOf(caller: Caller): PiiScopeRef | undefined {
  switch (caller.via.kind) {
    case 'token':
      return tokenScopeRef(caller.user.id, caller.via.tokenId);
    case 'agent':
      return conversationScopeRef(caller.user.id, caller.via.conversationId);
    case 'session':
      return undefined;
  }
}

/** The scope of what the client of one API token was shown. */
export function tokenScopeRef(userId: number, tokenId: number): PiiScopeRef {
  return { userId, kind: 'token', id: String(tokenId) };
}

/** Deletes a scope with everything in it. Returns the scope's id, if it existed. */
export function dropPiiScope(db: Database.Database, ref: PiiScopeRef): number | undefined {
  const row = db.prepare('DELETE FROM pii_scopes WHERE user_id = ? AND kind = ? AND ref = ? RETURNING id').get(ref.userId, ref.kind, ref.id) as
    | { id: number }
    | undefined;
  return row?.id;
}

/**
 * One batch of token scopes whose token can no longer be used: revoked, past its expiry,
 * or no longer in the store (purged, or never one of this user's). Read from the scopes'
 * side, so the cost follows the scopes that exist, not every token ever made. `afterId`
 * pages by scope id.
 */
export function inactiveTokenScopes(db: Database.Database, opts: { now: number; afterId: number; limit: number }): Array<PiiScopeRef & { scopeId: number }> {
  const rows = db
    .prepare(
      `SELECT s.id, s.user_id, s.ref FROM pii_scopes s
        LEFT JOIN api_tokens t ON t.id = CAST(s.ref AS INTEGER) AND t.user_id = s.user_id
        WHERE s.kind = 'token' AND s.id > ?
          AND (t.id IS NULL OR t.revoked_at IS NOT NULL OR (t.expires_at IS NOT NULL AND t.expires_at <= ?))
        ORDER BY s.id LIMIT ?`,
    )
    .all(opts.afterId, opts.now, opts.limit) as Array<{ id: number; user_id: number; ref: string }>;
  return rows.map((r) => ({ scopeId: r.id, userId: r.user_id, kind: 'token', id: r.ref }));
}
