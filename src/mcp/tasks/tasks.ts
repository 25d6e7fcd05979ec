/**
 * MCP tasks (the `io.modelcontextprotocol/tasks` extension, protocol revision
 * 2026-07-28): an `execute_code` that runs long is answered with a task handle; the
 * client polls `tasks/get` for the result, or `tasks/cancel`s it.
 *
 * The run is a **kept** run (ExecuteOptions.keep): the runner records its output and
 * `done` until a gateway has stored the result, so it outlives the gateway that started
 * it. The task's state is a row of `mcp_tasks` (schema.ts), so any gateway answers
 * `tasks/get`. Exactly one gateway follows each working task (the row's `watcher`, said
 * again every few seconds); it stores the result as the caller's model sees it (through
 * the PII boundary, like the call's own result) and kills the process on a cancel. A
 * task nobody follows (its gateway restarted, or died) is taken by the next sweep of any
 * gateway: the user's sandbox is adopted and the runner replays what the run sent.
 *
 * What a task cannot survive: its sandbox dying or being replaced (out of memory, an
 * admin's stop, a lost host). The task then completes with an error that says so.
 */
import crypto from 'node:crypto';
import type { CallToolResult } from '@modelcontextprotocol/server';
import type { Caller, Via } from '../../auth/caller.js';
import { getUser } from '../../accounts/accounts.js';
import type { Logger } from '../../logger.js';
import type { SandboxExecution } from '../../sandboxes/execution.js';
import { SandboxError } from '../../sandboxes/errors.js';
import { GatewayError } from '../../errors.js';
import type { Language } from '../../sandboxes/protocol.js';
import type { ExecuteResult, SandboxOwner } from '../../sandboxes/types.js';
import type { Db } from '../../store/store.js';
import type { McpTasksTable, TaskStatus } from './schema.js';
import { ERROR_CLASS_META } from '../audited-transport.js';
import { callerColumns, recordAudit } from '../../audit/audit.js';

export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
/** How long a task's handle works, from its creation. */
export const TASK_TTL_MS = 24 * 3600_000;
/** How often a client is asked to poll. */
export const POLL_INTERVAL_MS = 2000;
/** Working tasks one user may have at once (their runs share one sandbox and wait in turn). */
export const MAX_WORKING_PER_USER = 4;
/** Tasks (with their results) kept per user: the latest; older finished ones are deleted as new ones come. */
export const MAX_KEPT_PER_USER = 50;
/** How often a gateway says which tasks it follows, and looks for cancels and tasks nobody follows. */
const TICK_MS = 2000;
/** A task whose gateway has not said so for this long is followed by another. */
const STALE_MS = 10_000;
/** A task no gateway could follow for this long past its run's own time limit is given up as lost. */
const GIVE_UP_AFTER_MS = 10 * 60_000;

/** What a client is told about a task: the extension's Task, with the result or error once there. */
export interface TaskView {
  taskId: string;
  status: TaskStatus;
  statusMessage?: string;
  createdAt: string;
  lastUpdatedAt: string;
  ttlMs: number;
  pollIntervalMs: number;
  result?: Record<string, unknown>;
  error?: Record<string, unknown>;
}

export class TaskError extends Error {
  constructor(
    message: string,
    readonly code: 'not_found' | 'too_many',
  ) {
    super(message);
  }
}

/** The caller's identity a task is bound to: the same user, through the same token (or session, or conversation). */
function viaKey(via: Via): string {
  return via.kind === 'token' ? `token:${via.tokenId}` : via.kind === 'session' ? `session:${via.sessionId}` : `agent:${via.conversationId}`;
}

export function viewOf(row: Pick<McpTasksTable, 'id' | 'status' | 'status_message' | 'result' | 'error' | 'created_at' | 'updated_at' | 'expires_at'>): TaskView {
  return {
    taskId: row.id,
    status: row.status,
    ...(row.status_message ? { statusMessage: row.status_message } : {}),
    createdAt: new Date(row.created_at).toISOString(),
    lastUpdatedAt: new Date(row.updated_at).toISOString(),
    ttlMs: row.expires_at - row.created_at,
    pollIntervalMs: POLL_INTERVAL_MS,
    ...(row.status === 'completed' && row.result ? { result: JSON.parse(row.result) as Record<string, unknown> } : {}),
    ...(row.status === 'failed' && row.error ? { error: JSON.parse(row.error) as Record<string, unknown> } : {}),
  };
}

export interface TaskRun {
  language: Language;
  timeoutSec: number;
  protocolVersion?: string;
}

export interface TasksDeps {
  db: Db;
  logger: Logger;
  sandboxes: Pick<SandboxExecution, 'resume' | 'release'>;
  /** This gateway, as the `watcher` of the tasks it follows. */
  gatewayId: string;
  /** The call's result as the caller's model sees it (execute_code's own presentation). */
  present(caller: Caller, protocolVersion: string | undefined, result: ExecuteResult): Promise<CallToolResult>;
  /** A result for a run that ended without one of its own (its sandbox was lost), as the model sees it. */
  presentError(caller: Caller, protocolVersion: string | undefined, message: string): Promise<CallToolResult>;
}

/** One gateway's part in tasks: it creates them, follows the runs it holds, stores their results. */
export class Tasks {
  private readonly log: Logger;
  /** Tasks this gateway follows now, and how to cancel each one's run. */
  private readonly watched = new Map<string, AbortController>();
  private timer?: NodeJS.Timeout;
  private ticking?: Promise<void>;
  private stopped = false;

  constructor(private readonly deps: TasksDeps) {
    this.log = deps.logger.child({ module: 'tasks' });
  }

  /** Begins following tasks: now (those a gateway left, this one before a restart included), then every few seconds. */
  start(): void {
    if (this.timer || this.stopped) return;
    void this.tick();
    this.timer = setInterval(() => void this.tick(), TICK_MS);
    this.timer.unref();
  }

  /** Stops following: the runs go on in their sandboxes, for the next gateway to follow. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.ticking?.catch(() => {});
  }

  /** A kept run that ended before it became a task: the runner may forget it. */
  release(owner: SandboxOwner, execId: string): void {
    this.deps.sandboxes.release(owner, execId);
  }

  /** A fresh id for a kept run (what code in the sandbox sees as its execution id). */
  static execId(): string {
    return `t${crypto.randomBytes(9).toString('hex')}`;
  }

  /**
   * Records a task for `run` (already started as kept run `execId`), followed by this
   * gateway from now on: `outcome` settles with its result, `abort` kills it. Refused
   * (too_many) past MAX_WORKING_PER_USER.
   */
  async create(caller: Caller, execId: string, run: TaskRun, outcome: Promise<ExecuteResult>, abort: AbortController): Promise<TaskView> {
    const now = Date.now();
    if ((await this.workingOf(caller.user.id)) >= MAX_WORKING_PER_USER) {
      throw new TaskError(`you have ${MAX_WORKING_PER_USER} tasks running already; wait for one to finish or cancel one`, 'too_many');
    }
    const row: McpTasksTable = {
      id: crypto.randomBytes(16).toString('base64url'),
      user_id: caller.user.id,
      via: JSON.stringify(caller.via),
      exec_id: execId,
      language: run.language,
      timeout_sec: run.timeoutSec,
      protocol_version: run.protocolVersion ?? null,
      status: 'working',
      status_message: 'Running in your sandbox.',
      result: null,
      error: null,
      cancel_requested: 0,
      created_at: now,
      updated_at: now,
      expires_at: now + TASK_TTL_MS,
      watcher: this.deps.gatewayId,
      watched_at: now,
    };
    await this.deps.db.insertInto('mcp_tasks').values(row).execute();
    // Counted again with the row in: calls that raced past the first count all see each other.
    const after = await this.workingOf(caller.user.id);
    if (after > MAX_WORKING_PER_USER) {
      await this.deps.db.deleteFrom('mcp_tasks').where('id', '=', row.id).execute();
      throw new TaskError(`you have ${MAX_WORKING_PER_USER} tasks running already; wait for one to finish or cancel one`, 'too_many');
    }
    // What a user keeps: their latest tasks (the result is in each); older finished ones go.
    const kept = await this.deps.db.selectFrom('mcp_tasks').select('id').where('user_id', '=', caller.user.id).orderBy('created_at', 'desc').offset(MAX_KEPT_PER_USER).limit(1000).execute();
    if (kept.length) await this.deps.db.deleteFrom('mcp_tasks').where('id', 'in', kept.map((k) => k.id)).where('status', '!=', 'working').execute();
    this.watched.set(row.id, abort);
    void this.settle(row, caller, outcome);
    return viewOf(row);
  }

  private async workingOf(userId: number): Promise<number> {
    const { n } = await this.deps.db
      .selectFrom('mcp_tasks')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('user_id', '=', userId)
      .where('status', '=', 'working')
      .executeTakeFirstOrThrow();
    return Number(n);
  }

  /** The task as its caller may see it; not_found for another caller's, an unknown or an expired one. */
  async get(caller: Caller, taskId: string): Promise<TaskView> {
    return viewOf(await this.row(caller, taskId));
  }

  /** Asks for the task's run to be killed: at once when this gateway follows it, else at the follower's next tick. */
  async cancel(caller: Caller, taskId: string): Promise<void> {
    const row = await this.row(caller, taskId);
    if (row.status !== 'working') return;
    await this.deps.db.updateTable('mcp_tasks').set({ cancel_requested: 1, status_message: 'Cancelling: the process is being killed.', updated_at: Date.now() }).where('id', '=', row.id).where('status', '=', 'working').execute();
    this.watched.get(row.id)?.abort();
  }

  private async row(caller: Caller, taskId: string): Promise<McpTasksTable> {
    const row =
      typeof taskId === 'string' && taskId.length <= 64
        ? await this.deps.db.selectFrom('mcp_tasks').selectAll().where('id', '=', taskId).where('user_id', '=', caller.user.id).executeTakeFirst()
        : undefined;
    if (!row || row.expires_at <= Date.now() || viaKey(JSON.parse(row.via) as Via) !== viaKey(caller.via)) throw new TaskError('Failed to retrieve task: Task not found', 'not_found');
    return row;
  }

  /** Stores the run's outcome; a run this gateway let go (it stops) is left working for the next one. */
  private async settle(row: McpTasksTable, caller: Caller, outcome: Promise<ExecuteResult | undefined>): Promise<void> {
    const owner: SandboxOwner = { userId: row.user_id, name: caller.user.name };
    try {
      const result = await outcome;
      if (result?.detached) return;
      const cancelled = await this.deps.db.selectFrom('mcp_tasks').select('cancel_requested').where('id', '=', row.id).executeTakeFirst();
      const version = row.protocol_version ?? undefined;
      let errorClass: string | undefined;
      if (!result) {
        errorClass = 'lost';
        await this.finish(row.id, 'completed', 'The run was lost.', await this.deps.presentError(caller, version, 'The sandbox this run was in is gone (it was stopped or replaced while no gateway followed the run). Files it wrote before are in /workspace; run it again.'));
      } else if (cancelled?.cancel_requested && result.killed) {
        errorClass = 'cancelled';
        await this.finish(row.id, 'cancelled', 'Cancelled: the process was killed.');
      } else {
        const shown = await this.deps.present(caller, version, result);
        errorClass = shown._meta?.[ERROR_CLASS_META] as string | undefined;
        await this.finish(row.id, 'completed', result.exitCode === 0 && !result.error ? 'Finished.' : 'Finished with an error.', shown);
      }
      this.deps.sandboxes.release(owner, row.exec_id);
      await this.audit(row, caller, errorClass);
    } catch (e) {
      // The run ended in an error of the gateway's (not the code's): a failed task, with the error a call would have had.
      const message = e instanceof GatewayError ? e.message : 'internal error';
      if (!(e instanceof GatewayError)) this.log.error({ err: e, task: row.id }, 'a task ended in an error');
      await this.finish(row.id, 'failed', `The run failed: ${message}`, undefined, { code: -32603, message }).catch((err: unknown) => this.log.error({ err, task: row.id }, 'could not store the outcome of a task'));
    } finally {
      this.watched.delete(row.id);
    }
  }

  /** The end of a task's run in the audit log (the call that made the task has its own row): how long from the call, and how it ended. */
  private async audit(row: McpTasksTable, caller: Caller, errorClass: string | undefined): Promise<void> {
    await recordAudit(this.deps.db, {
      ...callerColumns(caller),
      kind: 'mcp',
      method: 'task',
      tool: 'execute_code',
      ts: row.created_at,
      durationMs: Date.now() - row.created_at,
      outcome: errorClass ? 'error' : 'ok',
      errorClass: errorClass ?? null,
    }).catch((err: unknown) => this.log.error({ err, task: row.id }, 'could not write an audit entry'));
  }

  private async finish(id: string, status: TaskStatus, message: string, result?: CallToolResult, error?: { code: number; message: string }): Promise<void> {
    // The failure's class is for the audit log, never for the client (as the audited transport does for a call's result).
    if (result?._meta) {
      const { [ERROR_CLASS_META]: _class, ...meta } = result._meta;
      result = { ...result, _meta: meta };
      if (!Object.keys(meta).length) delete result._meta;
    }
    await this.deps.db
      .updateTable('mcp_tasks')
      .set({ status, status_message: message, result: result ? JSON.stringify(result) : null, error: error ? JSON.stringify(error) : null, updated_at: Date.now(), watcher: null })
      .where('id', '=', id)
      .where('status', '=', 'working')
      .execute();
  }

  /** Says which tasks this gateway follows, kills those a client cancelled elsewhere, takes those nobody follows, drops expired ones. */
  private async tick(): Promise<void> {
    if (this.ticking || this.stopped) return;
    this.ticking = (async () => {
      const { db, gatewayId } = this.deps;
      const now = Date.now();
      const mine = [...this.watched.keys()];
      if (mine.length) {
        await db.updateTable('mcp_tasks').set({ watched_at: now, watcher: gatewayId }).where('id', 'in', mine).where('status', '=', 'working').execute();
        const cancels = await db.selectFrom('mcp_tasks').select('id').where('id', 'in', mine).where('cancel_requested', '=', 1).execute();
        for (const { id } of cancels) this.watched.get(id)?.abort();
      }
      const working = await db.selectFrom('mcp_tasks').selectAll().where('status', '=', 'working').execute();
      for (const row of working) {
        if (this.watched.has(row.id)) continue;
        // Another gateway follows it (a task this one followed before a restart is its own to take again).
        if (row.watcher && row.watcher !== gatewayId && (row.watched_at ?? 0) > now - STALE_MS) continue;
        await this.follow(row, now);
      }
      await db.deleteFrom('mcp_tasks').where('expires_at', '<', now).where('status', '!=', 'working').execute();
    })()
      .catch((err: unknown) => this.log.warn({ err }, 'could not look after the tasks'))
      .finally(() => (this.ticking = undefined));
    await this.ticking;
  }

  /** Takes a task nobody follows: adopts the user's sandbox and follows the kept run to its end. */
  private async follow(row: McpTasksTable, now: number): Promise<void> {
    const { db, gatewayId } = this.deps;
    const taken = await db
      .updateTable('mcp_tasks')
      .set({ watcher: gatewayId, watched_at: now })
      .where('id', '=', row.id)
      .where('status', '=', 'working')
      .where((eb) => eb.or([eb('watcher', 'is', null), eb('watcher', '=', gatewayId), eb('watched_at', '<', now - STALE_MS)]))
      .executeTakeFirst();
    if (!Number(taken.numUpdatedRows)) return;
    const user = await getUser(db, row.user_id);
    if (!user) return;
    const caller: Caller = { user, via: JSON.parse(row.via) as Via };
    const abort = new AbortController();
    if (row.cancel_requested) abort.abort();
    this.watched.set(row.id, abort);
    const owner: SandboxOwner = { userId: user.id, name: user.name };
    const outcome = this.deps.sandboxes.resume(owner, row.exec_id, { language: row.language as Language, timeoutSec: row.timeout_sec, signal: abort.signal }).catch(async (e: unknown) => {
      // Another replica holds the sandbox (it follows the task), this gateway stops, dockerd
      // or the database is away, the sandbox could not start: tried again at a later tick,
      // until the run would have ended by its own time limit long since.
      const lost = Date.now() > row.created_at + row.timeout_sec * 1000 + GIVE_UP_AFTER_MS;
      if (!lost) {
        if (!(e instanceof SandboxError && e.reason === 'held_elsewhere')) this.log.warn({ err: e, task: row.id, user: user.name }, 'could not follow a task yet');
        await db.updateTable('mcp_tasks').set({ watcher: null }).where('id', '=', row.id).where('watcher', '=', gatewayId).execute().catch(() => {});
        return { detached: true } as ExecuteResult;
      }
      this.log.warn({ err: e, task: row.id, user: user.name }, 'gave up following a task');
      return undefined;
    });
    this.log.info({ task: row.id, user: user.name }, 'following a task another gateway (or this one before a restart) started');
    void this.settle(row, caller, outcome);
  }
}
