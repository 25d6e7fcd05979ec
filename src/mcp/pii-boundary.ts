/**
 * The model boundary backed by the PII vault: text to a model is tokenized, text from
 * a model is detokenized, in the scope of the user and the API token in use.
 *
 * Why (user, API token) and not the MCP session or the user alone:
 * - not the session: the protocol may be stateless (every request here is), and a
 *   client reconnecting with the same token must find the tokens it was shown;
 * - not the user alone: an API token is one client on one device (Claude Desktop on a
 *   laptop, Cursor at work). Tokens a model saw in one client mean nothing in another,
 *   and revoking a token can forget exactly what that client was shown. The price: the
 *   same value has a different token in each of a user's clients.
 * The user id is part of every lookup, so one user's token text never resolves for
 * another user, whatever API token id they present.
 */
import type Database from 'better-sqlite3';
import type { PiiVault } from '../pii/index.js';
import { dropPiiScope, tokenScopeRef } from '../pii/scopes.js';
import { inactiveTokens } from '../tokens/tokens.js';
import type { SandboxOwner } from '../sandboxes/types.js';
import type { BoundaryPrincipal, ModelBoundary } from './boundary.js';

/**
 * Forgets what the clients of revoked and expired API tokens were shown. The command
 * line drops a token's scope when it revokes it; this catches expiry and anything
 * revoked while the vault was not looking. Returns how many scopes went.
 */
export function dropInactiveTokenScopes(db: Database.Database, vault: PiiVault | undefined, now = Date.now()): number {
  let dropped = 0;
  for (const t of inactiveTokens(db, now)) {
    const ref = tokenScopeRef(t.userId, t.id);
    if (vault ? vault.dropScope(ref) : dropPiiScope(db, ref) !== undefined) dropped++;
  }
  return dropped;
}

export function createPiiBoundary(vault: PiiVault): ModelBoundary {
  const scope = (owner: SandboxOwner, principal: BoundaryPrincipal) => vault.scope(tokenScopeRef(owner.userId, principal.tokenId));
  return {
    toModel: (owner, principal, text) => (text ? scope(owner, principal).tokenize(text).text : text),
    fromModel: (owner, principal, text) => (text ? scope(owner, principal).detokenize(text) : { text, unknown: [] }),
    toModelStream: (owner, principal) => scope(owner, principal).stream(),
  };
}
