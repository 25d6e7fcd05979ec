/**
 * Who is calling: a user, and how they came. Everything that acts for someone (the
 * tools, the PII boundary, the audit log, the rate limits) takes a Caller, so the MCP
 * endpoint, the web app and the built-in agent share one path:
 *
 * - `token`: an MCP client (or the OpenAI-compatible API) with a personal API token;
 * - `session`: a person signed in to the web app in a browser;
 * - `agent`: one conversation of the built-in agent, acting for its user.
 */
import type { User } from '../accounts/accounts.js';

export type Via =
  | { kind: 'token'; tokenId: number; tokenName: string }
  | { kind: 'session'; sessionId: string }
  | { kind: 'agent'; conversationId: string };

export type ViaKind = Via['kind'];
export const VIA_KINDS: readonly ViaKind[] = ['token', 'session', 'agent'];

export interface Caller {
  user: User;
  via: Via;
}

/** The caller as the sandbox manager knows users (its SandboxOwner). */
export function ownerOf(caller: Caller): { userId: number; name: string } {
  return { userId: caller.user.id, name: caller.user.name };
}

/** The token of a caller that came with one, for the audit log's token columns. */
export function tokenOf(caller: Caller): { tokenId: number; tokenName: string } | undefined {
  return caller.via.kind === 'token' ? { tokenId: caller.via.tokenId, tokenName: caller.via.tokenName } : undefined;
}
