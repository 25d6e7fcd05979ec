/**
 * MCP clients connecting with OAuth, end to end: the real gateway and sandboxes, the
 * stand-in GitHub for sign-in, Chromium for the person, and on the client side only
 * third-party code (the MCP TypeScript SDK's client and its OAuth flow). Then the
 * attacks the flow must stop, sent as raw HTTP: a foreign redirect URI, a wrong PKCE
 * verifier, a code used twice, a token for another resource, a refresh token used twice,
 * a revoked grant, a disabled user.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { Client, StreamableHTTPClientTransport, UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findUser, ensureUser, setUserDisabled } from '../src/accounts/accounts.js';
import { queryAudit } from '../src/audit/audit.js';
import { startGitHubStandin, type GitHubStandin } from './support/github-standin.js';
import { rawRequest, startGateway, type Gateway } from './support/mcp.js';
import { makeCertificates } from './support/tls.js';
import { webSession, type WebSession } from './support/web-session.js';

const CHROMIUM = process.env.SANDGATE_CHROMIUM ?? '/usr/bin/chromium';

let github: GitHubStandin;
let gw: Gateway;
let browser: Browser;

beforeAll(async () => {
  github = await startGitHubStandin();
  github.teams.set('acme/dev', new Set(['olivia', 'pat']));
  gw = await startGateway({ env: { ...github.settings(), SANDGATE_ALLOWED_TEAMS: 'acme/dev' } });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  await github?.close();
});

/** A native app's loopback listener: the redirect URI, and the callbacks it receives. */
async function callbackListener(): Promise<{ url: string; next(): Promise<URLSearchParams>; close(): Promise<void> }> {
  const waiting: ((p: URLSearchParams) => void)[] = [];
  const server = http.createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://127.0.0.1');
    res.end('You can close this window.');
    waiting.shift()?.(u.searchParams);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/callback`;
  return {
    url,
    next: () => new Promise((r) => waiting.push(r)),
    close: () => new Promise((r) => server.close(() => r())),
  };
}

/** The SDK's OAuthClientProvider as a desktop app implements it: everything in memory, the browser opened on demand. */
function appProvider(redirectUrl: string, onRedirect: (u: URL) => void): OAuthClientProvider & { saved: { tokens?: { access_token: string; refresh_token?: string } } } {
  const saved: { client?: unknown; tokens?: { access_token: string; refresh_token?: string }; verifier?: string; discovery?: unknown } = {};
  return {
    saved,
    get redirectUrl() {
      return redirectUrl;
    },
    get clientMetadata() {
      return { client_name: 'Test Desktop', redirect_uris: [redirectUrl], grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], token_endpoint_auth_method: 'none' };
    },
    clientInformation: () => saved.client as never,
    saveClientInformation: (c) => void (saved.client = c),
    tokens: () => saved.tokens as never,
    saveTokens: (t) => void (saved.tokens = t as never),
    redirectToAuthorization: (u) => onRedirect(u),
    saveCodeVerifier: (v) => void (saved.verifier = v),
    codeVerifier: () => saved.verifier!,
    saveDiscoveryState: (d) => void (saved.discovery = d),
    discoveryState: () => saved.discovery as never,
  };
}

const connect = async (provider: OAuthClientProvider) => {
  const transport = new StreamableHTTPClientTransport(new URL(gw.mcpUrl), { authProvider: provider });
  const client = new Client({ name: 'test-desktop', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
};

const textOf = (r: unknown) => ((r as { content: { type: string; text?: string }[] }).content ?? []).map((c) => c.text ?? '').join('\n');

describe('the MCP SDK client signs in with OAuth', () => {
  it('will not fetch a client metadata document from its own network by default', async () => {
    for (const url of ['https://127.0.0.1/client.json', 'https://[::7f00:1]/client.json', 'https://example.com:8443/client.json']) {
      const r = await fetch(`${gw.url}/oauth/authorize?client_id=${encodeURIComponent(url)}&response_type=code`);
      expect(r.status, url).toBe(400);
      const text = await r.text();
      // Why (an address, a port) stays in the log: the page would map the network for anyone.
      expect(text, url).toContain('could not be fetched');
      expect(text, url).not.toMatch(/loopback|private address|port \d|resolves/);
    }
  });

  it('is sent to sign in and consent in the browser, then calls tools; its token refreshes; a revoked grant is refused at the next call', async () => {
    const cb = await callbackListener();
    let authUrl: URL | undefined;
    const provider = appProvider(cb.url, (u) => (authUrl = u));
    try {
      // 1. No token: the SDK discovers the gateway's authorization server, registers, and wants the browser.
      await expect(connect(provider)).rejects.toBeInstanceOf(UnauthorizedError);
      expect(authUrl?.href.startsWith(`${gw.url}/oauth/authorize?`)).toBe(true);
      expect(authUrl!.searchParams.get('code_challenge_method')).toBe('S256');
      expect(authUrl!.searchParams.get('resource')).toBe(gw.mcpUrl);

      // 2. The person: signed out, so sign-in first (GitHub), then the consent page names the app and where it goes.
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(authUrl!.href);
      await page.waitForURL(`${gw.url}/login`);
      await page.click('text=Sign in with GitHub');
      await page.waitForURL(`${github.url}/**`);
      await page.fill('#login_field', 'olivia');
      await page.click('button[name=commit]');
      await page.waitForURL((u) => u.pathname === '/oauth/authorize');
      const consent = await page.textContent('main');
      expect(consent).toContain('Connect Test Desktop?');
      expect(consent).toContain(new URL(cb.url).host);
      expect(consent).toContain('run code in your sandbox');
      const callback = cb.next();
      await page.click('button[value=allow]');
      const params = await callback;
      expect(params.get('iss')).toBe(gw.url);
      expect(params.get('code')).toMatch(/^sgo_/);
      await context.close();

      // 3. The app finishes (the SDK checks iss), connects and runs code as olivia.
      const first = new StreamableHTTPClientTransport(new URL(gw.mcpUrl), { authProvider: provider });
      await first.finishAuth(params);
      const { client } = await connect(provider);
      expect(provider.saved.tokens?.access_token).toMatch(/^sga_/);
      const tools = await client.listTools();
      expect(tools.tools.map((t) => t.name)).toContain('execute_code');
      const run = await client.callTool({ name: 'execute_code', arguments: { language: 'bash', code: 'whoami; echo from-oauth > /workspace/oauth.txt; cat /workspace/oauth.txt' } });
      expect(textOf(run)).toContain('from-oauth');
      const olivia = (await findUser(gw.gateway.store.db, 'olivia'))!;
      const audit = await queryAudit(gw.gateway.store.db, { userId: olivia.id, limit: 50 });
      expect(audit.some((a) => a.method === 'oauth/grant')).toBe(true);
      expect(audit.some((a) => a.method === 'oauth/token')).toBe(true);
      expect(audit.some((a) => a.kind === 'mcp' && a.tokenName === 'Test Desktop (app)')).toBe(true);

      // 4. The access token expires: the SDK refreshes on the 401 and goes on, with a new pair.
      const before = provider.saved.tokens!;
      await gw.gateway.store.db.updateTable('oauth_tokens').set({ expires_at: Date.now() - 1 }).where('kind', '=', 'access').execute();
      const again = await client.callTool({ name: 'execute_code', arguments: { language: 'bash', code: 'cat /workspace/oauth.txt' } });
      expect(textOf(again)).toContain('from-oauth');
      expect(provider.saved.tokens!.access_token).not.toBe(before.access_token);
      expect(provider.saved.tokens!.refresh_token).not.toBe(before.refresh_token);
      expect((await queryAudit(gw.gateway.store.db, { userId: olivia.id, limit: 50 })).some((a) => a.method === 'oauth/refresh')).toBe(true);

      // 5. Olivia disconnects the app on the tokens page: its next call is refused, with where to sign in again.
      const session = await webSession(gw, olivia);
      const tokensPage = await (await session.get('/tokens', { htmx: false })).text();
      expect(tokensPage).toContain('Test Desktop (app)');
      const grantId = /hx-post="\/tokens\/(\d+)\/revoke"[^>]*Disconnect/.exec(tokensPage)?.[1];
      expect(grantId).toBeDefined();
      expect((await session.post(`/tokens/${grantId}/revoke`)).status).toBe(200);
      expect((await queryAudit(gw.gateway.store.db, { userId: olivia.id, limit: 100 })).some((a) => a.method === 'oauth/revoke' && a.tokenId === Number(grantId))).toBe(true);
      const refused = await rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${provider.saved.tokens!.access_token}`, 'mcp-protocol-version': '2025-06-18' }, body: { jsonrpc: '2.0', id: 1, method: 'tools/list' } });
      expect(refused.status).toBe(401);
      expect(refused.headers['www-authenticate']).toContain(`resource_metadata="${gw.url}/.well-known/oauth-protected-resource/mcp"`);
      expect(refused.text).toContain('revoked');
    } finally {
      await cb.close();
    }
  });
});

describe('mcp-remote, the bridge desktop apps use, signs in with OAuth', () => {
  it('registers, sends the person to sign in and consent, and bridges tools over stdio', async () => {
    const configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-mcp-remote-'));
    const callbackPort = await new Promise<number>((resolve) => {
      const s = http.createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as AddressInfo).port;
        s.close(() => resolve(p));
      });
    });
    // Exactly as a desktop app's config starts it; a plain-http gateway on a LAN needs --allow-http.
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [path.join(process.cwd(), 'node_modules/mcp-remote/dist/proxy.js'), gw.mcpUrl, String(callbackPort), '--allow-http', '--host', '127.0.0.1'],
      env: { PATH: process.env.PATH!, HOME: configDir, MCP_REMOTE_CONFIG_DIR: configDir, BROWSER: '/bin/true' },
      stderr: 'pipe',
    });
    let stderr = '';
    const urlSeen = new Promise<string>((resolve) => {
      transport.stderr!.on('data', (d: Buffer) => {
        stderr += d.toString();
        const m = /Please authorize this client by visiting:\s+(\S+)/.exec(stderr);
        if (m) resolve(m[1]!);
      });
    });
    const client = new Client({ name: 'desktop-app', version: '1.0.0' });
    const connected = client.connect(transport);
    try {
      const authUrl = await Promise.race([urlSeen, new Promise<string>((_, reject) => setTimeout(() => reject(new Error(`mcp-remote asked for no sign-in:\n${stderr}`)), 60_000))]);
      expect(authUrl.startsWith(`${gw.url}/oauth/authorize?`)).toBe(true);
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(authUrl);
      await page.click('text=Sign in with GitHub');
      await page.waitForURL(`${github.url}/**`);
      await page.fill('#login_field', 'pat');
      await page.click('button[name=commit]');
      await page.waitForURL((u) => u.pathname === '/oauth/authorize');
      expect(await page.textContent('main')).toContain('Connect MCP CLI Proxy?');
      await page.click('button[value=allow]');
      await page.waitForURL((u) => u.port === String(callbackPort));
      await context.close();
      await connected;
      const run = await client.callTool({ name: 'execute_code', arguments: { language: 'bash', code: 'echo bridged-by-mcp-remote' } });
      expect(textOf(run)).toContain('bridged-by-mcp-remote');
    } finally {
      await client.close().catch(() => {});
      fs.rmSync(configDir, { recursive: true, force: true });
    }
  });
});

/** An authorization request's query, PKCE pair and redirect URI for a registered client. */
async function registered(redirectUri = 'http://127.0.0.1:43210/cb', name = 'Raw Client', grantTypes = ['authorization_code', 'refresh_token']) {
  const r = await fetch(`${gw.url}/oauth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ client_name: name, redirect_uris: [redirectUri], grant_types: grantTypes, token_endpoint_auth_method: 'none' }),
  });
  expect(r.status).toBe(201);
  const client = (await r.json()) as { client_id: string; client_secret?: string; token_endpoint_auth_method: string };
  expect(client.client_secret).toBeUndefined();
  expect(client.token_endpoint_auth_method).toBe('none');
  return client.client_id;
}

const pkce = () => {
  const verifier = crypto.randomBytes(32).toString('base64url');
  return { verifier, challenge: crypto.createHash('sha256').update(verifier).digest('base64url') };
};

const authorizeQuery = (clientId: string, redirectUri: string, challenge: string, extra: Record<string, string> = {}) =>
  new URLSearchParams({ response_type: 'code', client_id: clientId, redirect_uri: redirectUri, code_challenge: challenge, code_challenge_method: 'S256', state: 'st8', resource: gw.mcpUrl, ...extra }).toString();

/** Consent given in `session` to an authorization request: the redirect it answers with. */
async function consent(session: WebSession, query: string): Promise<URL> {
  const page = await session.get(`/oauth/authorize?${query}`, { htmx: false });
  if (page.status === 303) return new URL(page.headers.get('location')!);
  const html = await page.text();
  const request = /name="request" value="([^"]+)"/.exec(html)?.[1];
  if (!request) throw new Error(`no consent form: ${page.status} ${html.slice(0, 500)}`);
  const answer = await session.post('/oauth/authorize', { request, decision: 'allow' });
  expect(answer.status).toBe(303);
  return new URL(answer.headers.get('location')!);
}

const tokenRequest = (fields: Record<string, string>) =>
  fetch(`${gw.url}/oauth/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields).toString() });

describe('what the authorization server refuses', () => {
  let session: WebSession;
  let clientId: string;
  const redirect = 'http://127.0.0.1:43210/cb';
  let githubGateway: Gateway;

  let documents: { url: string; docs: Map<string, unknown>; close(): Promise<void> };

  // A gateway with one-time-link sign-in, so that sessions need no browser; it fetches client
  // metadata documents from loopback under a test CA (the settings a LAN-hosted app needs).
  beforeAll(async () => {
    githubGateway = gw;
    const certs = makeCertificates(fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-oauth-tls-')));
    const caFile = path.join(os.tmpdir(), `sandgate-oauth-ca-${process.pid}.pem`);
    fs.writeFileSync(caFile, certs.ca);
    const docs = new Map<string, unknown>();
    const server = https.createServer({ key: certs.key, cert: certs.cert }, (req, res) => {
      const doc = docs.get(req.url ?? '');
      if (!doc) return void res.writeHead(404).end();
      res.writeHead(200, { 'content-type': 'application/json' }).end(typeof doc === 'string' ? doc : JSON.stringify(doc));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    documents = { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, docs, close: () => new Promise((r) => server.close(() => r())) };
    gw = await startGateway({ env: { SANDGATE_OAUTH_CLIENT_DOCUMENTS_PRIVATE: 'true', SANDGATE_OAUTH_CLIENT_DOCUMENTS_CA_FILE: caFile, SANDGATE_OAUTH_MAX_PENDING_CLIENTS: '5' } });
    const user = await ensureUser(gw.gateway.store.db, 'rawuser');
    session = await webSession(gw, user);
    clientId = await registered(redirect);
  });

  afterAll(async () => {
    await gw.close();
    await documents?.close();
    gw = githubGateway;
  });

  it('takes a client whose id is its metadata document, and refuses a document that names another client', async () => {
    const url = `${documents.url}/apps/doc-app.json`;
    documents.docs.set('/apps/doc-app.json', { client_id: url, client_name: 'Doc App', redirect_uris: [redirect], token_endpoint_auth_method: 'none' });
    const { verifier, challenge } = pkce();
    const page = await session.get(`/oauth/authorize?${authorizeQuery(url, redirect, challenge)}`, { htmx: false });
    const html = await page.text();
    expect(html).toContain('Connect Doc App?');
    expect(html).toContain(url);
    const code = (await consent(session, authorizeQuery(url, redirect, challenge))).searchParams.get('code')!;
    const t = await tokenRequest({ grant_type: 'authorization_code', client_id: url, code, code_verifier: verifier, redirect_uri: redirect });
    expect(t.status).toBe(200);

    const liar = `${documents.url}/apps/liar.json`;
    documents.docs.set('/apps/liar.json', { client_id: url, client_name: 'Liar', redirect_uris: ['https://evil.example/cb'] });
    const refused = await session.get(`/oauth/authorize?${authorizeQuery(liar, 'https://evil.example/cb', challenge)}`, { htmx: false });
    expect(refused.status).toBe(400);
    expect(await refused.text()).toContain('does not name that URL as its client_id');
    documents.docs.set('/apps/huge.json', JSON.stringify({ client_id: `${documents.url}/apps/huge.json`, redirect_uris: [redirect], pad: 'x'.repeat(20_000) }));
    const huge = await session.get(`/oauth/authorize?${authorizeQuery(`${documents.url}/apps/huge.json`, redirect, challenge)}`, { htmx: false });
    expect(await huge.text()).toContain('could not be fetched');
  });

  it('bounds registration: bad metadata and http redirects beyond loopback are refused', async () => {
    const reg = (body: unknown) => fetch(`${gw.url}/oauth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect(((await (await reg({ redirect_uris: ['http://evil.example/cb'] })).json()) as { error: string }).error).toBe('invalid_redirect_uri');
    expect(((await (await reg({ redirect_uris: ['javascript:alert(1)'] })).json()) as { error: string }).error).toBe('invalid_redirect_uri');
    expect((await reg({ redirect_uris: Array.from({ length: 11 }, (_, i) => `http://127.0.0.1/${i}`) })).status).toBe(400);
    expect((await reg({ redirect_uris: [redirect], pad: 'x'.repeat(20_000) })).status).toBe(413);
    expect((await reg('not json')).status).toBe(400);
  });

  it('publishes its metadata, and every 401 from /mcp names it', async () => {
    const prm = (await (await fetch(`${gw.url}/.well-known/oauth-protected-resource/mcp`)).json()) as Record<string, unknown>;
    expect(prm).toMatchObject({ resource: gw.mcpUrl, authorization_servers: [gw.url] });
    const as = (await (await fetch(`${gw.url}/.well-known/oauth-authorization-server`)).json()) as Record<string, unknown>;
    expect(as).toMatchObject({ issuer: gw.url, code_challenge_methods_supported: ['S256'], authorization_response_iss_parameter_supported: true, client_id_metadata_document_supported: true });
    const r = await rawRequest(gw.mcpUrl, { headers: { 'mcp-protocol-version': '2025-06-18' }, body: { jsonrpc: '2.0', id: 1, method: 'tools/list' } });
    expect(r.status).toBe(401);
    expect(r.headers['www-authenticate']).toBe(`Bearer realm="sandgate", resource_metadata="${gw.url}/.well-known/oauth-protected-resource/mcp", scope="mcp"`);
  });

  it('shows a foreign redirect URI a page, and sends it nothing', async () => {
    const { challenge } = pkce();
    const r = await session.get(`/oauth/authorize?${authorizeQuery(clientId, 'https://evil.example/cb', challenge)}`, { htmx: false });
    expect(r.status).toBe(400);
    expect(r.headers.get('location')).toBeNull();
    expect(await r.text()).toContain('an address it did not register');
    // A loopback redirect on another port is the same native client's (RFC 8252 §7.3).
    const other = await consent(session, authorizeQuery(clientId, 'http://127.0.0.1:5555/cb', challenge));
    expect(other.origin).toBe('http://127.0.0.1:5555');
    expect(other.searchParams.get('code')).toMatch(/^sgo_/);
  });

  it('refuses a request without PKCE S256, or for another resource, back at the app', async () => {
    const plain = await session.get(`/oauth/authorize?${authorizeQuery(clientId, redirect, 'x'.repeat(43), { code_challenge_method: 'plain' })}`, { htmx: false });
    expect(new URL(plain.headers.get('location')!).searchParams.get('error')).toBe('invalid_request');
    const foreign = await session.get(`/oauth/authorize?${authorizeQuery(clientId, redirect, pkce().challenge, { resource: 'https://other.example/mcp' })}`, { htmx: false });
    const u = new URL(foreign.headers.get('location')!);
    expect(u.searchParams.get('error')).toBe('invalid_target');
    expect(u.searchParams.get('iss')).toBe(gw.url);
    expect(u.searchParams.get('state')).toBe('st8');
  });

  it('refuses a wrong verifier, a code used twice (revoking what it got), and a token for another resource', async () => {
    const { verifier, challenge } = pkce();
    const code = (await consent(session, authorizeQuery(clientId, redirect, challenge))).searchParams.get('code')!;
    const wrong = await tokenRequest({ grant_type: 'authorization_code', client_id: clientId, code, code_verifier: pkce().verifier, redirect_uri: redirect });
    expect(wrong.status).toBe(400);
    expect(((await wrong.json()) as { error: string }).error).toBe('invalid_grant');
    // A wrong verifier spends nothing: the code still works with its own.
    expect((await tokenRequest({ grant_type: 'authorization_code', client_id: clientId, code, code_verifier: verifier, redirect_uri: redirect })).status).toBe(200);

    const { verifier: v2, challenge: c2 } = pkce();
    const code2 = (await consent(session, authorizeQuery(clientId, redirect, c2))).searchParams.get('code')!;
    const otherResource = await tokenRequest({ grant_type: 'authorization_code', client_id: clientId, code: code2, code_verifier: v2, redirect_uri: redirect, resource: 'https://other.example/mcp' });
    expect(((await otherResource.json()) as { error: string }).error).toBe('invalid_target');

    const { verifier: v3, challenge: c3 } = pkce();
    const code3 = (await consent(session, authorizeQuery(clientId, redirect, c3))).searchParams.get('code')!;
    const ok = await tokenRequest({ grant_type: 'authorization_code', client_id: clientId, code: code3, code_verifier: v3, redirect_uri: redirect, resource: gw.mcpUrl });
    expect(ok.status).toBe(200);
    const tokens = (await ok.json()) as { access_token: string; refresh_token: string; expires_in: number };
    expect(tokens.expires_in).toBe(3600);
    const mcp = (t: string) => rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${t}`, 'mcp-protocol-version': '2025-06-18' }, body: { jsonrpc: '2.0', id: 1, method: 'tools/list' } });
    expect((await mcp(tokens.access_token)).status).toBe(200);
    // The access token is for /mcp only: /v1 refuses it.
    const v1 = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${tokens.access_token}` } });
    expect(v1.status).toBe(401);
    expect(await v1.text()).toContain('works only on /mcp');

    // The code replayed without its verifier (seen in a log or a history): refused, and nothing is revoked.
    const replay = await tokenRequest({ grant_type: 'authorization_code', client_id: clientId, code: code3, code_verifier: pkce().verifier, redirect_uri: redirect });
    expect(((await replay.json()) as { error: string }).error).toBe('invalid_grant');
    expect((await mcp(tokens.access_token)).status).toBe(200);
    // With its verifier a second time: the tokens of its first use are revoked.
    const twice = await tokenRequest({ grant_type: 'authorization_code', client_id: clientId, code: code3, code_verifier: v3, redirect_uri: redirect });
    expect(((await twice.json()) as { error: string }).error).toBe('invalid_grant');
    expect((await mcp(tokens.access_token)).status).toBe(401);
  });

  it('gives no refresh token to a client that did not register for them', async () => {
    const id = await registered(redirect, 'No Refresh', ['authorization_code']);
    const { verifier, challenge } = pkce();
    const code = (await consent(session, authorizeQuery(id, redirect, challenge))).searchParams.get('code')!;
    const t = (await (await tokenRequest({ grant_type: 'authorization_code', client_id: id, code, code_verifier: verifier, redirect_uri: redirect })).json()) as Record<string, unknown>;
    expect(t.access_token).toMatch(/^sga_/);
    expect(t.refresh_token).toBeUndefined();
  });

  it('sends a bad request back only to an app the user allowed: for anyone else it is a page (no open redirect)', async () => {
    const stranger = await registered('https://attacker.example/landing', 'Stranger');
    const r = await fetch(`${gw.url}/oauth/authorize?${new URLSearchParams({ client_id: stranger, redirect_uri: 'https://attacker.example/landing', response_type: 'token' })}`, { redirect: 'manual' });
    expect(r.status).toBe(400);
    expect(r.headers.get('location')).toBeNull();
    const signedIn = await session.get(`/oauth/authorize?${new URLSearchParams({ client_id: stranger, redirect_uri: 'https://attacker.example/landing', response_type: 'token' })}`, { htmx: false });
    expect(signedIn.status).toBe(400);
    expect(signedIn.headers.get('location')).toBeNull();
  });

  it('holds back a flood of failed token requests for an app, never its successes', async () => {
    const id = await registered(redirect, 'Flooded');
    const { verifier, challenge } = pkce();
    const code = (await consent(session, authorizeQuery(id, redirect, challenge))).searchParams.get('code')!;
    let limited = 0;
    for (let i = 0; i < 70; i++) {
      const r = await tokenRequest({ grant_type: 'refresh_token', client_id: id, refresh_token: 'sgr_nothing' });
      if (r.status === 429) {
        limited++;
        expect(((await r.json()) as { error: string }).error).toBe('temporarily_unavailable');
      }
    }
    expect(limited).toBeGreaterThan(0);
    expect((await tokenRequest({ grant_type: 'authorization_code', client_id: id, code, code_verifier: verifier, redirect_uri: redirect })).status).toBe(200);
  });

  it('keeps at most the set number of registrations nobody used: past it the oldest goes', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push(await registered(redirect, `Unused ${i}`));
    const gone = await session.get(`/oauth/authorize?${authorizeQuery(ids[0]!, redirect, pkce().challenge)}`, { htmx: false });
    expect(await gone.text()).toContain('not known to the gateway');
    expect((await session.get(`/oauth/authorize?${authorizeQuery(ids[5]!, redirect, pkce().challenge)}`, { htmx: false })).status).toBe(200);
  });

  it('rotates refresh tokens; a refresh token used twice revokes the whole grant', async () => {
    const id = await registered(redirect, 'Rotating Client');
    const { verifier, challenge } = pkce();
    const code = (await consent(session, authorizeQuery(id, redirect, challenge))).searchParams.get('code')!;
    const first = (await (await tokenRequest({ grant_type: 'authorization_code', client_id: id, code, code_verifier: verifier, redirect_uri: redirect })).json()) as { access_token: string; refresh_token: string };
    const second = (await (await tokenRequest({ grant_type: 'refresh_token', client_id: id, refresh_token: first.refresh_token })).json()) as { access_token: string; refresh_token: string };
    expect(second.refresh_token).toMatch(/^sgr_/);
    expect(second.refresh_token).not.toBe(first.refresh_token);
    // Another client cannot use it.
    const foreign = await tokenRequest({ grant_type: 'refresh_token', client_id: clientId, refresh_token: second.refresh_token });
    expect(foreign.status).toBe(400);
    const reuse = await tokenRequest({ grant_type: 'refresh_token', client_id: id, refresh_token: first.refresh_token });
    expect(reuse.status).toBe(400);
    expect(await reuse.text()).toContain('used before');
    // The whole grant went: the newest pair too.
    expect((await tokenRequest({ grant_type: 'refresh_token', client_id: id, refresh_token: second.refresh_token })).status).toBe(400);
    const mcp = await rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${second.access_token}`, 'mcp-protocol-version': '2025-06-18' }, body: { jsonrpc: '2.0', id: 1, method: 'tools/list' } });
    expect(mcp.status).toBe(401);
    const user = (await findUser(gw.gateway.store.db, 'rawuser'))!;
    expect((await queryAudit(gw.gateway.store.db, { userId: user.id, limit: 100 })).some((a) => a.method === 'oauth/refresh_reused' && a.outcome === 'denied')).toBe(true);
  });

  it("stops a disabled user's grants at once, and remembers consent per user and client", async () => {
    const user = await ensureUser(gw.gateway.store.db, 'disableme');
    const s = await webSession(gw, user);
    const id = await registered(redirect, 'Remembered Client');
    const { verifier, challenge } = pkce();
    const code = (await consent(s, authorizeQuery(id, redirect, challenge))).searchParams.get('code')!;
    const t = (await (await tokenRequest({ grant_type: 'authorization_code', client_id: id, code, code_verifier: verifier, redirect_uri: redirect })).json()) as { access_token: string; refresh_token: string };
    // Asked again, no consent page: straight back with a code.
    const again = await s.get(`/oauth/authorize?${authorizeQuery(id, redirect, pkce().challenge)}`, { htmx: false });
    expect(again.status).toBe(303);
    expect(new URL(again.headers.get('location')!).searchParams.get('code')).toMatch(/^sgo_/);

    await setUserDisabled(gw.gateway.store.db, user.id, true);
    const mcp = await rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${t.access_token}`, 'mcp-protocol-version': '2025-06-18' }, body: { jsonrpc: '2.0', id: 1, method: 'tools/list' } });
    expect(mcp.status).toBe(401);
    expect(mcp.text).toContain('disabled');
    expect((await tokenRequest({ grant_type: 'refresh_token', client_id: id, refresh_token: t.refresh_token })).status).toBe(400);
  });
});
