/**
 * Fake values for the labelled corpus: one generator per entity type, in the variety
 * real tool output shows (formats, locales, issuers), and the decoys that look like
 * them but are not sensitive. Everything draws from the Faker instance it is given, so
 * a seed fixes the whole corpus.
 */
import { Faker, base, de, en, en_GB, en_US, fr } from '@faker-js/faker';

export interface Fakers {
  /** The seeded instance for choices and values without a locale. */
  f: Faker;
  /** Seeded instances per locale, for names and phone numbers. */
  locales: readonly Faker[];
}

const REFERENCE_DATE = new Date('2025-06-01T12:00:00Z');

export function createFakers(seed: number): Fakers {
  const locales = [
    [en_US, en, base],
    [en_GB, en, base],
    [de, en, base],
    [fr, en, base],
  ].map((locale, i) => new Faker({ locale, seed: seed * 31 + i + 1 }));
  const f = new Faker({ locale: [en_US, en, base], seed });
  // Dates relative to a fixed day, not to now: the same seed must give the same bytes.
  for (const x of [f, ...locales]) x.setDefaultRefDate(REFERENCE_DATE);
  return { f, locales };
}

/** A locale instance, weighted towards en_US as a US-hosted team's data would be. */
export function localFaker(fk: Fakers): Faker {
  return fk.f.helpers.weightedArrayElement([
    { weight: 5, value: fk.locales[0] },
    { weight: 2, value: fk.locales[1] },
    { weight: 2, value: fk.locales[2] },
    { weight: 2, value: fk.locales[3] },
  ]);
}

export interface Person {
  first: string;
  last: string;
  /** How the person's name is written in running text. */
  full: string;
  email: string;
}

export function person(fk: Fakers): Person {
  const lf = localFaker(fk);
  const first = lf.person.firstName();
  const last = lf.person.lastName();
  const middle = fk.f.datatype.boolean(0.1) ? ` ${lf.person.middleName()}` : '';
  const provider = fk.f.helpers.arrayElement(['', '', fk.f.internet.domainName()]);
  const email = fk.f.internet.email({ firstName: first, lastName: last, ...(provider ? { provider } : {}) });
  return { first, last, full: `${first}${middle} ${last}`, email };
}

export function phone(fk: Fakers): string {
  const lf = localFaker(fk);
  const style = fk.f.helpers.weightedArrayElement([
    { weight: 6, value: 'human' as const },
    { weight: 2, value: 'national' as const },
    { weight: 2, value: 'international' as const },
  ]);
  const n = lf.phone.number({ style });
  // Faker's en_GB national formats include `500######`, which is not dialable: UK
  // national numbers start with the trunk 0 (0500 ######). Written as a bare 9-digit run
  // it would be a phone only by the label we give it.
  return /^500\d{6}$/.test(n) ? `0${n}` : n;
}

const CARD_ISSUERS = ['visa', 'visa', 'mastercard', 'mastercard', 'amex', 'discover', 'diners_club', 'jcb'];

export function card(fk: Fakers): string {
  const raw = fk.f.finance.creditCardNumber(fk.f.helpers.arrayElement(CARD_ISSUERS));
  return fk.f.helpers.weightedArrayElement([
    { weight: 3, value: raw },
    { weight: 3, value: raw.replace(/-/g, '') },
    { weight: 2, value: raw.replace(/-/g, ' ') },
  ]);
}

export function iban(fk: Fakers): string {
  return fk.f.finance.iban({ formatted: fk.f.datatype.boolean(0.5) });
}

export function ipv4(fk: Fakers): string {
  return fk.f.helpers.weightedArrayElement([
    { weight: 4, value: () => fk.f.internet.ipv4() },
    { weight: 2, value: () => fk.f.internet.ipv4({ network: 'private-a' }) },
    { weight: 1, value: () => fk.f.internet.ipv4({ network: 'private-c' }) },
  ])();
}

export function ipv6(fk: Fakers): string {
  const h = () => fk.f.string.hexadecimal({ length: { min: 1, max: 4 }, casing: 'lower', prefix: '' });
  return fk.f.helpers.arrayElement([
    () => fk.f.internet.ipv6(),
    () => `2001:db8:${h()}:${h()}::${h()}`,
    () => `fe80::${h()}:${h()}:${h()}:${h()}`,
    () => `2a02:${h()}:${h()}::${h()}:${h()}`,
  ])();
}

export function ip(fk: Fakers): string {
  return fk.f.datatype.boolean(0.75) ? ipv4(fk) : ipv6(fk);
}

/** A valid-looking SSN (the SSA never issues area 000, 666 or 9xx). */
export function ssn(fk: Fakers): string {
  const area = fk.f.helpers.arrayElement([fk.f.number.int({ min: 1, max: 665 }), fk.f.number.int({ min: 667, max: 899 })]);
  const group = fk.f.number.int({ min: 1, max: 99 });
  const serial = fk.f.number.int({ min: 1, max: 9999 });
  const sep = fk.f.datatype.boolean(0.85) ? '-' : ' ';
  return [String(area).padStart(3, '0'), String(group).padStart(2, '0'), String(serial).padStart(4, '0')].join(sep);
}

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const B64URL = BASE62 + '-_';

function base64url(s: string): string {
  return Buffer.from(s).toString('base64url');
}

export type SecretKind =
  | 'aws-key-id' | 'aws-secret' | 'github' | 'github-pat' | 'slack' | 'npm' | 'jwt' | 'google' | 'stripe'
  | 'anthropic' | 'sandgate' | 'password';

export const SECRET_KINDS: readonly SecretKind[] = [
  'aws-key-id', 'aws-secret', 'github', 'github-pat', 'slack', 'npm', 'jwt', 'google', 'stripe', 'anthropic', 'sandgate', 'password',
];

/** A credential of the given kind. `aws-secret` and `password` only make sense under a key. */
export function secret(fk: Fakers, kind: SecretKind): string {
  const s = fk.f.string;
  switch (kind) {
    case 'aws-key-id':
      return fk.f.helpers.arrayElement(['AKIA', 'ASIA']) + s.fromCharacters('ABCDEFGHIJKLMNOPQRSTUVWXYZ234567', 16);
    case 'aws-secret':
      return s.fromCharacters(BASE62 + '/+', 40);
    case 'github':
      return fk.f.helpers.arrayElement(['ghp_', 'gho_', 'ghs_']) + s.fromCharacters(BASE62, 36);
    case 'github-pat':
      return `github_pat_${s.fromCharacters(BASE62, 22)}_${s.fromCharacters(BASE62, 59)}`;
    case 'slack':
      return `xoxb-${s.numeric(12)}-${s.numeric(13)}-${s.fromCharacters(BASE62, 24)}`;
    case 'npm':
      return `npm_${s.fromCharacters(BASE62, 36)}`;
    case 'jwt': {
      const header = base64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
      const payload = base64url(JSON.stringify({ sub: fk.f.string.uuid(), iat: fk.f.number.int({ min: 1.6e9, max: 1.8e9 }), scope: 'read:all' }));
      return `${header}.${payload}.${s.fromCharacters(B64URL, 43)}`;
    }
    case 'google':
      return `AIza${s.fromCharacters(B64URL, 35)}`;
    case 'stripe':
      return `${fk.f.helpers.arrayElement(['sk_live_', 'rk_live_', 'sk_test_'])}${s.fromCharacters(BASE62, 24)}`;
    case 'anthropic':
      return `sk-ant-api03-${s.fromCharacters(B64URL, 93)}AA`;
    case 'sandgate':
      return `sgp_${s.fromCharacters(BASE62, 32)}${s.fromCharacters(BASE62, 6)}`;
    case 'password':
      return fk.f.internet.password({ length: fk.f.number.int({ min: 10, max: 24 }) });
  }
}

/** A PEM private key with a random body, lines joined by `eol` (`\n`, or `\\n` inside JSON). */
export function privateKey(fk: Fakers, eol = '\n'): string {
  const label = fk.f.helpers.arrayElement(['RSA PRIVATE KEY', 'PRIVATE KEY', 'EC PRIVATE KEY', 'OPENSSH PRIVATE KEY']);
  const lines = fk.f.number.int({ min: 4, max: 26 });
  const body = Array.from({ length: lines }, (_, i) =>
    fk.f.string.fromCharacters(BASE62 + '+/', i === lines - 1 ? fk.f.number.int({ min: 8, max: 60 }) : 64),
  );
  return [`-----BEGIN ${label}-----`, ...body, `-----END ${label}-----`].join(eol);
}

// ---- decoys: values tool output is full of that resemble PII and are not ----

export function decoyNumber(fk: Fakers): string {
  const f = fk.f;
  return f.helpers.arrayElement([
    () => String(f.number.int({ min: 1.6e9, max: 1.8e9 })), // epoch seconds
    () => String(f.number.int({ min: 1.6e12, max: 1.8e12 })), // epoch milliseconds
    () => f.string.numeric({ length: { min: 12, max: 19 }, allowLeadingZeros: false }), // order/tracking numbers
    () => `${f.number.int(9999)}.${f.number.int(99)}`, // amounts
    () => String(f.number.int({ min: 100000, max: 99999999 })), // counts, bytes
    () => f.location.zipCode('#####'),
    () => `${f.number.int({ min: 1, max: 20 })}.${f.number.int(20)}.${f.number.int(40)}`, // versions
    () => `${f.number.int({ min: 1, max: 130 })}.0.${f.number.int(9999)}.${f.number.int(300)}`, // browser builds
    () => f.date.recent().toISOString().slice(0, 10),
  ])();
}

export function decoyId(fk: Fakers): string {
  const f = fk.f;
  return f.helpers.arrayElement([
    () => f.string.uuid(),
    () => f.git.commitSha(),
    () => f.git.commitSha({ length: 7 }),
    () => `ORD-${f.date.recent().getFullYear()}-${f.string.numeric(6)}`,
    () => `cus_${f.string.alphanumeric(14)}`,
    () => `req_${f.string.alphanumeric(24)}`,
    () => f.internet.mac(),
    () => f.string.hexadecimal({ length: 24, casing: 'lower', prefix: '' }),
  ])();
}

/** Title-case text that is not a person: companies, places, titles, products. */
export function decoyProper(fk: Fakers): string {
  const lf = localFaker(fk);
  return fk.f.helpers.arrayElement([
    () => lf.company.name(),
    () => lf.location.city(),
    () => lf.location.street(),
    () => fk.f.person.jobTitle(),
    () => fk.f.commerce.productName(),
    () => fk.f.commerce.department(),
    () => lf.location.country(),
  ])();
}

export function userAgent(fk: Fakers): string {
  return fk.f.internet.userAgent();
}
