/**
 * The held-out corpus for the kinds of PII that need more than a shape: people's names
 * of many origins, street addresses and dates of birth, in customer data as it arrives
 * (CSV with and without a header, JSON records, prose, a pasted customer list, code),
 * with the decoys that resemble them labelled too (products and places, months, column
 * headers, identifiers, ordinary words that are also names, dates that are not
 * birthdays, street names without a house).
 *
 * Two splits from one fixed seed: `train`, to look at while working on the
 * recognizers, and `test`, to score them. They share templates but not values: every
 * given name, surname, street and city is assigned to one split by a hash of its
 * spelling, so a recognizer tuned on `train` meets only names it has not seen. The
 * recognizers must never read this file (src/pii/heldout.test.ts checks their import
 * graph).
 *
 * Deterministic: the same split gives the same documents, byte for byte.
 */
import { Faker, base, cs_CZ, de, en, en_GB, en_IN, en_NG, en_US, es, es_MX, fr, hr, it as itLocale, nl, pl, pt_BR, pt_PT, sk, vi, yo_NG } from '@faker-js/faker';
import type { PiiEntityType } from '../../src/pii/entities.js';
import { D, DocBuilder, L, P, type Json, type LabelledSpan, type Piece } from './pii-corpus.js';

export const HELD_OUT_SEED = 20_261_129;
export type Split = 'train' | 'test';

export const HELD_OUT_KINDS = ['csv-header', 'csv-bare', 'json', 'prose', 'pasted-list', 'code'] as const;
export type HeldOutKind = (typeof HELD_OUT_KINDS)[number];

export interface HeldOutDoc {
  kind: HeldOutKind;
  text: string;
  /** Every sensitive value, in order, non-overlapping. */
  spans: LabelledSpan[];
  /** Text that resembles a value of `type` and must be left as it is. */
  decoys: LabelledSpan[];
}

export const ORIGINS = [
  'english', 'spanish', 'portuguese', 'indian', 'chinese', 'vietnamese', 'arabic', 'slavic', 'nigerian', 'dutch-german', 'common-word',
] as const;
export type Origin = (typeof ORIGINS)[number];

// ---- splitting values between train and test ----

function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

function fold(s: string): string {
  return s.normalize('NFD').replace(/\p{M}/gu, '').toLowerCase();
}

/** The split a spelling belongs to (diacritics ignored, so `Nguyễn` and `Nguyen` agree). */
export function splitOf(value: string): Split {
  return (fnv1a(fold(value)) >>> 7) % 3 === 0 ? 'test' : 'train';
}

const onSplit = (values: readonly string[], split: Split) => {
  const kept = [...new Set(values)].filter((v) => v.length > 1 && /^\p{Lu}/u.test(v) && !/\s/.test(v) && splitOf(v) === split);
  if (kept.length < 3) throw new Error(`too few values for ${split}: ${values.slice(0, 5).join(', ')}`);
  return kept;
};

// ---- name pools ----

type Defs = { first_name?: unknown; last_name?: unknown };
function flat(x: unknown): string[] {
  if (!x) return [];
  if (Array.isArray(x)) return x as string[];
  return Object.values(x as Record<string, string[]>).flat();
}
const defs = (locale: { person?: Defs }) => ({ first: flat(locale.person?.first_name), last: flat(locale.person?.last_name) });

/** Transliterated Chinese (pinyin) and Arabic names, which Faker has only in their own scripts. */
const CHINESE = {
  first: [
    'Wei', 'Fang', 'Xiuying', 'Na', 'Min', 'Jing', 'Li', 'Qiang', 'Lei', 'Jun', 'Yang', 'Yong', 'Yan', 'Jie', 'Tao', 'Ming', 'Chao', 'Xiulan',
    'Xia', 'Ping', 'Gang', 'Guiying', 'Hui', 'Xin', 'Yu', 'Hao', 'Zhiwei', 'Xiaoming', 'Jiahao', 'Yuxuan', 'Zihan', 'Haoran', 'Yichen', 'Ruoxi',
    'Shuang', 'Lingling', 'Dongmei', 'Jianguo', 'Wenjun', 'Xiaoyan', 'Zhen', 'Kai', 'Bo', 'Lan', 'Yun', 'Mei', 'Ling', 'Rui', 'Xue', 'Qing',
  ],
  last: [
    'Wang', 'Li', 'Zhang', 'Liu', 'Chen', 'Yang', 'Huang', 'Zhao', 'Wu', 'Zhou', 'Xu', 'Sun', 'Ma', 'Zhu', 'Hu', 'Guo', 'He', 'Gao', 'Lin',
    'Luo', 'Zheng', 'Liang', 'Xie', 'Song', 'Tang', 'Han', 'Feng', 'Deng', 'Cao', 'Peng', 'Zeng', 'Xiao', 'Tian', 'Dong', 'Pan', 'Yuan',
    'Cai', 'Jiang', 'Yu', 'Du', 'Ye', 'Cheng', 'Wei', 'Su', 'Lu', 'Ding', 'Ren', 'Shen', 'Yao', 'Fu', 'Zhong', 'Jin', 'Qian', 'Tan', 'Liao',
  ],
};
const ARABIC = {
  first: [
    'Mohammed', 'Muhammad', 'Ahmed', 'Ahmad', 'Ali', 'Omar', 'Umar', 'Youssef', 'Yusuf', 'Ibrahim', 'Khalid', 'Hassan', 'Hussein', 'Mustafa',
    'Abdullah', 'Abdulrahman', 'Tariq', 'Karim', 'Samir', 'Walid', 'Faisal', 'Hamza', 'Bilal', 'Rami', 'Nabil', 'Majid', 'Saeed', 'Nasser',
    'Fatima', 'Aisha', 'Maryam', 'Khadija', 'Zainab', 'Layla', 'Noor', 'Huda', 'Salma', 'Yasmin', 'Rania', 'Amira', 'Dalia', 'Hana', 'Leila',
    'Samira', 'Nadia', 'Farah', 'Reem', 'Lina', 'Mona', 'Rasha', 'Jamila', 'Ghada', 'Suha', 'Abir', 'Iman', 'Dina', 'Nour', 'Souad',
  ],
  last: [
    'Rashid', 'Farsi', 'Sayed', 'Masri', 'Hashimi', 'Qasimi', 'Mansour', 'Haddad', 'Khoury', 'Nasser', 'Saleh', 'Hamdan', 'Zahrani', 'Ghamdi',
    'Otaibi', 'Shehri', 'Harbi', 'Mutairi', 'Dosari', 'Qahtani', 'Amrani', 'Idrissi', 'Alaoui', 'Bennani', 'Tazi', 'Fassi', 'Bakr', 'Darwish',
    'Khalil', 'Aziz', 'Hakim', 'Najjar', 'Tamimi', 'Jaber', 'Suleiman', 'Awad', 'Barakat', 'Sabbagh', 'Shami', 'Halabi', 'Kurdi', 'Obeid',
  ],
};
/** Given names and surnames that are also everyday English words. */
const COMMON_WORD = {
  first: [
    'Rose', 'Mark', 'Bill', 'Will', 'May', 'Grant', 'Hope', 'Faith', 'Joy', 'Dawn', 'Summer', 'April', 'June', 'Frank', 'Rich', 'Pat', 'Sue',
    'Ray', 'Guy', 'Miles', 'Chase', 'Hunter', 'Drew', 'Lily', 'Ruby', 'Iris', 'Ivy', 'Daisy', 'Amber', 'Crystal', 'Pearl', 'Sky', 'Glen', 'Dale',
    'Art', 'Gene', 'Jack', 'Bob', 'Rob', 'Don', 'Sandy', 'Penny', 'Holly', 'Heather', 'Autumn', 'Destiny', 'Harmony', 'Grace', 'Hazel', 'Olive',
    'Jasmine', 'Violet', 'Skip', 'Buck', 'Chip', 'Rusty', 'Forrest', 'Reed', 'Victor', 'Angel', 'Christian', 'Major', 'Royal', 'Sterling',
  ],
  last: [
    'Brown', 'White', 'Green', 'Black', 'Young', 'King', 'Little', 'Long', 'Short', 'Bishop', 'Cook', 'Baker', 'Fox', 'Wolf', 'Bird', 'Stone',
    'Hill', 'Wood', 'Rivers', 'Banks', 'Price', 'Sharp', 'Strong', 'Moody', 'Church', 'Hall', 'Cross', 'Lane', 'Marsh', 'Fields', 'Park',
    'Best', 'Wise', 'Swift', 'Hardy', 'Rich', 'Gold', 'Silver', 'Steel', 'Mason', 'Carpenter', 'Turner', 'Porter', 'Walker', 'Hunter', 'Fisher',
    'Potter', 'Weaver', 'Glass', 'Bell', 'Rose', 'Page', 'Knight', 'Love', 'Day', 'Snow', 'Frost', 'Winter', 'Holiday', 'English', 'French',
  ],
};

function pools(): Record<Origin, { first: string[]; last: string[] }> {
  const join = (...ls: Array<{ first: string[]; last: string[] }>) => ({ first: ls.flatMap((l) => l.first), last: ls.flatMap((l) => l.last) });
  return {
    english: join(defs(en)),
    spanish: join(defs(es), defs(es_MX)),
    portuguese: join(defs(pt_BR), defs(pt_PT)),
    indian: defs(en_IN),
    chinese: CHINESE,
    // Faker's Vietnamese given names are two syllables (`Minh Đan`); a person is family, middle, given.
    vietnamese: { first: defs(vi).first.flatMap((n) => n.split(' ')), last: defs(vi).last },
    arabic: ARABIC,
    slavic: join(defs(pl), defs(cs_CZ), defs(hr), defs(sk)),
    nigerian: join(defs(en_NG), defs(yo_NG)),
    'dutch-german': join(defs(nl), defs(de)),
    'common-word': COMMON_WORD,
  };
}

// ---- the generator ----

/** Everything a document template draws from: seeded choices and the split's values. */
export class HeldOutSource {
  readonly f: Faker;
  private readonly names: Record<Origin, { first: string[]; last: string[] }>;
  private readonly streets: string[];
  private readonly cities: Record<'us' | 'uk' | 'de' | 'fr' | 'nl' | 'es' | 'it' | 'pt', string[]>;

  constructor(readonly split: Split) {
    this.f = new Faker({ locale: [en_US, en, base], seed: HELD_OUT_SEED + (split === 'test' ? 1 : 0) });
    this.f.setDefaultRefDate(new Date('2026-06-01T12:00:00Z'));
    const all = pools();
    this.names = Object.fromEntries(
      Object.entries(all).map(([origin, p]) => [origin, { first: onSplit(p.first, split), last: onSplit(p.last, split) }]),
    ) as Record<Origin, { first: string[]; last: string[] }>;
    // Street names are made from surnames and nouns: any surname of the split will do.
    this.streets = onSplit([...all.english.last, ...all['dutch-german'].last, ...all.spanish.last], split);
    // Cities as Faker writes them for each country, one word long (multi-word ones would mix splits).
    const cities = (...ls: Array<typeof en>) => {
      const g = new Faker({ locale: [...ls, en, base], seed: HELD_OUT_SEED });
      const all = Array.from({ length: 400 }, () => g.location.city()).filter((c) => /^[\p{Lu}][\p{L}'’-]+$/u.test(c));
      return onSplit(all, split);
    };
    this.cities = {
      us: cities(en_US), uk: cities(en_GB), de: cities(de), fr: cities(fr), nl: cities(nl), es: cities(es), it: cities(itLocale), pt: cities(pt_PT, pt_BR),
    };
  }

  pick<T>(xs: readonly T[]): T {
    return this.f.helpers.arrayElement(xs);
  }

  int(min: number, max: number): number {
    return this.f.number.int({ min, max });
  }

  chance(p: number): boolean {
    return this.f.datatype.boolean(p);
  }

  origin(): Origin {
    return this.f.helpers.weightedArrayElement([
      { weight: 4, value: 'english' as const }, { weight: 2, value: 'spanish' as const }, { weight: 1, value: 'portuguese' as const },
      { weight: 2, value: 'indian' as const }, { weight: 1, value: 'chinese' as const }, { weight: 1, value: 'vietnamese' as const },
      { weight: 1, value: 'arabic' as const }, { weight: 1, value: 'slavic' as const }, { weight: 1, value: 'nigerian' as const },
      { weight: 1, value: 'dutch-german' as const }, { weight: 1, value: 'common-word' as const },
    ]);
  }

  /** A person: given name and surname as they would be filled into separate fields, and the full name as written. */
  person(origin = this.origin()): { first: string; last: string; full: string; origin: Origin } {
    const n = this.names[origin];
    let first = this.pick(n.first);
    let last = this.pick(n.last);
    const other = this.names.english;
    let full: string;
    switch (origin) {
      case 'chinese':
        full = this.chance(0.6) ? `${first} ${last}` : `${last} ${first}`;
        break;
      case 'vietnamese': {
        const middle = this.pick(['Văn', 'Thị', 'Hữu', 'Đức', 'Minh', 'Thanh', 'Ngọc']);
        if (this.chance(0.4)) [first, last] = [fold(first).replace(/^./, (c) => c.toUpperCase()), fold(last).replace(/^./, (c) => c.toUpperCase())];
        full = this.chance(0.7) ? `${last} ${middle} ${first}` : `${first} ${last}`;
        break;
      }
      case 'arabic': {
        const particle = this.pick(['al-', 'Al-', 'El-', 'al ', 'Al ', '', '', 'bin ', 'ibn ']);
        last = particle === 'bin ' || particle === 'ibn ' ? `${particle}${this.pick(this.names.arabic.first)}` : `${particle}${last}`;
        full = `${first} ${last}`;
        break;
      }
      case 'spanish':
        full = this.chance(0.35) ? `${first} ${last} ${this.pick(n.last)}` : this.chance(0.15) ? `${first} de la ${last}` : `${first} ${last}`;
        break;
      case 'portuguese':
        full = this.chance(0.4) ? `${first} ${this.pick(['da', 'dos', 'de'])} ${last}` : `${first} ${this.pick(n.first)} ${last}`;
        break;
      case 'dutch-german':
        full = this.chance(0.4) ? `${first} ${this.pick(['van', 'van der', 'van den', 'de', 'von', 'ter'])} ${last}` : `${first} ${last}`;
        break;
      default:
        full = `${first} ${last}`;
    }
    // Forms any origin is written in: initials, hyphenated surnames and given names.
    const form = this.int(0, 19);
    if (form === 0 && !full.includes(' de ')) full = `${first} ${this.pick(other.first)[0]}. ${last}`;
    else if (form === 1) full = `${first[0]}. ${last}`;
    else if (form === 2) full = `${first} ${last}-${this.pick(this.names[this.origin()].last)}`;
    else if (form === 3) full = `${first}-${this.pick(n.first)} ${last}`;
    return { first, last, full, origin };
  }

  street(): string {
    return this.pick(this.streets);
  }

  city(region: keyof HeldOutSource['cities']): string {
    return this.pick(this.cities[region]);
  }

  /** A street address as one value: US, UK or EU, with or without the unit, town and postcode. */
  address(): string {
    const f = this.f;
    const n = () => String(this.int(1, 9999));
    const unit = () => (this.chance(0.3) ? `${this.pick([', ', ' '])}${this.pick(['Apt', 'Apt.', 'Suite', 'Unit', '#', 'Ste'])}${this.pick([' ', ''])}${this.int(1, 990)}${this.pick(['', 'B', ''])}` : '');
    const street = this.street();
    switch (this.int(0, 7)) {
      case 0:
      case 1: {
        const type = this.pick(['Street', 'St', 'St.', 'Avenue', 'Ave', 'Ave.', 'Road', 'Rd', 'Boulevard', 'Blvd', 'Drive', 'Dr', 'Lane', 'Ln', 'Court', 'Ct', 'Way', 'Place', 'Pl', 'Parkway', 'Terrace', 'Circle', 'Highway', 'Trail']);
        const dir = this.chance(0.15) ? `${this.pick(['N', 'S', 'E', 'W', 'North', 'South'])} ` : '';
        const line = `${n()} ${dir}${street} ${type}${unit()}`;
        if (this.chance(0.25)) return line;
        const zip = f.location.zipCode(this.pick(['#####', '#####', '#####-####']));
        return `${line}, ${this.city('us')}${this.pick([', ', ' '])}${f.location.state({ abbreviated: true })} ${zip}`;
      }
      case 2: {
        const type = this.pick(['Road', 'Street', 'Lane', 'Avenue', 'Close', 'Drive', 'Grove', 'Gardens', 'Crescent', 'Terrace', 'Way', 'Place', 'Court', 'Square', 'Hill', 'Mews', 'Row', 'Walk', 'Green', 'Rise', 'Parade']);
        const flat = this.chance(0.2) ? `Flat ${this.int(1, 40)}, ` : '';
        const post = `${this.pick(['SW', 'E', 'N', 'LS', 'M', 'B', 'EH', 'G', 'CF', 'BS', 'NW', 'OX', 'CB', 'SE'])}${this.int(1, 28)} ${this.int(0, 9)}${f.string.alpha({ length: 2, casing: 'upper', exclude: ['C', 'I', 'K', 'M', 'O', 'V'] })}`;
        return `${flat}${this.int(1, 300)} ${street} ${type}, ${this.city('uk')}${this.pick([' ', ', '])}${post}`;
      }
      case 3: {
        const type = this.pick(['straße', 'strasse', 'str.', 'weg', 'gasse', 'platz', 'allee', 'ring', 'damm']);
        const s = this.chance(0.2) ? `${street}-${this.street()}-${type.replace(/^./, (c) => c.toUpperCase())}` : `${street}${type}`;
        return `${s} ${this.int(1, 200)}${this.pick(['', '', 'a', 'b'])}, ${String(this.int(1067, 99998)).padStart(5, '0')} ${this.city('de')}`;
      }
      case 4: {
        const type = this.pick(['rue', 'Rue', 'avenue', 'Avenue', 'boulevard', 'Boulevard', 'place', 'Place', 'chemin', 'allée', 'impasse', 'quai']);
        const of = this.pick(['de la ', 'du ', 'des ', 'de ', "de l'", '']);
        return `${this.int(1, 180)}${this.pick(['', '', ' bis'])} ${type} ${of}${street}, ${String(this.int(1000, 95999)).padStart(5, '0')} ${this.city('fr')}`;
      }
      case 5: {
        const type = this.pick(['straat', 'laan', 'weg', 'gracht', 'plein', 'kade', 'singel', 'dijk']);
        const post = `${this.int(1000, 9999)} ${f.string.alpha({ length: 2, casing: 'upper' })}`;
        return `${street}${type} ${this.int(1, 400)}${this.pick(['', '', 'a', '-2'])}, ${post} ${this.city('nl')}`;
      }
      case 6: {
        const [type, region] = this.pick([['Calle', 'es'], ['Avenida', 'es'], ['Plaza', 'es'], ['Paseo', 'es'], ['Carrer', 'es'], ['Via', 'it'], ['Viale', 'it'], ['Piazza', 'it'], ['Corso', 'it']] as const);
        const of = this.pick(['', '', 'de ', 'del ', 'di ', 'della ']);
        const number = `${this.int(1, 250)}${this.pick(['', '', ', 3º B', ', 2ª'])}`;
        return `${type} ${of}${street} ${number}, ${String(this.int(1000, 52999)).padStart(5, '0')} ${this.city(region)}`;
      }
      default: {
        const type = this.pick(['Rua', 'Avenida', 'Travessa', 'Largo', 'Praça']);
        const of = this.pick(['', 'da ', 'do ', 'de ', 'dos ']);
        return `${type} ${of}${street}, ${this.int(1, 900)}, ${this.int(1000, 9999)}-${String(this.int(0, 999)).padStart(3, '0')} ${this.city('pt')}`;
      }
    }
  }

  /** A date in one of the forms people write birthdays in; `birth` picks a birth year. */
  date(birth: boolean): string {
    const d = birth ? this.f.date.birthdate({ min: 18, max: 90, mode: 'age' }) : this.f.date.between({ from: '2019-01-01', to: '2026-05-31' });
    const y = d.getUTCFullYear();
    const m = d.getUTCMonth() + 1;
    const day = d.getUTCDate();
    const p2 = (x: number) => String(x).padStart(2, '0');
    const month = d.toLocaleString('en-US', { month: 'long', timeZone: 'UTC' });
    return this.pick([
      `${y}-${p2(m)}-${p2(day)}`,
      `${y}-${p2(m)}-${p2(day)}`,
      `${p2(m)}/${p2(day)}/${y}`,
      `${m}/${day}/${y}`,
      `${p2(day)}.${p2(m)}.${y}`,
      `${p2(day)}/${p2(m)}/${y}`,
      `${month} ${day}, ${y}`,
      `${day} ${month} ${y}`,
      `${day} ${month.slice(0, 3)} ${y}`,
    ]);
  }

  email(p: { first: string; last: string }): string {
    const local = `${fold(p.first)}.${fold(p.last)}`.replace(/[^a-z.]/g, '');
    return `${local || 'user'}${this.chance(0.3) ? this.int(1, 99) : ''}@${this.pick(['gmail.com', 'example.com', 'outlook.com', 'mail.example.org'])}`;
  }

  product(): string {
    return this.f.commerce.productName();
  }
}

// ---- decoys ----

/** Capitalized text that is not a person, in the forms customer data carries it. */
function nameDecoy(s: HeldOutSource): string {
  return s.pick([
    () => s.product(),
    () => s.f.commerce.productName(),
    () => s.pick(['Rose Garden Tea', 'Grant Application Form', 'Mark Down Sale', 'Bill Pay Express', 'Will Call Desk', 'May Flowers Bouquet', 'Victor Mouse Trap', 'Hope Springs Resort', 'Amber Ale', 'Ruby Red Grapefruit', 'Holly Wreath', 'Daisy Chain Cable', 'Crystal Clear Water', 'Summer Collection', 'Autumn Leaves Candle']),
    () => `${s.city('us')} ${s.pick(['Airport', 'Harbor', 'Station', 'Office', 'Warehouse', 'Mall'])}`,
    () => s.city('uk'),
    () => s.f.location.country(),
    () => s.f.company.name(),
    () => s.f.person.jobTitle(),
    () => s.f.commerce.department(),
  ])();
}

const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];

// ---- documents ----

type Build = (s: HeldOutSource) => DocBuilder;

const dobKey = (s: HeldOutSource) => s.pick(['dob', 'date_of_birth', 'birth_date', 'birthdate', 'DateOfBirth', 'birthday']);

/** A CSV export whose header names the columns. */
const csvHeader: Build = (s) => {
  const b = new DocBuilder();
  const sep = s.pick([',', ',', ';', '\t']);
  const layout = s.int(0, 3);
  const header = [
    ['customer_id', 'name', 'email', 'address', dobKey(s), 'product', 'signup_date'],
    ['id', 'first_name', 'last_name', 'email', 'city', 'created_at'],
    ['Account', 'Full Name', 'Date of Birth', 'Mailing Address', 'Plan', 'Last Order'],
    ['member_no', 'Contact', 'Phone', 'Street Address', 'Birth Date', 'Month'],
  ][layout];
  b.add(...header.flatMap((h, i) => (i ? [sep, D('NAME', h)] : [D('NAME', h)])), '\n');
  for (let i = s.int(6, 18); i > 0; i--) {
    const p = s.person();
    const dob = () => P('DOB', s.date(true));
    const other = () => D('DOB', s.date(false));
    const rows: Piece[][] = [
      [1000 + i, P('NAME', p.full), P('EMAIL', s.email(p)), P('ADDRESS', s.address()), dob(), D('NAME', nameDecoy(s)), other()],
      [i, P('NAME', p.first), P('NAME', p.last), P('EMAIL', s.email(p)), D('NAME', s.city('us')), other()],
      [`AC-${s.int(10000, 99999)}`, P('NAME', p.full), dob(), P('ADDRESS', s.address()), D('NAME', s.pick(['Basic', 'Premium Plus', 'Family', 'Business Pro'])), other()],
      [s.int(100, 99999), P('NAME', p.full), P('PHONE', `+1 555 ${s.int(100, 999)} ${s.int(1000, 9999)}`), P('ADDRESS', s.address()), dob(), D('NAME', s.pick(MONTHS))],
    ];
    b.csvRow(rows[layout], sep);
  }
  return b;
};

/** The same kind of export without a header line: only the values say what they are. */
const csvBare: Build = (s) => {
  const b = new DocBuilder();
  const layout = s.int(0, 2);
  for (let i = s.int(6, 18); i > 0; i--) {
    const p = s.person();
    const rows: Piece[][] = [
      [1000 + i, P('NAME', p.full), P('EMAIL', s.email(p)), P('ADDRESS', s.address()), s.int(1, 40)],
      [P('NAME', p.full), D('NAME', nameDecoy(s)), s.f.finance.amount({ min: 5, max: 900 }), D('DOB', s.date(false))],
      [`C${s.int(1000, 9999)}`, P('NAME', p.last), P('NAME', p.first), P('PHONE', `+44 7${s.int(100, 999)} ${s.int(100000, 999999)}`), D('NAME', s.city('uk'))],
    ];
    b.csvRow(rows[layout]);
  }
  return b;
};

/** JSON records; a free-text note inside one is written as a single string with its labels. */
const jsonDoc: Build = (s) => {
  const b = new DocBuilder();
  b.add('{"customers": [');
  for (let i = s.int(2, 5); i > 0; i--) {
    const p = s.person();
    const m = s.person();
    const rec: Array<[string, Json | Piece[]]> = [['id', s.f.string.uuid()]];
    if (s.chance(0.5)) rec.push(['name', P('NAME', p.full)]);
    else rec.push(['first_name', P('NAME', p.first)], ['last_name', P('NAME', p.last)]);
    rec.push(['email', P('EMAIL', s.email(p))], [dobKey(s), P('DOB', s.date(true))]);
    rec.push([
      'address',
      s.chance(0.7)
        ? P('ADDRESS', s.address())
        : { street: P('ADDRESS', `${s.int(1, 999)} ${s.street()} ${s.pick(['Street', 'Road', 'Avenue', 'Lane'])}`), city: D('NAME', s.city('us')), zip: s.f.location.zipCode('#####') },
    ]);
    rec.push(['created_at', D('DOB', s.date(false))], ['product', D('NAME', nameDecoy(s))], ['account_manager', P('NAME', m.full)]);
    if (s.chance(0.5)) rec.push(['notes', L`Called ${P('NAME', m.first)} about the ${D('NAME', s.product())} order`]);
    b.add(i > 0 && b.text.endsWith('}') ? ',\n  ' : '\n  ', '{');
    rec.forEach(([k, v], j) => {
      b.add(j ? ', ' : '', JSON.stringify(k), ': ');
      if (Array.isArray(v)) b.add('"', ...(v as Piece[]), '"');
      else b.json(v);
    });
    b.add('}');
  }
  return b.add('\n]}\n');
};

const prose: Build = (s) => {
  const b = new DocBuilder();
  for (let i = s.int(4, 10); i > 0; i--) {
    const p = s.person();
    const q = s.person();
    const name = P('NAME', p.full);
    switch (s.int(0, 17)) {
      case 0: b.line(L`I spoke with ${name} yesterday about the ${D('NAME', s.product())} order.`); break;
      case 1: b.line(L`${name} (born ${P('DOB', s.date(true))}) moved to ${P('ADDRESS', s.address())} last year.`); break;
      case 2: b.line(L`Please ship the replacement to ${P('ADDRESS', s.address())} by Friday.`); break;
      case 3: b.line(L`Customer ${name}, DOB ${P('DOB', s.date(true))}, called about a refund.`); break;
      case 4: b.line(L`Our next review is on ${D('DOB', s.date(false))}; the report covers ${D('NAME', s.pick(MONTHS))} and ${D('NAME', s.pick(MONTHS))}.`); break;
      case 5: b.line(L`The ${D('NAME', 'mark')} of a good model is that it ${D('NAME', 'will')} generalise; ${D('NAME', 'Will')} it hold on new data?`); break;
      case 6: b.line(L`${D('NAME', 'Grant')} read access to the billing role, then ${D('NAME', 'Bill')} the customer monthly.`); break;
      case 7: b.line(L`In ${D('NAME', 'May')} we launched ${D('NAME', s.product())} in ${D('NAME', s.city('us'))}.`); break;
      case 8: b.line(L`${name} and ${P('NAME', q.full)} signed the contract on ${D('DOB', s.date(false))}.`); break;
      case 9: b.line(L`Date of birth: ${P('DOB', s.date(true))}`); break;
      case 10: b.line(L`Escalated by ${name}; assigned to ${P('NAME', q.full)}.`); break;
      case 11: b.line(L`The invoice dated ${D('DOB', s.date(false))} was sent to ${P('ADDRESS', s.address())}.`); break;
      case 12: b.line(L`Thanks ${P('NAME', p.first)}, I've forwarded this to ${P('NAME', q.full)}.`); break;
      case 13: b.line(L`Meet at ${D('ADDRESS', `${s.street()} ${s.pick(['Street', 'Road', 'Park', 'Square'])}`)} station at ${s.int(1, 12)} pm, near the ${D('NAME', nameDecoy(s))}.`); break;
      case 14: b.line(L`${D('NAME', 'Rose')} gold and ${D('NAME', 'Ruby')} red are the two best sellers of ${D('NAME', s.product())}.`); break;
      case 15: b.line(L`${name} was born on ${P('DOB', s.date(true))} in ${D('NAME', s.city('uk'))}.`); break;
      case 16: b.line(L`Hi ${P('NAME', p.first)},`); break;
      default: b.line(L`${D('NAME', 'Hope')} this helps. ${name} will send the signed copy.`); break;
    }
  }
  return b;
};

/** A customer list as someone pastes it into a chat. */
const pastedList: Build = (s) => {
  const b = new DocBuilder();
  b.line(L`Can you check these customers for duplicates?`);
  b.line(L``);
  const style = s.int(0, 2);
  for (let i = 1; i <= s.int(4, 10); i++) {
    const p = s.person();
    if (style === 0) b.line(L`${i}. ${P('NAME', p.full)} - ${P('EMAIL', s.email(p))} - ${P('ADDRESS', s.address())}`);
    else if (style === 1) b.line(L`- ${P('NAME', p.full)}, born ${P('DOB', s.date(true))}, ${P('ADDRESS', s.address())}`);
    else {
      b.line(L`Name: ${P('NAME', p.full)}`);
      b.line(L`DOB: ${P('DOB', s.date(true))}`);
      b.line(L`Address: ${P('ADDRESS', s.address())}`);
      b.line(L``);
    }
  }
  return b;
};

/** Source code and logs whose identifiers look like names. */
const code: Build = (s) => {
  const b = new DocBuilder();
  for (let i = s.int(4, 9); i > 0; i--) {
    const p = s.person();
    switch (s.int(0, 7)) {
      case 0: b.line(L`import { ${D('NAME', 'MarkdownRenderer')} } from './render';`); break;
      case 1: b.line(L`const ${D('NAME', 'markAsRead')} = (id: string) => ${D('NAME', 'RoseChart')}.update(id);`); break;
      case 2: b.line(L`class ${D('NAME', 'BillingService')} extends ${D('NAME', 'GrantManager')} {}`); break;
      case 3: b.line(L`// TODO(${P('NAME', p.first)}): remove once ${D('NAME', s.product())} ships in ${D('NAME', s.pick(MONTHS))}`); break;
      case 4: b.line(L`${s.f.date.recent().toISOString()} INFO user ${P('NAME', p.full)} updated address to ${P('ADDRESS', s.address())}`); break;
      case 5: b.line(L`test('${D('NAME', 'Will')} retry when the ${D('NAME', 'May')} batch fails', () => {});`); break;
      case 6: b.line(L`SELECT first_name, last_name, date_of_birth FROM customers WHERE created_at > '${D('DOB', s.date(false))}';`); break;
      default: b.line(L`${D('NAME', 'Grant')}: ${D('NAME', 'ReadOnly')}  ${D('NAME', 'Expires')}: ${D('DOB', s.date(false))}`); break;
    }
  }
  return b;
};

const BUILDERS: Readonly<Record<HeldOutKind, Build>> = {
  'csv-header': csvHeader, 'csv-bare': csvBare, json: jsonDoc, prose, 'pasted-list': pastedList, code,
};

/** The documents of one split: `docsPerKind` of every kind, interleaved. */
export function generateHeldOut(split: Split, docsPerKind = 60): HeldOutDoc[] {
  const s = new HeldOutSource(split);
  const docs: HeldOutDoc[] = [];
  for (let i = 0; i < docsPerKind; i++) {
    for (const kind of HELD_OUT_KINDS) {
      const b = BUILDERS[kind](s);
      docs.push({ kind, text: b.text, spans: b.spans, decoys: b.decoys });
    }
  }
  return docs;
}

/** The types this corpus labels. */
export const HELD_OUT_TYPES: readonly PiiEntityType[] = ['NAME', 'ADDRESS', 'DOB'] as PiiEntityType[];
