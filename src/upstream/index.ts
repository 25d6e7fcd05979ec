/**
 * Upstream MCP servers, composed: read the admin's config, open the credential store,
 * and hand back the pieces the rest of the gateway plugs in:
 *
 * - `bridgeHandler` → the sandbox manager (answers tools/call, tools/list, tools/describe
 *   from code in a sandbox),
 * - `prepareTools` (or `toolsDirFor`) → the sandbox manager (the host directory mounted
 *   read-only at /tools),
 * - `catalog` → the MCP endpoint's search_tools,
 * - `hub` → admin pages and credential forms.
 */
import path from 'node:path';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { ToolCatalog } from '../mcp/catalog.js';
import type { BridgeHandler, SandboxOwner } from '../sandboxes/types.js';
import type { Db } from '../store/store.js';
import { createBridgeHandler, type UpstreamAudit } from './bridge.js';
import { createToolCatalog } from './catalog.js';
import { loadUpstreamConfig, upstreamConfigFile } from './config.js';
import { createCredentialStore, loadOrCreateCredentialsKey, type CredentialStore } from './credentials.js';
import { UpstreamHub } from './hub.js';
import { createToolsDirs } from './tools-dir.js';
import { rateLimiterFor } from '../limits/store-rate-limit.js';
import { UpstreamConfigError } from './config.js';
import { uidBlockOf, upstreamIdentity } from './identities.js';
import { unreachableAncestor } from './isolation.js';
import { gatewayIdFor } from '../sandboxes/index.js';

export { UPSTREAM_MIGRATION } from './schema.js';
export { UpstreamHub, type HubTool, type ToolListing, type ConnectionStatus } from './hub.js';
export { UpstreamError, type UpstreamErrorReason } from './errors.js';
export { UpstreamConfigError, parseUpstreamConfig, loadUpstreamConfig, upstreamConfigFile, type UpstreamServerConfig, type NetworkPolicy } from './config.js';
export { createBridgeHandler, type UpstreamAudit, type UpstreamAuditEntry } from './bridge.js';
export { createToolCatalog } from './catalog.js';
export { createToolsDirs, type ToolsDirs } from './tools-dir.js';
export { createCredentialStore, loadOrCreateCredentialsKey, type CredentialStore } from './credentials.js';

export interface Upstream {
  hub: UpstreamHub;
  /** Weaker-than-default choices in the config (a server on the host's network), to be said loudly at start. */
  warnings: string[];
  catalog: ToolCatalog;
  toolsDirFor(owner: SandboxOwner): Promise<string>;
  /** The sandbox manager's `prepareTools(dir, owner)`. */
  prepareTools(dir: string, owner: SandboxOwner | undefined): Promise<void>;
  bridgeHandler: BridgeHandler;
  /** Users' stored credentials (sealed), which egress secrets share. */
  credentials: CredentialStore;
  close(): Promise<void>;
}

export interface UpstreamDeps {
  config: Pick<Config, 'dataDir' | 'mcpServersFile' | 'upstreamHomeDir'> & Partial<Pick<Config, 'rateLimitPerMin' | 'rateLimitBurst' | 'sandboxDriver'>>;
  /** The store's database, migrated with UPSTREAM_MIGRATION. */
  db: Db;
  audit: UpstreamAudit;
  logger?: Logger;
  /** GitHub teams (`org/team`) of a user, for allowTeams. */
  teamsOf?: (owner: SandboxOwner) => Promise<string[]>;
  /** Environment for `${NAME}` in the config file (default: process.env). */
  env?: Record<string, string | undefined>;
  /** The gateway's uid (default: the process's). */
  uid?: number;
}

/** Throws UpstreamConfigError when the config file is invalid; a missing file means no servers. */
export function createUpstream(deps: UpstreamDeps): Upstream {
  const servers = loadUpstreamConfig(upstreamConfigFile(deps.config), deps.env);
  const credentials = createCredentialStore(deps.db, loadOrCreateCredentialsKey(deps.config.dataDir));
  const logger = deps.logger?.child({ module: 'upstream' });
  const homeDir = path.join(path.resolve(deps.config.upstreamHomeDir), gatewayIdFor(deps.config.dataDir));
  const uid = deps.uid ?? process.getuid?.();
  // On a cluster the gateway runs as a user of its own beside its service account token and
  // the installation's keys: a stdio server would run as that same user (a user namespace
  // gives it no other), and could read both.
  if (servers.some((s) => s.transport.type === 'stdio') && deps.config.sandboxDriver === 'kubernetes' && uid !== 0) {
    const names = servers.filter((s) => s.transport.type === 'stdio').map((s) => s.name);
    throw new UpstreamConfigError(
      `stdio upstream servers (${names.join(', ')}) cannot run in a gateway on a cluster: they would run as the gateway's own user, who holds its service account token and keys. ` +
        'Run each as an HTTP MCP server of its own (a Deployment and a Service) and name it by URL in the MCP servers file',
    );
  }
  if (servers.some((s) => s.transport.type === 'stdio') && uid === 0) {
    const blocked = unreachableAncestor(homeDir);
    if (blocked) {
      throw new UpstreamConfigError(
        `stdio upstream servers run as users of their own and must reach ${homeDir}, but ${blocked} does not let other users pass ` +
          `(chmod o+x ${blocked}), or set SANDGATE_UPSTREAM_HOME_DIR to a folder they can reach`,
      );
    }
  }
  const hub = new UpstreamHub({
    servers,
    dataDir: deps.config.dataDir,
    homeDir,
    identityOf: (connection) => upstreamIdentity(deps.db, connection, uidBlockOf(gatewayIdFor(deps.config.dataDir))),
    credentials,
    ...(deps.teamsOf ? { teamsOf: deps.teamsOf } : {}),
    ...(logger ? { logger } : {}),
    idleCloseMs: 10 * 60_000,
  });
  const dirs = createToolsDirs({ hub, dataDir: deps.config.dataDir, ...(logger ? { logger } : {}) });
  const warnings = servers
    .filter((s) => s.network.kind === 'host')
    .map((s) => `UNSAFE: upstream server "${s.name}" runs on the host's own network (sandgate.network "host"): code in any sandbox that may call it reaches what the host reaches, the gateway's own port included.`);
  return {
    hub,
    warnings,
    credentials,
    catalog: createToolCatalog(hub),
    toolsDirFor: dirs.toolsDirFor,
    prepareTools: dirs.prepareTools,
    bridgeHandler: createBridgeHandler(hub, deps.audit, {
      ...(logger ? { logger } : {}),
      ...(deps.config.rateLimitPerMin ? { rateLimiter: rateLimiterFor(deps.db, { perMinute: deps.config.rateLimitPerMin, burst: deps.config.rateLimitBurst ?? 60 }, 'upstream') } : {}),
    }),
    async close() {
      dirs.close();
      await hub.close();
    },
  };
}
