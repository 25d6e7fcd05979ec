/**
 * What the sandbox manager is built from, and what it holds at run time: each user's
 * live sandbox, the starts under way, the stops an admin asked for, and whether the
 * gateway is shutting down. One `Held` is shared by the parts of the manager
 * (execution.ts, lifecycle.ts, stops.ts, idle.ts, inspection.ts); only lifecycle.ts and
 * stops.ts add or remove a user's sandbox.
 */
import type { EgressHandler } from './egress-route.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { Db } from '../store/store.js';
import type { UserSandbox } from './live.js';
import type { BridgeHandler, SandboxDriver, SandboxOwner } from './types.js';
import type { WorkspaceStore } from './types.js';
import type { Replica } from '../replicas/leases.js';
import type { HopSigner } from '../replicas/hop-auth.js';

export interface SandboxManagerDeps {
  config: Config;
  db: Db;
  logger: Logger;
  driver: SandboxDriver;
  volumes: WorkspaceStore;
  /** Host directory mounted read-only at /skills. */
  skillsDir: string;
  /** Host directory where per-sandbox /tools mounts are prepared. */
  toolsMountsDir: string;
  /** Fills a sandbox's /tools directory for its owner (undefined owner: a pooled sandbox). */
  prepareTools: (dir: string, owner: SandboxOwner | undefined) => Promise<void>;
  /**
   * This gateway among its replicas: a user's sandbox is held only under its lease in the
   * store (src/replicas/leases.ts), so two gateways never both hold one. Absent, this
   * gateway is alone with its sandboxes (tests of the manager by itself).
   */
  replica?: Replica;
  /** Signs runs sent to the replica that holds a user's sandbox (the internal hop); with `replica` only. */
  hop?: HopSigner;
}

/** The manager's deps with its logger already scoped to sandboxes. */
export type PartDeps = Omit<SandboxManagerDeps, 'logger'> & { log: Logger };

export class Held {
  /** Each user's live sandbox, by user id. */
  readonly users = new Map<number, UserSandbox>();
  /** Sandboxes being started, by user id (one start per user at a time). */
  readonly starting = new Map<number, Promise<UserSandbox>>();
  /** Users whose sandbox an admin is stopping now. */
  readonly stopping = new Set<number>();
  /** Containers being stopped now (no longer any user's): never adopted back. */
  readonly removing = new Set<string>();
  /** Where calls from code to the gateway's tools go (set once the tools exist). */
  bridge?: BridgeHandler;
  /** Where connections out of sandboxes go (the egress proxy, once it exists). */
  egress?: EgressHandler;
  /** The gateway is shutting down: no new run, no freeze, no timer. */
  closed = false;
}
