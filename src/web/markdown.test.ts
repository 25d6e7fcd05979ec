import { describe, expect, it } from 'vitest';
import { tokenRegex } from '../pii/token-format.js';
import { MARKDOWN_MAX_CHARS, PLAIN_MAX_CHARS, renderMarkdown, replaceInText } from './markdown.js';

describe('renderMarkdown', () => {
  it('formats Markdown, shows raw HTML as text, links only to http(s) and mailto, without the page as opener', async () => {
    const html = await renderMarkdown('**bold** <script>alert(1)</script> [ok](https://example.com/a) [bad](javascript:alert(1))');
    expect(html).toContain('<strong>bold</strong>');
    expect(html).toContain('&lt;script&gt;');
    expect(html).not.toContain('<script');
    expect(html).toContain('<a href="https://example.com/a" rel="noopener noreferrer nofollow" target="_blank">ok</a>');
    expect(html).not.toContain('javascript:alert(1)"');
  });

  it('renders many texts at once, each to its own answer', async () => {
    const out = await Promise.all(Array.from({ length: 20 }, (_, i) => renderMarkdown(`# title ${i}`)));
    out.forEach((html, i) => expect(html).toBe(`<h1>title ${i}</h1>\n`));
  });

  it('shows text over its bound as plain text with a note, cut at the plain-text bound', async () => {
    const html = await renderMarkdown('['.repeat(4_000_000));
    expect(html).toMatch(/^<p class="notice" role="status">This text is shown as it is, not formatted: it is 4000000 characters long, and Markdown is formatted up to 120000\. Only its first 200000 characters are shown\.<\/p>/);
    expect(html.length).toBeLessThan(PLAIN_MAX_CHARS + 500);
    const just = await renderMarkdown('x'.repeat(MARKDOWN_MAX_CHARS + 1));
    expect(just).toContain('<pre class="text">');
  });

  it('formats bracket-heavy Markdown within its bound (on its own thread)', async () => {
    const html = await renderMarkdown('!['.repeat(MARKDOWN_MAX_CHARS / 2));
    expect(html.startsWith('<p>![')).toBe(true);
    expect(html.length).toBeLessThan(MARKDOWN_MAX_CHARS + 100);
  });
});

describe('replaceInText', () => {
  it('replaces tokens in text content only: link destinations keep what was rendered, values are escaped', async () => {
    const html = await renderMarkdown('Mail [EMAIL_1]: [click](https://evil.example/?q=[EMAIL_1]) `[NAME_2]` <https://x.example/[EMAIL_1]>');
    const shown = await replaceInText(html, tokenRegex(), (t) => (t === '[EMAIL_1]' ? 'ana@corp.example' : '<b>Ana</b>'));
    expect(shown).toContain('Mail ana@corp.example:');
    expect(shown).toContain('href="https://evil.example/?q=%5BEMAIL_1%5D"');
    expect(shown).toContain('<code>&#60;b&#62;Ana&#60;/b&#62;</code>');
    expect(shown).not.toMatch(/href="[^"]*ana@corp/);
    expect(shown).toContain('href="https://x.example/%5BEMAIL_1%5D"');
  });
});
