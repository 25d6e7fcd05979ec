/**
 * What one model round may hand the gateway, bounded where it enters: a middleware on
 * every language model the agent uses (models.ts), so the AI SDK itself never holds,
 * parses or serialises more than the bounds, whatever a provider (or whoever answers in
 * its place) streams.
 *
 * - Answer text: MAX_ROUND_TEXT_CHARS per round; what is cut is counted and reported in
 *   the round's finish metadata (`sandgate.cutTextChars`), from which the loop writes a
 *   note that the user and the model read.
 * - Tool-call arguments: text too long or nested too deep becomes a note the loop
 *   refuses as a tool error (tool-input.ts), before the SDK parses it.
 * - Time: the providers read their responses through `yieldingFetch`, at most
 *   YIELD_BYTES per turn of the event loop. The SDK pumps a response as fast as it
 *   arrives, and a provider that sends megabytes at once would otherwise be parsed in
 *   one go while every other request waits; in pieces, no turn holds more than one
 *   event's worth of parsing (an event's JSON is parsed when its last piece arrives).
 */
import type { LanguageModelMiddleware } from 'ai';
import { boundedInputText } from './tool-input.js';

/** Characters of answer text one model round keeps (and streams to the user); the rest is cut with a note. */
export const MAX_ROUND_TEXT_CHARS = 100_000;

/** Where the middleware reports what it cut, in the round's provider metadata. */
const METADATA_KEY = 'sandgate';

/** `piece`, or as much of it as fits `room` characters without splitting a character. */
export function withinRoom(piece: string, room: number): string {
  if (piece.length <= room) return piece;
  if (room <= 0) return '';
  const end = /[\uD800-\uDBFF]/.test(piece[room - 1]!) ? room - 1 : room;
  return piece.slice(0, end);
}

/** Characters of answer text the middleware cut from a round, from the round's provider metadata. */
export function cutTextChars(providerMetadata: unknown): number {
  const n = (providerMetadata as Record<string, { cutTextChars?: unknown } | undefined> | undefined)?.[METADATA_KEY]?.cutTextChars;
  return typeof n === 'number' && n > 0 ? n : 0;
}

export const boundedModel: LanguageModelMiddleware = {
  specificationVersion: 'v3',
  async wrapGenerate({ doGenerate }) {
    const result = await doGenerate();
    let kept = 0;
    let cut = 0;
    const content = result.content.map((c) => {
      if (c.type === 'tool-call') return { ...c, input: boundedInputText(c.input) };
      if (c.type !== 'text') return c;
      const text = withinRoom(c.text, MAX_ROUND_TEXT_CHARS - kept);
      kept += text.length;
      cut += c.text.length - text.length;
      return { ...c, text };
    });
    return { ...result, content, ...(cut ? { providerMetadata: { ...result.providerMetadata, [METADATA_KEY]: { cutTextChars: cut } } } : {}) };
  },
  async wrapStream({ doStream }) {
    const { stream, ...rest } = await doStream();
    let kept = 0;
    let cut = 0;
    return {
      ...rest,
      stream: stream.pipeThrough(
        new TransformStream({
          transform(part, controller) {
            if (part.type === 'text-delta') {
              const delta = withinRoom(part.delta, MAX_ROUND_TEXT_CHARS - kept);
              kept += delta.length;
              cut += part.delta.length - delta.length;
              if (delta) controller.enqueue(delta === part.delta ? part : { ...part, delta });
            } else if (part.type === 'tool-call') {
              controller.enqueue({ ...part, input: boundedInputText(part.input) });
            } else if (part.type === 'finish' && cut) {
              controller.enqueue({ ...part, providerMetadata: { ...part.providerMetadata, [METADATA_KEY]: { cutTextChars: cut } } });
            } else {
              controller.enqueue(part);
            }
          },
        }),
      ),
    };
  },
};

/** Bytes of a model's response handed to the AI SDK per turn of the event loop. */
const YIELD_BYTES = 16 * 1024;

/**
 * fetch for the model providers: the same request, with the response body handed over
 * YIELD_BYTES at a time, each after the event loop has had a turn.
 */
export const yieldingFetch: typeof fetch = async (input, init) => {
  const response = await fetch(input, init);
  if (!response.body) return response;
  const reader = response.body.getReader();
  let pending: Uint8Array | undefined;
  const body = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        await new Promise((resolve) => setImmediate(resolve));
        if (!pending?.length) {
          const { done, value } = await reader.read();
          if (done) return controller.close();
          pending = value;
        }
        controller.enqueue(pending.subarray(0, YIELD_BYTES));
        pending = pending.subarray(YIELD_BYTES);
      },
      cancel: (reason) => reader.cancel(reason),
    },
    { highWaterMark: 0 },
  );
  return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
};
