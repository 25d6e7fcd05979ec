/**
 * A stand-in GitHub Enterprise Server: the OAuth web flow (authorize, a sign-in form,
 * access_token) under the web base URL and the REST endpoints sandgate calls under
 * /api/v3, as GitHub answers them. Accounts, organisations and team memberships are
 * plain data a test sets and changes (to remove someone, say).
 *
 * As on GitHub, an account has a numeric id that never changes and a login that can:
 * `rename` gives an account a new login (its tokens and memberships follow it), and
 * `register` makes a new account, e.g. one that takes a login someone renamed away
 * from. Signing in with a login nobody has yet makes its account. `down` makes the API
 * stop answering (connections are dropped), as an outage does.
 */
import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface GitHubStandin {
  /** SANDGATE_GITHUB_URL */
  url: string;
  /** SANDGATE_GITHUB_API_URL */
  apiUrl: string;
  clientId: string;
  clientSecret: string;
  /** login -> organisations (active membership). */
  orgs: Map<string, Set<string>>;
  /** "org/team" -> logins. */
  teams: Map<string, Set<string>>;
  /** Requests to the API, as `METHOD path`. */
  apiCalls: string[];
  /** The gateway's settings that point its GitHub sign-in at this stand-in. */
  settings(): Record<string, string>;
  /** While true, the API drops every connection without an answer. */
  down: boolean;
  /** The numeric id of the account called `login` now (made if nobody is). */
  idOf(login: string): number;
  /** Renames the account called `from`; its tokens, organisations and teams follow it. */
  rename(from: string, to: string): void;
  /** Makes a new account called `login` (which nobody may be called now); its id. */
  register(login: string): number;
  close(): Promise<void>;
}

const page = (body: string) => `<!doctype html><html><head><meta charset="utf-8"><title>GitHub</title></head><body>${body}</body></html>`;

export async function startGitHubStandin(): Promise<GitHubStandin> {
  const clientId = `Iv1.${crypto.randomBytes(8).toString('hex')}`;
  const clientSecret = crypto.randomBytes(20).toString('hex');
  const codes = new Map<string, { id: number; redirect: string }>();
  /** OAuth token -> account id. */
  const tokens = new Map<string, number>();
  const orgs = new Map<string, Set<string>>();
  const teams = new Map<string, Set<string>>();
  const apiCalls: string[] = [];
  /** Account id -> its login now. */
  const accounts = new Map<number, string>();
  let nextId = 1000;
  const find = (login: string) => [...accounts].find(([, l]) => l.toLowerCase() === login.toLowerCase())?.[0];
  const register = (login: string) => {
    if (find(login) !== undefined) throw new Error(`a GitHub account is already called ${login}`);
    const id = nextId++;
    accounts.set(id, login);
    return id;
  };
  const idOf = (login: string) => find(login) ?? register(login);
  const rename = (from: string, to: string) => {
    const id = find(from);
    if (id === undefined) throw new Error(`no GitHub account is called ${from}`);
    if (find(to) !== undefined && find(to) !== id) throw new Error(`a GitHub account is already called ${to}`);
    accounts.set(id, to);
    for (const members of teams.values()) {
      if (members.delete(from.toLowerCase())) members.add(to.toLowerCase());
    }
    for (const [login, held] of [...orgs]) {
      if (login.toLowerCase() !== from.toLowerCase()) continue;
      orgs.delete(login);
      orgs.set(to, held);
    }
  };
  const state = { down: false };

  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const json = (status: number, body: unknown) => res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(body));
      // --- the OAuth web flow
      if (req.method === 'GET' && url.pathname === '/login/oauth/authorize') {
        if (url.searchParams.get('client_id') !== clientId) return void res.writeHead(404).end(page('<p>Unknown OAuth app</p>'));
        const fields = ['redirect_uri', 'state', 'scope'].map((k) => `<input type="hidden" name="${k}" value="${encodeURIComponent(url.searchParams.get(k) ?? '')}">`).join('');
        return void res
          .writeHead(200, { 'content-type': 'text/html' })
          .end(page(`<h1>Sign in to GitHub</h1><form method="post" action="/session">${fields}<label>Username <input name="login" id="login_field"></label><button type="submit" name="commit">Sign in and authorize</button></form>`));
      }
      if (req.method === 'POST' && url.pathname === '/session') {
        const form = new URLSearchParams(raw);
        const id = idOf(form.get('login') ?? '');
        const redirect = decodeURIComponent(form.get('redirect_uri') ?? '');
        const state = decodeURIComponent(form.get('state') ?? '');
        const code = crypto.randomBytes(10).toString('hex');
        codes.set(code, { id, redirect });
        const to = new URL(redirect);
        to.searchParams.set('code', code);
        if (state) to.searchParams.set('state', state);
        return void res.writeHead(302, { location: to.toString() }).end();
      }
      if (req.method === 'POST' && url.pathname === '/login/oauth/access_token') {
        const form = req.headers['content-type']?.includes('json') ? (JSON.parse(raw) as Record<string, string>) : Object.fromEntries(new URLSearchParams(raw));
        const grant = codes.get(form.code ?? '');
        if (form.client_id !== clientId || form.client_secret !== clientSecret || !grant) return json(200, { error: 'bad_verification_code', error_description: 'The code passed is incorrect or expired.' });
        codes.delete(form.code!);
        const token = `gho_${crypto.randomBytes(16).toString('hex')}`;
        tokens.set(token, grant.id);
        return json(200, { access_token: token, token_type: 'bearer', scope: 'read:org' });
      }
      // --- the REST API, under /api/v3
      if (!url.pathname.startsWith('/api/v3/')) return void res.writeHead(404).end();
      apiCalls.push(`${req.method} ${url.pathname}`);
      if (state.down) return void req.socket.destroy();
      const token = /^(?:Bearer|token) (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
      const id = token ? tokens.get(token) : undefined;
      const login = id === undefined ? undefined : accounts.get(id);
      if (id === undefined || login === undefined) return json(401, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' });
      const path = url.pathname.slice('/api/v3'.length);
      if (path === '/user') return json(200, { login, id, name: login, email: null, avatar_url: '', type: 'User' });
      if (path === '/user/emails') return json(200, [{ email: `${login}@example.com`, primary: true, verified: true }]);
      let m = /^\/user\/memberships\/orgs\/([^/]+)$/.exec(path);
      if (m) {
        const org = decodeURIComponent(m[1]!).toLowerCase();
        return [...orgs].find(([l]) => l.toLowerCase() === login.toLowerCase())?.[1].has(org) ? json(200, { state: 'active', role: 'member', organization: { login: org } }) : json(404, { message: 'Not Found' });
      }
      m = /^\/orgs\/([^/]+)\/teams\/([^/]+)\/memberships\/([^/]+)$/.exec(path);
      if (m) {
        const team = `${decodeURIComponent(m[1]!)}/${decodeURIComponent(m[2]!)}`.toLowerCase();
        const who = decodeURIComponent(m[3]!).toLowerCase();
        return teams.get(team)?.has(who) ? json(200, { state: 'active', role: 'member' }) : json(404, { message: 'Not Found' });
      }
      json(404, { message: 'Not Found' });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    apiUrl: `${url}/api/v3`,
    clientId,
    clientSecret,
    orgs,
    teams,
    apiCalls,
    settings: () => ({ SANDGATE_GITHUB_CLIENT_ID: clientId, SANDGATE_GITHUB_CLIENT_SECRET: clientSecret, SANDGATE_GITHUB_URL: url, SANDGATE_GITHUB_API_URL: `${url}/api/v3` }),
    get down() {
      return state.down;
    },
    set down(v: boolean) {
      state.down = v;
    },
    idOf,
    rename,
    register,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
