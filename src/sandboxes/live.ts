/**
 * A live sandbox as the manager holds it: the driver's handle plus what the gateway
 * tracks about it. A pooled one has no owner yet; a user's one has an owner, a queue of
 * runs and the run in flight.
 */
import type { Grant } from './permissions.js';
import type { RunQueue } from './run-queue.js';
import type { ExecuteResult, SandboxHandle, SandboxOwner } from './types.js';

export interface Live {
  handle: SandboxHandle;
  workspaceId: string;
  /** Host directory mounted at /tools. */
  toolsDir: string;
  startedAt: number;
  lastActivity: number;
  /** Mounted read-write? (from the ceiling when the container was made) */
  workspaceWritable: boolean;
  /** The gateway wrote to the workspace since the last execution began. */
  hostWrote: boolean;
  /** Its cgroup is frozen (idle; thawed before anything talks to it). */
  frozen?: boolean;
  /** When it freezes next, if nothing comes first. */
  freezeTimer?: NodeJS.Timeout;
  /** When, frozen, it is next thawed for a moment to keep its run path warm. */
  rewarmTimer?: NodeJS.Timeout;
  /** The warm-up in progress (anything that wakes the sandbox ends its claim). */
  rewarming?: object;
}

export interface UserSandbox extends Live {
  owner: SandboxOwner;
  /** The ceiling the container was made for (its mounts follow it). */
  ceilingKey: string;
  queue: RunQueue;
  running: number;
  /** The execution the runner is running now: the only one whose calls are taken. */
  inFlight?: string;
  /** The `net` grant of the run in flight, when it has one: what its connections out may reach. */
  runNet?: Grant;
  /** Ends the connections out that run `execId` opened (set by routeEgress). */
  endEgress?: (execId: string) => void;
  /** The run in flight: its language and when it began (for the admin page). */
  run?: { language: string; startedAt: number };
  /** Set when an admin stops the sandbox: what its runs report instead of a plain stop. */
  stopNotice?: string;
  /**
   * Kept runs (MCP tasks) the sandbox's runner held when this gateway adopted it, each
   * followed to its end before any run of this gateway's (`resume` takes the outcome).
   * `undefined` until the runner said; `false` when its runner keeps no runs (an older image).
   */
  kept?: Map<string, Promise<ExecuteResult | undefined>> | false;
  /** Settles once `kept` is known (the adopted runner answered, or did not). */
  keptKnown?: Promise<void>;
  /** Set when this gateway lets the sandbox go running (it stops, hands it over, or lost its lease): its runs may go on there. */
  letGo?: boolean;
  /** Executions not yet counted in the store, and when the store was last told. */
  unrecorded?: number;
  recordedAt?: number;
}
