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
 *   MARKDOWN_TIME_LIMIT_MS is given up (the thread is stopped and started afresh);
 * - plain text is shown up to PLAIN_MAX_CHARS characters.
 * So the gateway's own thread only escapes text and passes messages, whatever it is sent.
 */
import { Worker } from 'node:worker_threads';

/** Longest text formatted as Markdown; longer text is shown as plain text. */
export const MARKDOWN_MAX_CHARS = 120_000;
/** Longest time one text may take to format before it is shown as plain text. */
export const MARKDOWN_TIME_LIMIT_MS = 5_000;
/** Longest plain text shown in place of Markdown. */
export const PLAIN_MAX_CHARS = 200_000;

export const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** `text` as escaped plain text under a note: what is shown when it is not formatted. */
export function plainHtml(text: string, note: string): string {
  const cut = text.length > PLAIN_MAX_CHARS;
  const fullNote = cut ? `${note} Only its first ${PLAIN_MAX_CHARS} characters are shown.` : note;
  return `<p class="notice" role="status">${escapeHtml(fullNote)}</p>\n<pre class="text">${escapeHtml(cut ? text.slice(0, PLAIN_MAX_CHARS) : text)}</pre>\n`;
}

interface Job {
  id: number;
  text: string;
  resolve: (html: string) => void;
}

/** The renderer's thread: started at the first text, one text at a time, started afresh after a text it gave up on. */
class RendererThread {
  private worker?: Worker;
  private readonly queue: Job[] = [];
  private current?: { job: Job; timer: NodeJS.Timeout };
  private seq = 0;

  render(text: string): Promise<string> {
    return new Promise((resolve) => {
      this.queue.push({ id: ++this.seq, text, resolve });
      this.next();
    });
  }

  private next(): void {
    if (this.current) return;
    const job = this.queue.shift();
    if (!job) return;
    let worker: Worker;
    try {
      worker = this.started();
    } catch (e) {
      job.resolve(plainHtml(job.text, `This text could not be formatted (${(e as Error).message}), so it is shown as it is.`));
      return this.next();
    }
    const timer = setTimeout(() => this.giveUp(`formatting it took longer than ${MARKDOWN_TIME_LIMIT_MS / 1000} s`), MARKDOWN_TIME_LIMIT_MS);
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
      c.job.resolve(m.html ?? plainHtml(c.job.text, `This text could not be formatted (${m.error}), so it is shown as it is.`));
      this.next();
    });
    const lost = (why: string) => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      this.finishCurrent(why);
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
    this.finishCurrent(why);
  }

  private finishCurrent(why: string): void {
    const c = this.current;
    if (!c) return;
    clearTimeout(c.timer);
    this.current = undefined;
    c.job.resolve(plainHtml(c.job.text, `This text is shown as it is: ${why}.`));
    this.next();
  }
}

const renderer = new RendererThread();

/** Safe HTML for `text`: Markdown rendered off the gateway's thread, or plain text with a note past the bounds above. */
export function renderMarkdown(text: string): Promise<string> {
  if (text.length > MARKDOWN_MAX_CHARS) {
    return Promise.resolve(plainHtml(text, `This text is shown as it is, not formatted: it is ${text.length} characters long, and Markdown is formatted up to ${MARKDOWN_MAX_CHARS}.`));
  }
  return renderer.render(text);
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
