/**
 * The one door between model text and sandbox data. Every string a tool returns to the
 * model passes `toModel` (or, when it is sent in pieces as it is produced, a stream from
 * `toModelStream`); every string a model provides (code, file contents, paths, queries,
 * permission values, resource URIs) passes `fromModel`. The identity boundary changes
 * nothing; the PII boundary (pii-boundary.ts) replaces values with tokens (`[EMAIL_1]`)
 * on the way out and puts them back on the way in.
 */
import type { SandboxOwner } from '../sandboxes/types.js';

/** The API token a request came with: the PII scope is (user, token). */
export interface BoundaryPrincipal {
  tokenId: number;
  tokenName: string;
}

/** Text from a model, ready for the sandbox or an upstream tool. */
export interface FromModelResult {
  text: string;
  /**
   * Token literals the boundary could not resolve (never issued in this scope, expired,
   * or another scope's). They are left in `text` as they were, never guessed.
   */
  unknown: string[];
}

/**
 * Text headed to a model in chunks (streamed output). `push` returns what may be sent
 * now, `end` the rest; a boundary that rewrites values holds back a chunk's unfinished
 * tail, so a value split across chunks is never sent in pieces.
 */
export interface ModelStream {
  push(chunk: string): string;
  end(): string;
}

export interface ModelBoundary {
  toModel(owner: SandboxOwner, principal: BoundaryPrincipal, text: string): string | Promise<string>;
  fromModel(owner: SandboxOwner, principal: BoundaryPrincipal, text: string): FromModelResult | Promise<FromModelResult>;
  /**
   * A stream for one run of output. Optional: without it each chunk passes `toModel` on
   * its own, which is only right for a boundary that never needs context across chunks.
   */
  toModelStream?(owner: SandboxOwner, principal: BoundaryPrincipal): ModelStream;
}

export const IDENTITY_BOUNDARY: ModelBoundary = {
  toModel: (_owner, _principal, text) => text,
  fromModel: (_owner, _principal, text) => ({ text, unknown: [] }),
  toModelStream: () => ({ push: (chunk) => chunk, end: () => '' }),
};
