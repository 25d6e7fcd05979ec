import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Sealer } from './sealing.js';

describe('Sealer', () => {
  const sealer = new Sealer(crypto.randomBytes(32));

  it('uses a fresh IV for every value, across refills of its IV pool', () => {
    const sealed = Array.from({ length: 2000 }, (_, i) => sealer.seal(`value ${i}`, `aad ${i}`));
    expect(new Set(sealed.map((s) => s.subarray(0, 12).toString('hex'))).size).toBe(sealed.length);
    sealed.forEach((s, i) => expect(sealer.open(s, `aad ${i}`)).toBe(`value ${i}`));
  });

  it('refuses a sealed value moved to another row or tampered with', () => {
    const s = sealer.seal('ann@example.com', '1:2:EMAIL:3');
    expect(sealer.open(s, '1:2:EMAIL:4')).toBeUndefined();
    const bad = Buffer.from(s);
    bad[bad.length - 1]! ^= 1;
    expect(sealer.open(bad, '1:2:EMAIL:3')).toBeUndefined();
  });
});
