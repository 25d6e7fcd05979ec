/**
 * The seam every way of signing in fits: the same checks against each authenticator,
 * over HTTP with real sessions. GitHub's runs its OAuth web flow against the stand-in
 * GitHub Enterprise (test/support/github-standin.ts) on a GitHub install; the one-time
 * link runs on an install without GitHub. A small app plays the sign-in routes' part:
 * a success is signed in with the session module, a refusal is answered as it came.
 *
 * - a person who may come in is the user the authenticator names, and signing them in
 *   opens a page that needs a user;
 * - a person who may not gets a refusal in words for them, and no session opens a page;
 * - the proof of a sign-in (OAuth state and code, the link) is good once, also when it
 *   is used twice at the same moment.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGitHubStandin, type GitHubStandin } from '../../test/support/github-standin.js';
import { ensureUser, setUserDisabled } from '../accounts/accounts.js';
import { configFor } from '../config.js';
import { createLogger } from '../logger.js';
import type { Store } from '../store/store.js';
import { openTestStore } from '../../test/support/store.js';
import { TRY_AGAIN, type Authenticator } from './authenticator.js';
import { authenticatorsFor } from './index.js';
import { createLoginLink } from './login-links.js';
import { SESSION_COOKIE, userOf, webSessions } from './session-middleware.js';

type Answer = { ok: true; user: string } | { ok: false; message: string; reason: string; why?: string };

/** A browser's view of one install: its cookie, and what an attempt came to. */
class Visitor {
  cookie = '';
  constructor(readonly base: string) {}

  async get(url: string): Promise<Response> {
    return this.keep(await fetch(url.startsWith('http') ? url : `${this.base}${url}`, { redirect: 'manual', headers: this.cookie ? { cookie: this.cookie } : {} }));
  }

  async post(url: string, form: Record<string, string>): Promise<Response> {
    return this.keep(
      await fetch(`${this.base}${url}`, {
        method: 'POST',
        redirect: 'manual',
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...(this.cookie ? { cookie: this.cookie } : {}) },
        body: new URLSearchParams(form).toString(),
      }),
    );
  }

  /** Whether this visitor's session opens a page that needs a user: the user's name, or undefined. */
  async signedInAs(): Promise<string | undefined> {
    const r = await this.get('/me');
    return r.status === 200 ? ((await r.json()) as { name: string }).name : undefined;
  }

  private keep(r: Response): Response {
    const set = r.headers.getSetCookie().find((c) => c.startsWith(`${SESSION_COOKIE}=`));
    if (set) this.cookie = set.split(';')[0]!;
    return r;
  }
}

interface Install {
  authenticator: Authenticator;
  /** Someone who may come in, and the name they sign in as. */
  allowed: { attempt: (v: Visitor) => Promise<Answer>; name: string };
  /** Someone who may not, and words the refusal says. */
  refused: { attempt: (v: Visitor) => Promise<Answer>; says: RegExp };
  /** The same proof used twice: what the second use comes to. */
  replay: (v: Visitor, second: Visitor) => Promise<Answer>;
  /** The same proof used twice at the same moment: what each use comes to. */
  race: (v: Visitor, second: Visitor) => Promise<Answer[]>;
  visitor(): Visitor;
  close(): Promise<void>;
}

/** An install with these settings and a small app that completes sign-ins with `pick`'s authenticator. */
async function install(settings: Record<string, string>, pick: (all: Authenticator[]) => Authenticator): Promise<{ store: Store; base: string; authenticator: Authenticator; close: () => Promise<void> }> {
  const store = await openTestStore();
  const dir = store.dataDir;
  let handler: http.RequestListener = (_req, res) => res.writeHead(503).end();
  const server = http.createServer((req, res) => handler(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const config = configFor({ ...settings, SANDGATE_PUBLIC_URL: base, SANDGATE_DATA_DIR: dir });
  const logger = createLogger('silent');
  const sessions = webSessions({ config, db: store.db, logger });
  const authenticator = pick(authenticatorsFor({ config, db: store.db, logger, membership: sessions.membership }).all);
  const complete: express.RequestHandler = async (req, res) => {
    const r = await authenticator.complete(req, res);
    if (r === 'restart') return void res.status(500).json({ restart: true });
    if (r.ok) await sessions.signIn(req, r.user);
    res.json(r.ok ? { ok: true, user: r.user.name } : r);
  };
  const app = express();
  app.use(...sessions.session);
  app.get('/auth/:name', (req, res, next) => authenticator.start!(req, res, next));
  app.get('/auth/:name/callback', complete);
  app.post('/login/link', express.urlencoded({ extended: false }), complete);
  app.get('/me', sessions.requireUser, (req, res) => res.json({ name: userOf(req).name }));
  handler = app;
  return {
    store,
    base,
    authenticator,
    async close() {
      sessions.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** GitHub's web flow as a browser follows it, up to the callback (not yet opened). */
async function toGitHubAndBack(v: Visitor, github: GitHubStandin, login: string): Promise<string> {
  const start = await v.get('/auth/github');
  expect(start.status).toBe(302);
  const authorize = new URL(start.headers.get('location')!);
  expect(authorize.origin).toBe(github.url);
  const form = Object.fromEntries(['redirect_uri', 'state', 'scope'].map((k) => [k, authorize.searchParams.get(k) ?? '']));
  const back = await fetch(`${github.url}/session`, { method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ ...form, login }).toString() });
  return back.headers.get('location')!;
}

const answer = async (r: Response) => (await r.json()) as Answer;

async function githubInstall(): Promise<Install> {
  const github = await startGitHubStandin();
  const i = await install({ ...github.settings(), SANDGATE_ALLOWED_USERS: 'alice' }, (all) => all.find((a) => a.name === 'github')!);
  const attempt = async (v: Visitor, login: string) => answer(await v.get(await toGitHubAndBack(v, github, login)));
  return {
    authenticator: i.authenticator,
    allowed: { attempt: (v) => attempt(v, 'alice'), name: 'alice' },
    refused: { attempt: (v) => attempt(v, 'mallory'), says: /mallory is not on this gateway's allow-list/ },
    async replay(v, second) {
      const callback = await toGitHubAndBack(v, github, 'alice');
      await v.get(callback);
      return answer(await second.get(callback));
    },
    async race(v) {
      // One browser's callback opened twice at once (a double click): both requests read the session with its state.
      const callback = await toGitHubAndBack(v, github, 'alice');
      const copy = new Visitor(v.base);
      copy.cookie = v.cookie;
      return Promise.all([v.get(callback), copy.get(callback)].map(async (r) => answer(await r)));
    },
    visitor: () => new Visitor(i.base),
    async close() {
      await i.close();
      await github.close();
    },
  };
}

async function linkInstall(): Promise<Install> {
  const i = await install({}, (all) => all.find((a) => a.name === 'link')!);
  const db = i.store.db;
  const alice = (await ensureUser(db, 'alice')).id;
  const carol = (await ensureUser(db, 'carol')).id;
  await setUserDisabled(db, carol, true);
  const attempt = async (v: Visitor, secret: string) => answer(await v.post('/login/link', { secret }));
  return {
    authenticator: i.authenticator,
    allowed: { attempt: async (v) => attempt(v, (await createLoginLink(db, alice)).secret), name: 'alice' },
    refused: { attempt: async (v) => attempt(v, (await createLoginLink(db, carol)).secret), says: /disabled/ },
    async replay(v, second) {
      const { secret } = await createLoginLink(db, alice);
      await attempt(v, secret);
      return attempt(second, secret);
    },
    async race(v, second) {
      const { secret } = await createLoginLink(db, alice);
      return Promise.all([attempt(v, secret), attempt(second, secret)]);
    },
    visitor: () => new Visitor(i.base),
    close: () => i.close(),
  };
}

describe.each([
  ['GitHub', githubInstall],
  ['one-time link', linkInstall],
])('the %s authenticator', (_name, make) => {
  let inst: Install;
  beforeAll(async () => {
    inst = await make();
  });
  afterAll(async () => {
    await inst?.close();
  });

  it('has a name and a label, and a start only where a provider is visited', () => {
    expect(inst.authenticator.name).toMatch(/^[a-z]+$/);
    expect(inst.authenticator.label).toMatch(/^Sign in with /);
    expect(typeof inst.authenticator.start).toBe(inst.authenticator.name === 'github' ? 'function' : 'undefined');
  });

  it('names the user who may come in, and signing them in opens a page', async () => {
    const v = inst.visitor();
    expect(await inst.allowed.attempt(v)).toEqual({ ok: true, user: inst.allowed.name });
    expect(await v.signedInAs()).toBe(inst.allowed.name);
  });

  it('refuses who may not with words for them, and no session opens a page', async () => {
    const v = inst.visitor();
    const r = await inst.refused.attempt(v);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.message).toMatch(inst.refused.says);
    expect(r.message).toMatch(/[.!]$/);
    expect(r.reason).not.toBe('');
    expect(await v.signedInAs()).toBeUndefined();
  });

  it('takes the proof of a sign-in once', async () => {
    const first = inst.visitor();
    const second = inst.visitor();
    const r = await inst.replay(first, second);
    expect(await first.signedInAs()).toBe(inst.allowed.name);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.message.length).toBeGreaterThan(10);
    expect(await second.signedInAs()).toBeUndefined();
  });

  it('of two uses of one proof at the same moment, exactly one signs in', async () => {
    const answers = await inst.race(inst.visitor(), inst.visitor());
    expect(answers.filter((a) => a.ok)).toEqual([{ ok: true, user: inst.allowed.name }]);
    expect(answers.filter((a) => !a.ok)).toHaveLength(1);
  });
});

describe('the GitHub authenticator, on addresses anyone can write', () => {
  let github: GitHubStandin;
  let i: Awaited<ReturnType<typeof install>>;
  beforeAll(async () => {
    github = await startGitHubStandin();
    i = await install({ ...github.settings(), SANDGATE_ALLOWED_USERS: 'alice' }, (all) => all.find((a) => a.name === 'github')!);
  });
  afterAll(async () => {
    await i?.close();
    await github?.close();
  });

  it('a start that carries an error or a code goes to the sign-in page as a sign-in that did not work: no error, and nobody signed in', async () => {
    for (const query of ['error=access_denied', 'error=server_error&error_description=boom', 'code=x']) {
      const r = await new Visitor(i.base).get(`/auth/github?${query}`);
      expect([query, r.status, r.headers.get('location')]).toEqual([query, 303, '/login?why=error']);
    }
    // GitHub's own code and state, brought to the start instead of the callback, sign nobody in.
    const v = new Visitor(i.base);
    const callback = new URL(await toGitHubAndBack(v, github, 'alice'));
    const r = await v.get(`/auth/github${callback.search}`);
    expect([r.status, r.headers.get('location')]).toEqual([303, '/login?why=error']);
    expect(await v.signedInAs()).toBeUndefined();
  });

  it('a callback GitHub ended says so in our words for its code, never in the words of the address', async () => {
    const said = 'Your account is locked: call support at +1 555 0100.';
    const denied = await answer(await new Visitor(i.base).get(`/auth/github/callback?${new URLSearchParams({ error: 'access_denied', error_description: said })}`));
    expect(denied).toEqual({ ok: false, message: 'GitHub did not let you sign in (access denied).', reason: 'GitHub: access_denied' });
    const other = await answer(await new Visitor(i.base).get(`/auth/github/callback?${new URLSearchParams({ error: 'made_up', error_description: said })}`));
    expect(other).toEqual({ ok: false, message: TRY_AGAIN, reason: 'error', why: 'error' });
  });
});
