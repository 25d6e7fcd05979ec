/**
 * Whose tokens a vault scope holds, and dropping a scope without the vault: it needs no
 * key, so the command line can forget what a revoked token's client was shown. Kept
 * apart from vault.ts so that importing it loads no detector.
 */
import type Database from 'better-sqlite3';
import type { Caller } from '../identity/caller.js';

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
