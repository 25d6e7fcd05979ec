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
 * - Tool calls: MAX_TOOL_CALLS_PER_ROUND per round; the calls past it (and the pieces
 *   of their arguments) are dropped, counted in the finish metadata
 *   (`sandgate.droppedToolCalls`), from which the loop writes one note. So a round
 *   stores at most the cap's calls, each bounded, and one note, however many a
 *   provider streams.
 * - Time: the providers read their responses through `yieldingFetch`, at most
 *   YIELD_BYTES per turn of the event loop. The SDK pumps a response as fast as it
 *   arrives, and a provider that sends megabytes at once would otherwise be parsed in
 *   one go while every other request waits; in pieces, no turn holds more than one
 *   event's worth of parsing (an event's JSON is parsed when its last piece arrives).
 */
import type { LanguageModelMiddleware } from 'ai';
import { boundedInputText, MAX_TOOL_CALLS_PER_ROUND } from './tool-input.js';

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

interface Cuts {
  cutTextChars?: number;
  droppedToolCalls?: number;
}

const cutOf = (providerMetadata: unknown, what: keyof Cuts): number => {
  const n = (providerMetadata as Record<string, Record<string, unknown> | undefined> | undefined)?.[METADATA_KEY]?.[what];
  return typeof n === 'number' && n > 0 ? n : 0;
};

/** Characters of answer text the middleware cut from a round, from the round's provider metadata. */
export const cutTextChars = (providerMetadata: unknown): number => cutOf(providerMetadata, 'cutTextChars');

/** Tool calls past MAX_TOOL_CALLS_PER_ROUND the middleware dropped from a round, from the round's provider metadata. */
export const droppedToolCalls = (providerMetadata: unknown): number => cutOf(providerMetadata, 'droppedToolCalls');

/** `metadata` with what was cut added under the middleware's key, or as it is when nothing was. */
function withCuts<M extends object | undefined>(metadata: M, cuts: Cuts): M {
  const said = Object.fromEntries(Object.entries(cuts).filter(([, n]) => n > 0));
  return Object.keys(said).length ? ({ ...metadata, [METADATA_KEY]: said } as M) : metadata;
}

export const boundedModel: LanguageModelMiddleware = {
  specificationVersion: 'v3',
  async wrapGenerate({ doGenerate }) {
    const result = await doGenerate();
    let kept = 0;
    let cut = 0;
    let calls = 0;
    let dropped = 0;
    const content = result.content.flatMap((c): (typeof result.content)[number][] => {
      if (c.type === 'tool-call') {
        if (calls >= MAX_TOOL_CALLS_PER_ROUND) {
          dropped++;
          return [];
        }
        calls++;
        return [{ ...c, input: boundedInputText(c.input) }];
      }
      if (c.type !== 'text') return [c];
      const text = withinRoom(c.text, MAX_ROUND_TEXT_CHARS - kept);
      kept += text.length;
      cut += c.text.length - text.length;
      return [{ ...c, text }];
    });
    const providerMetadata = withCuts(result.providerMetadata, { cutTextChars: cut, droppedToolCalls: dropped });
    return { ...result, content, ...(providerMetadata ? { providerMetadata } : {}) };
  },
  async wrapStream({ doStream }) {
    const { stream, ...rest } = await doStream();
    let kept = 0;
    let cut = 0;
    let calls = 0;
    let dropped = 0;
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
              if (calls >= MAX_TOOL_CALLS_PER_ROUND) dropped++;
              else controller.enqueue({ ...part, input: boundedInputText(part.input) });
              calls++;
            } else if (part.type === 'tool-input-start' || part.type === 'tool-input-delta' || part.type === 'tool-input-end') {
              // The pieces of a call's arguments as they stream: those of calls past the cap go with them.
              if (calls < MAX_TOOL_CALLS_PER_ROUND) controller.enqueue(part);
            } else if (part.type === 'finish' && (cut || dropped)) {
              controller.enqueue({ ...part, providerMetadata: withCuts(part.providerMetadata, { cutTextChars: cut, droppedToolCalls: dropped }) });
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
