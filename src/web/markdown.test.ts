import { describe, expect, it } from 'vitest';
import { tokenRegex } from '../pii/token-format.js';
import { MARKDOWN_MAX_CHARS, MARKDOWN_QUEUED_PER_OWNER, markdownRenders, PLAIN_MAX_CHARS, renderMarkdown, renderMarkdownFor, replaceInText, type Rendered } from './markdown.js';

describe('renderMarkdown', () => {
  it('formats Markdown, shows raw HTML as text, links only to http(s) and mailto, without the page as opener', async () => {
    const html = await renderMarkdown('**bold** <script>alert(1)</script> [ok](https://example.com/a) [bad](javascript:alert(1))', { owner: 1 });
    expect(html).toContain('<strong>bold</strong>');
    expect(html).toContain('&lt;script&gt;');
    expect(html).not.toContain('<script');
    expect(html).toContain('<a href="https://example.com/a" rel="noopener noreferrer nofollow" target="_blank">ok</a>');
    expect(html).not.toContain('javascript:alert(1)"');
  });

  it('renders many texts at once, each to its own answer', async () => {
    const out = await Promise.all(Array.from({ length: 20 }, (_, i) => renderMarkdown(`# title ${i}`, { owner: i % 5 })));
    out.forEach((html, i) => expect(html).toBe(`<h1>title ${i}</h1>\n`));
  });

  it('shows text over its bound as plain text with a note, cut at the plain-text bound', async () => {
    const html = await renderMarkdown('['.repeat(4_000_000), { owner: 1 });
    expect(html).toMatch(/^<p class="notice" role="status">This text is shown as it is, not formatted: it is 4000000 characters long, and Markdown is formatted up to 120000\. Only its first 200000 characters are shown\.<\/p>/);
    expect(html.length).toBeLessThan(PLAIN_MAX_CHARS + 500);
    const just = await renderMarkdown('x'.repeat(MARKDOWN_MAX_CHARS + 1), { owner: 1 });
    expect(just).toContain('<pre class="text">');
  });

  it('formats bracket-heavy Markdown within its bound (on its own thread)', async () => {
    const html = await renderMarkdown('!['.repeat(MARKDOWN_MAX_CHARS / 2), { owner: 1 });
    expect(html.startsWith('<p>![')).toBe(true);
    expect(html.length).toBeLessThan(MARKDOWN_MAX_CHARS + 100);
  });
});

describe('renderMarkdownFor, with many owners', () => {
  /** Bracket-heavy text: each takes the thread a while. */
  const slow = (i: number) => `${'![a'.repeat(8_000)} ${i}`;

  it("serves owners in turn: another owner's text is formatted before the next of one owner's many, and one owner's texts past its share are shown as they are", async () => {
    const finished: string[] = [];
    const noted = (name: string, p: Promise<Rendered>) => p.then((r) => (finished.push(name), r));
    const before = markdownRenders();
    const many = Array.from({ length: MARKDOWN_QUEUED_PER_OWNER + 3 }, (_, i) => noted(`a${i}`, renderMarkdownFor(slow(i), { owner: 'a' })));
    const other = noted('b', renderMarkdownFor('**from b**', { owner: 'b' }));
    const [mine, theirs] = await Promise.all([Promise.all(many), other]);

    expect(theirs).toEqual({ html: '<p><strong>from b</strong></p>\n', lasting: true });
    // One of a's texts was being formatted when b's came; b's is next.
    expect(finished.indexOf('b')).toBe(finished.indexOf('a0') + 1);
    expect(finished.indexOf('b')).toBeLessThan(finished.indexOf('a1'));
    // One formatting, MARKDOWN_QUEUED_PER_OWNER waiting: the rest are plain text, not kept.
    mine.slice(0, MARKDOWN_QUEUED_PER_OWNER + 1).forEach((r) => expect(r).toMatchObject({ lasting: true, html: expect.stringMatching(/^<p>!\[a/) }));
    for (const r of mine.slice(MARKDOWN_QUEUED_PER_OWNER + 1)) {
      expect(r.lasting).toBe(false);
      expect(r.html).toContain(`This text is shown as it is: ${MARKDOWN_QUEUED_PER_OWNER} of your texts are waiting to be formatted already; open it again in a moment to see it formatted.`);
    }
    expect(markdownRenders() - before).toBe(MARKDOWN_QUEUED_PER_OWNER + 2);
  });

  it('does not format a waiting text whose request ended', async () => {
    const before = markdownRenders();
    const first = renderMarkdownFor(slow(0), { owner: 'c' });
    const ended = new AbortController();
    const waiting = renderMarkdownFor('# never formatted', { owner: 'c', signal: ended.signal });
    ended.abort();
    const dropped = await waiting;
    expect(dropped.lasting).toBe(false);
    expect(dropped.html).toContain('This text is shown as it is: the request ended before it was formatted.');
    expect((await first).lasting).toBe(true);
    expect(markdownRenders() - before).toBe(1);
  });

  it("gives up a text past the caller's time limit, and shows it as plain text for good", async () => {
    const r = await renderMarkdownFor('!['.repeat(MARKDOWN_MAX_CHARS / 2), { owner: 'd', timeLimitMs: 1 });
    expect(r.lasting).toBe(true);
    expect(r.html).toContain('This text is shown as it is: formatting it took longer than 0.001 s.');
    expect(await renderMarkdown('*still formatting*', { owner: 'd' })).toBe('<p><em>still formatting</em></p>\n');
  });
});

describe('replaceInText', () => {
  it('replaces tokens in text content only: link destinations keep what was rendered, values are escaped', async () => {
    const html = await renderMarkdown('Mail [EMAIL_1]: [click](https://evil.example/?q=[EMAIL_1]) `[NAME_2]` <https://x.example/[EMAIL_1]>', { owner: 1 });
    const shown = await replaceInText(html, tokenRegex(), (t) => (t === '[EMAIL_1]' ? 'ana@corp.example' : '<b>Ana</b>'));
    expect(shown).toContain('Mail ana@corp.example:');
    expect(shown).toContain('href="https://evil.example/?q=%5BEMAIL_1%5D"');
    expect(shown).toContain('<code>&#60;b&#62;Ana&#60;/b&#62;</code>');
    expect(shown).not.toMatch(/href="[^"]*ana@corp/);
    expect(shown).toContain('href="https://x.example/%5BEMAIL_1%5D"');
  });
});
