/**
 * The one door between model text and sandbox data. Every string a tool returns to the
 * model passes `toModel` (or, when it is sent in pieces as it is produced, a stream from
 * `toModelStream`); every string a model provides (code, file contents, paths, queries,
 * permission values, resource URIs) passes `fromModel`. The identity boundary changes
 * nothing; the PII boundary (pii-boundary.ts) replaces values with tokens (`[EMAIL_1]`)
 * on the way out and puts them back on the way in.
 */
import type { Caller } from '../auth/caller.js';

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
 * tail, so a value split across chunks is never sent in pieces. A boundary that stores
 * what it rewrote returns a Promise, settled once it is stored: send the outputs in the
 * order of the calls.
 */
export interface ModelStream {
  push(chunk: string): string | Promise<string>;
  end(): string | Promise<string>;
}

/** The boundary for one caller: its scope (src/pii/scopes.ts `piiScopeOf`) decides which tokens it knows. */
export interface ModelBoundary {
  toModel(caller: Caller, text: string): string | Promise<string>;
  fromModel(caller: Caller, text: string): FromModelResult | Promise<FromModelResult>;
  /**
   * A stream for one run of output. Optional: without it each chunk passes `toModel` on
   * its own, which is only right for a boundary that never needs context across chunks.
   */
  toModelStream?(caller: Caller): ModelStream;
}

export const IDENTITY_BOUNDARY: ModelBoundary = {
  toModel: (_caller, text) => text,
  fromModel: (_caller, text) => ({ text, unknown: [] }),
  toModelStream: () => ({ push: (chunk) => chunk, end: () => '' }),
};
