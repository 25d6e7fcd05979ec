// The Markdown renderer's own thread (started by markdown.ts): markdown-it with raw HTML
// off (any tag a model writes is shown as text), links only to http(s), mailto and
// fragments, every link opened without the page as opener. It runs here because
// markdown-it takes 0.3-7 µs a character (bracket-heavy text is the slowest), which on
// the gateway's own thread would hold every other request. Plain JavaScript: a worker
// thread is loaded by Node itself, without the TypeScript loader of the main thread.
import os from 'node:os';
import { parentPort } from 'node:worker_threads';
import MarkdownIt from 'markdown-it';

// This thread yields the CPU to the gateway's own: on Linux the niceness of thread 0 is
// this thread's alone. Where it cannot be set, rendering runs at the process's priority.
try {
  os.setPriority(0, 10);
} catch {
  /* not permitted here */
}

const md = new MarkdownIt({ html: false, linkify: true, breaks: false, typographer: false });
md.validateLink = (url) => /^(https?:|mailto:|#)/i.test(url.trim());
const defaultLinkOpen = md.renderer.rules.link_open ?? ((tokens, idx, options, _env, self) => self.renderToken(tokens, idx, options));
md.renderer.rules.link_open = (tokens, idx, options, env, self) => {
  tokens[idx].attrSet('rel', 'noopener noreferrer nofollow');
  tokens[idx].attrSet('target', '_blank');
  return defaultLinkOpen(tokens, idx, options, env, self);
};

parentPort.on('message', ({ id, text }) => {
  try {
    parentPort.postMessage({ id, html: md.render(text) });
  } catch (e) {
    parentPort.postMessage({ id, error: String(e && e.message ? e.message : e) });
  }
});
