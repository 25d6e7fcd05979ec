/**
 * What the tokens templates (views/web/tokens) are given: the user's tokens as the page
 * lists them (the active ones, then the RECENT_INACTIVE_SHOWN newest revoked or expired
 * ones), what the gateway stores for the user against their quota, and the ready-to-paste
 * client configurations for a new token.
 */
import type { Config } from '../../config.js';
import { utcText } from '../../dates.js';
import { storeUsage } from '../../limits/store-quota.js';
import type { Db } from '../../store/store.js';
import { formatBytes } from '../../text.js';
import { countActiveTokens, listTokens, tokenState } from '../../tokens/tokens.js';
import { listGrants } from '../../oauth/grants.js';

/** Revoked and expired tokens the page lists after the active ones (the newest); `sandgate tokens list --all` lists every one kept. */
export const RECENT_INACTIVE_SHOWN = 10;

/** A stored time as text: '–' for none, "unknown" for a value no date can hold (an old install may have stored one). */
const day = (ms: number | null) => (ms === null ? '–' : utcText(ms, 'minute'));

/** The client configurations docs/mcp-clients.md describes, for this gateway and token. */
export function clientConfigs(mcpUrl: string, token: string): { claudeCode: string; claudeDesktop: string; cursor: string } {
  return {
    claudeCode: `claude mcp add --transport http --scope user sandgate ${mcpUrl} --header "Authorization: Bearer ${token}"`,
    claudeDesktop: JSON.stringify({ mcpServers: { sandgate: { command: 'npx', args: ['-y', 'mcp-remote', mcpUrl, '--header', 'Authorization:${SANDGATE_AUTH}'], env: { SANDGATE_AUTH: `Bearer ${token}` } } } }, null, 2),
    cursor: JSON.stringify({ mcpServers: { sandgate: { url: mcpUrl, headers: { Authorization: `Bearer ${token}` } } } }, null, 2),
  };
}

/** The token list (views/web/tokens/list.eta). */
export async function tokenList(db: Db, userId: number, now = Date.now()) {
  const limit = (await countActiveTokens(db, userId, now)) + RECENT_INACTIVE_SHOWN;
  const tokens = (await listTokens(db, { userId, includeRevoked: true, activeFirst: true, now, limit, kind: 'personal' })).map((t) => ({
    id: t.id,
    name: t.name,
    created: day(t.createdAt),
    lastUsed: day(t.lastUsedAt),
    expires: t.expiresAt === null ? 'never' : day(t.expiresAt),
    state: tokenState(t),
  }));
  // Apps connected with OAuth (src/oauth/): each a grant, disconnected like a token is revoked.
  const apps = (await listGrants(db, userId)).map((g) => ({ id: g.id, name: g.name, clientId: g.clientId, created: day(g.createdAt), lastUsed: day(g.lastUsedAt) }));
  return { tokens, apps, recentInactive: RECENT_INACTIVE_SHOWN };
}

/** What the gateway stores for the user (views/web/tokens/storage.eta), with a message after an action. */
export async function storageView(db: Db, config: Config, userId: number, message?: string) {
  const u = await storeUsage(db, config, userId);
  return {
    used: formatBytes(u.total),
    quota: formatBytes(u.quota),
    web: formatBytes(u.web),
    api: formatBytes(u.api),
    personalData: formatBytes(u.personalData),
    tokenPersonalData: u.tokenPersonalData ? formatBytes(u.tokenPersonalData) : undefined,
    ttlHours: config.piiTtlHours,
    full: u.total >= u.quota,
    hasApi: u.api > 0,
    days: config.apiConversationDays,
    message,
  };
}
