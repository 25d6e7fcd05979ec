/**
 * A signed-in browser session without a browser: a one-time sign-in link followed over
 * plain HTTP, its cookie kept, and requests sent as the pages' htmx sends them (the
 * session's CSRF token in `x-csrf-token`, `HX-Request: true`). For tests of what a route
 * answers; the pages' own behaviour is tested in Chromium (test/web.test.ts, src/web/admin/admin.test.ts).
 */
import type { User } from '../../src/accounts/accounts.js';
import { createLoginLink } from '../../src/auth/login-links.js';
import type { Db } from '../../src/store/store.js';
import type { Gateway } from './mcp.js';

export interface WebSession {
  /** The session's Cookie header, as a page's live connection (socket.io) sends it. */
  cookie(): string;
  /** The session's CSRF token, as the pages carry it (the live connection's auth too). */
  csrf: string;
  /** A GET as htmx sends it (`htmx: false`: as a plain link or address bar does). */
  get(path: string, o?: { htmx?: boolean }): Promise<Response>;
  /** A form POST as htmx sends it. */
  post(path: string, form?: Record<string, string>): Promise<Response>;
}

/** A gateway of this process, or one in another process: its URL and the store it shares. */
export type SignInAt = Pick<Gateway, 'url' | 'gateway'> | { url: string; db: Db };

export async function webSession(gw: SignInAt, user: Pick<User, 'id'>): Promise<WebSession> {
  const db = 'db' in gw ? gw.db : gw.gateway.store.db;
  const cookies = new Map<string, string>();
  const cookie = () => [...cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  const request = async (path: string, init: RequestInit = {}): Promise<Response> => {
    const headers = new Headers(init.headers);
    if (cookies.size) headers.set('cookie', cookie());
    const r = await fetch(`${gw.url}${path}`, { ...init, headers, redirect: 'manual' });
    for (const c of r.headers.getSetCookie()) {
      const pair = c.split(';')[0]!;
      const eq = pair.indexOf('=');
      cookies.set(pair.slice(0, eq), pair.slice(eq + 1));
    }
    return r;
  };
  const form = (fields: Record<string, string>) => ({ 'content-type': 'application/x-www-form-urlencoded', body: new URLSearchParams(fields).toString() });

  const secret = (await createLoginLink(db, user.id)).secret;
  const linkPage = await (await request(`/login/link/${secret}`)).text();
  const linkCsrf = /name="_csrf" value="([^"]+)"/.exec(linkPage)?.[1];
  if (!linkCsrf) throw new Error('the sign-in link page has no CSRF field');
  const { body, ...headers } = form({ _csrf: linkCsrf, secret });
  const signedIn = await request('/login/link', { method: 'POST', headers, body });
  if (signedIn.headers.get('location') !== '/chat') throw new Error(`sign-in by link failed: ${signedIn.status} to ${signedIn.headers.get('location')}`);
  const chat = await (await request('/chat')).text();
  const csrf = /data-csrf="([^"]+)"/.exec(chat)?.[1];
  if (!csrf) throw new Error('the chat page has no CSRF token');

  return {
    cookie,
    csrf,
    get: (path, o = {}) => request(path, { headers: o.htmx === false ? { accept: 'text/html' } : { 'hx-request': 'true' } }),
    post: (path, fields = {}) => {
      const { body: b, ...h } = form(fields);
      return request(path, { method: 'POST', headers: { ...h, 'x-csrf-token': csrf, 'hx-request': 'true' }, body: b });
    },
  };
}
