/**
 * Composes a gateway from its configuration: store, sandboxes, upstream MCP servers,
 * the PII boundary and the HTTP app. main.ts serves it; tests build the same thing.
 */
import type express from 'express';
import type Docker from 'dockerode';
import { createApp } from './app.js';
import { recordAudit } from './audit/audit.js';
import type { Config } from './config.js';
import type { Logger } from './logger.js';
import { IDENTITY_BOUNDARY, type ModelBoundary } from './pii/boundary.js';
import { mcpRouter } from './http/mcp-endpoint.js';
import { createPiiBoundary, dropInactiveTokenScopes } from './pii/pii-boundary.js';
import { createDetector, detectorOptions, loadOrCreatePiiKey, parsePiiSettings, PiiVault, preloadWordKnowledge, ttlMs } from './pii/index.js';
import { createSandboxManager, dockerClient } from './sandboxes/index.js';
import type { SandboxManager } from './sandboxes/manager.js';
import { dockerReachable, imagePresent, runtimePreflight, type PreflightResult } from './sandboxes/preflight.js';
import { openStore, type Db, type Store } from './store/store.js';
import { createUpstream, type Upstream } from './upstream/index.js';

export interface Gateway {
  config: Config;
  store: Store;
  manager: SandboxManager;
  upstream: Upstream;
  vault?: PiiVault;
  boundary: ModelBoundary;
  /** Weaker-than-default choices found while composing (e.g. an upstream server on the host network), to be said loudly at start. */
  warnings: string[];
  app: express.Express;
  docker: Docker;
  /** Runs the sandbox preflight, adopts earlier containers and fills the warm pool. */
  start(): Promise<PreflightResult>;
  /** `stopAll` also stops user sandboxes (otherwise the next start adopts them). */
  close(opts?: { stopAll?: boolean; releaseVolumes?: boolean }): Promise<void>;
}

/** The PII vault and the model boundary over it, as configured; none when SANDGATE_PII_TOKENIZE=false. */
export function piiLayer(config: Config, db: Db): { vault: PiiVault; boundary: ModelBoundary } | undefined {
  if (!config.piiTokenize) return undefined;
  const settings = parsePiiSettings({ entities: config.piiEntities, allow: config.piiAllow, ttlHours: String(config.piiTtlHours) });
  const vault = new PiiVault(db, loadOrCreatePiiKey(config.dataDir, config.piiKey || undefined), {
    ttlMs: ttlMs(settings),
    detector: createDetector(detectorOptions(settings)),
  });
  return { vault, boundary: createPiiBoundary(vault) };
}

/** How often expired vault entries are purged. */
const PURGE_INTERVAL_MS = 60 * 60 * 1000;

export function createGateway(config: Config, logger: Logger): Gateway {
  const store = openStore(config.dataDir);
  const upstream = createUpstream({ config, db: store.db, audit: (e) => recordAudit(store.db, e), logger });
  const manager = createSandboxManager(config, store.db, logger, { prepareTools: upstream.prepareTools });
  manager.setBridgeHandler(upstream.bridgeHandler);

  const pii = piiLayer(config, store.db);
  const vault = pii?.vault;
  const boundary = pii?.boundary ?? IDENTITY_BOUNDARY;

  const docker = dockerClient(config);
  let preflight: PreflightResult = { ok: false, detail: 'not run yet' };
  const runPreflight = async () => {
    const reach = await dockerReachable(docker);
    preflight = reach.ok ? await runtimePreflight(docker, config).catch((e: Error) => ({ ok: false, detail: e.message })) : reach;
    if (!preflight.ok) logger.error({ detail: preflight.detail }, 'sandbox preflight failed');
    return preflight;
  };

  const app = createApp({
    config,
    store,
    logger,
    readiness: {
      docker: () => dockerReachable(docker),
      runtime: async () => (preflight.ok ? preflight : runPreflight()),
      image: () => imagePresent(docker, config.sandboxImage),
    },
    mount: (a) => a.use(mcpRouter({ config, db: store.db, logger, sandboxes: manager, catalog: upstream.catalog, boundary })),
  });

  let purge: NodeJS.Timeout | undefined;
  return {
    config,
    store,
    manager,
    upstream,
    vault,
    boundary,
    warnings: upstream.warnings,
    app,
    docker,
    async start() {
      if (vault) {
        preloadWordKnowledge();
        const sweep = () => {
          dropInactiveTokenScopes(store.db, vault);
          vault!.purgeExpired();
        };
        sweep();
        purge = setInterval(sweep, PURGE_INTERVAL_MS);
        purge.unref();
      }
      await runPreflight();
      if (preflight.ok) await manager.init();
      return preflight;
    },
    async close(opts = {}) {
      if (purge) clearInterval(purge);
      await manager.shutdown(opts);
      await upstream.close();
      store.close();
    },
  };
}
