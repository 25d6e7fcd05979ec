/**
 * Model text on its way to the user: tokens ([EMAIL_1]) back to the values they stand
 * for, in the conversation's scope. Streamed text arrives in pieces, and a token may be
 * cut between two of them ("[EMA", "IL_1]"): the unfinished tail is held back until the
 * next piece shows whether it is a token.
 */
import type { Caller } from '../auth/caller.js';
import type { ModelBoundary } from '../pii/boundary.js';
import { UrlSpans, type Span } from './url-spans.js';

export async function forUser(boundary: ModelBoundary, caller: Caller, text: string): Promise<string> {
  if (!text.includes('[')) return text;
  return (await boundary.fromModel(caller, text)).text;
}

/**
 * An answer as the user reads it, which clients (the /v1 API's, the web page once the
 * turn ends) render as Markdown: values go back only where a client shows text. In an
 * address (a link's or image's destination, an autolink, a bare URL; see url-spans.ts)
 * tokens stay as the model wrote them, so a link the model builds cannot carry a value
 * it never saw to a host it names.
 */
export class DisplayStream {
  private readonly spans = new UrlSpans();

  constructor(
    private readonly boundary: ModelBoundary,
    private readonly caller: Caller,
  ) {}

  /** What can be shown of the text so far. */
  push(delta: string): Promise<string> {
    return this.shown(this.spans.push(delta));
  }

  end(): Promise<string> {
    return this.shown(this.spans.end());
  }

  private async shown(spans: Span[]): Promise<string> {
    const parts = await Promise.all(spans.map(async (s) => (s.url ? s.text : forUser(this.boundary, this.caller, s.text))));
    return parts.join('');
  }
}
