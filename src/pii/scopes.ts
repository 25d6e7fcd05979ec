/**
 * Whose tokens a vault scope holds, and dropping a scope without the vault: it needs no
 * key, so the command line can forget what a revoked token's client was shown. Kept
 * apart from vault.ts so that importing it loads no detector.
 */
import { sql } from 'kysely';
import type { Caller } from '../auth/caller.js';
import type { Db } from '../store/store.js';

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
export async function dropPiiScope(db: Db, ref: PiiScopeRef): Promise<number | undefined> {
  const row = await db
    .deleteFrom('pii_scopes')
    .where('user_id', '=', ref.userId)
    .where('kind', '=', ref.kind)
    .where('ref', '=', ref.id)
    .returning('id')
    .executeTakeFirst();
  return row?.id;
}

/**
 * A token scope's ref as the API token id it names; null when it is not one (a ref is
 * always one, but Postgres would fail the whole query on a cast of anything else).
 */
const tokenIdOfRef = sql<number | null>`CASE WHEN length(s.ref) BETWEEN 1 AND 18 AND ltrim(s.ref, '0123456789') = '' THEN CAST(s.ref AS BIGINT) END`;

/**
 * One batch of token scopes whose token can no longer be used: revoked, past its expiry,
 * or no longer in the store (purged, or never one of this user's). Read from the scopes'
 * side, so the cost follows the scopes that exist, not every token ever made. `afterId`
 * pages by scope id.
 */
export async function inactiveTokenScopes(db: Db, opts: { now: number; afterId: number; limit: number }): Promise<Array<PiiScopeRef & { scopeId: number }>> {
  const rows = await db
    .selectFrom('pii_scopes as s')
    .leftJoin('api_tokens as t', (join) => join.on('t.id', '=', tokenIdOfRef).onRef('t.user_id', '=', 's.user_id'))
    .select(['s.id', 's.user_id', 's.ref'])
    .where('s.kind', '=', 'token')
    .where('s.id', '>', opts.afterId)
    .where((eb) =>
      eb.or([eb('t.id', 'is', null), eb('t.revoked_at', 'is not', null), eb.and([eb('t.expires_at', 'is not', null), eb('t.expires_at', '<=', opts.now)])]),
    )
    .orderBy('s.id')
    .limit(opts.limit)
    .execute();
  return rows.map((r) => ({ scopeId: r.id, userId: r.user_id, kind: 'token', id: r.ref }));
}
