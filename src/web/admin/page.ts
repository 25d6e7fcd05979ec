/**
 * The admin page (admins named in settings only): every sandbox live with its usage and
 * stop/kill, orphans and the preflight's verdict, users (disable, enable, ceiling,
 * delete), every token (paged, active first), the audit log (filtered, paged, CSV),
 * usage per user and model, and upstream servers. Every action asks for confirmation in
 * the page and is written to the audit log with the admin's name. The same facts are
 * JSON under /admin/api for scripts, with an admin's session or an admin's API token.
 *
 * `adminPage` gives the handlers; src/routes.ts places them on their paths, behind
 * `gate` mounted on all of /admin, so that no admin path can miss the admin check (a test
 * walks every one of them as a non-admin). What the templates show is built in
 * ./view.ts; what is done to a user as a whole is src/users/.
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Agent } from '../../agent/agent.js';
import { AUDIT_KINDS, AUDIT_OUTCOMES, queryAudit, recordAudit } from '../../audit/audit.js';
import type { Config } from '../../config.js';
import { GatewayError } from '../../errors.js';
import type { Logger } from '../../logger.js';
import { dropPiiScope, tokenScopeRef } from '../../pii/scopes.js';
import { narrowPermissions, parsePermissions, type Permissions } from '../../sandboxes/permissions.js';
import type { SandboxInspection } from '../../sandboxes/inspection.js';
import type { SandboxStops } from '../../sandboxes/stops.js';
import type { Db } from '../../store/store.js';
import { getUser, setUserPermissions, type User } from '../../accounts/accounts.js';
import { getToken, revokeToken } from '../../tokens/tokens.js';
import type { Upstream } from '../../upstream/index.js';
import { deleteUser, disableUser, enableUser, stillRefused, type UserParts } from '../../users/users.js';
import { listWorkspaceStores } from '../../replicas/stores.js';
import { SandboxMonitor, type SandboxSnapshot } from './sandbox-monitor.js';
import { authenticateToken, bearerToken } from '../../auth/bearer.js';
import type { WebSessions } from '../../auth/session-middleware.js';
import { sendRefusal } from '../../http/errors.js';
import type { LiveHub } from '../live/hub.js';
import { renderPage, renderPartial } from '../render.js';
import { AUDIT_CSV_MAX, AUDIT_PAGE, PERIODS, auditFilter, auditRow, pageNumber, sandboxView, storesView, str, strays, tokensView, upstreamView, networkView, usageOf, userNames, usersView } from './view.js';

export interface AdminDeps {
  config: Config;
  db: Db;
  logger: Logger;
  sandboxes: SandboxInspection & SandboxStops;
  agent: Agent;
  upstream: Upstream;
  auth: WebSessions;
  live: LiveHub;
  /** The preflight's last verdict (checks by name). */
  preflight: () => { ok: boolean; checks: Record<string, { ok: boolean; detail: string; notAvailable?: boolean }> };
}

export interface AdminPage {
  /** The admin check, mounted on all of /admin before any of the handlers below: 403 (or the sign-in page) for anyone else. */
  gate: RequestHandler;
  // GET /admin, GET /admin/sandboxes/rows, POST /admin/sandboxes/:userId/{stop,kill}, POST /admin/sandboxes/stop-idle, POST /admin/orphans/remove
  sandboxes: RequestHandler;
  sandboxRows: RequestHandler;
  stopSandbox: RequestHandler;
  killSandbox: RequestHandler;
  stopIdle: RequestHandler;
  removeOrphans: RequestHandler;
  // GET /admin/users, POST /admin/users/:id/{disable,enable,permissions,delete}
  users: RequestHandler;
  disableUser: RequestHandler;
  enableUser: RequestHandler;
  setPermissions: RequestHandler;
  deleteUser: RequestHandler;
  // GET /admin/tokens, POST /admin/tokens/:id/revoke
  tokens: RequestHandler;
  revokeToken: RequestHandler;
  // GET /admin/audit, GET /admin/audit.csv
  audit: RequestHandler;
  auditCsv: RequestHandler;
  // GET /admin/usage
  usage: RequestHandler;
  // GET /admin/upstream, POST /admin/upstream/:name/reconnect
  upstream: RequestHandler;
  // GET /admin/network: connections out of sandboxes
  network: RequestHandler;
  reconnectUpstream: RequestHandler;
  // GET /admin/api/{sandboxes,users,usage}
  apiSandboxes: RequestHandler;
  apiUsers: RequestHandler;
  apiUsage: RequestHandler;
  /** Samples the sandboxes while an admin watches. */
  monitor: SandboxMonitor;
  close(): void;
}

/** The admin, from an admin's session or an admin's API token; 403 for anyone else, with nothing said about what is here. */
function adminGate(deps: AdminDeps): RequestHandler {
  return async function adminGate(req: Request, res: Response, next: NextFunction) {
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
      return sendRefusal(req, res, allowed.status, allowed.message);
    }
    if (!allowed.user.isAdmin) return sendRefusal(req, res, 403, 'Only an admin of this gateway may see this page.');
    req.user = allowed.user;
    next();
  };
}

export function adminPage(deps: AdminDeps): AdminPage {
  const { db, sandboxes, auth, live, config } = deps;
  const log = deps.logger.child({ module: 'admin' });
  const runtime = () => `${config.sandboxDriver === 'kubernetes' ? `pods under RuntimeClass ${config.k8sRuntimeClass}` : config.sandboxRuntime}: ${deps.preflight().checks.runtime?.detail ?? 'not checked yet'}`;
  const monitor = new SandboxMonitor({ config, db, sandboxes, logger: deps.logger, runtime });
  const admin = (req: Request) => req.user as User;
  const page = (req: Request) => ({ user: admin(req), csrf: auth.csrfToken(req) });
  /** What disabling and deleting a user reach: everything of theirs in this process. */
  const userParts: UserParts = { db, sessions: auth, live, turns: deps.agent, sandboxes };

  /** One audit entry per admin action, named by the admin, about the user it concerned. */
  const audited = async <T>(req: Request, method: string, target: number | null, act: () => Promise<T> | T): Promise<T> => {
    const started = performance.now();
    const entry = { userId: admin(req).id, via: (req as { adminVia?: string }).adminVia === 'token' ? ('token' as const) : ('session' as const), kind: 'admin' as const, method, targetUserId: target };
    try {
      const out = await act();
      await recordAudit(db, { ...entry, durationMs: performance.now() - started, outcome: 'ok' });
      log.info({ admin: admin(req).name, action: method, target }, 'admin action');
      return out;
    } catch (e) {
      await recordAudit(db, { ...entry, durationMs: performance.now() - started, outcome: 'error', errorClass: 'internal' });
      throw e;
    }
  };

  const userById = async (raw: unknown): Promise<User> => {
    const id = Number(raw);
    const u = Number.isSafeInteger(id) ? await getUser(db, id) : undefined;
    if (!u) throw new GatewayError('No such user.', { reason: 'not_found', status: 404 });
    return u;
  };
  const notSelf = (req: Request, u: User, what: string) => {
    if (u.id === admin(req).id) throw new GatewayError(`You cannot ${what} your own account here: another admin can.`, { reason: 'invalid_request', status: 400 });
  };
  /** An action's notice, with a table's rows swapped in out of band. */
  const changed = (res: Response, message: string, id: string, rows: string) => void res.type('html').send(renderPartial('admin/changed', { message, id, rows }));
  const notice = (res: Response, message: string) => void res.type('html').send(renderPartial('notice', { message }));

  // --- sandboxes
  const rowsHtml = (snap: SandboxSnapshot) => renderPartial('admin/sandbox-rows', sandboxView(snap));
  monitor.start(
    () => live.roomSize('admins') > 0,
    (snap) => live.toRoom('admins', { target: '#sandbox-rows', swap: 'innerHTML', html: rowsHtml(snap) }),
  );
  /** After a sandbox action: every admin watching gets the new rows, and so does the answer. */
  const refreshed = async (res: Response, message: string) => {
    const snap = await monitor.sample();
    const rows = rowsHtml(snap);
    live.toRoom('admins', { target: '#sandbox-rows', swap: 'innerHTML', html: rows });
    changed(res, message, 'sandbox-rows', rows);
  };

  // --- users
  const usersAnswer = async (res: Response, message: string) => changed(res, message, 'user-rows', renderPartial('admin/user-rows', { users: await usersView({ config, db, monitor }) }));

  return {
    gate: adminGate(deps),
    monitor,
    close: () => monitor.stop(),

    async sandboxes(req, res) {
      const snap = await monitor.sample();
      // With gateways on several sandbox hosts: each host's workspace store (none on SQLite).
      const stores = await listWorkspaceStores(db, { leaseMs: config.replicaLeaseMs, lostMs: config.hostLostSec * 1000 });
      renderPage(res, 'admin/sandboxes', { ...page(req), live: 'admin' }, { title: 'Admin · sandboxes', tab: 'sandboxes', ...sandboxView(snap), preflight: deps.preflight(), ...(await strays(sandboxes)), stores: storesView(stores) });
    },
    async sandboxRows(_req, res) {
      res.type('html').send(rowsHtml(await monitor.sample()));
    },
    async stopSandbox(req, res) {
      const u = await userById(req.params.userId);
      const done = await audited(req, 'sandbox/stop', u.id, () => sandboxes.stopUser(u.id, { by: admin(req).name }));
      await refreshed(res, done ? `Stopped ${u.name}’s sandbox.` : `${u.name} has no sandbox running.`);
    },
    async killSandbox(req, res) {
      const u = await userById(req.params.userId);
      const done = await audited(req, 'sandbox/kill', u.id, () => sandboxes.stopUser(u.id, { kill: true, by: admin(req).name }));
      await refreshed(res, done ? `Killed ${u.name}’s sandbox.` : `${u.name} has no sandbox running.`);
    },
    async stopIdle(req, res) {
      const n = await audited(req, 'sandbox/stop_idle', null, () => sandboxes.stopIdle(admin(req).name));
      await refreshed(res, `Stopped ${n} idle sandbox${n === 1 ? '' : 'es'}.`);
    },
    async removeOrphans(req, res) {
      const n = await audited(req, 'orphans/remove', null, () => sandboxes.removeOrphans());
      notice(res, `Removed ${n} container${n === 1 ? '' : 's'} or runtime process${n === 1 ? '' : 'es'} nothing tracked.`);
    },

    async users(req, res) {
      renderPage(res, 'admin/users', page(req), { title: 'Admin · users', tab: 'users', users: await usersView({ config, db, monitor }), team: config.maxPermissions || config.defaultPermissions, defaultPermissions: config.defaultPermissions });
    },
    async disableUser(req, res) {
      const u = await userById(req.params.id);
      notSelf(req, u, 'disable');
      await audited(req, 'user/disable', u.id, () => disableUser(userParts, u, admin(req).name));
      await usersAnswer(res, `${u.name} is disabled: their sessions, tokens and sandbox stopped working. Nothing of theirs was deleted.`);
    },
    async enableUser(req, res) {
      const u = await userById(req.params.id);
      await audited(req, 'user/enable', u.id, () => enableUser(userParts, u));
      const github = stillRefused(u);
      await usersAnswer(res, github ? `${u.name} is enabled, but ${github}.` : `${u.name} is enabled again.`);
    },
    async setPermissions(req, res) {
      const u = await userById(req.params.id);
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
        await setUserPermissions(db, u.name, value);
        // The container follows the ceiling: the next run starts one made for the new ceiling.
      });
      await usersAnswer(res, value ? `${u.name}’s ceiling is now ${value}; it applies from their next run.` : `${u.name} has the default ceiling again; it applies from their next run.`);
    },
    async deleteUser(req, res) {
      const u = await userById(req.params.id);
      notSelf(req, u, 'delete');
      if (str(req.body.confirm) !== u.name) throw new GatewayError(`Type the user’s name (${u.name}) to delete them.`, { reason: 'invalid_request', status: 400 });
      const { storesLeft } = await audited(req, 'user/delete', u.id, () => deleteUser({ ...userParts, workspaces: sandboxes }, u, admin(req).name));
      const later =
        storesLeft === undefined
          ? ' Whether copies of their files are left on other sandbox hosts could not be checked now: each host removes them when one of its gateways next looks (within five minutes).'
          : storesLeft
            ? ` Copies of their files are still on ${storesLeft === 1 ? 'a sandbox host' : `${storesLeft} sandbox hosts`} whose gateways could not remove them now: they are removed when one of its gateways starts again or next looks.`
            : '';
      await usersAnswer(res, `${u.name} and their data are deleted.${later}`);
    },

    async tokens(req, res) {
      renderPage(res, 'admin/tokens', page(req), { title: 'Admin · tokens', tab: 'tokens', ...(await tokensView(db, pageNumber(req.query.page))) });
    },
    async revokeToken(req, res) {
      const id = Number(req.params.id);
      const t = Number.isSafeInteger(id) ? await getToken(db, id) : undefined;
      if (!t) throw new GatewayError('No such token.', { reason: 'not_found', status: 404 });
      await audited(req, 'token/revoke', t.userId, async () => {
        await revokeToken(db, id);
        await dropPiiScope(db, tokenScopeRef(t.userId, id));
      });
      res.type('html').send(renderPartial('admin/token-rows', await tokensView(db, pageNumber(req.query.page))));
    },

    async audit(req, res) {
      const { form, query } = await auditFilter(db, req.query);
      const before = Number(req.query.before) || undefined;
      const entries = await queryAudit(db, { ...query, before, limit: AUDIT_PAGE + 1 });
      const who = await userNames(db);
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
        users: [...who.values()],
      });
    },
    async auditCsv(req, res) {
      const { query } = await auditFilter(db, req.query);
      const who = await userNames(db);
      const cell = (v: string) => (/[",\n\r]/.test(v) || /^[=+\-@\t]/.test(v) ? `"${(/^[=+\-@\t]/.test(v) ? `'${v}` : v).replace(/"/g, '""')}"` : v);
      const head = ['id', 'time', 'user', 'via', 'token', 'kind', 'action', 'tool', 'target', 'outcome', 'error', 'ms', 'shape'] as const;
      res.set({ 'Content-Type': 'text/csv; charset=utf-8', 'Content-Disposition': `attachment; filename="sandgate-audit-${new Date().toISOString().slice(0, 10)}.csv"` });
      res.write(`${head.join(',')}\n`);
      let before: number | undefined;
      let written = 0;
      while (written < AUDIT_CSV_MAX) {
        const batch = await queryAudit(db, { ...query, before, limit: 1000 });
        if (!batch.length) break;
        res.write(batch.map((e) => auditRow(e, who)).map((r) => head.map((h) => cell(String(r[h]))).join(',')).join('\n') + '\n');
        written += batch.length;
        before = batch.at(-1)!.id;
      }
      res.end();
    },

    async usage(req, res) {
      renderPage(res, 'admin/usage', page(req), { title: 'Admin · usage', tab: 'usage', periods: Object.keys(PERIODS), ...(await usageOf(deps, str(req.query.period))) });
    },

    async network(req, res) {
      renderPage(res, 'admin/network', page(req), { title: 'Admin · network', tab: 'network', ...(await networkView(deps.db)) });
    },

    async upstream(req, res) {
      renderPage(res, 'admin/upstream', page(req), { title: 'Admin · upstream servers', tab: 'upstream', servers: await upstreamView(deps) });
    },
    async reconnectUpstream(req, res) {
      const name = str(req.params.name);
      if (!deps.upstream.hub.isServer(name)) throw new GatewayError('No such server.', { reason: 'not_found', status: 404 });
      const n = await audited(req, 'upstream/reconnect', null, () => deps.upstream.hub.reconnect(name));
      notice(res, `Closed ${n} connection${n === 1 ? '' : 's'} of ${name}; the next call connects afresh.`);
    },

    async apiSandboxes(_req, res) {
      const snap = await monitor.sample();
      res.json({ sampledAt: snap.at, runtime: snap.runtime, sandboxes: snap.rows });
    },
    async apiUsers(_req, res) {
      res.json({ users: await usersView({ config, db, monitor }) });
    },
    async apiUsage(req, res) {
      const u = await usageOf(deps, str(req.query.period));
      res.json({ period: u.period, since: u.since, until: u.until, executions: u.executions.map(({ bar: _b, cpu: _c, run: _r, ...e }) => e), models: u.models.map(({ bar: _b, ...m }) => m) });
    },
  };
}
