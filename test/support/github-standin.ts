/**
 * A stand-in GitHub Enterprise Server: the OAuth web flow (authorize, a sign-in form,
 * access_token) under the web base URL and the REST endpoints sandgate calls under
 * /api/v3, as GitHub answers them. Accounts, organisations and team memberships are
 * plain data a test sets and changes (to remove someone, say).
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
  /** Codes issued, and whether each was exchanged. */
  close(): Promise<void>;
}

const page = (body: string) => `<!doctype html><html><head><meta charset="utf-8"><title>GitHub</title></head><body>${body}</body></html>`;

export async function startGitHubStandin(): Promise<GitHubStandin> {
  const clientId = `Iv1.${crypto.randomBytes(8).toString('hex')}`;
  const clientSecret = crypto.randomBytes(20).toString('hex');
  const codes = new Map<string, { login: string; redirect: string }>();
  const tokens = new Map<string, string>();
  const orgs = new Map<string, Set<string>>();
  const teams = new Map<string, Set<string>>();
  const apiCalls: string[] = [];
  const ids = new Map<string, number>();
  const idOf = (login: string) => {
    if (!ids.has(login)) ids.set(login, 1000 + ids.size);
    return ids.get(login)!;
  };

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
        const login = form.get('login') ?? '';
        const redirect = decodeURIComponent(form.get('redirect_uri') ?? '');
        const state = decodeURIComponent(form.get('state') ?? '');
        const code = crypto.randomBytes(10).toString('hex');
        codes.set(code, { login, redirect });
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
        tokens.set(token, grant.login);
        return json(200, { access_token: token, token_type: 'bearer', scope: 'read:org' });
      }
      // --- the REST API, under /api/v3
      if (!url.pathname.startsWith('/api/v3/')) return void res.writeHead(404).end();
      apiCalls.push(`${req.method} ${url.pathname}`);
      const token = /^(?:Bearer|token) (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
      const login = token ? tokens.get(token) : undefined;
      if (!login) return json(401, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' });
      const path = url.pathname.slice('/api/v3'.length);
      if (path === '/user') return json(200, { login, id: idOf(login), name: login, email: null, avatar_url: '', type: 'User' });
      if (path === '/user/emails') return json(200, [{ email: `${login}@example.com`, primary: true, verified: true }]);
      let m = /^\/user\/memberships\/orgs\/([^/]+)$/.exec(path);
      if (m) {
        const org = decodeURIComponent(m[1]!).toLowerCase();
        return orgs.get(login)?.has(org) ? json(200, { state: 'active', role: 'member', organization: { login: org } }) : json(404, { message: 'Not Found' });
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
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
