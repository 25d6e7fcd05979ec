/**
 * Markdown from a model or a workspace file, rendered for the page: safe HTML (the
 * renderer, markdown-worker.mjs, turns raw HTML into text and links only to http(s),
 * mailto and fragments, opened without the page as opener; the page's CSP is the second
 * wall), made without holding the gateway's thread.
 *
 * Bounds, each ending in plain text with a note that says why:
 * - text over MARKDOWN_MAX_CHARS is not formatted (markdown-it's cost grows with the
 *   length, several microseconds a character for bracket-heavy text);
 * - rendering runs on one worker thread, one text at a time, and a text that takes over
 *   its time limit (MARKDOWN_TIME_LIMIT_MS unless the caller gives a shorter one) is
 *   given up (the thread is stopped and started afresh);
 * - waiting texts are served owner by owner (a user's texts never wait behind more than
 *   one text of each other user), at most MARKDOWN_QUEUED_PER_OWNER of one owner's and
 *   MARKDOWN_QUEUE_MAX in all wait, and a text whose request ended is not formatted;
 * - plain text is shown up to PLAIN_MAX_CHARS characters.
 * So the gateway's own thread only escapes text and passes messages, whatever it is sent.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { Worker } from 'node:worker_threads';
import { escapeHtml, renderPartial } from './render.js';

/** Longest text formatted as Markdown; longer text is shown as plain text. */
export const MARKDOWN_MAX_CHARS = 120_000;
/** Longest time one text may take to format before it is shown as plain text. */
export const MARKDOWN_TIME_LIMIT_MS = 5_000;
/** Longest plain text shown in place of Markdown. */
export const PLAIN_MAX_CHARS = 200_000;

/** `text` as escaped plain text under a note (views/web/plain-text.eta): what is shown when it is not formatted. */
export function plainHtml(text: string, note: string): string {
  const cut = text.length > PLAIN_MAX_CHARS;
  const fullNote = cut ? `${note} Only its first ${PLAIN_MAX_CHARS} characters are shown.` : note;
  return renderPartial('plain-text', { note: fullNote, text: cut ? text.slice(0, PLAIN_MAX_CHARS) : text });
}

/** Texts one owner may have waiting (besides the one being formatted); more are shown as plain text with a note. */
export const MARKDOWN_QUEUED_PER_OWNER = 4;
/** Texts waiting in all; more are shown as plain text with a note. */
export const MARKDOWN_QUEUE_MAX = 64;

/** Who a text is formatted for, and how long it may take. */
export interface RenderOptions {
  /** Whose request it is (a user's id): owners are served in turn, so one owner's texts never hold another's. */
  owner: string | number;
  /** The request's end: a text still waiting when it fires is not formatted. */
  signal?: AbortSignal;
  /** Longest time the text may take to format; MARKDOWN_TIME_LIMIT_MS when not given. */
  timeLimitMs?: number;
}

/** What renderMarkdownFor made, and whether it is worth keeping. */
export interface Rendered {
  html: string;
  /**
   * False when the text is plain for a passing reason (the queue was full, the request
   * ended, the formatter failed): formatting it again later may succeed, so it is not kept.
   */
  lasting: boolean;
}

interface Job {
  id: number;
  text: string;
  owner: string | number;
  timeLimitMs: number;
  signal?: AbortSignal;
  onAbort?: () => void;
  resolve: (r: Rendered) => void;
}

// The thread, its timers and the promises it settles belong to no request: made inside
// the first request that needed them, a later failure of theirs would be reported as
// that request's (src/http/request-context.ts).
const outsideRequests = AsyncLocalStorage.snapshot();

const asIs = (job: Job, why: string, lasting: boolean): Rendered => ({ html: plainHtml(job.text, `This text is shown as it is: ${why}.`), lasting });

/**
 * The renderer's thread: started at the first text, one text at a time, started afresh
 * after a text it gave up on. Waiting texts are taken owner by owner: next is the oldest
 * text of the owner served longest ago (or never), so an owner waits behind at most one
 * text of each other owner, however many those have sent.
 */
class RendererThread {
  private worker?: Worker;
  private readonly queue: Job[] = [];
  private current?: { job: Job; timer: NodeJS.Timeout };
  private seq = 0;
  /** When each owner with a text waiting or being formatted was last served (a dispatch count). */
  private readonly servedAt = new Map<string | number, number>();
  private dispatched = 0;
  /** Texts the thread has formatted. */
  rendered = 0;

  render(text: string, options: RenderOptions): Promise<Rendered> {
    return new Promise((resolve) => {
      const job: Job = { id: ++this.seq, text, owner: options.owner, timeLimitMs: options.timeLimitMs ?? MARKDOWN_TIME_LIMIT_MS, signal: options.signal, resolve };
      if (options.signal?.aborted) return resolve(asIs(job, 'the request ended before it was formatted', false));
      const own = this.queue.filter((j) => j.owner === job.owner).length;
      if (own >= MARKDOWN_QUEUED_PER_OWNER || this.queue.length >= MARKDOWN_QUEUE_MAX) {
        const many = own >= MARKDOWN_QUEUED_PER_OWNER ? `${own} of your texts are waiting to be formatted already` : 'the formatter is busy';
        return resolve(asIs(job, `${many}; open it again in a moment to see it formatted`, false));
      }
      if (job.signal) {
        job.onAbort = () => this.drop(job);
        job.signal.addEventListener('abort', job.onAbort, { once: true });
      }
      this.queue.push(job);
      outsideRequests(() => this.next());
    });
  }

  /** A waiting text whose request ended: taken out of the queue, never formatted. */
  private drop(job: Job): void {
    const i = this.queue.indexOf(job);
    if (i < 0) return;
    this.queue.splice(i, 1);
    this.settle(job, asIs(job, 'the request ended before it was formatted', false));
  }

  private settle(job: Job, r: Rendered): void {
    if (job.onAbort) job.signal?.removeEventListener('abort', job.onAbort);
    if (this.current?.job.owner !== job.owner && !this.queue.some((j) => j.owner === job.owner)) this.servedAt.delete(job.owner);
    job.resolve(r);
  }

  /** The oldest text of the owner served longest ago, out of the queue. */
  private take(): Job | undefined {
    const at = (owner: string | number) => this.servedAt.get(owner) ?? -1;
    let best: Job | undefined;
    for (const j of this.queue) if (!best || at(j.owner) < at(best.owner)) best = j;
    if (best) this.queue.splice(this.queue.indexOf(best), 1);
    return best;
  }

  private next(): void {
    if (this.current) return;
    const job = this.take();
    if (!job) return;
    this.servedAt.set(job.owner, ++this.dispatched);
    let worker: Worker;
    try {
      worker = this.started();
    } catch (e) {
      this.settle(job, asIs(job, `it could not be formatted (${(e as Error).message})`, false));
      return this.next();
    }
    const timer = setTimeout(() => this.giveUp(`formatting it took longer than ${job.timeLimitMs / 1000} s`), job.timeLimitMs);
    timer.unref();
    this.current = { job, timer };
    worker.postMessage({ id: job.id, text: job.text });
  }

  private started(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(new URL('./markdown-worker.mjs', import.meta.url));
    // Idle, it keeps nothing alive: a gateway that stops does not wait for it.
    worker.unref();
    worker.on('message', (m: { id: number; html?: string; error?: string }) => {
      const c = this.current;
      if (!c || c.job.id !== m.id) return;
      clearTimeout(c.timer);
      this.current = undefined;
      this.rendered++;
      this.settle(c.job, m.html !== undefined ? { html: m.html, lasting: true } : asIs(c.job, `it could not be formatted (${m.error})`, true));
      this.next();
    });
    const lost = (why: string) => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      this.finishCurrent(why, false);
    };
    worker.on('error', (e) => lost(`the formatter failed: ${e.message}`));
    worker.on('exit', () => lost('the formatter stopped'));
    this.worker = worker;
    return worker;
  }

  /** The current text is shown as plain text; the thread, busy with it, is replaced. */
  private giveUp(why: string): void {
    const worker = this.worker;
    this.worker = undefined;
    void worker?.terminate();
    this.finishCurrent(why, true);
  }

  private finishCurrent(why: string, lasting: boolean): void {
    const c = this.current;
    if (!c) return;
    clearTimeout(c.timer);
    this.current = undefined;
    this.settle(c.job, asIs(c.job, why, lasting));
    this.next();
  }
}

const renderer = new RendererThread();

/** Texts the renderer's thread has formatted since the gateway started (a text shown as plain text is not counted). */
export const markdownRenders = () => renderer.rendered;

/**
 * Safe HTML for `text`: Markdown rendered off the gateway's thread, or plain text with a
 * note past the bounds above; `lasting` says whether the result is worth keeping.
 */
export function renderMarkdownFor(text: string, options: RenderOptions): Promise<Rendered> {
  if (text.length > MARKDOWN_MAX_CHARS) {
    return Promise.resolve({ html: plainHtml(text, `This text is shown as it is, not formatted: it is ${text.length} characters long, and Markdown is formatted up to ${MARKDOWN_MAX_CHARS}.`), lasting: true });
  }
  return renderer.render(text, options);
}

/** renderMarkdownFor's HTML alone. */
export async function renderMarkdown(text: string, options: RenderOptions): Promise<string> {
  return (await renderMarkdownFor(text, options)).html;
}

/**
 * `html` (made by renderMarkdown) with `pattern`'s matches in its text content replaced
 * by `replace(match)` (escaped here), never inside a tag: an attribute (a link's
 * destination, an image's source) keeps what was rendered. Safe because the renderer
 * escapes `<` and `>` in text and in attribute values alike, so every `<…>` is a tag.
 * `pattern` must be global and must not match `<`.
 */
export async function replaceInText(html: string, pattern: RegExp, replace: (match: string) => string | Promise<string>): Promise<string> {
  const either = new RegExp(`(<[^>]*>)|(?:${pattern.source})`, 'g');
  const found = new Set<string>();
  for (const m of html.matchAll(either)) if (m[1] === undefined) found.add(m[0]);
  if (!found.size) return html;
  const values = new Map(await Promise.all([...found].map(async (s) => [s, escapeHtml(await replace(s))] as const)));
  return html.replace(either, (all: string, tag: string | undefined) => (tag !== undefined ? tag : (values.get(all) ?? all)));
}
