/**
 * What the settings templates (views/web/settings) are given: the keyed model providers
 * with whether the user has set a key (and whether the team has models of it), and the
 * upstream servers that take credentials of the user's own, with which are set.
 */
import type { Agent } from '../../agent/agent.js';
import { KEYED_PROVIDERS, providerLabel } from '../../agent/models.js';
import type { ProviderKeys } from '../../agent/provider-keys.js';
import type { User } from '../../accounts/accounts.js';
import type { Upstream } from '../../upstream/index.js';
import type { EgressSecrets } from '../../egress/index.js';

export interface SettingsViewDeps {
  agent: Agent;
  keys: ProviderKeys;
  upstream: Upstream;
  secrets: EgressSecrets;
}

/** The user as the upstream hub knows an owner. */
export const ownerOf = (u: User) => ({ userId: u.id, name: u.name });

/** views/web/settings/keys.eta */
export const providersFor = (deps: SettingsViewDeps, u: User) =>
  Promise.all(
    KEYED_PROVIDERS.map(async (p) => ({ id: p, label: providerLabel(p), set: await deps.keys.has(u.id, p), team: deps.agent.catalog.teamModels().some((m) => m.provider === p) })),
  );

/** views/web/settings/credentials.eta */
export const serversFor = async (deps: SettingsViewDeps, u: User) =>
  Promise.all(
    (await deps.upstream.hub.serversFor(ownerOf(u))).filter((s) => s.userCredentials.length).map(async (s) => ({ name: s.name, credentials: await deps.upstream.hub.credentialStatus(ownerOf(u), s.name) })),
  );

/** views/web/settings/page.eta */
export async function settingsView(deps: SettingsViewDeps, user: User) {
  return {
    models: await deps.agent.catalog.availableTo(user.id),
    defaultModel: user.defaultModel ?? (await deps.agent.catalog.defaultFor(user.id))?.id,
    providers: await providersFor(deps, user),
    servers: await serversFor(deps, user),
    secrets: await deps.secrets.list(user.id),
  };
}
