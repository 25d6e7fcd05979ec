/**
 * PII settings, validated with zod. The gateway maps them to environment variables:
 *
 * | setting  | env                    | default | meaning |
 * |----------|------------------------|---------|---------|
 * | entities | SANDGATE_PII_ENTITIES  | all     | comma-separated entity types to tokenize (EMAIL, PHONE, CARD, IBAN, IP, SSN, SECRET, NAME, ADDRESS, DOB), or `all` |
 * | allow    | SANDGATE_PII_ALLOW     | (empty) | comma-separated values never tokenized (compared case-insensitively), e.g. the team's support address |
 * | ttlHours | SANDGATE_PII_TTL_HOURS | 168     | a vault value unused this long is forgotten; its token stops resolving |
 *
 * The default is the safe choice: every type on. Switching a type off means its values
 * reach models in clear.
 */
import { z } from 'zod';
import type { DetectorOptions } from './detector.js';
import { PII_ENTITY_TYPES, type PiiEntityType } from './entities.js';

export const DEFAULT_PII_TTL_HOURS = 168;

export const piiSettingsSchema = z.object({
  entities: z.array(z.enum(PII_ENTITY_TYPES)).default([...PII_ENTITY_TYPES]),
  allow: z.array(z.string().min(1)).default([]),
  ttlHours: z.number().positive().max(24 * 365 * 10).default(DEFAULT_PII_TTL_HOURS),
});

export type PiiSettings = z.output<typeof piiSettingsSchema>;

const list = (s: string) =>
  s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);

/**
 * Parses the environment's string form (any of the three may be absent). Throws a
 * ZodError naming the bad field, e.g. an unknown entity type.
 */
export function parsePiiSettings(raw: { entities?: string; allow?: string; ttlHours?: string }): PiiSettings {
  const entities = raw.entities?.trim();
  return piiSettingsSchema.parse({
    entities: !entities || entities.toLowerCase() === 'all' ? undefined : list(entities).map((e) => e.toUpperCase()),
    allow: raw.allow ? list(raw.allow) : undefined,
    ttlHours: raw.ttlHours?.trim() ? Number(raw.ttlHours) : undefined,
  });
}

/** What the detector needs from the settings. */
export function detectorOptions(settings: PiiSettings): DetectorOptions {
  return { entities: settings.entities as PiiEntityType[], allow: settings.allow };
}

export function ttlMs(settings: PiiSettings): number {
  return settings.ttlHours * 3_600_000;
}
