import { describe, expect, it } from 'vitest';
import { cardBrandValid, ibanChecksumValid, ibanLength, luhnValid, ssnValid } from './checksums.js';

describe('checksums', () => {
  it('Luhn accepts valid card numbers and rejects a changed digit', () => {
    expect(luhnValid('4111111111111111')).toBe(true);
    expect(luhnValid('378282246310005')).toBe(true);
    expect(luhnValid('4111111111111112')).toBe(false);
    expect(luhnValid('41111x1111111111')).toBe(false);
  });

  it('card brands need the right prefix and length', () => {
    expect(cardBrandValid('4111111111111111')).toBe(true);
    expect(cardBrandValid('378282246310005')).toBe(true);
    expect(cardBrandValid('5555555555554444')).toBe(true);
    expect(cardBrandValid('37828224631000')).toBe(false); // Amex is 15 digits
    expect(cardBrandValid('1718900000123')).toBe(false); // a millisecond timestamp
    expect(cardBrandValid('9111111111111111')).toBe(false);
  });

  it('IBAN mod-97 and registered lengths', () => {
    expect(ibanChecksumValid('DE89370400440532013000')).toBe(true);
    expect(ibanChecksumValid('GB82WEST12345698765432')).toBe(true);
    expect(ibanChecksumValid('DE89370400440532013001')).toBe(false);
    expect(ibanLength('DE')).toBe(22);
    expect(ibanLength('US')).toBeUndefined();
  });

  it('SSN rules of the SSA', () => {
    expect(ssnValid('123456789')).toBe(true);
    expect(ssnValid('000456789')).toBe(false);
    expect(ssnValid('666456789')).toBe(false);
    expect(ssnValid('923456789')).toBe(false);
    expect(ssnValid('123006789')).toBe(false);
    expect(ssnValid('123450000')).toBe(false);
  });
});
