/**
 * The model boundary backed by the PII vault: text to a model is tokenized, text from
 * a model is detokenized, in the caller's scope (scopes.ts `piiScopeOf`): the user and
 * the API token for an MCP client, the user and the conversation for the built-in agent.
 * A person in a browser sees their own data as it is: no model reads that text.
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
import type { Caller } from '../auth/caller.js';
import type { Db } from '../store/store.js';
import { IDENTITY_BOUNDARY, type ModelBoundary, type ModelStream } from './boundary.js';
import { dropPiiScope, inactiveTokenScopes, piiScopeOf } from './scopes.js';
import type { PiiTokenStream, PiiVault } from './vault.js';

/** Scopes read per query by dropInactiveTokenScopes. */
const SCOPE_SWEEP_BATCH = 500;

/**
 * Forgets what the clients of revoked and expired API tokens were shown. The command
 * line drops a token's scope when it revokes it; this catches expiry and anything
 * revoked (or purged) while the vault was not looking. It walks the token scopes that
 * still exist, in batches, so its cost does not grow with every token ever revoked.
 * Returns how many scopes went.
 */
export async function dropInactiveTokenScopes(db: Db, vault: PiiVault | undefined, now = Date.now()): Promise<number> {
  let dropped = 0;
  let afterId = 0;
  for (;;) {
    const batch = await inactiveTokenScopes(db, { now, afterId, limit: SCOPE_SWEEP_BATCH });
    for (const { scopeId, ...ref } of batch) {
      if (vault ? await vault.dropScope(ref) : (await dropPiiScope(db, ref)) !== undefined) dropped++;
      afterId = scopeId;
    }
    if (batch.length < SCOPE_SWEEP_BATCH) return dropped;
  }
}

export function createPiiBoundary(vault: PiiVault): ModelBoundary {
  // Empty text needs no scope: nothing to replace, nothing to resolve.
  const refOf = (caller: Caller, text: string) => (text ? piiScopeOf(caller) : undefined);
  return {
    toModel: (caller, text) => {
      const ref = refOf(caller, text);
      return ref ? vault.scope(ref, caller).then(async (s) => (await s.tokenize(text)).text) : IDENTITY_BOUNDARY.toModel(caller, text);
    },
    fromModel: (caller, text) => {
      const ref = refOf(caller, text);
      return ref ? vault.scope(ref, caller).then((s) => s.detokenize(text)) : IDENTITY_BOUNDARY.fromModel(caller, text);
    },
    toModelStream: (caller): ModelStream => {
      const ref = piiScopeOf(caller);
      if (!ref) return IDENTITY_BOUNDARY.toModelStream!(caller);
      // The scope is opened at the first chunk; every call waits for the same opening, so they stay in order.
      let opened: Promise<PiiTokenStream> | undefined;
      const stream = () => (opened ??= vault.scope(ref, caller).then((s) => s.stream()));
      return {
        push: async (chunk) => (await stream()).push(chunk),
        end: async () => (opened ? (await opened).end() : ''),
      };
    },
  };
}
