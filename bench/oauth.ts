/**
 * The OAuth exchange of an MCP client, timed on loopback against a real gateway (SQLite,
 * or Postgres): the metadata documents, a registration, the
 * authorization request of a signed-in user (first the consent page and its answer, then
 * a remembered consent that goes straight back), and the token request. Then what a
 * token check costs on /mcp: the same tools/list with a personal token and with an OAuth
 * access token, alternating in blocks so that host noise falls on both alike.
 *
 *   node --import tsx bench/oauth.ts        (BENCH_ROUNDS, default 200; BENCH_CALLS per side, default 1000;
 *                                            BENCH_DB=postgres on a throw-away Postgres cluster)
 *
 * Times are client-observed on loopback, so they include the HTTP round trip; the
 * server's own share is at most that.
 */
import crypto from 'node:crypto';
import { ensureUser } from '../src/accounts/accounts.js';
import { listGrants, revokeGrantTokens } from '../src/oauth/grants.js';
import { rawRequest, startGateway } from '../test/support/mcp.js';
import { startPostgresCluster } from '../test/support/postgres.js';
import { webSession } from '../test/support/web-session.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 200);
const CALLS = Number(process.env.BENCH_CALLS ?? 1000);
const BLOCK = 20;
/** Rounds that connect the app afresh (consent page and answer); the rest find the consent remembered. */
const FIRST_TIMES = 40;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const f = (ms: number) => `${ms.toFixed(2)} ms`;
const timed = async <T>(xs: number[], work: () => Promise<T>): Promise<T> => {
  const t = performance.now();
  const r = await work();
  xs.push(performance.now() - t);
  return r;
};

const cluster = process.env.BENCH_DB === 'postgres' ? await startPostgresCluster() : undefined;
const database: Record<string, string> = cluster ? { SANDGATE_DATABASE_URL: await cluster.createDatabase() } : {};
const gw = await startGateway({ noStart: true, env: { ...database, SANDGATE_RATE_LIMIT_PER_MIN: '1000000', SANDGATE_RATE_LIMIT_BURST: '100000' } });
try {
  const user = await ensureUser(gw.gateway.store.db, 'bench');
  const session = await webSession(gw, user);
  const redirect = 'http://127.0.0.1:43210/cb';
  const t = { metadata: [] as number[], register: [] as number[], consent: [] as number[], remembered: [] as number[], token: [] as number[] };
  let access = '';
  let clientId = '';
  for (let i = 0; i < ROUNDS; i++) {
    await timed(t.metadata, async () => {
      await (await fetch(`${gw.url}/.well-known/oauth-protected-resource/mcp`)).json();
      await (await fetch(`${gw.url}/.well-known/oauth-authorization-server`)).json();
    });
    // Registration has a shared budget (30 at once, then one a second): past it, the last client is reused.
    clientId = i >= 25 ? clientId : await timed(t.register, async () => {
      const r = await fetch(`${gw.url}/oauth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ client_name: `Bench ${i}`, redirect_uris: [redirect], token_endpoint_auth_method: 'none' }) });
      return ((await r.json()) as { client_id: string }).client_id;
    });
    const query = (challenge: string) =>
      new URLSearchParams({ response_type: 'code', client_id: clientId, redirect_uri: redirect, code_challenge: challenge, code_challenge_method: 'S256', state: 's', resource: gw.mcpUrl }).toString();
    const pkce = () => {
      const verifier = crypto.randomBytes(32).toString('base64url');
      return { verifier, challenge: crypto.createHash('sha256').update(verifier).digest('base64url') };
    };
    // The first time: the consent page, then the answer that goes back with a code (a user may connect 50 apps a day: the first FIRST_TIMES rounds).
    const first = pkce();
    if (i < FIRST_TIMES) await timed(t.consent, async () => {
      const page = await (await session.get(`/oauth/authorize?${query(first.challenge)}`, { htmx: false })).text();
      const request = /name="request" value="([^"]+)"/.exec(page)![1]!;
      const r = await session.post('/oauth/authorize', { request, decision: 'allow' });
      return new URL(r.headers.get('location')!).searchParams.get('code');
    });
    // Remembered: straight back with a code; then the token request.
    const again = pkce();
    const code = await timed(t.remembered, async () => {
      const r = await session.get(`/oauth/authorize?${query(again.challenge)}`, { htmx: false });
      if (r.status !== 303) throw new Error(`authorize answered ${r.status}: ${(await r.text()).slice(0, 300)}`);
      return new URL(r.headers.get('location')!).searchParams.get('code')!;
    });
    access = await timed(t.token, async () => {
      const r = await fetch(`${gw.url}/oauth/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ grant_type: 'authorization_code', client_id: clientId, code, code_verifier: again.verifier, redirect_uri: redirect }).toString(),
      });
      return ((await r.json()) as { access_token: string }).access_token;
    });
    // A user may have 20 apps connected: each first-time round's goes (the last one's stays, for the remembered rounds and the token below).
    if (i < Math.min(FIRST_TIMES, ROUNDS) - 1) for (const g of await listGrants(gw.gateway.store.db, user.id)) await revokeGrantTokens(gw.gateway.store.db, g.id, { grant: true });
  }
  const p50 = (xs: number[]) => pct(xs, 50);
  console.log(`\nOAuth exchange, ${ROUNDS} rounds (client-observed on loopback, ${gw.gateway.config.databaseUrl ? 'Postgres' : 'SQLite'})`);
  for (const [k, xs] of Object.entries(t)) console.log(`${k.padEnd(12)} p50 ${f(p50(xs))}  p95 ${f(pct(xs, 95))}`);
  console.log(`whole exchange (metadata + remembered authorize + token): p50 ${f(p50(t.metadata) + p50(t.remembered) + p50(t.token))}`);
  console.log(`first time (metadata + register + consent page and answer + token): p50 ${f(p50(t.metadata) + p50(t.register) + p50(t.consent) + p50(t.token))}`);

  const personal = await gw.tokenFor('bench', 'laptop');
  const list = async (token: string, xs: number[]) => {
    const t0 = performance.now();
    const r = await rawRequest(gw.mcpUrl, { headers: { authorization: `Bearer ${token}`, 'mcp-protocol-version': '2025-06-18' }, body: { jsonrpc: '2.0', id: 1, method: 'tools/list' } });
    if (r.status !== 200) throw new Error(`tools/list answered ${r.status}: ${r.text.slice(0, 200)}`);
    xs.push(performance.now() - t0);
  };
  const warm: number[] = [];
  for (let i = 0; i < 200; i++) await list(i % 2 ? personal : access, warm);
  const byToken = { personal: [] as number[], oauth: [] as number[] };
  while (byToken.personal.length < CALLS) {
    for (let i = 0; i < BLOCK; i++) await list(personal, byToken.personal);
    for (let i = 0; i < BLOCK; i++) await list(access, byToken.oauth);
  }
  console.log(`\ntools/list on /mcp, ${CALLS} calls each`);
  console.log(`personal token     p50 ${f(p50(byToken.personal))}  p95 ${f(pct(byToken.personal, 95))}`);
  console.log(`OAuth access token p50 ${f(p50(byToken.oauth))}  p95 ${f(pct(byToken.oauth, 95))}`);
  console.log(`difference         p50 ${f(p50(byToken.oauth) - p50(byToken.personal))}`);
} finally {
  await gw.close();
  await cluster?.stop();
}
