import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { HopAuthError, HopSigner } from './hop-auth.js';

const key = crypto.randomBytes(32);

describe('hop credentials', () => {
  it('a hop signed for a replica is heard by it, once', () => {
    const signer = new HopSigner({ key });
    const header = signer.sign('a', 'b', '/p', '{"x":1}');
    expect(signer.verify(header, 'b', '/p', Buffer.from('{"x":1}'))).toMatchObject({ from: 'a', to: 'b' });
    // The same request again, copied off the wire: refused.
    expect(() => signer.verify(header, 'b', '/p', Buffer.from('{"x":1}'))).toThrow(/used twice/);
  });

  it('refuses a hop for another replica, with another body, or another key', () => {
    const signer = new HopSigner({ key });
    const header = signer.sign('a', 'b', '/p', 'body');
    expect(() => signer.verify(header, 'c', '/p', Buffer.from('body'))).toThrow(/another replica/);
    expect(() => signer.verify(header, 'b', '/p', Buffer.from('other body'))).toThrow(/body differs/);
    expect(() => signer.verify(header, 'b', '/other', Buffer.from('body'))).toThrow(/another endpoint/);
    const stranger = new HopSigner({ key: crypto.randomBytes(32) });
    expect(() => stranger.verify(header, 'b', '/p', Buffer.from('body'))).toThrow(/does not verify/);
    // The claims rewritten to another target, the mac kept: the mac no longer holds.
    const [claims, mac] = header.split('.');
    const rewritten = Buffer.from(Buffer.from(claims!, 'base64url').toString().replace('"to":"b"', '"to":"c"')).toString('base64url');
    expect(() => signer.verify(`${rewritten}.${mac}`, 'c', '/p', Buffer.from('body'))).toThrow(/does not verify/);
  });

  it('refuses a missing or malformed credential', () => {
    const signer = new HopSigner({ key });
    for (const bad of [undefined, '', 'nodot', 'a.b', `${'x'.repeat(3000)}.y`]) {
      expect(() => signer.verify(bad, 'b', '/p', Buffer.from(''))).toThrow(HopAuthError);
    }
  });

  it('refuses a hop older or later than the skew allows, and forgets nonces past it', () => {
    let now = 1_000_000;
    const sender = new HopSigner({ key, now: () => now });
    const receiver = new HopSigner({ key, maxSkewMs: 30_000, now: () => now + 31_000 });
    expect(() => receiver.verify(sender.sign('a', 'b', '/p', ''), 'b', '/p', Buffer.from(''))).toThrow(/expired/);
    const early = new HopSigner({ key, maxSkewMs: 30_000, now: () => now - 31_000 });
    expect(() => early.verify(sender.sign('a', 'b', '/p', ''), 'b', '/p', Buffer.from(''))).toThrow(/expired/);

    let at = now;
    const counting = new HopSigner({ key, maxSkewMs: 1000, now: () => at });
    for (let i = 0; i < 100; i++) counting.verify(sender.sign('a', 'b', '/p', ''), 'b', '/p', Buffer.from(''));
    at = now + 5000;
    now += 5000;
    counting.verify(sender.sign('a', 'b', '/p', ''), 'b', '/p', Buffer.from(''));
    expect((counting as unknown as { seen: Map<string, number> }).seen.size).toBe(1);
  });

  it('seals a request for its endpoint, and each answer line to its request and place', () => {
    const sender = new HopSigner({ key });
    const holder = new HopSigner({ key });
    const body = sender.sealRequest('/p', '{"code":"print(42)"}');
    expect(body.toString('latin1')).not.toContain('print(42)');
    const { header, nonce } = sender.signRequest('a', 'b', '/p', body);
    const claims = holder.verify(header, 'b', '/p', body);
    expect(holder.openRequest(claims, body)).toBe('{"code":"print(42)"}');
    // Sealed for another endpoint, or under another key: does not open.
    expect(() => holder.openRequest({ ...claims, path: '/other' }, body)).toThrow(HopAuthError);
    expect(() => new HopSigner({ key: crypto.randomBytes(32) }).openRequest(claims, body)).toThrow(/does not open/);

    const lines = ['{"t":"out","d":"42"}', '{"t":"done"}'].map((l, i) => holder.sealAnswer(claims, i, l));
    // The plaintext is nowhere in them (a marker long enough that random ciphertext never holds it by chance).
    expect(lines.join('')).not.toContain('"t":"out"');
    expect(lines.join('')).not.toContain(Buffer.from('{"t":"out"').toString('base64').slice(0, 12));
    expect(lines.map((l, i) => sender.openAnswer(nonce, i, l))).toEqual(['{"t":"out","d":"42"}', '{"t":"done"}']);
    // Out of its place (lines swapped, or one left out), from another request's answer, a byte changed, or forged without the key: refused.
    expect(() => sender.openAnswer(nonce, 0, lines[1]!)).toThrow(HopAuthError);
    const other = sender.signRequest('a', 'b', '/p', body).nonce;
    expect(() => sender.openAnswer(other, 0, lines[0]!)).toThrow(HopAuthError);
    const flipped = Buffer.from(lines[0]!, 'base64');
    flipped[flipped.length - 1]! ^= 1;
    expect(() => sender.openAnswer(nonce, 0, flipped.toString('base64'))).toThrow(HopAuthError);
    expect(() => sender.openAnswer(nonce, 0, new HopSigner({ key: crypto.randomBytes(32) }).sealAnswer(claims, 0, '{"t":"done"}'))).toThrow(HopAuthError);
    expect(() => sender.openAnswer(nonce, 0, '{"t":"done"}')).toThrow(HopAuthError);
  });

  it('needs a key of at least 32 bytes', () => {
    expect(() => new HopSigner({ key: Buffer.alloc(16) })).toThrow(/32 bytes/);
  });
});
