import { describe, expect, it } from 'vitest';
import { PII_ENTITY_TYPES } from './entities.js';
import { DEFAULT_PII_TTL_HOURS, detectorOptions, parsePiiSettings, ttlMs } from './settings.js';

describe('PII settings', () => {
  it('defaults to every entity type, no allow-list, a week of TTL', () => {
    const s = parsePiiSettings({});
    expect(s).toEqual({ entities: [...PII_ENTITY_TYPES], allow: [], ttlHours: DEFAULT_PII_TTL_HOURS });
    expect(parsePiiSettings({ entities: 'all', allow: '', ttlHours: ' ' })).toEqual(s);
    expect(ttlMs(s)).toBe(168 * 3_600_000);
  });

  it('reads the comma-separated environment form', () => {
    const s = parsePiiSettings({ entities: 'email, ip,SECRET', allow: 'support@acme.com, 10.0.0.1', ttlHours: '24' });
    expect(s).toEqual({ entities: ['EMAIL', 'IP', 'SECRET'], allow: ['support@acme.com', '10.0.0.1'], ttlHours: 24 });
    expect(detectorOptions(s)).toEqual({ entities: ['EMAIL', 'IP', 'SECRET'], allow: ['support@acme.com', '10.0.0.1'] });
  });

  it('rejects unknown entity types and bad TTLs, naming the field', () => {
    expect(() => parsePiiSettings({ entities: 'EMAIL,PASSPORT' })).toThrow(/entities/);
    // Addresses and dates of birth are on by default and can be left out like any type.
    expect(PII_ENTITY_TYPES).toEqual(expect.arrayContaining(['ADDRESS', 'DOB']));
    expect(parsePiiSettings({ entities: 'name,address,dob' }).entities).toEqual(['NAME', 'ADDRESS', 'DOB']);
    expect(() => parsePiiSettings({ ttlHours: '-1' })).toThrow(/ttlHours/);
    expect(() => parsePiiSettings({ ttlHours: 'soon' })).toThrow(/ttlHours/);
  });
});
