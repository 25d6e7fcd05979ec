/**
 * PII tokenization end to end, over MCP: the gateway as main.ts serves it (createGateway,
 * with its real vault and key file), the SDK client over real HTTP, the real sandbox.
 *
 * A workspace file of customer records (the user's view: real values) → execute_code
 * prints it → the client sees only tokens → the client sends code and files that use
 * tokens → the sandbox and the workspace get the real values. Nothing the client
 * receives, streamed progress included, and nothing in the store holds a raw value.
 *
 * And the built-in chat, over HTTP as its pages use it: a customer list pasted into a
 * message reaches the model (a stand-in provider) as tokens, and the user reads the
 * values in the conversation.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PII_KEY_FILE } from '../src/pii/index.js';
import { card, createFakers, iban, person, phone } from './support/pii-corpus-values.js';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import type { Workspace } from '../src/sandboxes/workspace.js';
import { ensureUser } from '../src/accounts/accounts.js';
import { createToken } from '../src/tokens/tokens.js';
import { callTool, startGateway, toolText, type Gateway as ServedGateway } from './support/mcp.js';
import { startStandin, type Standin } from './support/model-standins.js';
import { eventually } from './support/until.js';
import { webSession } from './support/web-session.js';

interface Customer {
  id: number;
  name: string;
  email: string;
  phone: string;
  card: string;
  iban: string;
}

/** Seeded customer records, with Faker values in the variety real exports show. */
function customers(seed: number, n: number): Customer[] {
  const fk = createFakers(seed);
  return Array.from({ length: n }, (_, i) => {
    const p = person(fk);
    return { id: 1001 + i, name: p.full, email: p.email, phone: phone(fk), card: card(fk), iban: iban(fk) };
  });
}

const CUSTOMERS = customers(42, 25);
const CSV = ['customer_id,name,email,phone,card_number,iban', ...CUSTOMERS.map((c) => [c.id, c.name, c.email, c.phone, c.card, c.iban].join(','))].join('\n') + '\n';
const RAW_VALUES = CUSTOMERS.flatMap((c) => [c.name, ...c.name.split(' ').filter((w) => w.length > 3), c.email, c.phone, c.card, c.iban]);
const TOKEN_ROW = /^(\d+),(\[NAME_\d+\]),(\[EMAIL_\d+\]),(\[PHONE_\d+\]),(\[CARD_\d+\]),(\[IBAN_\d+\])$/;

const CHAT_MODEL = 'openai:gpt-test';
let standin: Standin;
let served: ServedGateway;
let gateway: ServedGateway['gateway'];
let mcpUrl: string;
let dataDir: string;
let alice: SandboxOwner;
let aliceWs: Workspace;
const tokens: Record<'laptop' | 'phone' | 'bob', string> = { laptop: '', phone: '', bob: '' };

function rawValuesIn(s: string): string[] {
  return RAW_VALUES.filter((v) => s.includes(v));
}

async function connect(token: string): Promise<Client> {
  const client = new Client({ name: 'pii-e2e', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return client;
}

const text = toolText;
const call = callTool<CallToolResult>;

const python = (client: Client, code: string) => call(client, 'execute_code', { language: 'python', code });

/** The tokens the client was shown for one customer, from a tokenized CSV. */
function tokensOf(csv: string, id: number): { name: string; email: string; phone: string; card: string; iban: string } {
  const line = csv.split('\n').find((l) => l.startsWith(`${id},`));
  const m = line && TOKEN_ROW.exec(line);
  if (!m) throw new Error(`no tokenized row for ${id} in:\n${csv}`);
  return { name: m[2]!, email: m[3]!, phone: m[4]!, card: m[5]!, iban: m[6]! };
}

beforeAll(async () => {
  standin = await startStandin('openai', () => ({ text: ['Hello.'] }));
  const models = { SANDGATE_OPENAI_API_KEY: 'sk-team-openai', SANDGATE_OPENAI_BASE_URL: standin.baseURL, SANDGATE_MODELS: CHAT_MODEL };
  served = await startGateway({ pii: true, env: models });
  ({ gateway, mcpUrl, dataDir } = served);
  expect(gateway.config.piiTokenize).toBe(true);
  expect(served.preflight?.ok, JSON.stringify(served.preflight)).toBe(true);

  const db = gateway.store.db;
  const a = await ensureUser(db, 'alice');
  const b = await ensureUser(db, 'bob');
  tokens.laptop = (await createToken(db, { userId: a.id, name: 'laptop' })).token;
  tokens.phone = (await createToken(db, { userId: a.id, name: 'phone' })).token;
  tokens.bob = (await createToken(db, { userId: b.id, name: 'desktop' })).token;
  alice = { userId: a.id, name: a.name };
  // The user's view: the workspace holds real values.
  aliceWs = await gateway.manager.openWorkspace(alice);
  await aliceWs.write('customers.csv', CSV);
});

afterAll(async () => {
  await served?.close();
  await standin?.close();
});

describe('PII tokenization over MCP', () => {
  let laptop: Client;
  /** The CSV as the laptop client was first shown it. */
  let shownCsv = '';

  beforeAll(async () => {
    laptop = await connect(tokens.laptop);
  });
  afterAll(async () => {
    await laptop?.close();
  });

  it('the gateway made a vault key file only its owner can read', () => {
    expect(gateway.vault).toBeDefined();
    expect(fs.statSync(path.join(dataDir, PII_KEY_FILE)).mode & 0o777).toBe(0o600);
  });

  it('execute_code printing the customer file: the client sees tokens, never a value', async () => {
    const r = await python(laptop, "print(open('customers.csv').read())");
    expect(r.isError).toBeFalsy();
    const out = text(r);
    expect(rawValuesIn(out)).toEqual([]);
    shownCsv = out.slice(0, out.indexOf('\n[python'));
    const rows = shownCsv.split('\n').filter((l) => /^\d/.test(l));
    expect(rows).toHaveLength(CUSTOMERS.length);
    for (const row of rows) expect(row).toMatch(TOKEN_ROW);
    // Distinct values, distinct tokens.
    expect(new Set(rows.map((l) => TOKEN_ROW.exec(l)![3])).size).toBe(new Set(CUSTOMERS.map((c) => c.email)).size);
  });

  it('pandas output of the same records is tokenized with the same tokens', async () => {
    const r = await python(laptop, "import pandas as pd\ndf = pd.read_csv('customers.csv', dtype=str)\nprint(df.head(5).to_string())\ndf.shape");
    const out = text(r);
    expect(rawValuesIn(out)).toEqual([]);
    const first = tokensOf(shownCsv, CUSTOMERS[0]!.id);
    expect(out).toContain(first.email);
    expect(out).toMatch(/\[result\] \(25, 6\)/);
  });

  it('code using a token reaches the sandbox with the real value; the workspace keeps it', async () => {
    const c = CUSTOMERS[0]!;
    const t = tokensOf(shownCsv, c.id);
    const r = await python(
      laptop,
      `import os\nos.makedirs('out', exist_ok=True)\nemail = "${t.email}"\nprint(len(email), email.count("@"))\n` +
        `open('out/picked.txt', 'w').write(f"${t.name} <{email}> ${t.phone}")\nprint(email)`,
    );
    const out = text(r);
    expect(out).toMatch(new RegExp(`^${c.email.length} 1\\n`));
    // Printed back, the real value is shown as the same token.
    expect(out).toContain(`\n${t.email}\n`);
    expect(rawValuesIn(out)).toEqual([]);
    // The file the code wrote holds real values: the user's view.
    expect((await aliceWs.read('out/picked.txt')).data.toString()).toBe(`${c.name} <${c.email}> ${c.phone}`);
  });

  it('read_file and resources/read of the file return the same tokens', async () => {
    const read = text(await call(laptop, 'read_file', { path: 'customers.csv' }));
    expect(rawValuesIn(read)).toEqual([]);
    expect(read.trimEnd()).toBe(shownCsv.trimEnd());
    const res = await laptop.readResource({ uri: 'file:///workspace/customers.csv' });
    expect((res.contents[0] as { text: string }).text.trimEnd()).toBe(shownCsv.trimEnd());
  });

  it('read_file pages end at a line break, so no page ends in part of a value', async () => {
    const first = text(await call(laptop, 'read_file', { path: 'customers.csv', length: 200 }));
    const body = first.slice(0, first.indexOf('\n\n['));
    expect(body.endsWith('\n')).toBe(true);
    expect(rawValuesIn(first)).toEqual([]);
    const next = Number(/Continue with offset=(\d+)/.exec(first)![1]);
    expect(CSV.slice(0, next).endsWith('\n')).toBe(true);
    const second = text(await call(laptop, 'read_file', { path: 'customers.csv', offset: next, length: 300 }));
    expect(second).toMatch(/^\d+,\[NAME_\d+\],\[EMAIL_/);
    expect(rawValuesIn(second)).toEqual([]);
  });

  it('write_file with tokens stores the real values', async () => {
    const c = CUSTOMERS[1]!;
    const t = tokensOf(shownCsv, c.id);
    const note = (v: { name: string; phone: string; card: string }) => `# Follow-up\n- customer: ${v.name}\n- phone: ${v.phone}\n- card: ${v.card}\n`;
    const r = await call(laptop, 'write_file', { path: 'notes/follow-up.md', content: note(t) });
    expect(r.isError).toBeFalsy();
    expect((await aliceWs.read('notes/follow-up.md')).data.toString()).toBe(note(c));
    expect(text(await call(laptop, 'read_file', { path: 'notes/follow-up.md' }))).toBe(note(t));
  });

  it('file names are personal data too: listings, links and resource URIs carry tokens and resolve back', async () => {
    const c = CUSTOMERS[2]!;
    await aliceWs.write(`by-customer/${c.email}.txt`, `${c.name}\n`);
    const t = tokensOf(shownCsv, c.id);
    // `<email>.txt` reads as one address (.txt could be a top-level domain): a token of its own.
    const list = text(await call(laptop, 'list_files', { path: 'by-customer' }));
    expect(rawValuesIn(list)).toEqual([]);
    expect(list).toMatch(/^\/workspace\/by-customer:\n\[EMAIL_\d+\] {2}\d+ B$/);
    const { resources } = await laptop.listResources();
    expect(rawValuesIn(JSON.stringify(resources))).toEqual([]);
    const listed = resources.find((r) => r.name.startsWith('by-customer/'))!;
    expect(listed.name).toMatch(/^by-customer\/\[EMAIL_\d+\]/);
    const completion = await laptop.complete({ ref: { type: 'ref/resource', uri: 'file:///workspace/{+path}' }, argument: { name: 'path', value: 'by-customer/' } });
    expect(completion.completion.values).toEqual([expect.stringMatching(/^by-customer\/\[EMAIL_\d+\]$/)]);
    // The client reads the file by the URI it was given: the token resolves to the real path.
    const content = await laptop.readResource({ uri: listed.uri });
    expect((content.contents[0] as { text: string }).text).toBe(`${t.name}\n`);
    // A tool creating such a file links it by token.
    const w = await python(laptop, `open('by-customer/${t.email}.json', 'w').write('{}')`);
    const link = w.content.find((x) => x.type === 'resource_link') as { uri: string; name: string } | undefined;
    expect(link).toBeDefined();
    expect(rawValuesIn(JSON.stringify(w.content))).toEqual([]);
    expect((await aliceWs.stat(`by-customer/${c.email}.json`)).type).toBe('file');
    // Errors name paths by token as well.
    const missing = await call(laptop, 'read_file', { path: `by-customer/${t.email}.pdf` });
    expect(missing.isError).toBe(true);
    expect(rawValuesIn(text(missing))).toEqual([]);
    expect(text(missing)).toMatch(/by-customer\/\[EMAIL_\d+\]/);
  });

  it('instructions show the user skills by token', async () => {
    const c = CUSTOMERS[3]!;
    await aliceWs.write('skills/vip/SKILL.md', `---\nname: vip\ndescription: Weekly report for ${c.name} (${c.email}).\n---\n`);
    const again = await connect(tokens.laptop);
    const instructions = again.getInstructions()!;
    await again.close();
    expect(instructions).toMatch(/- vip: Weekly report for \[NAME_\d+\] \(\[EMAIL_\d+\]\)/);
    expect(rawValuesIn(instructions)).toEqual([]);
  });

  it('a token the vault does not know is passed on unchanged and reported', async () => {
    const r = await python(laptop, 'print(len("[EMAIL_999]"))');
    expect(text(r)).toMatch(/^11\n/);
    expect(text(r)).toMatch(/Note: \[EMAIL_999\] is not a token this conversation knows; it was passed on unchanged\.$/);
    const known = tokensOf(shownCsv, CUSTOMERS[0]!.id).email;
    const two = await call(laptop, 'write_file', { path: 'notes/two.txt', content: `${known} [PHONE_998] [CARD_997]` });
    expect(text(two)).toMatch(/Note: \[PHONE_998\] and \[CARD_997\] are not tokens this conversation knows; they were passed on unchanged\.$/);
    expect((await aliceWs.read('notes/two.txt')).data.toString()).toBe(`${CUSTOMERS[0]!.email} [PHONE_998] [CARD_997]`);
    // A call without unknown tokens carries no note.
    expect(text(await python(laptop, 'print(1)'))).not.toMatch(/Note:/);
  });

  it('streamed progress never carries a raw value, even printed a character at a time', async () => {
    const c = CUSTOMERS[4]!;
    const t = tokensOf(shownCsv, c.id);
    const record = `${t.name},${t.email},${t.phone},${t.card},${t.iban}`;
    const progress: string[] = [];
    let notifications = 0;
    const r = (await laptop.callTool(
      {
        name: 'execute_code',
        arguments: {
          language: 'python',
          code: `import sys, time\nfor ch in "${record}":\n    sys.stdout.write(ch)\n    sys.stdout.flush()\n    time.sleep(0.01)\nprint(flush=True)\ntime.sleep(0.2)\nprint("done", flush=True)`,
        },
      },
      undefined,
      {
        onprogress: (p) => {
          notifications++;
          if (p.message) progress.push(p.message);
        },
      },
    )) as CallToolResult;
    const raw = `${c.name},${c.email},${c.phone},${c.card},${c.iban}`;
    expect(text(r)).toMatch(new RegExp(`^${record.replace(/[[\]]/g, '\\$&')}\\ndone\\n`));
    // The output arrived in many pieces, yet every message is whole tokens.
    expect(notifications).toBeGreaterThan(2);
    const all = progress.join('');
    expect(all).toContain(`stdout: ${record}\n`);
    expect(rawValuesIn(all)).toEqual([]);
    // Not even a fragment: no 4 characters of the raw record outside tokens and labels.
    const rest = all.replace(/\[[A-Z]+_\d+\]/g, ' ').replace(/stdout: /g, ' ');
    for (let i = 0; i + 4 <= raw.length; i++) {
      const piece = raw.slice(i, i + 4);
      if (/[A-Za-z0-9@]{4}/.test(piece)) expect(rest, piece).not.toContain(piece);
    }
  });

  it('names of many origins, street addresses and dates of birth in a CSV reach the client as one token each', async () => {
    const people = [
      ['Nguyễn Văn An', '1984-03-14', '10 Downing Street, London SW1A 2AA'],
      ['María José García López', '14/03/1979', 'Calle Mayor 10, 28013 Madrid'],
      ['Chinedu Okafor', '3 March 1990', '1600 Pennsylvania Ave NW, Washington, DC 20500'],
      ['Fatima al-Rashid', '02.11.1968', 'Hauptstraße 5, 10115 Berlin'],
      ['Rose Grant', '1975-07-01', '12 rue de la Paix, 75002 Paris'],
    ];
    const csv = ['customer_id,full_name,date_of_birth,address,created_at', ...people.map(([n, d, a], i) => `${i + 1},${n},${d},"${a}",2026-05-0${i + 1}`)].join('\n') + '\n';
    await aliceWs.write('people.csv', csv);
    const out = text(await python(laptop, "print(open('people.csv').read())"));
    const shown = out.slice(0, out.indexOf('\n[python'));
    // The text the model gets: every name, birthday and address a token, the row's other dates as they were.
    for (const [n, d, a] of people) for (const v of [n, d, a]) expect(shown).not.toContain(v);
    const rows = shown.split('\n').filter((l) => /^\d/.test(l));
    expect(rows).toHaveLength(people.length);
    rows.forEach((row, i) => expect(row).toMatch(new RegExp(`^${i + 1},\\[NAME_\\d+\\],\\[DOB_\\d+\\],"\\[ADDRESS_\\d+\\]",2026-05-0${i + 1}$`)));
    // Code using the tokens reaches the sandbox with the real values.
    const [, name, dob, address] = /^1,(\[NAME_\d+\]),(\[DOB_\d+\]),"(\[ADDRESS_\d+\])"/.exec(rows[0])!;
    await python(laptop, `open('out/first.txt', 'w').write("${name}|${dob}|${address}")`);
    expect((await aliceWs.read('out/first.txt')).data.toString()).toBe(people[0].join('|'));
  });

  it('the same value keeps its token across requests and connections with the same API token', async () => {
    const again = await connect(tokens.laptop);
    const out = text(await python(again, "print(open('customers.csv').read())"));
    await again.close();
    expect(out.slice(0, out.indexOf('\n[python'))).toBe(shownCsv);
  });

  it("another API token of the same user has its own scope: the laptop's tokens mean nothing there", async () => {
    // A customer far down the file: the new client has been shown only the skills index yet.
    const c = CUSTOMERS[20]!;
    const t = tokensOf(shownCsv, c.id);
    const phoneClient = await connect(tokens.phone);
    try {
      const before = await python(phoneClient, `print(len("${t.email}"))`);
      expect(text(before)).toMatch(new RegExp(`^${t.email.length}\\n`));
      expect(text(before)).toContain(`Note: ${t.email} is not a token this conversation knows`);
      // Once this client has been shown the value, it has a token of its own for it.
      const shown = text(await call(phoneClient, 'read_file', { path: 'customers.csv' }));
      expect(rawValuesIn(shown)).toEqual([]);
      const own = tokensOf(shown, c.id).email;
      expect(text(await python(phoneClient, `print(len("${own}"))`))).toMatch(new RegExp(`^${c.email.length}\\n`));
    } finally {
      await phoneClient.close();
    }
  });

  it("another user's token text never resolves to the first user's value", async () => {
    const t = tokensOf(shownCsv, CUSTOMERS[0]!.id);
    const bob = await connect(tokens.bob);
    try {
      const r = await python(bob, `v = "${t.email}"\nopen('leak.txt', 'w').write(v)\nprint(len(v))`);
      expect(text(r)).toMatch(new RegExp(`^${t.email.length}\\n`));
      expect(text(r)).toContain(`Note: ${t.email} is not a token this conversation knows`);
      const bobWs = await gateway.manager.openWorkspace({ userId: (await ensureUser(gateway.store.db, 'bob')).id, name: 'bob' });
      expect((await bobWs.read('leak.txt')).data.toString()).toBe(t.email);
      const w = await call(bob, 'write_file', { path: 'leak2.txt', content: `${t.name} ${t.email}` });
      expect(text(w)).toMatch(/are not tokens this conversation knows/);
      expect((await bobWs.read('leak2.txt')).data.toString()).toBe(`${t.name} ${t.email}`);
    } finally {
      await bob.close();
    }
  });

  it('neither the audit log nor anything else in the store holds a raw value', async () => {
    const { db, dialect } = gateway.store;
    const rows = await db.selectFrom('audit_log').selectAll().execute();
    expect(rows.length).toBeGreaterThan(15);
    expect(rawValuesIn(JSON.stringify(rows))).toEqual([]);
    // The vault holds the values sealed: no vault row holds a value in clear...
    const batches = await db.selectFrom('pii_batches').selectAll().execute();
    for (const b of batches) expect(RAW_VALUES.filter((v) => b.sealed.includes(Buffer.from(v)) || b.uses.includes(v))).toEqual([]);
    expect(batches.reduce((n, b) => n + (JSON.parse(b.uses) as number[]).length, 0)).toBeGreaterThanOrEqual(CUSTOMERS.length * 5);
    if (dialect !== 'sqlite') return;
    // ...and the database files hold none either, whatever table or page it could be in.
    await sql`PRAGMA wal_checkpoint(TRUNCATE)`.execute(db);
    const files = fs.readdirSync(dataDir).filter((f) => f.startsWith('sandgate.db'));
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) {
      const bytes = fs.readFileSync(path.join(dataDir, f));
      const inClear = RAW_VALUES.filter((v) => bytes.includes(Buffer.from(v)));
      expect(inClear, f).toEqual([]);
    }
  });
});

describe('a customer list pasted into the built-in chat', () => {
  // Names of several origins, one that is two ordinary words, a duplicate row; addresses
  // quoted as CSV quotes a cell with commas in it.
  const PEOPLE = [
    ['Amara Okafor', 'amara.okafor@example.com', '14 Elm Grove, Leeds LS6 2AB', '1987-04-12'],
    ['Nguyễn Thị Lan', 'lan.nguyen@example.org', '221 Baker Street, London NW1 6XE', '03/09/1979'],
    ['José María de la Fuente', 'jm.fuente@example.com', 'Calle de Alcalá 45, 28014 Madrid', '22.11.1990'],
    ['Priya Venkataraman', 'priya.v@example.net', '88 Rue de Rivoli, 75004 Paris', '1965-07-30'],
    ['Rose Brown', 'rose.brown@example.com', '1600 Pennsylvania Avenue NW, Washington, DC 20500', '12/25/1958'],
  ];
  const ROWS = [...PEOPLE, PEOPLE[0]];
  const PASTED = [
    'Can you check these customers for duplicates, and tell me who is the oldest?',
    '',
    'name,email,address,date_of_birth',
    ...ROWS.map(([n, e, a, d]) => `${n},${e},"${a}",${d}`),
  ].join('\n');
  const VALUES = PEOPLE.flat();
  const TOKEN_ROW = /^(\[NAME_\d+\]),(\[EMAIL_\d+\]),"(\[ADDRESS_\d+\])",(\[DOB_\d+\])$/;
  /** HTML text as the user reads it. */
  const unescape = (html: string) => html.replace(/&#(\d+);/g, (_, n: string) => String.fromCharCode(Number(n))).replace(/&quot;/g, '"').replace(/&amp;/g, '&');

  it('reaches the model as tokens, one per value, and the user reads the values in the conversation', async () => {
    const rowsSeen: string[][] = [];
    // The model answers from what it was given: the duplicate row, and the oldest by the date it sees.
    standin.setScript((req) => {
      const rows = req.lastUserText.split('\n').map((l) => TOKEN_ROW.exec(l)?.slice(1)).filter((r): r is string[] => r !== undefined);
      rowsSeen.push(...rows);
      const twice = rows.find((r, i) => rows.findIndex((o) => o[0] === r[0]) !== i);
      const oldest = rows[4];
      return { text: [`${twice?.[0]} (${twice?.[1]}) is listed twice. `, `The oldest is ${oldest?.[0]}, born ${oldest?.[3]}, `, `who lives at ${oldest?.[2]}.`] };
    });
    const carla = await ensureUser(gateway.store.db, 'carla');
    const web = await webSession(served, carla);
    const created = await web.post('/chat/new');
    expect(created.status).toBe(303);
    const chat = created.headers.get('location')!;
    const conversationId = chat.slice('/c/'.length);
    expect((await web.post(`${chat}/send`, { text: PASTED })).status).toBe(204);
    const status = async () => (await gateway.store.db.selectFrom('turns').select('status').where('conversation_id', '=', conversationId).executeTakeFirst())?.status;
    await eventually(async () => ![undefined, 'running'].includes(await status()), 30_000);
    expect(await status()).toBe('complete');

    // What the model got: every row as tokens, the same value the same token, no value anywhere.
    const sent = standin.requests.at(-1)!;
    expect(VALUES.filter((v) => sent.raw.includes(v))).toEqual([]);
    expect(rowsSeen).toHaveLength(ROWS.length);
    for (const i of [0, 1, 2, 3]) expect(new Set(rowsSeen.map((r) => r[i])).size, `column ${i}`).toBe(PEOPLE.length);
    expect(rowsSeen[5]).toEqual(rowsSeen[0]);

    // What the user reads: the message as pasted and the answer with the values back.
    const page = unescape(await (await web.get(chat, { htmx: false })).text());
    for (const v of VALUES) expect(page, v).toContain(v);
    const [first, , , , oldest] = PEOPLE;
    expect(page).toContain(`${first[0]} (${first[1]}) is listed twice. The oldest is ${oldest[0]}, born ${oldest[3]}, who lives at ${oldest[2]}.`);
    expect(page).not.toMatch(/\[(?:NAME|EMAIL|ADDRESS|DOB)_\d+\]/);

    // The store keeps the model's side only.
    const stored = await gateway.store.db.selectFrom('messages').selectAll().where('conversation_id', '=', conversationId).execute();
    expect(stored.length).toBeGreaterThanOrEqual(2);
    expect(VALUES.filter((v) => JSON.stringify(stored).includes(v))).toEqual([]);
  });
});
