/**
 * Composes a gateway from its configuration and its parts: store, sandboxes (through a
 * SandboxDriver), upstream MCP servers, the PII boundary, the tools, and the HTTP app.
 * main.ts serves it; tests build the same thing, giving a part of their own only where a
 * failure cannot be produced with the real one (test/support: drivers named after how
 * they fail). The gateway holds no Docker client: whether sandboxes can run is the
 * driver's to say (`health`).
 */
import type http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import type { Duplex } from 'node:stream';
import type express from 'express';
import { Agent } from './agent/agent.js';
import { sweepApiConversations } from './agent/api-history.js';
import { ModelCatalog } from './agent/models.js';
import { ProviderKeys } from './agent/provider-keys.js';
import { createApp } from './app.js';
import { recordAudit } from './audit/audit.js';
import { createEgress } from './egress/index.js';
import type { Config } from './config.js';
import { mcpRouter } from './http/mcp-endpoint.js';
import { openAiApi } from './http/openai-api.js';
import { webApp, type WebApp } from './web/index.js';
import type { Caller } from './auth/caller.js';
import { rateLimiterFor } from './limits/store-rate-limit.js';
import type { Logger } from './logger.js';
import type { McpDeps } from './mcp/context.js';
import { connectInProcess, type InProcessConnection } from './mcp/serve.js';
import { instructionsFor, SERVER_INFO, toolContext } from './mcp/server.js';
import { forCall, textResult } from './mcp/context.js';
import { presentExecution } from './mcp/tools/execute-code.js';
import { Tasks } from './mcp/tasks/tasks.js';
import { IDENTITY_BOUNDARY, type ModelBoundary } from './pii/boundary.js';
import { createDetector, detectorOptions, loadOrCreatePiiKey, parsePiiSettings, PiiVault, preloadWordKnowledge, ttlMs } from './pii/index.js';
import { createPiiBoundary, dropInactiveTokenScopes } from './pii/pii-boundary.js';
import { createDriver, createSandboxManager, createWorkspaceStore, gatewayIdFor } from './sandboxes/index.js';
import { replicaKeyAgrees } from './sandboxes/remote.js';
import { StoreCopyCheck } from './sandboxes/store-copies.js';
import { KeyFileError } from './errors.js';
import { Replica } from './replicas/leases.js';
import { HopSigner, replicaSubkey } from './replicas/hop-auth.js';
import { internalUrlFor } from './replicas/internal-url.js';
import { loadOrCreateKey } from './secrets/key-file.js';
import { internalChannel, internalHop } from './http/internal.js';
import type { SandboxManager } from './sandboxes/manager.js';
import type { HealthCheck, SandboxDriver, WorkspaceStore } from './sandboxes/types.js';
import { ownersOfWorkspaces } from './accounts/accounts.js';
import { SkillsDir } from './skills/skills.js';
import { openStore, type Db, type Store } from './store/store.js';
import { MIGRATIONS } from './migrations.js';
import { purgeOldTokens } from './tokens/tokens.js';
import { ClientStore } from './oauth/clients.js';
import { MemoryRateLimiter } from './limits/rate-limit.js';
import { purgeOAuth } from './oauth/grants.js';
import { oauthServer } from './http/oauth.js';
import { createUpstream, type Upstream } from './upstream/index.js';
import * as metrics from './telemetry/metrics.js';
import { startTracing } from './telemetry/traces.js';

/** What a gateway is built from, besides its configuration; each defaults to the real one. */
export interface GatewayParts {
  /** Starts and finds sandboxes: Docker with runsc by default. */
  driver?: SandboxDriver;
  /** How soon a failed full health check may run again (default PREFLIGHT_RETRY_MS). */
  preflightRetryMs?: number;
  /** The models the agent offers: from the settings by default. */
  models?: ModelCatalog;
}

/** Whether sandboxes can run, and each check's word. */
export interface Preflight {
  ok: boolean;
  checks: Record<string, HealthCheck>;
}

export interface Gateway {
  config: Config;
  store: Store;
  manager: SandboxManager;
  /** This gateway among the replicas on its Postgres store: heartbeats and the leases on users' sandboxes. Absent on SQLite. */
  replica?: Replica;
  driver: SandboxDriver;
  upstream: Upstream;
  vault?: PiiVault;
  boundary: ModelBoundary;
  /** What the tools are served with, over /mcp and in process alike. */
  tools: McpDeps;
  /** Weaker-than-default choices found while composing (e.g. an upstream server on the host network), to be said loudly at start. */
  warnings: string[];
  app: express.Express;
  /** An MCP client in this process for `caller` (a conversation of the built-in agent): the same tools as /mcp. */
  connect(caller: Caller): Promise<InProcessConnection>;
  /** The built-in agent: conversations, turns, the models offered. */
  agent: Agent;
  /** Users' own provider keys (write-only). */
  providerKeys: ProviderKeys;
  /** The web app (pages, sign-in, the live channel). */
  web: WebApp;
  /** Starts the live channel on the HTTP server that serves `app`. */
  attach(server: http.Server): void;
  /** Runs other replicas sent on their channels and still under way here: a stopping gateway waits for them as for requests. */
  hopRunsUnderway(): number;
  /**
   * Runs the driver's full health check, then adopts earlier sandboxes and fills the warm
   * pool. When the check fails, sandboxes wait: readiness checks again (at most every
   * PREFLIGHT_RETRY_MS, one at a time) and the manager starts the first time it passes.
   */
  start(): Promise<Preflight>;
  /**
   * Before `close`, on a replica of several: takes no new sandbox, says so to the load
   * balancer (/readyz answers 503) and to the other replicas, and hands its sandboxes
   * over as they fall idle, within SANDGATE_DRAIN_SEC. Alone, it returns at once.
   */
  drain(): Promise<void>;
  /**
   * Once it serves, on a replica of several: `onCopied` is told (once) when a replica that
   * started before this one turns up on its workspace store id with another folder (one of
   * the two folders was copied): this one must stop (src/sandboxes/store-copies.ts).
   */
  watchWorkspaceStore(onCopied: (message: string) => void): void;
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

/** How often expired vault entries, and API conversations past SANDGATE_API_CONVERSATION_DAYS, are purged. */
const PURGE_INTERVAL_MS = 60 * 60 * 1000;
/** How soon a failed full health check may run again (readiness asks often; a check starts a container). */
export const PREFLIGHT_RETRY_MS = 10_000;
/** How long a stopping replica serves at least, so the load balancer's health checks see it stopping before its port closes. */
export const DRAIN_GRACE_MS = 3_000;

/** Opens the store (SQLite in the data directory, or SANDGATE_DATABASE_URL) and composes the gateway on it. */
export async function createGateway(config: Config, logger: Logger, parts: GatewayParts = {}): Promise<Gateway> {
  // The data directory holds the keys and every workspace: private, whichever database
  // (SQLite's opening makes it so too), so no other local user or upstream server reads it.
  fs.mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  fs.chmodSync(config.dataDir, 0o700);
  const store = await openStore(config, MIGRATIONS);
  try {
    const { gateway, volumes, hop, storeCopies } = compose(config, logger, parts, store);
    if (gateway.replica && hop) await refuseAnotherReplicaKey(gateway.replica, hop, logger);
    await storeCopies?.atStart();
    // Registered before anything may take a sandbox (an adoption at start, the first run).
    await gateway.replica?.start();
    const replica = gateway.replica;
    const localIds = volumes.localIds?.bind(volumes);
    if (replica && localIds) {
      // The users whose files are on this store's disk: every such workspace recorded as a
      // copy here (deleting its user asks this store too), and this store named as where
      // their files are where no store was named (an earlier release's rows, or a store
      // forgotten while this gateway was silent: recorded again when it is back).
      const recordStore = async () => {
        const owners = await ownersOfWorkspaces(store.db, await localIds());
        await replica.noteCopies(owners.map((o) => o.workspaceId));
        const claimed = await replica.claimFiles(owners.map((o) => o.userId));
        if (claimed) logger.info({ users: claimed, store: volumes.storeId }, 'named this workspace store as where these users\' files are');
      };
      await recordStore();
      replica.onBack(() => void recordStore().catch((e: unknown) => logger.warn({ err: e }, 'recording this workspace store again after a silence failed: tried again after the next silence, and at the next start')));
    }
    return gateway;
  } catch (e) {
    // A part that cannot be built (a damaged key, a bad upstream file): the pool of a Postgres store would keep the process alive.
    await store.close().catch(() => {});
    throw e;
  }
}

/**
 * A gateway whose replica key is not the one of the replicas already running would refuse
 * their runs and have its own refused: it does not start, and says which file to copy.
 * When no live replica answers, it starts (the first of a new key, or others unreachable
 * for now), and its hops say so later if the keys differ.
 */
async function refuseAnotherReplicaKey(replica: Replica, hop: HopSigner, logger: Logger): Promise<void> {
  const others = (await replica.live()).filter((r) => r.id !== replica.id && r.internalUrl).map((r) => ({ id: r.id, internalUrl: r.internalUrl! }));
  if (!others.length) return;
  const r = await replicaKeyAgrees(others, { signer: hop, selfId: replica.id });
  if (r.result === 'differs') {
    throw new KeyFileError(
      `the replica key of this gateway is not the one of the gateway ${r.replica} already running on this database (or their clocks differ by more than 30 s): ` +
        'copy replicas.key from that gateway\'s data directory (or set the same SANDGATE_REPLICA_KEY on every gateway)',
    );
  }
  if (r.result === 'unknown') logger.warn({ replicas: others.map((o) => o.id) }, 'no other replica answered to confirm the replica key is shared: if it is not, runs sent between replicas will fail');
}

function compose(config: Config, logger: Logger, parts: GatewayParts, store: Store): { gateway: Gateway; hop?: HopSigner; volumes: WorkspaceStore; storeCopies?: StoreCopyCheck } {
  const upstream = createUpstream({ config, db: store.db, audit: (e) => recordAudit(store.db, e), logger });
  const driver = parts.driver ?? createDriver(config, logger);
  // This gateway among the replicas on its store. On SQLite it is the only one (one process
  // uses the file): its sandboxes need no lease, and none is taken.
  const volumes = createWorkspaceStore(config, logger);
  const replica =
    store.dialect === 'postgres'
      ? new Replica(
          store.db,
          { internalUrl: null, sandboxHost: os.hostname(), leaseMs: config.replicaLeaseMs, workspaceStore: volumes.storeId, storeLostMs: config.hostLostSec * 1000 },
          logger.child({ module: 'replicas' }),
        )
      : undefined;
  // Runs sent between replicas are signed, and live updates passing through the database
  // sealed, with keys derived from the installation's replica key.
  const replicaKey = replica && loadOrCreateKey(config.dataDir, 'replicas.key', { configured: config.replicaKey || undefined, setting: 'SANDGATE_REPLICA_KEY' });
  const hop = replicaKey && new HopSigner({ key: replicaSubkey(replicaKey, 'internal hop') });
  // Whether another live replica on this workspace store id has another folder (a copied one): at start, and while it runs.
  const storeCopies = replica && hop && volumes.probes ? new StoreCopyCheck(replica, hop, volumes, logger.child({ module: 'replicas' })) : undefined;
  const liveKey = replicaKey && replicaSubkey(replicaKey, 'live updates');
  const manager = createSandboxManager(config, store.db, logger, { driver, volumes, prepareTools: upstream.prepareTools, replica, hop });
  manager.setBridgeHandler(upstream.bridgeHandler);
  // Its sandboxes in the metrics' gauges, read at each scrape.
  const unobserve = metrics.observe(() => manager.counts());
  // Traces only when asked for: otherwise no span is ever made.
  const stopTracing = config.tracesUrl
    ? startTracing({ url: config.tracesUrl, headers: config.tracesHeaders, sampleRatio: config.tracesSampleRatio, instance: replica?.id ?? os.hostname(), version: SERVER_INFO.version })
    : undefined;
  const egress = createEgress({ config, db: store.db, credentials: upstream.credentials, audit: (e) => recordAudit(store.db, e), logger });
  manager.setEgressHandler(egress.handler);

  const pii = piiLayer(config, store.db);
  const vault = pii?.vault;
  const boundary = pii?.boundary ?? IDENTITY_BOUNDARY;
  const tools: McpDeps = { config, db: store.db, logger, sandboxes: manager, skills: new SkillsDir(), catalog: upstream.catalog, boundary };
  // Long MCP runs as tasks, followed by this gateway (and taken over from one that stopped).
  const tasks = (tools.tasks = new Tasks({
    db: store.db,
    logger,
    sandboxes: manager,
    gatewayId: replica?.id ?? gatewayIdFor(config.dataDir),
    present: (caller, version, result) => presentExecution(forCall(toolContext(tools, caller, version)), result),
    presentError: (caller, version, message) => textResult(forCall(toolContext(tools, caller, version)), `[error] ${message}`, [], 'interrupted'),
  }));
  const connect = (caller: Caller) => connectInProcess(tools, caller);
  const providerKeys = new ProviderKeys(store.db, config.dataDir);
  const models = parts.models ?? new ModelCatalog(config, providerKeys);
  const agent = new Agent({ config, db: store.db, logger, boundary, catalog: models, connect, instructions: (caller) => instructionsFor(toolContext(tools, caller)), prepare: (user) => manager.prepare({ userId: user.id, name: user.name }), replica });

  let preflight: Preflight = { ok: false, checks: { runtime: { ok: false, detail: 'not checked yet' } } };
  let running: Promise<Preflight> | undefined;
  let checkedAt = 0;
  let managerStarted = false;
  let closed = false;
  let draining = false;
  /** The full check, one at a time; when it passes for the first time, the manager starts. */
  const runPreflight = (): Promise<Preflight> => {
    running ??= (async () => {
      const checks = await driver.health({ full: true }).catch((e: Error) => ({ runtime: { ok: false, detail: e.message } }));
      preflight = { ok: Object.values(checks).every((c) => c.ok), checks };
      checkedAt = Date.now();
      if (!preflight.ok) logger.error({ checks: preflight.checks }, 'sandbox preflight failed');
      else if (!managerStarted && !closed) {
        managerStarted = true;
        await manager.init();
        tasks.start();
      }
      return preflight;
    })().finally(() => (running = undefined));
    return running;
  };
  /** The runtime check for /readyz: the last full check, run again when it failed and is old enough. */
  const runtimeReadiness = async (): Promise<HealthCheck> => {
    if (!preflight.ok && !closed && Date.now() - checkedAt >= (parts.preflightRetryMs ?? PREFLIGHT_RETRY_MS)) await runPreflight();
    return preflight.checks.runtime ?? { ok: preflight.ok, detail: preflight.ok ? 'passed' : 'failed' };
  };
  /** The quick checks, asked once per /readyz for all of them. */
  let quick: Promise<Record<string, HealthCheck>> | undefined;
  const quickCheck = (name: string) => async (): Promise<HealthCheck> => {
    quick ??= driver.health().finally(() => setImmediate(() => (quick = undefined)));
    return (await quick)[name] ?? { ok: false, detail: 'not reported by the driver' };
  };

  // One budget per user, whichever token or page a request comes through (or gateway, on a shared Postgres).
  const rateLimiter = rateLimiterFor(store.db, { perMinute: config.rateLimitPerMin, burst: config.rateLimitBurst }, 'requests');
  const web = webApp({ config, db: store.db, logger, agent, boundary, sandboxes: manager, keys: providerKeys, upstream, egressSecrets: egress.secrets, rateLimiter, preflight: () => preflight, pgPool: store.pgPool, liveKey });
  // MCP clients' OAuth: the gateway is its own authorization server, signing users in with the web app's sessions.
  const oauthClients = config.oauth ? new ClientStore(store.db, {
        maxPending: config.oauthMaxPendingClients,
        documentsFromPrivate: config.oauthClientDocumentsPrivate,
        // Outbound fetches of documents anyone may name: this gateway's own budget.
        fetches: new MemoryRateLimiter({ perMinute: 60, burst: 30 }),
        ...(config.oauthClientDocumentsCaFile && { documentCa: fs.readFileSync(config.oauthClientDocumentsCaFile, 'utf8') }),
      }) : undefined;
  const oauth =
    oauthClients &&
    oauthServer({
      config,
      db: store.db,
      logger,
      clients: oauthClients,
      // Failed token requests per client (successes are never held back); registration: strict, as anyone may register.
      limiters: { tokenFailures: rateLimiterFor(store.db, { perMinute: 120, burst: 60 }, 'oauth-token-failures'), register: rateLimiterFor(store.db, { perMinute: 60, burst: 30 }, 'oauth-register') },
      auth: web.auth,
    });
  const internalDeps = replica && hop && { signer: hop, selfId: replica.id, sandboxes: manager, workspaces: volumes, log: logger.child({ module: 'replicas' }), outputLimitBytes: config.outputLimitKb * 1024 };
  const app = createApp({
    config,
    store,
    logger,
    readiness: {
      ...Object.fromEntries((driver.quickChecks ?? ['docker', 'image']).map((name) => [name, quickCheck(name)])),
      runtime: runtimeReadiness,
      ...(replica && { replica: async () => (draining ? { ok: false, detail: 'stopping: this gateway hands its sandboxes over to the others' } : { ok: true }) }),
    },
    mcp: mcpRouter({ ...tools, rateLimiter }),
    v1: openAiApi({ config, db: store.db, logger, agent, rateLimiter }),
    web,
    oauth,
    internal: internalDeps && internalHop(internalDeps),
  });
  /** Where the other replicas' run channels arrive (upgrades to /internal/v3/channel). */
  const channelUpgrade = internalDeps && internalChannel(internalDeps);

  let purge: NodeJS.Timeout | undefined;
  let expireApi: NodeJS.Timeout | undefined;
  /** The hourly purges under way: close waits for them before it closes the store. */
  const sweeping = new Set<Promise<void>>();
  /** Runs a purge now, its failure logged (a database away for a moment is tried again at the next hour). */
  const sweepNow = (work: () => Promise<void>, failure: string) => {
    const p = work().catch((err: unknown) => logger.error({ err }, failure));
    sweeping.add(p);
    void p.finally(() => sweeping.delete(p));
    return p;
  };
  /** Hourly, vault or not: API conversations past SANDGATE_API_CONVERSATION_DAYS, token rows past TOKEN_RETENTION_MS. */
  const sweepStore = async () => {
    await Promise.all([
      sweepNow(async () => {
        const n = await sweepApiConversations(store.db, { days: config.apiConversationDays });
        if (n) logger.info({ conversations: n, days: config.apiConversationDays }, 'deleted API conversations past SANDGATE_API_CONVERSATION_DAYS');
      }, 'could not delete old API conversations'),
      sweepNow(async () => {
        const n = (await purgeOAuth(store.db)) + ((await oauthClients?.sweep()) ?? 0);
        if (n) logger.info({ rows: n }, 'deleted ended OAuth codes and tokens, and registrations never used');
      }, 'could not delete ended OAuth codes and tokens'),
      sweepNow(async () => {
        const n = await purgeOldTokens(store.db);
        if (n) logger.info({ tokens: n }, 'deleted the rows of tokens revoked or expired longer ago than they are kept');
      }, 'could not delete old revoked tokens'),
    ]);
  };
  const gateway: Gateway = {
    config,
    store,
    manager,
    replica,
    driver,
    upstream,
    vault,
    boundary,
    tools,
    warnings: upstream.warnings,
    app,
    connect,
    agent,
    providerKeys,
    web,
    attach: (server) => {
      web.attach(server);
      // Upgrades: socket.io's own (web.attach), the other replicas' run channels, and no
      // other. socket.io ends an upgrade to any other path (h2c, a WebSocket to a page) only a
      // second later, and one whose request carried a body it never reads stays open for good
      // (a file descriptor held, and a stop that waits for it): cut at once.
      server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
        try {
          if (channelUpgrade?.take(req, socket, head)) return;
        } catch (e) {
          // Whatever an upgrade carries, it never ends the gateway: it is logged and cut.
          logger.warn({ err: e }, 'an upgrade to the run channel failed');
          socket.destroy();
          return;
        }
        if (!(req.url ?? '').startsWith('/socket.io/')) socket.destroy();
      });
      // Once it listens, the other replicas may send it runs: they read where in the replica table.
      if (replica) {
        const reachable = () => {
          const addr = server.address();
          const url = internalUrlFor(config, typeof addr === 'object' && addr ? addr.port : config.port);
          replica.setInternalUrl(url).then(
            () => logger.info({ replica: replica.id, internalUrl: url }, 'replica reachable by the others'),
            (e: unknown) => logger.error({ err: e }, 'could not record where the other replicas reach this one: they cannot send it runs'),
          );
        };
        // A server attached after it began to listen is reachable already.
        if (server.listening) reachable();
        else server.once('listening', reachable);
      }
    },
    async start() {
      if (vault) {
        preloadWordKnowledge();
        const sweep = () =>
          sweepNow(async () => {
            await dropInactiveTokenScopes(store.db, vault);
            await vault.purgeExpired();
          }, 'could not purge the PII vault');
        await sweep();
        purge = setInterval(() => void sweep(), PURGE_INTERVAL_MS);
        purge.unref();
      }
      await agent.init();
      // After init: a turn a restart left 'running' is marked interrupted, so its conversation can go.
      await sweepStore();
      expireApi = setInterval(() => void sweepStore(), PURGE_INTERVAL_MS);
      expireApi.unref();
      // Before anything asks dockerd: it cannot start while a container of ours is frozen.
      manager.thawLeftFrozen();
      return runPreflight();
    },
    async drain() {
      if (!replica || draining) return;
      draining = true;
      const t0 = Date.now();
      await replica.drain().catch((e: unknown) => logger.warn({ err: e }, 'could not tell the other replicas that this one stops'));
      // Its chat turns end meanwhile too (those still going at the deadline are cut by close).
      await Promise.all([manager.handOver(config.drainSec * 1000), agent.settle(config.drainSec * 1000)]);
      // Serving a little longer, so that a load balancer checking /readyz has seen it fail
      // before the port closes: whatever still arrives meanwhile goes on to another replica.
      const grace = Math.min(DRAIN_GRACE_MS, config.drainSec * 1000) - (Date.now() - t0);
      if (grace > 0) await new Promise((r) => setTimeout(r, grace));
      logger.info({ ms: Date.now() - t0 }, 'drained');
    },
    hopRunsUnderway: () => channelUpgrade?.underway() ?? 0,
    watchWorkspaceStore: (onCopied) => storeCopies?.watch(onCopied),
    async close(opts = {}) {
      closed = true;
      unobserve();
      storeCopies?.stop();
      channelUpgrade?.close();
      await agent.close();
      await web.close();
      await oauthClients?.close();
      if (purge) clearInterval(purge);
      if (expireApi) clearInterval(expireApi);
      await running?.catch(() => undefined);
      // The tasks' runs go on in their sandboxes: the next gateway follows them.
      await tasks.stop();
      await manager.shutdown(opts);
      // After the sandboxes were let go: the next replica asked for one takes it at once.
      await replica?.stop().catch((e: unknown) => logger.warn({ err: e }, 'could not leave the replica table'));
      await upstream.close();
      await egress.close();
      await Promise.all(sweeping);
      await store.close();
      await stopTracing?.();
    },
  };
  return { gateway, hop: hop || undefined, volumes, storeCopies };
}
