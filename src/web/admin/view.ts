/**
 * What the admin page's templates (views/web/admin) are given: rows of sandboxes, users,
 * tokens, audit entries, usage and upstream servers, each value already text (times as
 * "12 s" or a UTC date, sizes as "1.5 MB"). Everything here reads; the handlers in
 * ./page.ts act. The JSON under /admin/api is built from the same rows.
 */
import { usageByUserAndModel } from '../../agent/conversations.js';
import { AUDIT_KINDS, AUDIT_OUTCOMES, queryAudit, upstreamCallCounts, type AuditKind, type AuditOutcome, type AuditRecord } from '../../audit/audit.js';
import type { Config } from '../../config.js';
import { utcText } from '../../dates.js';
import { GatewayError } from '../../errors.js';
import type { SandboxInspection } from '../../sandboxes/inspection.js';
import type { WorkspaceStoreRow } from '../../replicas/stores.js';
import { executionUsage, sandboxRecords } from '../../sandboxes/records.js';
import type { Db } from '../../store/store.js';
import { findUser, listUsers } from '../../accounts/accounts.js';
import { countTokens, listTokens, tokenState } from '../../tokens/tokens.js';
import type { Upstream } from '../../upstream/index.js';
import { formatBytes } from '../../text.js';
import type { SandboxMonitor, SandboxSnapshot } from './sandbox-monitor.js';

/** Audit entries per page, and at most in a CSV export. */
export const AUDIT_PAGE = 100;
export const AUDIT_CSV_MAX = 100_000;
/** Tokens per page of /admin/tokens. */
const TOKEN_PAGE = 100;
export const PERIODS: Record<string, number> = { '24h': 86_400_000, '7d': 7 * 86_400_000, '30d': 30 * 86_400_000, all: Number.POSITIVE_INFINITY };

/** A stored time as text: '–' for none, "unknown" for a value no date can hold (an old install may have stored one). */
const when = (ms: number | null | undefined) => (ms === null || ms === undefined || ms === 0 ? '–' : utcText(ms, 'second'));
const ago = (ms: number | null | undefined, now = Date.now()) => {
  if (!ms) return '–';
  const s = Math.max(0, Math.round((now - ms) / 1000));
  return s < 90 ? `${s} s` : s < 5400 ? `${Math.round(s / 60)} min` : s < 172_800 ? `${Math.round(s / 3600)} h` : `${Math.round(s / 86_400)} d`;
};
export const str = (v: unknown) => (typeof v === 'string' ? v : '');

/** The sandbox rows of one sample. */
export const sandboxView = (snap: SandboxSnapshot) => ({
  rows: snap.rows.map((r) => ({
    ...r,
    short: r.containerId.slice(0, 12),
    age: ago(r.startedAt, snap.at),
    last: ago(r.lastActivity, snap.at),
    runFor: r.run ? ago(r.run.startedAt, snap.at) : '',
    cpu: r.cpuPercent === null ? '–' : `${r.cpuPercent.toFixed(1)} %`,
    mem: r.memoryBytes === null ? '–' : formatBytes(r.memoryBytes),
    peak: r.memoryPeakBytes === null ? '–' : formatBytes(r.memoryPeakBytes),
    limit: formatBytes(r.memoryLimitBytes),
    ws: r.workspace ? `${formatBytes(r.workspace.usedBytes)}${r.workspace.limitBytes ? ` of ${formatBytes(r.workspace.limitBytes)}` : ''}` : '–',
  })),
  sampledAt: when(snap.at),
  runtime: snap.runtime,
  unreachable: snap.unreachable,
});

/** Each workspace store (a sandbox host keeping files on its own disk), as `sandgate stores list` shows it. */
export const storesView = (stores: WorkspaceStoreRow[], now = Date.now()) =>
  stores.map((r) => ({
    ...r,
    stateText: r.state === 'live' ? 'running' : r.state === 'away' ? 'no gateway now (restarting?)' : 'lost',
    seen: r.state === 'live' ? 'now' : r.seenAt == null ? 'never' : `${ago(r.seenAt, now)} ago`,
    gatewayText: r.gateways.map((g) => `${g.sandboxHost}${g.draining ? ' (stopping)' : ''}`).join(', ') || '–',
  }));

/** Containers nobody tracks, and runtime processes whose container is gone. */
export async function strays(sandboxes: SandboxInspection) {
  return {
    orphans: (await sandboxes.orphans().catch(() => [])).map((o) => ({ ...o, short: o.id.slice(0, 12), age: ago(o.createdAt) })),
    leftovers: (await sandboxes.runtimeLeftovers().catch(() => [])).map((l) => ({ ...l, short: l.containerId.slice(0, 12) })),
  };
}

/** Every user with their sign-in, tokens, sandbox and ceiling. */
export async function usersView(deps: { config: Config; db: Db; monitor: SandboxMonitor }) {
  const { config, db, monitor } = deps;
  const snap = monitor.latest ?? (await monitor.sample());
  const byUser = new Map(snap.rows.filter((r) => r.userId !== null).map((r) => [r.userId!, r]));
  const tokens = new Map<number, number>();
  for (const t of await listTokens(db)) if (tokenState(t) === 'active') tokens.set(t.userId, (tokens.get(t.userId) ?? 0) + 1);
  const records = await sandboxRecords(db);
  return (await listUsers(db)).map((u) => {
    const sb = byUser.get(u.id);
    const rec = records.get(u.id);
    return {
      id: u.id,
      name: u.name,
      isAdmin: u.isAdmin,
      disabled: u.disabledAt !== null,
      /** Why a GitHub membership check took their access away (lifted by their next allowed GitHub sign-in). */
      lostAccess: u.suspendedAt !== null ? (u.suspendedReason ?? 'a GitHub membership check said no') : null,
      /** With GitHub sign-in: not yet bound to a GitHub account id (the next sign-in with this login binds it). */
      unbound: config.githubClientId !== '' && u.githubId === null,
      signIn: u.signInMethod ? `${u.signInMethod === 'github' ? 'GitHub' : 'one-time link'}, ${ago(u.lastSignInAt)} ago` : 'never signed in',
      tokens: tokens.get(u.id) ?? 0,
      sandbox: sb ? sb.state : 'none',
      executions: rec?.executions ?? 0,
      workspace: sb?.workspace ? formatBytes(sb.workspace.usedBytes) : '–',
      permissions: u.permissions ?? '',
    };
  });
}

/** The page number asked for (1 if none or nonsense). */
export const pageNumber = (raw: unknown) => Math.max(1, Math.floor(Number(raw)) || 1);

/** One page of tokens: active ones first, then revoked and expired, newest first, TOKEN_PAGE a page. */
export async function tokensView(db: Db, pageNo: number) {
  const now = Date.now();
  const pages = Math.max(1, Math.ceil((await countTokens(db, { includeRevoked: true })) / TOKEN_PAGE));
  const p = Math.min(pageNo, pages);
  const tokens = (await listTokens(db, { includeRevoked: true, activeFirst: true, now, limit: TOKEN_PAGE, offset: (p - 1) * TOKEN_PAGE })).map((t) => ({
    id: t.id,
    user: t.userName,
    name: t.name,
    created: when(t.createdAt),
    lastUsed: when(t.lastUsedAt),
    expires: t.expiresAt === null ? 'never' : when(t.expiresAt),
    state: tokenState(t, now),
  }));
  return { tokens, page: p, pages, prev: p > 1 ? `/admin/tokens?page=${p - 1}` : '', next: p < pages ? `/admin/tokens?page=${p + 1}` : '' };
}

/** User names by id, in name order (audit rows and upstream connections name users; the audit filter lists them). */
export const userNames = async (db: Db) => new Map((await listUsers(db)).map((u) => [u.id, u.name]));

/** The audit log's filter form as sent, and the query it stands for. */
export async function auditFilter(db: Db, q: Record<string, unknown>) {
  const user = str(q.user) ? await findUser(db, str(q.user)) : undefined;
  const date = (v: string, end = false) => {
    if (!v) return undefined;
    const t = Date.parse(/^\d{4}-\d{2}-\d{2}$/.test(v) ? `${v}T00:00:00Z` : v);
    if (!Number.isFinite(t)) throw new GatewayError(`"${v}" is not a date (use YYYY-MM-DD).`, { reason: 'invalid_request', status: 400 });
    return end && /^\d{4}-\d{2}-\d{2}$/.test(v) ? t + 86_400_000 : t;
  };
  const kind = str(q.kind) as AuditKind;
  const outcome = str(q.outcome) as AuditOutcome;
  return {
    form: { user: str(q.user), kind: str(q.kind), tool: str(q.tool), outcome: str(q.outcome), since: str(q.since), until: str(q.until) },
    query: {
      // A name that matches nobody matches no entry.
      userId: str(q.user) ? (user?.id ?? -1) : undefined,
      kind: AUDIT_KINDS.includes(kind) ? kind : undefined,
      tool: str(q.tool).slice(0, 100) || undefined,
      outcome: AUDIT_OUTCOMES.includes(outcome) ? outcome : undefined,
      since: date(str(q.since)),
      until: date(str(q.until), true),
    },
  };
}

/** One audit entry as the page and the CSV show it. */
export const auditRow = (e: AuditRecord, who: Map<number, string>) => ({
  id: e.id,
  time: when(e.ts),
  user: who.get(e.userId) ?? `#${e.userId}`,
  via: e.via ?? '',
  token: e.tokenName ?? '',
  kind: e.kind,
  action: e.method,
  tool: e.tool ?? '',
  target: e.targetUserId ? (who.get(e.targetUserId) ?? `#${e.targetUserId}`) : '',
  outcome: e.outcome,
  error: e.errorClass ?? '',
  ms: e.durationMs.toFixed(1),
  // The shape of the arguments (types, never values).
  shape: e.argsShape === null ? '' : JSON.stringify(e.argsShape),
});

/** Sandbox time and model tokens per user over a period (7 days if the name is not one of PERIODS), with bar widths. */
export async function usageOf(deps: { db: Db; sandboxes: SandboxInspection }, period: string) {
  // Object.hasOwn: a name such as `constructor` is not a period.
  const known = Object.hasOwn(PERIODS, period);
  const span = known ? PERIODS[period]! : PERIODS['7d']!;
  const until = Date.now() + 1;
  const since = Number.isFinite(span) ? until - span : 0;
  await deps.sandboxes.flushExecutions();
  const executions = await executionUsage(deps.db, since, until);
  const models = await usageByUserAndModel(deps.db, since);
  const maxCpu = Math.max(1e-9, ...executions.map((e) => e.cpuSeconds));
  const maxTokens = Math.max(1, ...models.map((m) => (m.inputTokens ?? 0) + (m.outputTokens ?? 0)));
  return {
    period: known ? period : '7d',
    since,
    until,
    executions: executions.map((e) => ({ ...e, cpu: e.cpuSeconds.toFixed(1), run: e.runSeconds.toFixed(1), bar: Math.round((e.cpuSeconds / maxCpu) * 100) })),
    models: models.map((m) => ({ ...m, total: (m.inputTokens ?? 0) + (m.outputTokens ?? 0), bar: Math.round((((m.inputTokens ?? 0) + (m.outputTokens ?? 0)) / maxTokens) * 100) })),
  };
}

/** Every upstream server: who may use it, its connections and its calls. */
export async function upstreamView(deps: { db: Db; upstream: Upstream }) {
  const counts = await upstreamCallCounts(deps.db);
  const who = await userNames(deps.db);
  const status = deps.upstream.hub.status();
  return deps.upstream.hub.servers().map((s) => {
    const conns = status.filter((c) => c.server === s.name);
    const c = counts.get(s.name);
    return {
      name: s.name,
      scope: s.scope,
      who: [...s.allowUsers.map((u) => (u === '*' ? 'everyone' : u)), ...s.allowTeams.map((t) => `team ${t}`)].join(', ') || 'nobody',
      state: conns.length ? `${conns.filter((x) => x.connected).length} of ${conns.length} connected` : 'not connected (connects on first use)',
      connections: conns.map((x) => ({ user: x.userId ? (who.get(x.userId) ?? `#${x.userId}`) : 'shared', connected: x.connected, failures: x.failures, lastError: x.lastError ?? '' })),
      calls: c?.calls ?? 0,
      failed: c?.failed ?? 0,
      lastCall: when(c?.lastAt),
    };
  });
}

/** The network of sandboxes: each user's connections out over the last hour (counted in the database), and the last 200. */
export async function networkView(db: Db) {
  const since = Date.now() - 3_600_000;
  const who = await userNames(db);
  const totals = await db
    .selectFrom('audit_log')
    .select((eb) => [
      'user_id',
      eb.fn.countAll<number>().as('rows'),
      eb.fn.sum<number | null>(eb.case().when('outcome', '!=', 'ok').then(eb.lit(1)).else(eb.lit(0)).end()).as('refused'),
    ])
    .where('kind', '=', 'egress')
    .where('method', '!=', 'summary')
    .where('ts', '>=', since)
    .groupBy('user_id')
    .execute();
  // Bytes are in each row's shape: read back for the hour, at most 20,000 rows.
  const shapes = await db.selectFrom('audit_log').select(['user_id', 'args_shape']).where('kind', '=', 'egress').where('ts', '>=', since).orderBy('id', 'desc').limit(20_000).execute();
  const bytesOf = (shape: unknown, key: 'sent' | 'received' | 'connections' | 'refused') => {
    const v = shape && typeof shape === 'object' ? (shape as Record<string, unknown>)[key] : undefined;
    return typeof v === 'number' ? v : 0;
  };
  const moved = new Map<number, { sent: number; received: number; more: number; moreRefused: number }>();
  for (const r of shapes) {
    let shape: unknown;
    try {
      shape = r.args_shape ? JSON.parse(r.args_shape) : null;
    } catch {
      shape = null;
    }
    const m = moved.get(Number(r.user_id)) ?? { sent: 0, received: 0, more: 0, moreRefused: 0 };
    m.sent += bytesOf(shape, 'sent');
    m.received += bytesOf(shape, 'received');
    // Summary rows: the connections of a window past its rows.
    m.more += bytesOf(shape, 'connections');
    m.moreRefused += bytesOf(shape, 'refused');
    moved.set(Number(r.user_id), m);
  }
  const kib = (n: number) => (n / 1024).toFixed(1);
  const rows = await queryAudit(db, { kind: 'egress', limit: 200 });
  return {
    users: totals.map((t) => {
      const m = moved.get(Number(t.user_id));
      return {
        user: who.get(Number(t.user_id)) ?? `#${t.user_id}`,
        connections: Number(t.rows) + (m?.more ?? 0),
        refused: Number(t.refused ?? 0) + (m?.moreRefused ?? 0),
        sent: kib(m?.sent ?? 0),
        received: kib(m?.received ?? 0),
      };
    }),
    connections: rows.map((r) => {
      const [host, port] = (r.tool ?? (r.method === 'summary' ? `(${bytesOf(r.argsShape, 'connections')} more connections)/` : '?/')).split('/');
      return {
        time: when(r.ts),
        user: who.get(r.userId) ?? `#${r.userId}`,
        method: r.method,
        host,
        port,
        sent: kib(bytesOf(r.argsShape, 'sent')),
        received: kib(bytesOf(r.argsShape, 'received')),
        outcome: r.outcome,
        why: r.errorClass ?? '',
        ms: r.durationMs.toFixed(0),
      };
    }),
  };
}
