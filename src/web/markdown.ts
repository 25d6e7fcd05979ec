/**
 * Markdown from a model, rendered for the page: markdown-it with raw HTML off (any tag a
 * model writes is shown as text), links only to http(s) and mailto, and every link
 * opened without the page as opener. What cannot run stays text; the page's CSP is the
 * second wall (no inline script, images only from the gateway).
 */
import MarkdownIt from 'markdown-it';

const md = new MarkdownIt({ html: false, linkify: true, breaks: false, typographer: false });
md.validateLink = (url) => /^(https?:|mailto:|#)/i.test(url.trim());
const defaultLinkOpen = md.renderer.rules.link_open ?? ((tokens, idx, options, _env, self) => self.renderToken(tokens, idx, options));
md.renderer.rules.link_open = (tokens, idx, options, env, self) => {
  tokens[idx]!.attrSet('rel', 'noopener noreferrer nofollow');
  tokens[idx]!.attrSet('target', '_blank');
  return defaultLinkOpen(tokens, idx, options, env, self);
};

/** Safe HTML for `text`. */
export function renderMarkdown(text: string): string {
  return md.render(text);
}
