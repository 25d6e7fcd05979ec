/**
 * Model text on its way to the user: tokens ([EMAIL_1]) back to the values they stand
 * for, in the conversation's scope. Streamed text arrives in pieces, and a token may be
 * cut between two of them ("[EMA", "IL_1]"): the unfinished tail is held back until the
 * next piece shows whether it is a token.
 */
import type { Caller } from '../identity/caller.js';
import type { ModelBoundary } from '../pii/boundary.js';

/** Longer than any token literal ([CARD_123456789]); a '[' further back than this is plain text. */
const MAX_TOKEN_CHARS = 24;

export async function forUser(boundary: ModelBoundary, caller: Caller, text: string): Promise<string> {
  if (!text.includes('[')) return text;
  return (await boundary.fromModel(caller, text)).text;
}

export class DisplayStream {
  private held = '';

  constructor(
    private readonly boundary: ModelBoundary,
    private readonly caller: Caller,
  ) {}

  /** What can be shown of the text so far. */
  async push(delta: string): Promise<string> {
    const text = this.held + delta;
    const open = text.lastIndexOf('[');
    const cut = open >= 0 && text.indexOf(']', open) < 0 && text.length - open <= MAX_TOKEN_CHARS ? open : text.length;
    this.held = text.slice(cut);
    return forUser(this.boundary, this.caller, text.slice(0, cut));
  }

  async end(): Promise<string> {
    const rest = this.held;
    this.held = '';
    return forUser(this.boundary, this.caller, rest);
  }
}
