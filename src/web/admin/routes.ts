/**
 * The admin page (admins named in settings only): every sandbox live with its usage and
 * stop/kill, orphans and the preflight's verdict, users (disable, enable, ceiling,
 * delete), every token (paged, active first), the audit log (filtered, paged, CSV),
 * usage per user and model, and upstream servers. Every action asks for confirmation in the page and is written to
 * the audit log with the admin's name. The same facts are JSON under /admin/api for
 * scripts, with an admin's session or an admin's API token.
 *
 * Every route here is in ADMIN_ROUTES (read from the router itself), which a test walks
 * as a non-admin: a route added here cannot miss the admin check, because the check is
 * the router's first handler.
 */
import express, { type NextFunction, type Request, type Response, type Router } from 'express';
import type { Agent } from '../../agent/agent.js';
import { usageByUserAndModel } from '../../agent/conversations.js';
import { AUDIT_KINDS, AUDIT_OUTCOMES, queryAudit, recordAudit, upstreamCallCounts, type AuditKind, type AuditOutcome, type AuditRecord } from '../../audit/audit.js';
import type { Config } from '../../config.js';
import { utcText } from '../../dates.js';
import { GatewayError } from '../../errors.js';
import type { Logger } from '../../logger.js';
import { formatBytes } from '../../text.js';
import { dropPiiScope, tokenScopeRef } from '../../pii/scopes.js';
import { narrowPermissions, parsePermissions, type Permissions } from '../../sandboxes/permissions.js';
import type { SandboxManager } from '../../sandboxes/manager.js';
import { executionUsage, sandboxRecord } from '../../sandboxes/records.js';
import type { Db } from '../../store/store.js';
import { deleteUser, getUser, listUsers, setUserDisabled, setUserPermissions, type User } from '../../accounts/accounts.js';
import { countTokens, getToken, listTokens, revokeToken, tokenState } from '../../tokens/tokens.js';
import type { Upstream } from '../../upstream/index.js';
import { SandboxMonitor, type SandboxSnapshot } from './sandbox-monitor.js';
import { authenticateToken, bearerToken } from '../../auth/bearer.js';
import type { WebAuth } from '../sign-in/routes.js';
import type { LiveHub } from '../live/hub.js';
import { renderPage, renderPartial } from '../render.js';

export interface AdminDeps {
  config: Config;
  db: Db;
  logger: Logger;
  sandboxes: SandboxManager;
  agent: Agent;
  upstream: Upstream;
  auth: WebAuth;
  live: LiveHub;
  /** The preflight's last verdict (checks by name). */
  preflight: () => { ok: boolean; checks: Record<string, { ok: boolean; detail: string }> };
}

export interface AdminApp {
  router: Router;
  monitor: SandboxMonitor;
  close(): void;
}

/** Audit entries per page, and at most in a CSV export. */
const AUDIT_PAGE = 100;
const AUDIT_CSV_MAX = 100_000;
/** Tokens per page of /admin/tokens. */
const TOKEN_PAGE = 100;
const PERIODS: Record<string, number> = { '24h': 86_400_000, '7d': 7 * 86_400_000, '30d': 30 * 86_400_000, all: Number.POSITIVE_INFINITY };

/** A stored time as text: '–' for none, "unknown" for a value no date can hold (an old install may have stored one). */
const when = (ms: number | null | undefined) => (ms === null || ms === undefined || ms === 0 ? '–' : utcText(ms, 'second'));
const ago = (ms: number | null | undefined, now = Date.now()) => {
  if (!ms) return '–';
  const s = Math.max(0, Math.round((now - ms) / 1000));
  return s < 90 ? `${s} s` : s < 5400 ? `${Math.round(s / 60)} min` : s < 172_800 ? `${Math.round(s / 3600)} h` : `${Math.round(s / 86_400)} d`;
};
const str = (v: unknown) => (typeof v === 'string' ? v : '');
/** A table body swapped in out of band: inside a <template>, or the HTML parser drops a <tbody> that follows other content. */
const oobRows = (id: string, rows: string) => `<template><tbody id="${id}" hx-swap-oob="true">${rows}</tbody></template>`;

/** The admin, from an admin's session or an admin's API token; 403 for anyone else, with nothing said about what is here. */
function adminGate(deps: AdminDeps) {
  return async (req: Request, res: Response, next: NextFunction) => {
    if (bearerToken(req)) {
      const r = await authenticateToken(deps, bearerToken(req));
      if (!r.ok) return void res.status(r.status).json({ error: r.message });
      if (!r.principal.user.isAdmin) return void res.status(403).json({ error: 'Only an admin of this gateway may use this.' });
      req.user = r.principal.user;
      (req as { adminVia?: string }).adminVia = 'token';
      return next();
    }
    const allowed = await deps.auth.stillAllowed(req);
    if (!allowed.ok) {
      if (req.method === 'GET' && allowed.status === 401 && !req.originalUrl.startsWith('/admin/api/')) return res.redirect(303, '/login');
      return void res.status(allowed.status).type('text').send(allowed.message);
    }
    if (!allowed.user.isAdmin) return void res.status(403).type('text').send('Only an admin of this gateway may see this page.');
    req.user = allowed.user;
    next();
  };
}

export function adminRoutes(deps: AdminDeps): AdminApp {
  const { db, sandboxes, auth, live, config } = deps;
  const log = deps.logger.child({ module: 'admin' });
  const router = express.Router();
  const body = express.urlencoded({ extended: false, limit: '16kb' });
  const runtime = () => `${config.sandboxRuntime}: ${deps.preflight().checks.runtime?.detail ?? 'not checked yet'}`;
  const monitor = new SandboxMonitor({ config, db, sandboxes, logger: deps.logger, runtime });
  const admin = (req: Request) => req.user as User;
  const page = (req: Request) => ({ user: admin(req), csrf: auth.csrfToken(req) });

  /** One audit entry per admin action, named by the admin, about the user it concerned. */
  const audited = async <T>(req: Request, method: string, target: number | null, act: () => Promise<T> | T): Promise<T> => {
    const started = performance.now();
    const entry = { userId: admin(req).id, via: (req as { adminVia?: string }).adminVia === 'token' ? ('token' as const) : ('session' as const), kind: 'admin' as const, method, targetUserId: target };
    try {
      const out = await act();
      recordAudit(db, { ...entry, durationMs: performance.now() - started, outcome: 'ok' });
      log.info({ admin: admin(req).name, action: method, target }, 'admin action');
      return out;
    } catch (e) {
      recordAudit(db, { ...entry, durationMs: performance.now() - started, outcome: 'error', errorClass: 'internal' });
      throw e;
    }
  };

  const userById = (raw: unknown): User => {
    const id = Number(raw);
    const u = Number.isSafeInteger(id) ? getUser(db, id) : undefined;
    if (!u) throw new GatewayError('No such user.', { reason: 'not_found', status: 404 });
    return u;
  };

  // Every route below is an admin's: this gate is the router's first handler.
  router.use('/admin', adminGate(deps));

  // --- sandboxes
  const sandboxView = (snap: SandboxSnapshot) => ({
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
  });
  const rowsHtml = (snap: SandboxSnapshot) => renderPartial('admin/sandbox-rows', sandboxView(snap));
  monitor.start(
    () => live.roomSize('admins') > 0,
    (snap) => live.toRoom('admins', { target: '#sandbox-rows', swap: 'innerHTML', html: rowsHtml(snap) }),
  );

  router.get('/admin', async (req, res) => {
    const snap = await monitor.sample();
    renderPage(res, 'admin/sandboxes', { ...page(req), live: 'admin' }, {
      title: 'Admin · sandboxes',
      tab: 'sandboxes',
      ...sandboxView(snap),
      preflight: deps.preflight(),
      orphans: (await sandboxes.orphans().catch(() => [])).map((o) => ({ ...o, short: o.id.slice(0, 12), age: ago(o.createdAt) })),
      leftovers: (await sandboxes.runtimeLeftovers().catch(() => [])).map((l) => ({ ...l, short: l.containerId.slice(0, 12) })),
    });
  });
  router.get('/admin/sandboxes/rows', async (_req, res) => {
    res.type('html').send(rowsHtml(await monitor.sample()));
  });
  const refreshed = async (res: Response, message: string) => {
    const snap = await monitor.sample();
    live.toRoom('admins', { target: '#sandbox-rows', swap: 'innerHTML', html: rowsHtml(snap) });
    res.type('html').send(renderPartial('notice', { message }) + oobRows('sandbox-rows', rowsHtml(snap)));
  };
  router.post('/admin/sandboxes/:userId/stop', body, auth.csrf, async (req, res) => {
    const u = userById(req.params.userId);
    const done = await audited(req, 'sandbox/stop', u.id, () => sandboxes.stopUser(u.id, { by: admin(req).name }));
    await refreshed(res, done ? `Stopped ${u.name}’s sandbox.` : `${u.name} has no sandbox running.`);
  });
  router.post('/admin/sandboxes/:userId/kill', body, auth.csrf, async (req, res) => {
    const u = userById(req.params.userId);
    const done = await audited(req, 'sandbox/kill', u.id, () => sandboxes.stopUser(u.id, { kill: true, by: admin(req).name }));
    await refreshed(res, done ? `Killed ${u.name}’s sandbox.` : `${u.name} has no sandbox running.`);
  });
  router.post('/admin/sandboxes/stop-idle', body, auth.csrf, async (req, res) => {
    const n = await audited(req, 'sandbox/stop_idle', null, () => sandboxes.stopIdle(admin(req).name));
    await refreshed(res, `Stopped ${n} idle sandbox${n === 1 ? '' : 'es'}.`);
  });
  router.post('/admin/orphans/remove', body, auth.csrf, async (req, res) => {
    const n = await audited(req, 'orphans/remove', null, () => sandboxes.removeOrphans());
    res.type('html').send(renderPartial('notice', { message: `Removed ${n} container${n === 1 ? '' : 's'} or runtime process${n === 1 ? '' : 'es'} nothing tracked.` }));
  });

  // --- users
  const usersView = async () => {
    const snap = monitor.latest ?? (await monitor.sample());
    const byUser = new Map(snap.rows.filter((r) => r.userId !== null).map((r) => [r.userId!, r]));
    const tokens = new Map<number, number>();
    for (const t of listTokens(db)) if (tokenState(t) === 'active') tokens.set(t.userId, (tokens.get(t.userId) ?? 0) + 1);
    return listUsers(db).map((u) => {
      const sb = byUser.get(u.id);
      const rec = sandboxRecord(db, u.id);
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
  };
  router.get('/admin/users', async (req, res) => {
    renderPage(res, 'admin/users', page(req), { title: 'Admin · users', tab: 'users', users: await usersView(), team: config.maxPermissions || config.defaultPermissions, defaultPermissions: config.defaultPermissions });
  });
  const notSelf = (req: Request, u: User, what: string) => {
    if (u.id === admin(req).id) throw new GatewayError(`You cannot ${what} your own account here: another admin can.`, { reason: 'invalid_request', status: 400 });
  };
  /** Ends everything of a user that works now: their turns, sessions, live pages and sandbox. */
  const cutOff = async (req: Request, u: User) => {
    deps.agent.cancelUser(u.id);
    auth.endSessionsOf(u.id);
    live.signedOut(u.id, true);
    await sandboxes.stopUser(u.id, { kill: true, by: admin(req).name });
  };
  const usersAnswer = async (res: Response, message: string) => res.type('html').send(renderPartial('notice', { message }) + oobRows('user-rows', renderPartial('admin/user-rows', { users: await usersView() })));
  router.post('/admin/users/:id/disable', body, auth.csrf, async (req, res) => {
    const u = userById(req.params.id);
    notSelf(req, u, 'disable');
    await audited(req, 'user/disable', u.id, async () => {
      setUserDisabled(db, u.id, true);
      await cutOff(req, u);
    });
    await usersAnswer(res, `${u.name} is disabled: their sessions, tokens and sandbox stopped working. Nothing of theirs was deleted.`);
  });
  router.post('/admin/users/:id/enable', body, auth.csrf, async (req, res) => {
    const u = userById(req.params.id);
    await audited(req, 'user/enable', u.id, () => setUserDisabled(db, u.id, false));
    await usersAnswer(res, `${u.name} is enabled again.`);
  });
  router.post('/admin/users/:id/permissions', body, auth.csrf, async (req, res) => {
    const u = userById(req.params.id);
    const raw = str(req.body.permissions).trim();
    let value: string | null = null;
    if (raw) {
      let parsed: Permissions;
      try {
        parsed = parsePermissions(JSON.parse(raw));
        // Within the team's ceiling: a grant beyond it is refused, naming it.
        narrowPermissions(parsePermissions(JSON.parse(config.maxPermissions || config.defaultPermissions)), parsed);
      } catch (e) {
        throw new GatewayError(`Not a ceiling this gateway allows: ${(e as Error).message}`, { reason: 'invalid_request', status: 400 });
      }
      value = JSON.stringify(parsed);
    }
    await audited(req, 'user/permissions', u.id, async () => {
      setUserPermissions(db, u.name, value);
      // The container follows the ceiling: the next run starts one made for the new ceiling.
    });
    await usersAnswer(res, value ? `${u.name}’s ceiling is now ${value}; it applies from their next run.` : `${u.name} has the default ceiling again; it applies from their next run.`);
  });
  router.post('/admin/users/:id/delete', body, auth.csrf, async (req, res) => {
    const u = userById(req.params.id);
    notSelf(req, u, 'delete');
    if (str(req.body.confirm) !== u.name) throw new GatewayError(`Type the user’s name (${u.name}) to delete them.`, { reason: 'invalid_request', status: 400 });
    await audited(req, 'user/delete', u.id, async () => {
      await cutOff(req, u);
      await sandboxes.destroyWorkspaceOf(u);
      deleteUser(db, u.id);
    });
    await usersAnswer(res, `${u.name} and their data are deleted.`);
  });

  // --- tokens: active ones first, then revoked and expired, newest first, TOKEN_PAGE a page
  const tokenPage = (req: Request) => Math.max(1, Math.floor(Number(req.query.page)) || 1);
  const tokensView = (pageNo: number) => {
    const now = Date.now();
    const pages = Math.max(1, Math.ceil(countTokens(db, { includeRevoked: true }) / TOKEN_PAGE));
    const p = Math.min(pageNo, pages);
    const tokens = listTokens(db, { includeRevoked: true, activeFirst: true, now, limit: TOKEN_PAGE, offset: (p - 1) * TOKEN_PAGE }).map((t) => ({
      id: t.id,
      user: t.userName,
      name: t.name,
      created: when(t.createdAt),
      lastUsed: when(t.lastUsedAt),
      expires: t.expiresAt === null ? 'never' : when(t.expiresAt),
      state: tokenState(t, now),
    }));
    return { tokens, page: p, pages, prev: p > 1 ? `/admin/tokens?page=${p - 1}` : '', next: p < pages ? `/admin/tokens?page=${p + 1}` : '' };
  };
  router.get('/admin/tokens', (req, res) => {
    renderPage(res, 'admin/tokens', page(req), { title: 'Admin · tokens', tab: 'tokens', ...tokensView(tokenPage(req)) });
  });
  router.post('/admin/tokens/:id/revoke', body, auth.csrf, async (req, res) => {
    const id = Number(req.params.id);
    const t = Number.isSafeInteger(id) ? getToken(db, id) : undefined;
    if (!t) throw new GatewayError('No such token.', { reason: 'not_found', status: 404 });
    await audited(req, 'token/revoke', t.userId, () => {
      revokeToken(db, id);
      dropPiiScope(db, tokenScopeRef(t.userId, id));
    });
    res.type('html').send(renderPartial('admin/token-rows', tokensView(tokenPage(req))));
  });

  // --- audit log
  const names = () => new Map(listUsers(db).map((u) => [u.id, u.name]));
  const auditFilter = (req: Request) => {
    const q = req.query;
    const user = str(q.user) ? listUsers(db).find((u) => u.name === str(q.user)) : undefined;
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
  };
  const auditRow = (e: AuditRecord, who: Map<number, string>) => ({
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
  router.get('/admin/audit', (req, res) => {
    const { form, query } = auditFilter(req);
    const before = Number(req.query.before) || undefined;
    const entries = queryAudit(db, { ...query, before, limit: AUDIT_PAGE + 1 });
    const who = names();
    const rows = entries.slice(0, AUDIT_PAGE).map((e) => auditRow(e, who));
    const params = new URLSearchParams(Object.entries(form).filter(([, v]) => v));
    const older = entries.length > AUDIT_PAGE ? `/admin/audit?${new URLSearchParams({ ...Object.fromEntries(params), before: String(rows.at(-1)!.id) })}` : null;
    renderPage(res, 'admin/audit', page(req), {
      title: 'Admin · audit log',
      tab: 'audit',
      form,
      rows,
      older,
      newest: before ? `/admin/audit?${params}` : null,
      csv: `/admin/audit.csv?${params}`,
      kinds: AUDIT_KINDS,
      outcomes: AUDIT_OUTCOMES,
      users: listUsers(db).map((u) => u.name),
    });
  });
  router.get('/admin/audit.csv', (req, res) => {
    const { query } = auditFilter(req);
    const who = names();
    const cell = (v: string) => (/[",\n\r]/.test(v) || /^[=+\-@\t]/.test(v) ? `"${(/^[=+\-@\t]/.test(v) ? `'${v}` : v).replace(/"/g, '""')}"` : v);
    const head = ['id', 'time', 'user', 'via', 'token', 'kind', 'action', 'tool', 'target', 'outcome', 'error', 'ms', 'shape'] as const;
    res.set({ 'Content-Type': 'text/csv; charset=utf-8', 'Content-Disposition': `attachment; filename="sandgate-audit-${new Date().toISOString().slice(0, 10)}.csv"` });
    res.write(`${head.join(',')}\n`);
    let before: number | undefined;
    let written = 0;
    while (written < AUDIT_CSV_MAX) {
      const batch = queryAudit(db, { ...query, before, limit: 1000 });
      if (!batch.length) break;
      res.write(batch.map((e) => auditRow(e, who)).map((r) => head.map((h) => cell(String(r[h]))).join(',')).join('\n') + '\n');
      written += batch.length;
      before = batch.at(-1)!.id;
    }
    res.end();
  });

  // --- usage
  const usageOf = (period: string) => {
    const span = PERIODS[period] ?? PERIODS['7d']!;
    const until = Date.now() + 1;
    const since = Number.isFinite(span) ? until - span : 0;
    sandboxes.flushExecutions();
    const executions = executionUsage(db, since, until);
    const models = usageByUserAndModel(db, since);
    const maxCpu = Math.max(1e-9, ...executions.map((e) => e.cpuSeconds));
    const maxTokens = Math.max(1, ...models.map((m) => (m.inputTokens ?? 0) + (m.outputTokens ?? 0)));
    return {
      period: PERIODS[period] ? period : '7d',
      since,
      until,
      executions: executions.map((e) => ({ ...e, cpu: e.cpuSeconds.toFixed(1), run: e.runSeconds.toFixed(1), bar: Math.round((e.cpuSeconds / maxCpu) * 100) })),
      models: models.map((m) => ({ ...m, total: (m.inputTokens ?? 0) + (m.outputTokens ?? 0), bar: Math.round((((m.inputTokens ?? 0) + (m.outputTokens ?? 0)) / maxTokens) * 100) })),
    };
  };
  router.get('/admin/usage', (req, res) => {
    renderPage(res, 'admin/usage', page(req), { title: 'Admin · usage', tab: 'usage', periods: Object.keys(PERIODS), ...usageOf(str(req.query.period)) });
  });

  // --- upstream servers
  const upstreamView = () => {
    const counts = upstreamCallCounts(db);
    const who = names();
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
  };
  router.get('/admin/upstream', (req, res) => {
    renderPage(res, 'admin/upstream', page(req), { title: 'Admin · upstream servers', tab: 'upstream', servers: upstreamView() });
  });
  router.post('/admin/upstream/:name/reconnect', body, auth.csrf, async (req, res) => {
    const name = str(req.params.name);
    if (!deps.upstream.hub.isServer(name)) throw new GatewayError('No such server.', { reason: 'not_found', status: 404 });
    const n = await audited(req, 'upstream/reconnect', null, () => deps.upstream.hub.reconnect(name));
    res.type('html').send(renderPartial('notice', { message: `Closed ${n} connection${n === 1 ? '' : 's'} of ${name}; the next call connects afresh.` }));
  });

  // --- JSON for scripts
  router.get('/admin/api/sandboxes', async (_req, res) => {
    const snap = await monitor.sample();
    res.json({ sampledAt: snap.at, runtime: snap.runtime, sandboxes: snap.rows });
  });
  router.get('/admin/api/users', async (_req, res) => {
    res.json({ users: await usersView() });
  });
  router.get('/admin/api/usage', (req, res) => {
    const u = usageOf(str(req.query.period));
    res.json({ period: u.period, since: u.since, until: u.until, executions: u.executions.map(({ bar: _b, cpu: _c, run: _r, ...e }) => e), models: u.models.map(({ bar: _b, ...m }) => m) });
  });

  return { router, monitor, close: () => monitor.stop() };
}

/** Method and path of every admin route, from the router (for the test that walks them as a non-admin). */
export function adminRouteTable(router: Router): { method: string; path: string }[] {
  const out: { method: string; path: string }[] = [];
  for (const layer of router.stack as unknown as { route?: { path: string; methods: Record<string, boolean> } }[]) {
    if (!layer.route) continue;
    for (const m of Object.keys(layer.route.methods)) out.push({ method: m.toUpperCase(), path: layer.route.path });
  }
  return out;
}
