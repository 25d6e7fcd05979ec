import { afterAll, describe, expect, it } from 'vitest';
import { generateCorpus } from '../../test/support/pii-corpus.js';
import { createDetector } from './detector.js';
import { MAX_RECORD } from './records.js';
import { openTestVault, randomChunks, seededRandom } from '../../test/support/pii.js';

const t = await openTestVault();
afterAll(() => t.cleanup());
const ana = await t.userId('ana');
const scope = await t.vault.scope({ userId: ana, kind: 'conversation', id: 'c1' });
const random = seededRandom(7);

/** Pushes every chunk at once, as output arriving faster than the vault stores: the outputs still come in order. */
async function streamed(chunks: readonly string[], into = scope): Promise<{ text: string; found: unknown[] }> {
  const s = into.stream();
  const out = (await Promise.all(chunks.map((c) => s.push(c)))).join('') + (await s.end());
  return { text: out, found: [...s.found] };
}

describe('streaming tokenization equals whole-text tokenization', () => {
  const docs = generateCorpus({ seed: 99, docsPerKind: 6 });
  // Every kind alone, and several documents run together (state such as a CSV header
  // must carry across chunk boundaries, and end where the text says, not the chunks).
  const texts = [...docs.map((d) => d.text), docs.map((d) => d.text).join('\n'), docs.slice(0, 10).map((d) => d.text).join('')];

  it.each([1, 3, 17, 256, 8192])('over random chunkings of at most %i characters', async (maxChunk) => {
    for (const text of texts) {
      const whole = await scope.tokenize(text);
      const s = await streamed(randomChunks(text, random, maxChunk));
      expect(s.text).toBe(whole.text);
      expect(s.found).toEqual(whole.found);
    }
  });

  it('finds a value split across two chunks at every position', async () => {
    const text = 'mail jane.roe@example.com, card 4111 1111 1111 1111, key AKIAIOSFODNN7EXAMPLE, Omer Walker\n';
    const fresh = await t.vault.scope({ userId: ana, kind: 'conversation', id: 'c2' });
    const whole = (await fresh.tokenize(text)).text;
    expect(whole).toBe('mail [EMAIL_1], card [CARD_1], key [SECRET_1], [NAME_1]\n');
    for (let i = 0; i <= text.length; i++) expect((await streamed([text.slice(0, i), text.slice(i)], fresh)).text).toBe(whole);
  });

  it('keeps a multi-line private key whole whatever the chunking', async () => {
    const key = ['-----BEGIN OPENSSH PRIVATE KEY-----', ...Array.from({ length: 30 }, (_, i) => 'A'.repeat(60) + String(i).padStart(4, '0')), '-----END OPENSSH PRIVATE KEY-----'].join('\n');
    const text = `config:\n${key}\ndone\n`;
    expect((await scope.tokenize(text)).text).toMatch(/^config:\n\[SECRET_\d+\]\ndone\n$/);
    for (const max of [1, 5, 100]) expect((await streamed(randomChunks(text, random, max))).text).toBe((await scope.tokenize(text)).text);
  });

  it('holds back at most one record, and cuts over-long lines where the text says', async () => {
    const line = Array.from({ length: 12_000 }, (_, i) => `{"id":${i},"email":"user${i}@example.com"}`).join(',');
    expect(line.length).toBeGreaterThan(3 * MAX_RECORD);
    const s = scope.stream();
    let emitted = 0;
    for (const c of randomChunks(line, random, 4096)) {
      emitted += (await s.push(c)).length;
    }
    const tail = await s.end();
    expect(tail.length).toBeLessThanOrEqual(MAX_RECORD * 1.2);
    expect(emitted).toBeGreaterThan(0);
    expect((await streamed(randomChunks(line, random, 999))).text).toBe((await scope.tokenize(line)).text);
    expect((await scope.tokenize(line)).text).not.toMatch(/@example\.com/);
  });

  it('detection sessions give exactly the spans of detect()', () => {
    const detector = createDetector();
    for (const text of texts.slice(0, 12)) {
      const session = detector.session();
      const spans = [];
      let offset = 0;
      for (const c of [...randomChunks(text, random, 50), null]) {
        const seg = c === null ? session.end() : session.push(c);
        spans.push(...seg.spans.map((x) => ({ ...x, start: x.start + offset, end: x.end + offset })));
        offset += seg.text.length;
      }
      expect(offset).toBe(text.length);
      expect(spans).toEqual(detector.detect(text));
    }
  });
});
