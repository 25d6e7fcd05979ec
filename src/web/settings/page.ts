/**
 * The settings page: the user's own model provider keys and their credentials for
 * per-user upstream MCP servers (write-only: stored encrypted, never shown again,
 * replaceable and removable), and the model their new conversations start with. The
 * handlers are placed, with their guards, by the route table (src/routes.ts); the
 * template data comes from ./view.ts.
 */
import type { Request, RequestHandler } from 'express';
import type { Agent } from '../../agent/agent.js';
import { KEYED_PROVIDERS, providerLabel, type ProviderId } from '../../agent/models.js';
import type { ProviderKeys } from '../../agent/provider-keys.js';
import { GatewayError } from '../../errors.js';
import type { Db } from '../../store/store.js';
import { setDefaultModel } from '../../accounts/accounts.js';
import type { Upstream } from '../../upstream/index.js';
import { userOf, type WebSessions } from '../../auth/session-middleware.js';
import { renderPage, renderPartial } from '../render.js';
import { ownerOf, providersFor, serversFor, settingsView } from './view.js';

export interface SettingsPage {
  /** GET /settings */
  index: RequestHandler;
  /** POST /settings/model: the model new conversations start with. */
  setModel: RequestHandler;
  /** POST /settings/keys/:provider */
  saveKey: RequestHandler;
  /** POST /settings/keys/:provider/delete */
  deleteKey: RequestHandler;
  /** POST /settings/credentials */
  saveCredential: RequestHandler;
  /** POST /settings/credentials/delete */
  deleteCredential: RequestHandler;
}

const field = (req: Request, name: string) => {
  const v = (req.body as Record<string, unknown>)[name];
  return typeof v === 'string' ? v : '';
};

const provider = (p: string): ProviderId => {
  if (!(KEYED_PROVIDERS as readonly string[]).includes(p)) throw new GatewayError('No such provider.', { reason: 'not_found', status: 404 });
  return p as ProviderId;
};

export function settingsPage(deps: { db: Db; agent: Agent; keys: ProviderKeys; upstream: Upstream; auth: WebSessions }): SettingsPage {
  const { db, agent, keys, upstream, auth } = deps;

  return {
    index: async (req, res) => {
      const user = userOf(req);
      renderPage(res, 'settings/page', { user, csrf: auth.csrfToken(req) }, await settingsView(deps, user));
    },

    setModel: async (req, res) => {
      const user = userOf(req);
      const model = await agent.modelFor(user, field(req, 'model'));
      await setDefaultModel(db, user.id, model.id);
      res.type('html').send('Saved.');
    },

    saveKey: async (req, res) => {
      const user = userOf(req);
      const p = provider(req.params.provider as string);
      await keys.set(user.id, p, field(req, 'key'));
      res.type('html').send(renderPartial('settings/keys', { providers: await providersFor(deps, user), saved: `Your ${providerLabel(p)} key is saved.` }));
    },

    deleteKey: async (req, res) => {
      const user = userOf(req);
      const p = provider(req.params.provider as string);
      await keys.delete(user.id, p);
      res.type('html').send(renderPartial('settings/keys', { providers: await providersFor(deps, user), saved: `Your ${providerLabel(p)} key is removed.` }));
    },

    saveCredential: async (req, res) => {
      const user = userOf(req);
      await upstream.hub.setUserCredential(ownerOf(user), field(req, 'server'), field(req, 'name'), field(req, 'value'));
      res.type('html').send(renderPartial('settings/credentials', { servers: await serversFor(deps, user), savedCredential: `${field(req, 'name')} for ${field(req, 'server')} is saved.` }));
    },

    deleteCredential: async (req, res) => {
      const user = userOf(req);
      // Only a server this user may use: another's name is answered like a missing one.
      if (!(await upstream.hub.serversFor(ownerOf(user))).some((s) => s.name === field(req, 'server'))) throw new GatewayError('No such server.', { reason: 'not_found', status: 404 });
      await upstream.hub.deleteUserCredential(ownerOf(user), field(req, 'server'), field(req, 'name'));
      res.type('html').send(renderPartial('settings/credentials', { servers: await serversFor(deps, user), savedCredential: `${field(req, 'name')} for ${field(req, 'server')} is removed.` }));
    },
  };
}
