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
import type { EgressSecrets } from '../../egress/index.js';
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
  /** POST /settings/secrets: a secret the egress proxy adds to the user's code's requests for one host. */
  saveSecret: RequestHandler;
  /** POST /settings/secrets/delete */
  deleteSecret: RequestHandler;
}

const field = (req: Request, name: string) => {
  const v = (req.body as Record<string, unknown>)[name];
  return typeof v === 'string' ? v : '';
};

const provider = (p: string): ProviderId => {
  if (!(KEYED_PROVIDERS as readonly string[]).includes(p)) throw new GatewayError('No such provider.', { reason: 'not_found', status: 404 });
  return p as ProviderId;
};

export function settingsPage(deps: { db: Db; agent: Agent; keys: ProviderKeys; upstream: Upstream; secrets: EgressSecrets; auth: WebSessions }): SettingsPage {
  const { db, agent, keys, upstream, secrets, auth } = deps;
  const secretsPartial = async (user: { id: number }, saved: string) => renderPartial('settings/secrets', { secrets: await secrets.list(user.id), savedSecret: saved });

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

    saveSecret: async (req, res) => {
      const user = userOf(req);
      let saved;
      try {
        saved = await secrets.set(user.id, field(req, 'name').trim(), {
          host: field(req, 'host').trim(),
          value: field(req, 'value'),
          ...(field(req, 'header').trim() && { header: field(req, 'header').trim() }),
          ...(field(req, 'port').trim() && { port: Number(field(req, 'port').trim()) }),
          ...(req.body && typeof (req.body as Record<string, unknown>).prefix === 'string' && { prefix: field(req, 'prefix') }),
        });
      } catch (e) {
        throw new GatewayError(e instanceof Error ? e.message : String(e), { reason: 'invalid_request', status: 400 });
      }
      res.type('html').send(await secretsPartial(user, `${saved.name} for ${saved.host} is saved: requests your code makes to http://${saved.host}/ carry it.`));
    },

    deleteSecret: async (req, res) => {
      const user = userOf(req);
      const host = field(req, 'host').trim().toLowerCase();
      const removed = await secrets.remove(user.id, host);
      res.type('html').send(await secretsPartial(user, removed ? `Your secret for ${host} is removed.` : `You had no secret for ${host}.`));
    },
  };
}
