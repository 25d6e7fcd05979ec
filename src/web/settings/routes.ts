/**
 * The settings page: the user's own model provider keys and their credentials for
 * per-user upstream MCP servers (write-only: stored encrypted, never shown again,
 * replaceable and removable), and the model their new conversations start with.
 */
import express, { type Request, type Router } from 'express';
import type { Agent } from '../../agent/agent.js';
import { KEYED_PROVIDERS, providerLabel, type ProviderId } from '../../agent/models.js';
import type { ProviderKeys } from '../../agent/provider-keys.js';
import { GatewayError } from '../../errors.js';
import type { Db } from '../../store/store.js';
import { setDefaultModel, type User } from '../../accounts/accounts.js';
import type { Upstream } from '../../upstream/index.js';
import { userOf, type WebAuth } from '../sign-in/routes.js';
import { renderPage, renderPartial } from '../render.js';

export function settingsRoutes(deps: { db: Db; agent: Agent; keys: ProviderKeys; upstream: Upstream; auth: WebAuth }): Router {
  const { db, agent, keys, upstream, auth } = deps;
  const router = express.Router();
  const body = express.urlencoded({ extended: false, limit: '16kb' });
  const owner = (u: User) => ({ userId: u.id, name: u.name });

  const providersFor = (u: User) =>
    KEYED_PROVIDERS.map((p) => ({ id: p, label: providerLabel(p), set: keys.has(u.id, p), team: agent.catalog.teamModels().some((m) => m.provider === p) }));
  const serversFor = async (u: User) =>
    (await upstream.hub.serversFor(owner(u))).filter((s) => s.userCredentials.length).map((s) => ({ name: s.name, credentials: upstream.hub.credentialStatus(owner(u), s.name) }));
  const field = (req: Request, name: string) => {
    const v = (req.body as Record<string, unknown>)[name];
    return typeof v === 'string' ? v : '';
  };

  router.get('/settings', auth.requireUser, async (req, res) => {
    const user = userOf(req);
    renderPage(res, 'settings', { user, csrf: auth.csrfToken(req) }, {
      models: agent.catalog.availableTo(user.id),
      defaultModel: user.defaultModel ?? agent.catalog.defaultFor(user.id)?.id,
      providers: providersFor(user),
      servers: await serversFor(user),
    });
  });

  router.post('/settings/model', auth.requireUser, body, auth.csrf, (req, res) => {
    const user = userOf(req);
    const model = agent.modelFor(user, field(req, 'model'));
    setDefaultModel(db, user.id, model.id);
    res.type('html').send('Saved.');
  });

  const provider = (p: string): ProviderId => {
    if (!(KEYED_PROVIDERS as readonly string[]).includes(p)) throw new GatewayError('No such provider.', { reason: 'not_found', status: 404 });
    return p as ProviderId;
  };

  router.post('/settings/keys/:provider', auth.requireUser, body, auth.csrf, (req, res) => {
    const user = userOf(req);
    const p = provider(req.params.provider as string);
    keys.set(user.id, p, field(req, 'key'));
    res.type('html').send(renderPartial('settings-keys', { providers: providersFor(user), saved: `Your ${providerLabel(p)} key is saved.` }));
  });

  router.post('/settings/keys/:provider/delete', auth.requireUser, body, auth.csrf, (req, res) => {
    const user = userOf(req);
    const p = provider(req.params.provider as string);
    keys.delete(user.id, p);
    res.type('html').send(renderPartial('settings-keys', { providers: providersFor(user), saved: `Your ${providerLabel(p)} key is removed.` }));
  });

  router.post('/settings/credentials', auth.requireUser, body, auth.csrf, async (req, res) => {
    const user = userOf(req);
    await upstream.hub.setUserCredential(owner(user), field(req, 'server'), field(req, 'name'), field(req, 'value'));
    res.type('html').send(renderPartial('settings-credentials', { servers: await serversFor(user), savedCredential: `${field(req, 'name')} for ${field(req, 'server')} is saved.` }));
  });

  router.post('/settings/credentials/delete', auth.requireUser, body, auth.csrf, async (req, res) => {
    const user = userOf(req);
    // Only a server this user may use: another's name is answered like a missing one.
    if (!(await upstream.hub.serversFor(owner(user))).some((s) => s.name === field(req, 'server'))) throw new GatewayError('No such server.', { reason: 'not_found', status: 404 });
    await upstream.hub.deleteUserCredential(owner(user), field(req, 'server'), field(req, 'name'));
    res.type('html').send(renderPartial('settings-credentials', { servers: await serversFor(user), savedCredential: `${field(req, 'name')} for ${field(req, 'server')} is removed.` }));
  });

  return router;
}
