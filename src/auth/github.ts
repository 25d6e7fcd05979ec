/**
 * Who may sign in with GitHub: the allow-list (users, organisations, teams) and the
 * admins from settings, checked against GitHub's REST API with the member's own OAuth
 * token (scope read:org) at sign-in and again every SANDGATE_AUTH_RECHECK_SEC
 * (src/auth/membership.ts). Works with GitHub Enterprise Server through
 * SANDGATE_GITHUB_URL / SANDGATE_GITHUB_API_URL.
 */
import type { Config } from '../config.js';

const list = (s: string) =>
  s
    .split(',')
    .map((x) => x.trim().toLowerCase())
    .filter(Boolean);

/** How long a GitHub API request may take before the check fails (closed). */
const API_TIMEOUT_MS = 10_000;

export interface GitHubEndpoints {
  authorizationURL: string;
  tokenURL: string;
  userProfileURL: string;
  userEmailURL: string;
  api: string;
}

export function githubEndpoints(config: Config): GitHubEndpoints {
  const web = config.githubUrl.replace(/\/+$/, '');
  const api = (config.githubApiUrl || (new URL(web).hostname === 'github.com' ? 'https://api.github.com' : `${web}/api/v3`)).replace(/\/+$/, '');
  return {
    authorizationURL: `${web}/login/oauth/authorize`,
    tokenURL: `${web}/login/oauth/access_token`,
    userProfileURL: `${api}/user`,
    userEmailURL: `${api}/user/emails`,
    api,
  };
}

export interface AccessDecision {
  /** The account the token is for, as GitHub's /user says (its numeric id never changes; its login can); none when GitHub refused the token. */
  account?: { id: number; login: string };
  allowed: boolean;
  isAdmin: boolean;
  /** The allowed teams (org/team) the member is in; also what upstream servers open to teams see. */
  teams: string[];
  /** Why not, in words for the person refused. */
  reason?: string;
}

export class AllowList {
  readonly users: string[];
  readonly orgs: string[];
  readonly teams: string[];
  readonly admins: string[];

  constructor(
    config: Config,
    private readonly endpoints = githubEndpoints(config),
    private readonly fetchImpl: typeof fetch = fetch,
  ) {
    this.users = list(config.allowedUsers);
    this.orgs = list(config.allowedOrgs);
    this.teams = list(config.allowedTeams);
    this.admins = list(config.admins);
  }

  private async get(token: string, path: string): Promise<{ status: number; body: unknown }> {
    const r = await this.fetchImpl(`${this.endpoints.api}${path}`, {
      headers: { authorization: `Bearer ${token}`, accept: 'application/vnd.github+json', 'user-agent': 'sandgate', 'x-github-api-version': '2022-11-28' },
      signal: AbortSignal.timeout(API_TIMEOUT_MS),
      redirect: 'error',
    });
    // Answers that say nothing about the member: GitHub is down or rate-limiting us.
    if (r.status >= 500 || r.status === 429 || (r.status === 403 && r.headers.get('x-ratelimit-remaining') === '0')) {
      throw new Error(`GitHub answered ${r.status} for ${path}`);
    }
    const text = await r.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    return { status: r.status, body };
  }

  /**
   * Whether the account whose token this is may use the gateway now, and which account
   * that is: its id and login are read from /user, never taken from the caller. Throws
   * when GitHub cannot be asked (unreachable, 5xx, rate-limited); the caller then
   * refuses, or keeps an earlier decision for a while.
   */
  async decide(token: string): Promise<AccessDecision> {
    const me = await this.get(token, '/user');
    if (me.status === 401) return { allowed: false, isAdmin: false, teams: [], reason: 'GitHub no longer accepts this sign-in: sign in again.' };
    if (me.status !== 200) throw new Error(`GitHub answered ${me.status} for /user`);
    const body = me.body as { login?: unknown; id?: unknown } | undefined;
    const login = typeof body?.login === 'string' ? body.login : '';
    const id = body?.id;
    if (!login || typeof id !== 'number' || !Number.isSafeInteger(id)) throw new Error('GitHub answered /user without a login and a numeric id');
    const account = { id, login };
    const actual = login.toLowerCase();
    let allowed = this.users.includes(actual);
    for (const org of this.orgs) {
      if (allowed) break;
      const m = await this.get(token, `/user/memberships/orgs/${encodeURIComponent(org)}`);
      allowed = m.status === 200 && (m.body as { state?: string }).state === 'active';
    }
    const teams: string[] = [];
    for (const team of this.teams) {
      const [org, slug] = team.split('/') as [string, string];
      const m = await this.get(token, `/orgs/${encodeURIComponent(org)}/teams/${encodeURIComponent(slug)}/memberships/${encodeURIComponent(actual)}`);
      if (m.status === 200 && (m.body as { state?: string }).state === 'active') teams.push(team);
    }
    allowed ||= teams.length > 0;
    return {
      account,
      allowed,
      isAdmin: allowed && this.admins.includes(actual),
      teams,
      ...(allowed ? {} : { reason: `${login} is not on this gateway's allow-list (its users, organisations or teams). Ask its admin to add you.` }),
    };
  }
}
