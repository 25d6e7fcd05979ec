/**
 * The labelled corpus: realistic tool output (CSV exports, JSON API responses, logs,
 * emails, stack traces, git logs, config dumps) built from templates filled with fake
 * values, with the exact span of every sensitive value. Templates also carry the
 * decoys tool output is full of (ids, timestamps, versions, hashes, company and place
 * names) so that precision means something.
 *
 * Deterministic: the same seed gives the same documents, byte for byte.
 */
import type { PiiEntityType } from '../../src/pii/entities.js';
import {
  card, createFakers, decoyId, decoyNumber, decoyProper, iban, ip, ipv4, ipv6, person, phone, privateKey, secret, ssn, userAgent,
  type Fakers, type Person, type SecretKind,
} from './pii-corpus-values.js';

export interface LabelledSpan {
  type: PiiEntityType;
  start: number;
  end: number;
}

export const CORPUS_KINDS = ['csv', 'json', 'json-compact', 'jsonl-log', 'text-log', 'access-log', 'email', 'stacktrace', 'git-log', 'config'] as const;
export type CorpusKind = (typeof CORPUS_KINDS)[number];

export interface CorpusDoc {
  kind: CorpusKind;
  text: string;
  /** Every sensitive value in `text`, in order, non-overlapping. */
  spans: LabelledSpan[];
}

/** A labelled value inside a template. */
export class Pii {
  constructor(
    readonly type: PiiEntityType,
    readonly value: string,
  ) {}
}
export const P = (type: PiiEntityType, value: string) => new Pii(type, value);
/**
 * A decoy inside a template: text that looks like a value of `type` and is not one
 * (a product named like a person, a date that is not a birthday). Detection must leave it.
 */
export class Decoy {
  constructor(
    readonly type: PiiEntityType,
    readonly value: string,
  ) {}
}
export const D = (type: PiiEntityType, value: string) => new Decoy(type, value);
export type Piece = string | number | Pii | Decoy;
/** A template's literal parts and labelled values, in order. */
export const L = (strings: TemplateStringsArray, ...values: Piece[]): Piece[] => strings.flatMap((s, i) => (i < values.length ? [s, values[i]] : [s]));
export type Json = string | number | boolean | null | Pii | Decoy | Json[] | { [k: string]: Json };

export class DocBuilder {
  text = '';
  spans: LabelledSpan[] = [];
  decoys: LabelledSpan[] = [];

  add(...pieces: Piece[]): this {
    for (const p of pieces) {
      if (p instanceof Pii || p instanceof Decoy) {
        (p instanceof Pii ? this.spans : this.decoys).push({ type: p.type, start: this.text.length, end: this.text.length + p.value.length });
        this.text += p.value;
      } else {
        this.text += String(p);
      }
    }
    return this;
  }

  /** Appends a line: `b.line(L\`user ${P('EMAIL', e)} logged in\`)`. */
  line(pieces: Piece[]): this {
    return this.add(...pieces, '\n');
  }

  /** Serializes JSON; labelled values are labelled as they appear (JSON-escaped). */
  json(v: Json, indent = '', level = 0): this {
    const nl = indent ? '\n' + indent.repeat(level + 1) : '';
    const close = indent ? '\n' + indent.repeat(level) : '';
    const colon = indent ? ': ' : ':';
    if (v instanceof Pii) return this.add('"', P(v.type, JSON.stringify(v.value).slice(1, -1)), '"');
    if (v instanceof Decoy) return this.add('"', D(v.type, JSON.stringify(v.value).slice(1, -1)), '"');
    if (Array.isArray(v)) {
      if (!v.length) return this.add('[]');
      this.add('[');
      v.forEach((x, i) => {
        this.add(i ? ',' : '', nl);
        this.json(x, indent, level + 1);
      });
      return this.add(close, ']');
    }
    if (v !== null && typeof v === 'object') {
      const entries = Object.entries(v);
      if (!entries.length) return this.add('{}');
      this.add('{');
      entries.forEach(([k, x], i) => {
        this.add(i ? ',' : '', nl, JSON.stringify(k), colon);
        this.json(x, indent, level + 1);
      });
      return this.add(close, '}');
    }
    return this.add(JSON.stringify(v));
  }

  csvRow(cells: Piece[], sep = ','): this {
    cells.forEach((c, i) => {
      if (i) this.add(sep);
      const labelled = c instanceof Pii || c instanceof Decoy;
      const s = labelled ? c.value : String(c);
      const quote = s.includes(sep) || s.includes('"');
      if (quote && !labelled) this.add('"', s.replaceAll('"', '""'), '"');
      else if (quote) this.add('"', c, '"');
      else this.add(c);
    });
    return this.add('\n');
  }

  build(kind: CorpusKind): CorpusDoc {
    return { kind, text: this.text, spans: this.spans };
  }
}

// ---- shared bits ----

const isoTime = (fk: Fakers) => fk.f.date.recent({ days: 30 }).toISOString();
const level = (fk: Fakers) => fk.f.helpers.weightedArrayElement([
  { weight: 6, value: 'INFO' }, { weight: 2, value: 'WARN' }, { weight: 1, value: 'ERROR' }, { weight: 2, value: 'DEBUG' },
]);
const pick = <T>(fk: Fakers, xs: readonly T[]): T => fk.f.helpers.arrayElement(xs);
const count = (fk: Fakers, min: number, max: number) => fk.f.number.int({ min, max });
const money = (fk: Fakers) => fk.f.finance.amount({ min: 5, max: 5000 });
const name = (p: Person) => P('NAME', p.full);
const email = (p: Person) => P('EMAIL', p.email);
const keyedSecret = (fk: Fakers): [string, SecretKind] => pick(fk, [
  ['GITHUB_TOKEN', 'github'], ['GH_PAT', 'github-pat'], ['SLACK_BOT_TOKEN', 'slack'], ['NPM_TOKEN', 'npm'],
  ['GOOGLE_API_KEY', 'google'], ['STRIPE_SECRET_KEY', 'stripe'], ['ANTHROPIC_API_KEY', 'anthropic'], ['SANDGATE_TOKEN', 'sandgate'],
  ['AWS_ACCESS_KEY_ID', 'aws-key-id'], ['AWS_SECRET_ACCESS_KEY', 'aws-secret'], ['DB_PASSWORD', 'password'], ['SESSION_SECRET', 'password'],
] as const);
/** Secrets recognizable by shape alone, wherever they appear. */
const SHAPED_SECRETS: readonly SecretKind[] = ['aws-key-id', 'github', 'github-pat', 'slack', 'npm', 'jwt', 'google', 'stripe', 'anthropic', 'sandgate'];

// ---- document templates ----

function csvDoc(fk: Fakers): CorpusDoc {
  const b = new DocBuilder();
  const rows = count(fk, 5, 25);
  const schema = count(fk, 0, 2);
  if (schema === 0) {
    b.csvRow(['id', 'first_name', 'last_name', 'email', 'phone', 'city', 'signup_ip', 'created_at', 'lifetime_value']);
    for (let i = 0; i < rows; i++) {
      const p = person(fk);
      b.csvRow([1000 + i, P('NAME', p.first), P('NAME', p.last), email(p), P('PHONE', phone(fk)), decoyProper(fk), P('IP', ip(fk)), isoTime(fk), money(fk)]);
    }
  } else if (schema === 1) {
    b.csvRow(['customer_id', 'name', 'email', 'company', 'card_number', 'exp', 'amount', 'currency', 'order_number']);
    for (let i = 0; i < rows; i++) {
      const p = person(fk);
      const exp = `${String(count(fk, 1, 12)).padStart(2, '0')}/${count(fk, 25, 31)}`;
      b.csvRow([decoyId(fk), name(p), email(p), fk.f.company.name(), P('CARD', card(fk)), exp, money(fk), pick(fk, ['USD', 'EUR', 'GBP']), fk.f.string.numeric(16)]);
    }
  } else {
    b.csvRow(['employee_id', 'full_name', 'ssn', 'work_email', 'department', 'title', 'iban', 'salary', 'start_date'], ';');
    for (let i = 0; i < rows; i++) {
      const p = person(fk);
      b.csvRow([`E${fk.f.string.numeric(5)}`, name(p), P('SSN', ssn(fk)), email(p), fk.f.commerce.department(), fk.f.person.jobTitle(), P('IBAN', iban(fk)), count(fk, 40000, 190000), fk.f.date.past().toISOString().slice(0, 10)], ';');
    }
  }
  return b.build('csv');
}

function userRecord(fk: Fakers): Json {
  const p = person(fk);
  const rec: Record<string, Json> = {
    id: fk.f.string.uuid(),
    full_name: name(p),
    email: email(p),
    phone: P('PHONE', phone(fk)),
    address: { street: P('ADDRESS', fk.f.location.streetAddress()), city: fk.f.location.city(), zip: fk.f.location.zipCode('#####'), country: fk.f.location.countryCode() },
    company: { name: fk.f.company.name(), department: fk.f.commerce.department() },
    last_login_ip: P('IP', ip(fk)),
    created_at: isoTime(fk),
    login_count: count(fk, 0, 5000),
    app_version: fk.f.system.semver(),
  };
  if (fk.f.datatype.boolean(0.5)) rec.payment = { card_number: P('CARD', card(fk)), card_brand: pick(fk, ['visa', 'mastercard', 'amex']), billing_iban: P('IBAN', iban(fk)) };
  if (fk.f.datatype.boolean(0.3)) rec.ssn = P('SSN', ssn(fk));
  if (fk.f.datatype.boolean(0.3)) {
    const m = person(fk);
    rec.account_manager = { first_name: P('NAME', m.first), last_name: P('NAME', m.last), email: email(m) };
  }
  return rec;
}

function jsonDoc(fk: Fakers): CorpusDoc {
  const b = new DocBuilder();
  const users = Array.from({ length: count(fk, 2, 6) }, () => userRecord(fk));
  b.json({ data: users, page: { next_page_token: fk.f.string.alphanumeric(24), total: count(fk, 10, 9000) }, request_id: decoyId(fk) }, '  ');
  return b.add('\n').build('json');
}

function jsonCompactDoc(fk: Fakers): CorpusDoc {
  const b = new DocBuilder();
  if (fk.f.datatype.boolean(0.5)) {
    const charges: Json[] = Array.from({ length: count(fk, 2, 8) }, () => {
      const p = person(fk);
      return {
        id: `ch_${fk.f.string.alphanumeric(24)}`,
        amount: count(fk, 100, 500000),
        currency: 'usd',
        billing_details: { name: name(p), email: email(p), phone: P('PHONE', phone(fk)) },
        payment_method_details: { card: { number: P('CARD', card(fk)), exp_year: count(fk, 2025, 2031), fingerprint: fk.f.string.alphanumeric(16) } },
        client_ip: P('IP', ip(fk)),
        created: count(fk, 1.6e9, 1.8e9),
      };
    });
    b.json({ object: 'list', data: charges, has_more: fk.f.datatype.boolean() });
  } else {
    const commits: Json[] = Array.from({ length: count(fk, 2, 8) }, () => {
      const a = person(fk);
      return {
        sha: fk.f.git.commitSha(),
        commit: { author: { name: name(a), email: email(a), date: isoTime(fk) }, message: fk.f.git.commitMessage() },
        stats: { additions: count(fk, 0, 900), deletions: count(fk, 0, 900) },
      };
    });
    b.json(commits);
  }
  return b.add('\n').build('json-compact');
}

function jsonlLogDoc(fk: Fakers): CorpusDoc {
  const b = new DocBuilder();
  for (let i = count(fk, 10, 40); i > 0; i--) {
    const p = person(fk);
    const base: Record<string, Json> = { ts: isoTime(fk), level: level(fk).toLowerCase(), request_id: fk.f.string.uuid() };
    const shape = count(fk, 0, 5);
    if (shape === 0) Object.assign(base, { msg: 'login succeeded', user: { email: email(p) }, ip: P('IP', ip(fk)), duration_ms: count(fk, 1, 900) });
    else if (shape === 2) Object.assign(base, { msg: 'sms sent', to: P('PHONE', phone(fk)), provider: pick(fk, ['twilio', 'vonage']), segments: count(fk, 1, 4) });
    else if (shape === 3) Object.assign(base, { msg: 'profile updated', actor: name(p), fields: ['phone', 'address'], version: fk.f.system.semver() });
    else if (shape === 4) Object.assign(base, { msg: 'payment failed', card: P('CARD', card(fk)), reason: 'insufficient_funds', amount: money(fk) });
    else Object.assign(base, { msg: 'cache miss', key: `user:${decoyId(fk)}`, bytes: count(fk, 100, 90000), node: decoyProper(fk) });
    if (shape === 1) {
      // A bearer header: the credential alone is the secret, not the scheme before it.
      b.add('{"ts":', JSON.stringify(base.ts), ',"level":', JSON.stringify(base.level), ',"msg":"outbound request","headers":{"authorization":"Bearer ', P('SECRET', secret(fk, 'jwt')), '"},"status":200}\n');
    } else {
      b.json(base).add('\n');
    }
  }
  return b.build('jsonl-log');
}

function textLogDoc(fk: Fakers): CorpusDoc {
  const b = new DocBuilder();
  for (let i = count(fk, 10, 40); i > 0; i--) {
    const t = isoTime(fk);
    const p = person(fk);
    switch (count(fk, 0, 11)) {
      case 0: b.line(L`${t} INFO  [auth] login ok for ${email(p)} from ${P('IP', ip(fk))} (session ${decoyId(fk)})`); break;
      case 1: b.line(L`${t} WARN  [billing] card ${P('CARD', card(fk))} declined for customer ${name(p)}, retry in ${count(fk, 1, 60)}s`); break;
      case 2: b.line(L`${t} DEBUG [db] connecting to postgres://app:${P('SECRET', secret(fk, 'password'))}@db-${count(fk, 1, 9)}.internal:5432/prod`); break;
      case 3: b.line(L`${t} ERROR [notify] sms to ${P('PHONE', phone(fk))} failed: provider timeout after ${count(fk, 1000, 30000)}ms`); break;
      case 4: b.line(L`${t} INFO  [users] ${name(p)} changed the role of ${name(person(fk))} to admin`); break;
      case 5: b.line(L`${t} INFO  [http] GET /api/v1/orders/${fk.f.string.numeric(8)} 200 ${count(fk, 1, 900)}ms ${decoyNumber(fk)} bytes`); break;
      case 6: b.line(L`${t} INFO  [kyc] verified ssn ${P('SSN', ssn(fk))} for applicant ${fk.f.string.uuid()}`); break;
      case 7: b.line(L`${t} INFO  [payouts] sending ${money(fk)} EUR to ${P('IBAN', iban(fk))} (batch ${decoyId(fk)})`); break;
      case 8: b.line(L`${t} WARN  [ci] token ${P('SECRET', secret(fk, pick(fk, SHAPED_SECRETS)))} used from ${P('IP', ipv6(fk))}`); break;
      case 9: b.line(L`${t} INFO  [worker] job ${decoyId(fk)} done in ${count(fk, 1, 99)}.${count(fk, 0, 99)}s, build ${decoyNumber(fk)} on ${decoyProper(fk)}`); break;
      case 10: b.line(L`${t} INFO  [support] ticket #${count(fk, 1000, 99999)} assigned to ${name(p)} (${email(p)})`); break;
      default: b.line(L`${t} INFO  [net] peer ${P('IP', ipv4(fk))}:${count(fk, 1024, 65535)} connected, mac ${fk.f.internet.mac()}, rtt ${count(fk, 1, 300)}ms`);
    }
  }
  return b.build('text-log');
}

function accessLogDoc(fk: Fakers): CorpusDoc {
  const b = new DocBuilder();
  const months = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  for (let i = count(fk, 10, 40); i > 0; i--) {
    const d = fk.f.date.recent({ days: 30 });
    const ts = `${String(d.getUTCDate()).padStart(2, '0')}/${months[d.getUTCMonth()]}/${d.getUTCFullYear()}:${d.toISOString().slice(11, 19)} +0000`;
    const path = pick(fk, ['/api/v1/users', '/login', `/orders/${fk.f.string.numeric(7)}`, '/static/app.js', `/v2/items?page=${count(fk, 1, 40)}`]);
    const status = pick(fk, [200, 200, 200, 301, 404, 500]);
    const client = fk.f.datatype.boolean(0.8) ? ipv4(fk) : ipv6(fk);
    b.line(L`${P('IP', client)} - - [${ts}] "${pick(fk, ['GET', 'POST', 'PUT'])} ${path} HTTP/1.1" ${status} ${count(fk, 0, 90000)} "-" "${userAgent(fk)}" rt=${count(fk, 0, 2)}.${count(fk, 100, 999)}`);
  }
  return b.build('access-log');
}

function emailDoc(fk: Fakers): CorpusDoc {
  const b = new DocBuilder();
  const from = person(fk);
  const to = person(fk);
  const cc = person(fk);
  const other = person(fk);
  b.line(L`From: ${name(from)} <${email(from)}>`);
  b.line(L`To: ${name(to)} <${email(to)}>`);
  if (fk.f.datatype.boolean(0.5)) b.line(L`Cc: ${name(cc)} <${email(cc)}>`);
  b.line(L`Date: ${fk.f.date.recent().toUTCString()}`);
  b.line(L`Subject: ${pick(fk, ['Invoice', 'Re: account access', 'Fwd: contract', 'Quick question', 'Payment details'])} ${fk.f.string.numeric(5)}`);
  b.line(L`Message-ID: <${fk.f.string.alphanumeric(20)}@mail.${fk.f.internet.domainName()}>`);
  b.line(L``);
  b.line(L`${pick(fk, ['Hi', 'Hello', 'Dear'])} ${P('NAME', to.first)},`);
  b.line(L``);
  switch (count(fk, 0, 3)) {
    case 0:
      b.line(L`please find the invoice for ${fk.f.commerce.productName()} attached. The amount of ${money(fk)} EUR is due in 30 days;`);
      b.line(L`kindly transfer it to IBAN ${P('IBAN', iban(fk))} and quote reference ${decoyId(fk)}.`);
      break;
    case 1:
      b.line(L`I spoke with ${name(other)} from ${fk.f.company.name()} yesterday. You can reach them at ${P('PHONE', phone(fk))} or ${email(other)}.`);
      break;
    case 2:
      b.line(L`the card ending in ${fk.f.string.numeric(4)} was declined, so we charged the backup card ${P('CARD', card(fk))} instead.`);
      b.line(L`${name(other)} approved it on ${fk.f.date.recent().toDateString()}.`);
      break;
    default:
      b.line(L`your temporary access key is ${P('SECRET', secret(fk, 'aws-key-id'))} and the VPN gateway is ${P('IP', ipv4(fk))}.`);
      b.line(L`If anything fails, call me on ${P('PHONE', phone(fk))}.`);
  }
  b.line(L``);
  b.line(L`${pick(fk, ['Best regards', 'Thanks', 'Cheers', 'Kind regards'])},`);
  b.line(L`${name(from)}`);
  b.line(L`${fk.f.person.jobTitle()}, ${fk.f.company.name()}`);
  b.line(L`${P('PHONE', phone(fk))}`);
  return b.build('email');
}

function stackTraceDoc(fk: Fakers): CorpusDoc {
  const b = new DocBuilder();
  const p = person(fk);
  const variant = count(fk, 0, 2);
  if (variant === 0) {
    b.line(L`Traceback (most recent call last):`);
    b.line(L`  File "/app/billing/charge.py", line ${count(fk, 10, 400)}, in charge_customer`);
    b.line(L`    result = gateway.charge(card_number, amount)`);
    b.line(L`  File "/usr/lib/python3.11/site-packages/gateway/client.py", line ${count(fk, 10, 900)}, in charge`);
    b.line(L`    raise CardDeclined(f"declined: {card_number}")`);
    b.line(L`gateway.errors.CardDeclined: declined: ${P('CARD', card(fk))}`);
    b.line(L``);
    b.line(L`Locals at failure:`);
    b.line(L`  customer = {'id': ${count(fk, 1, 99999)}, 'name': '${name(p)}', 'email': '${email(p)}', 'phone': '${P('PHONE', phone(fk))}'}`);
    b.line(L`  amount = ${money(fk)}`);
    b.line(L`  remote_addr = '${P('IP', ip(fk))}'`);
  } else if (variant === 1) {
    b.line(L`Error: connect ECONNREFUSED ${P('IP', ipv4(fk))}:${count(fk, 1024, 65535)}`);
    b.line(L`    at TCPConnectWrap.afterConnect [as oncomplete] (node:net:${count(fk, 1000, 2000)}:${count(fk, 1, 40)})`);
    b.line(L`    at UserService.notify (/srv/app/dist/services/UserService.js:${count(fk, 1, 400)}:${count(fk, 1, 80)})`);
    b.line(L`  errno: -111, code: 'ECONNREFUSED', syscall: 'connect',`);
    b.line(L`  context: { userEmail: '${email(p)}', userName: '${name(p)}', apiKey: '${P('SECRET', secret(fk, pick(fk, SHAPED_SECRETS)))}' }`);
    b.line(L`Node.js v${fk.f.system.semver()}`);
  } else {
    b.line(L`com.acme.accounts.AccountLockedException: account for ${email(p)} locked after ${count(fk, 3, 9)} attempts from ${P('IP', ip(fk))}`);
    b.line(L`\tat com.acme.accounts.LoginService.authenticate(LoginService.java:${count(fk, 10, 500)})`);
    b.line(L`\tat com.acme.web.AuthController.login(AuthController.java:${count(fk, 10, 500)})`);
    b.line(L`\tat java.base/jdk.internal.reflect.DirectMethodHandleAccessor.invoke(DirectMethodHandleAccessor.java:103)`);
    b.line(L`Caused by: com.acme.kyc.VerificationException: SSN ${P('SSN', ssn(fk))} does not match holder ${name(p)}`);
    b.line(L`\t... ${count(fk, 10, 60)} more`);
  }
  return b.build('stacktrace');
}

function gitLogDoc(fk: Fakers): CorpusDoc {
  const b = new DocBuilder();
  for (let i = count(fk, 3, 8); i > 0; i--) {
    const a = person(fk);
    b.line(L`commit ${fk.f.git.commitSha()}`);
    b.line(L`Author: ${name(a)} <${email(a)}>`);
    b.line(L`Date:   ${fk.f.date.recent().toString().slice(0, 24)} +0000`);
    b.line(L``);
    b.line(L`    ${fk.f.git.commitMessage()} (#${count(fk, 10, 9999)})`);
    if (fk.f.datatype.boolean(0.3)) {
      const c = person(fk);
      b.line(L``);
      b.line(L`    Co-authored-by: ${name(c)} <${email(c)}>`);
    }
    b.line(L``);
  }
  return b.build('git-log');
}

function configDoc(fk: Fakers): CorpusDoc {
  const b = new DocBuilder();
  if (fk.f.datatype.boolean(0.5)) {
    b.line(L`# .env (production)`);
    b.line(L`NODE_ENV=production`);
    b.line(L`PORT=${count(fk, 3000, 9000)}`);
    b.line(L`LOG_LEVEL=info`);
    b.line(L`MAX_TOKENS=${count(fk, 256, 8192)}`);
    b.line(L`PASSWORD_MIN_LENGTH=${count(fk, 8, 16)}`);
    b.line(L`DATABASE_URL=postgres://svc_app:${P('SECRET', secret(fk, 'password'))}@${fk.f.internet.domainName()}:5432/app`);
    for (let i = count(fk, 3, 7); i > 0; i--) {
      const [key, kind] = keyedSecret(fk);
      b.line(L`${key}=${P('SECRET', secret(fk, kind))}`);
    }
    b.line(L`SUPPORT_PHONE=${P('PHONE', phone(fk))}`);
    b.line(L`ADMIN_EMAIL=${email(person(fk))}`);
    b.line(L`ALLOWED_CIDR=${P('IP', ipv4(fk))}/32`);
    b.line(L`BUILD_ID=${decoyId(fk)}`);
    b.line(L`RELEASE=${decoyNumber(fk)}`);
  } else if (fk.f.datatype.boolean(0.4)) {
    // A cloud service-account file: the key is one JSON string with escaped line breaks.
    const owner = person(fk);
    b.json({
      type: 'service_account',
      project_id: `${fk.f.word.noun()}-${fk.f.string.numeric(6)}`,
      private_key_id: fk.f.string.hexadecimal({ length: 40, casing: 'lower', prefix: '' }),
      private_key: P('SECRET', privateKey(fk)),
      client_email: P('EMAIL', `deployer@${fk.f.word.noun()}-${fk.f.string.numeric(4)}.iam.example.com`),
      client_id: fk.f.string.numeric(21),
      owner: { name: name(owner), email: email(owner) },
    }, '  ').add('\n');
  } else {
    b.line(L`service:`);
    b.line(L`  name: ${fk.f.commerce.productName()}`);
    b.line(L`  owner: ${name(person(fk))}`);
    b.line(L`  version: ${fk.f.system.semver()}`);
    b.line(L`  listen: ${P('IP', ipv4(fk))}:${count(fk, 1024, 65535)}`);
    b.line(L`credentials:`);
    b.line(L`  api_key: ${P('SECRET', secret(fk, pick(fk, SHAPED_SECRETS)))}`);
    b.line(L`  password: "${P('SECRET', secret(fk, 'password'))}"`);
    b.line(L`  token_type: bearer`);
    b.line(L`  tls_key: |`);
    b.line(L`    ${P('SECRET', privateKey(fk).replaceAll('\n', '\n    '))}`);
    b.line(L`contacts:`);
    b.line(L`  oncall: ${P('PHONE', phone(fk))}`);
    b.line(L`  escalation: ${email(person(fk))}`);
  }
  return b.build('config');
}

const GENERATORS: Readonly<Record<CorpusKind, (fk: Fakers) => CorpusDoc>> = {
  csv: csvDoc,
  json: jsonDoc,
  'json-compact': jsonCompactDoc,
  'jsonl-log': jsonlLogDoc,
  'text-log': textLogDoc,
  'access-log': accessLogDoc,
  email: emailDoc,
  stacktrace: stackTraceDoc,
  'git-log': gitLogDoc,
  config: configDoc,
};

export interface CorpusOptions {
  seed: number;
  /** Documents of each kind. */
  docsPerKind: number;
}

/** The labelled corpus for a seed: `docsPerKind` documents of every kind, interleaved. */
export function generateCorpus({ seed, docsPerKind }: CorpusOptions): CorpusDoc[] {
  const fk = createFakers(seed);
  const docs: CorpusDoc[] = [];
  for (let i = 0; i < docsPerKind; i++) for (const kind of CORPUS_KINDS) docs.push(GENERATORS[kind](fk));
  return docs;
}
