import { describe, expect, it } from 'vitest';
import { createDetector } from './detector.js';

const detector = createDetector();
const found = (text: string) => detector.detect(text).map((s) => [s.type, text.slice(s.start, s.end)]);

describe('structured recognizers', () => {
  it('emails, including hyphenated domains, but not package versions or scp paths', () => {
    expect(found('mail jo@my-firm.co.uk now')).toEqual([['EMAIL', 'jo@my-firm.co.uk']]);
    expect(found('"Jane.Roe+x@example.com".')).toEqual([['EMAIL', 'Jane.Roe+x@example.com']]);
    expect(found('npm i left-pad@1.3.0 and git clone git@github.com:org/repo.git')).toEqual([]);
    expect(found('Message-ID: <abc123@mail.example.com>')).toEqual([]);
  });

  it('card numbers need Luhn and a brand, and are never carved out of a digit run', () => {
    expect(found('card 4111 1111 1111 1111 ok')).toEqual([['CARD', '4111 1111 1111 1111']]);
    expect(found('amex 3782-822463-10005')).toEqual([['CARD', '3782-822463-10005']]);
    expect(found('paid with 4111111111111111.')).toEqual([['CARD', '4111111111111111']]);
    expect(found('4111 1111 1111 1111 20 items')).toEqual([['CARD', '4111 1111 1111 1111']]);
    expect(found('id 94111111111111111119 and 4111111111111112')).toEqual([]);
    expect(found('"order_number": 4111111111111111')).toEqual([]);
    expect(found('{"card":{"number":"4111111111111111"}}')).toEqual([['CARD', '4111111111111111']]);
  });

  it('IBANs, printed or electronic, with country length and mod-97', () => {
    expect(found('to DE89 3704 0044 0532 0130 00 EUR')).toEqual([['IBAN', 'DE89 3704 0044 0532 0130 00']]);
    expect(found('GB82WEST12345698765432')).toEqual([['IBAN', 'GB82WEST12345698765432']]);
    expect(found('DE89 3704 0044 0532 0130 01').filter(([t]) => t === 'IBAN')).toEqual([]);
  });

  it('IPv4 and IPv6, but not versions, OIDs, MACs, times or code slices', () => {
    expect(found('from 203.0.113.5:443 and [2001:db8::8a2e:370:7334]:80')).toEqual([
      ['IP', '203.0.113.5'],
      ['IP', '2001:db8::8a2e:370:7334'],
    ]);
    expect(found('fe80::1c2d:3e4f:5a6b:7c8d%eth0')).toEqual([['IP', 'fe80::1c2d:3e4f:5a6b:7c8d']]);
    expect(found('Chrome/120.0.0.0 Safari/537.36 v10.0.0.1 oid 1.3.6.1.4.1 mac 00:1a:2b:3c:4d:5e at 10:30:45')).toEqual([]);
    expect(found('x = a[1::2] + b[::3]; std::vector')).toEqual([]);
    expect(found('version 256.1.1.1 and 10.0.0.300')).toEqual([]);
  });

  it('SSNs with SSA rules and one separator', () => {
    expect(found('ssn 123-45-6789')).toEqual([['SSN', '123-45-6789']]);
    expect(found('ssn 123 45 6789')).toEqual([['SSN', '123 45 6789']]);
    expect(found('000-12-3456 666-12-3456 123-45 6789 978-3-16-148410-0')).toEqual([]);
  });

  it('phone numbers in common shapes, not dates, amounts or ids', () => {
    expect(found('call (555) 123-4567 x89 or +44 20 7946 0958')).toEqual([
      ['PHONE', '(555) 123-4567 x89'],
      ['PHONE', '+44 20 7946 0958'],
    ]);
    expect(found('fr 01 23 45 67 89, de 030 12345678, us 555.123.4567')).toEqual([
      ['PHONE', '01 23 45 67 89'],
      ['PHONE', '030 12345678'],
      ['PHONE', '555.123.4567'],
    ]);
    expect(found('"phone": "500893004"')).toEqual([['PHONE', '500893004']]);
    expect(found('2024-01-15 12:30:45 took 1718900000 bytes 5551234567 ISBN 978-3-16-148410-0 total 1 234 567')).toEqual([]);
  });

  it('secrets by prefix, by key, in URLs and in authorization headers', () => {
    const gh = 'ghp_' + 'a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8';
    expect(found(`export GITHUB_TOKEN=${gh}`)).toEqual([['SECRET', gh]]);
    expect(found('key AKIAIOSFODNN7EXAMPLE here')).toEqual([['SECRET', 'AKIAIOSFODNN7EXAMPLE']]);
    expect(found('postgres://app:s3cr3t-P4ss@db.internal:5432/prod')).toEqual([['SECRET', 's3cr3t-P4ss']]);
    expect(found('Authorization: Bearer abc.def-ghi_jkl')).toEqual([['SECRET', 'abc.def-ghi_jkl']]);
    expect(found('"password": "hunter2hunter2", "token_type": "bearer", "max_tokens": 4096')).toEqual([['SECRET', 'hunter2hunter2']]);
    expect(found('password: ******** next_page_token: CAEQAA12345')).toEqual([]);
    const sgp = 'sgp_' + 'Ab3'.repeat(11);
    expect(found(`token ${sgp}`)).toEqual([['SECRET', sgp]]);
  });

  it('private-key blocks over several lines, escaped in JSON, and cut short', () => {
    const key = '-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nq3Zk/+8x==\n-----END RSA PRIVATE KEY-----';
    expect(found(`before\n${key}\nafter`)).toEqual([['SECRET', key]]);
    // Escaped inside JSON, under a secret key: the whole string value is the secret.
    const escaped = key.replaceAll('\n', '\\n');
    expect(found(`{"private_key": "${escaped}\\n"}`)).toEqual([['SECRET', `${escaped}\\n`]]);
    expect(found(`{"tls": "${escaped}"}`)).toEqual([['SECRET', escaped]]);
    const truncated = '-----BEGIN PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nq3Zk/+8x';
    expect(found(`${truncated}\n[output truncated]`)).toEqual([['SECRET', truncated]]);
  });

  it('text that already looks like a token is escaped as TOKEN', () => {
    expect(found('see [EMAIL_3] and [NAME_12], not [EMAIL_03] or [FOO_1]')).toEqual([
      ['TOKEN', '[EMAIL_3]'],
      ['TOKEN', '[NAME_12]'],
    ]);
  });
});

describe('names', () => {
  it('by key, column, header, greeting and sign-off', () => {
    expect(found('{"first_name": "Georgia", "last_name": "Von", "city": "Lake Lea"}')).toEqual([
      ['NAME', 'Georgia'],
      ['NAME', 'Von'],
    ]);
    expect(found('id,name,email\n1,Gunnar Barrows,gb@example.com\n')).toEqual([
      ['NAME', 'Gunnar Barrows'],
      ['EMAIL', 'gb@example.com'],
    ]);
    expect(found('From: Séverin Paris <sp@example.fr>')).toEqual([
      ['NAME', 'Séverin Paris'],
      ['EMAIL', 'sp@example.fr'],
    ]);
    expect(found('Dear Reed,\n\nthanks.\n\nKind regards,\nJoost Schwartz\n')).toEqual([
      ['NAME', 'Reed'],
      ['NAME', 'Joost Schwartz'],
    ]);
  });

  it('in running text, by what the words are', () => {
    expect(found('I spoke with Omer Walker yesterday about Giada Hornung.')).toEqual([
      ['NAME', 'Omer Walker'],
      ['NAME', 'Giada Hornung'],
    ]);
    expect(found('Assigned to Dr. Clara Garnier by Yoann Breton')).toEqual([
      ['NAME', 'Clara Garnier'],
      ['NAME', 'Yoann Breton'],
    ]);
  });

  it('in a table without a header, by what the column held in earlier rows', () => {
    const rows = ['C1736,Ward,Ludwig,+44 7433 334099,Leeds', 'C6857,Tandon,Gauraang,+44 7624 969194,Paucekwick', 'C3572,Satterfield,Randal,+44 7537 855348,Haleybury', 'C2824,Brown,Bob,+44 7591 349243,Brakusley'];
    const names = found(rows.join('\n')).filter(([t]) => t === 'NAME').map(([, v]) => v);
    // Neighbouring one-word cells vouch for each other; by the last row the columns decide:
    // `Brown,Bob` (ordinary words) are names, `Brakusley` in the town column is not.
    expect(names).toEqual(['Ward', 'Ludwig', 'Tandon', 'Gauraang', 'Satterfield', 'Randal', 'Brown', 'Bob']);
    expect(found('Chip Wise,Summer Collection,315.13,08/18/2025')).toEqual([]);
    const sales = ['Omer Walker,Handcrafted Steel Shoes,70.67,1/25/2019', 'Giada Hornung,Sleek Wooden Car,47.18,2024-02-03', 'Chip Wise,Summer Collection,315.13,08/18/2025'];
    expect(found(sales.join('\n')).filter(([t]) => t === 'NAME')).toEqual([
      ['NAME', 'Omer Walker'],
      ['NAME', 'Giada Hornung'],
      ['NAME', 'Chip Wise'],
    ]);
  });

  it('by what follows, and by a name said earlier on the line', () => {
    expect(found('- Hazel Wood, born 23.08.1967, and Holly Wise (born 1953)').filter(([t]) => t === 'NAME')).toEqual([
      ['NAME', 'Hazel Wood'],
      ['NAME', 'Holly Wise'],
    ]);
    expect(found('{"account_manager": "Reed Silver", "notes": "Called Reed about the order"}')).toEqual([
      ['NAME', 'Reed Silver'],
      ['NAME', 'Reed'],
    ]);
    expect(found('{"last_name": "al Rashid", "manager": "Souad al-Tazi"}')).toEqual([
      ['NAME', 'al Rashid'],
      ['NAME', 'Souad al-Tazi'],
    ]);
  });

  it('not ordinary capitalized text, companies, places or streets', () => {
    expect(found('500 Internal Server Error from Acme Group in New York; Senior Data Engineer')).toEqual([]);
    // The street is an address (one value, house number and all), not a name.
    expect(found('"street": "340 Prohaska Dale", "company": {"name": "Adams Group"}')).toEqual([['ADDRESS', '340 Prohaska Dale']]);
    expect(found('at UserService.notify (/srv/app/UserService.js:12:5) TypeError: Cannot read')).toEqual([]);
    // The town after a street, in a pasted list or a row; a product under its key; a sentence with a comma, not a header.
    expect(found('1. P. Sherman - p.sherman@example.com - 42 Wallaby Way, Sydney').map(([t]) => t)).toEqual(['NAME', 'EMAIL', 'ADDRESS']);
    expect(found('{"product": "Customer Identity Orchestrator"}')).toEqual([]);
    expect(found('Grant read access to the billing role, then Bill the customer monthly.\nThanks Carmen, see you.')).toEqual([['NAME', 'Carmen']]);
  });
});

describe('ordinary tool output', () => {
  it('finds nothing in listings, tables, tracebacks, versions and prose without PII', () => {
    const text = [
      '-rw-r--r-- 1 root root  4096 Jan 12 10:31 package.json',
      'USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND',
      'root           1  0.0  0.1 167812 11264 ?        Ss   06:19   0:02 /sbin/init',
      'NAME                      READY   STATUS    RESTARTS   AGE',
      'api-7d9f8b6c5d-x2k4p      1/1     Running   0          3d',
      '/dev/sda1        99G   42G   53G  45% /',
      '  File "/usr/lib/python3.12/json/decoder.py", line 353, in raw_decode',
      'json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)',
      'Hello World! Visit Google Cloud Console or Amazon Web Services in San Francisco.',
      '    "js-tokens": "^4.0.0", "password": faker.internet.password(),',
      'build 20250112.1 sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 uuid 6db60c49-0a67-4658-af15-0ba36aa2ec2d',
    ].join('\n');
    expect(found(text)).toEqual([]);
  });
});

describe('settings and allow-list', () => {
  it('only enabled types are found; token literals always are', () => {
    const d = createDetector({ entities: ['EMAIL'] });
    const text = 'a@b.io 10.0.0.1 [IP_1]';
    expect(d.detect(text).map((s) => s.type)).toEqual(['EMAIL', 'TOKEN']);
  });

  it('allow-listed values stay, case-insensitively', () => {
    const d = createDetector({ allow: ['Support@Acme.com'] });
    const text = 'write to support@acme.com or jo@acme.com';
    expect(d.detect(text).map((s) => text.slice(s.start, s.end))).toEqual(['jo@acme.com']);
  });
});
