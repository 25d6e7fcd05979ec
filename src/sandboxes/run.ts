/**
 * One execution in a user's sandbox: the request the runner gets (environment, Deno
 * flags, the paths this run may not use), and what the gateway keeps of the answer
 * whatever the runner sends: only events of this run, output to the limit (the rest
 * counted as dropped), and a `done` even when the sandbox dies, stops answering or
 * floods its output.
 */
import crypto from 'node:crypto';
import type { Logger } from '../logger.js';
import type { UserSandbox } from './live.js';
import { allows, denoFlags, type Permissions } from './permissions.js';
import { registryEntries, registryUrls, type NetEntry } from './net-grants.js';
import type { Config } from '../config.js';
import type { ClaimRequest, ExecDone, ExecRequest, KeptRun, RunnerEvent } from './protocol.js';
import type { ExecuteOptions, ExecuteResult, SandboxDriver } from './types.js';

/** Largest program text accepted in one execution. */
export const MAX_CODE_BYTES = 1024 * 1024;
/** How long past its timeout the gateway waits for the runner before it kills the container. */
const TIMEOUT_GRACE_MS = 10_000;
/** Output kept per stream beyond the limit the runner enforces: room for its truncation notice. */
const OUTPUT_SLACK = 4096;
/**
 * Output bytes of one run past which the sandbox is stopped as broken: the runner keeps
 * each stream to the limit itself, so only a runner that no longer keeps the protocol
 * gets here, and the gateway stops reading it instead of spending its time on it.
 */
const outputViolationBytes = (limit: number) => 4 * limit + 1024 * 1024;
export const BRIDGE_SOCKET = '/tmp/.sandgate/bridge.sock';
/** The egress relay's port on the sandbox's own loopback (a sandbox whose ceiling grants `net`). */
export const EGRESS_PORT = 3128;
const PROXY_URL = `http://127.0.0.1:${EGRESS_PORT}`;
/** The Deno host's cache in a sandbox that may reach the network and write its workspace: `npm:` packages outlive the sandbox. */
export const DENO_PACKAGES_DIR = '/workspace/.cache/deno';

/** The environment every process in a sandbox starts with; nothing from the host. */
const BASE_ENV: Record<string, string> = {
  // The user's own packages (pip --user, into /workspace/.local) come last: they never shadow the image's.
  PATH: '/usr/local/bin:/usr/bin:/bin:/workspace/.local/bin',
  HOME: '/workspace',
  LANG: 'C.UTF-8',
  TMPDIR: '/tmp',
  MPLBACKEND: 'Agg',
  MPLCONFIGDIR: '/tmp/.matplotlib',
  DENO_DIR: '/tmp/.deno',
  DENO_NO_UPDATE_CHECK: '1',
  NO_COLOR: '1',
  PYTHONUNBUFFERED: '1',
  PYTHONDONTWRITEBYTECODE: '1',
  PYTHONPATH: '/tools/python',
};

/**
 * Thread pools sized to the sandbox's CPU limit. OpenBLAS (numpy's) and OpenMP start a
 * thread for every CPU gVisor shows, the host's, which then only contend for the
 * sandbox's share: with 1 CPU a 600x600 matrix product took 245 ms on two threads and
 * 153 on one. And every thread that ran in a process keeps one more host process of
 * gVisor's (a stub thread) for that process's life.
 */
export function threadEnv(cpus: number): Record<string, string> {
  const n = String(Math.max(1, Math.floor(cpus)));
  return { OPENBLAS_NUM_THREADS: n, OMP_NUM_THREADS: n };
}

export interface RunSettings {
  driver: SandboxDriver;
  log: Logger;
  /** Per stream, in KiB (SANDGATE_OUTPUT_LIMIT_KB). */
  outputLimitKb: number;
  /** The sandbox's CPU limit (SANDGATE_SANDBOX_CPUS). */
  cpus: number;
  /** Where package managers look, for runs granted `net`, and the hosts `registries` names. */
  egress?: EgressSettings;
}

export interface EgressSettings {
  pipIndex: string;
  npmRegistry: string;
  registries: NetEntry[];
}

let egressCache: { config: object; settings: EgressSettings } | undefined;

/** The egress settings of a configuration (computed once per configuration object). */
export function egressSettings(config: Pick<Config, 'egressPipIndex' | 'egressPipFiles' | 'egressNpmRegistry'>): EgressSettings {
  if (egressCache?.config !== config) {
    egressCache = { config, settings: { pipIndex: config.egressPipIndex, npmRegistry: config.egressNpmRegistry, registries: registryEntries(registryUrls(config)) } };
  }
  return egressCache.settings;
}

/**
 * What a run granted `net` finds in its environment: the proxy variables every ordinary
 * tool reads (pip, curl, Python's urllib and requests, Deno's fetch) naming the egress
 * relay, and the registries from the settings for pip and npm.
 */
export function egressEnv(egress: EgressSettings | undefined): Record<string, string> {
  const env: Record<string, string> = {
    HTTP_PROXY: PROXY_URL,
    HTTPS_PROXY: PROXY_URL,
    http_proxy: PROXY_URL,
    https_proxy: PROXY_URL,
    NO_PROXY: 'localhost,127.0.0.1,::1',
    no_proxy: 'localhost,127.0.0.1,::1',
  };
  if (egress) {
    env.PIP_INDEX_URL = egress.pipIndex;
    const index = new URL(egress.pipIndex);
    // pip refuses an index over plain http unless told it is trusted (the proxy checks it all the same).
    if (index.protocol === 'http:') env.PIP_TRUSTED_HOST = index.hostname;
    env.NPM_CONFIG_REGISTRY = egress.npmRegistry;
    env.npm_config_registry = egress.npmRegistry;
  }
  return env;
}

/**
 * Paths the container mounts but this execution may not use: write-denied ones become
 * read-only, read-denied ones are hidden. Empty when the request did not narrow.
 */
export function fsNarrowing(perms: Permissions, workspaceWritable: boolean): ExecRequest['fs'] {
  const readOnly: string[] = [];
  const hidden: string[] = [];
  for (const p of ['/workspace', '/skills', '/tools']) {
    if (!allows(perms, 'read', p) && !(p === '/workspace' && allows(perms, 'write', p))) hidden.push(p);
  }
  if (workspaceWritable && !allows(perms, 'write', '/workspace') && !hidden.includes('/workspace')) readOnly.push('/workspace');
  return readOnly.length || hidden.length ? { readOnly, hidden } : undefined;
}

/**
 * The Deno flags of a run with `perms`: the user's grants and the gateway's own channels
 * (the bridge socket and its two variables), which the grants neither give nor take away.
 * For the ceiling, the flags the sandbox's Deno host runs with.
 */
export function denoRunFlags(perms: Permissions, registries: readonly NetEntry[] = []): string[] {
  return [
    '--no-prompt',
    ...denoFlags(
      perms,
      {
        read: [BRIDGE_SOCKET],
        write: [BRIDGE_SOCKET],
        net: [`unix:${BRIDGE_SOCKET}`],
        env: ['SANDGATE_BRIDGE', 'SANDGATE_EXEC_ID'],
      },
      registries,
    ),
  ];
}

/** Runs `opts` in `sb` now (its queue has given it the turn) with `perms`, the ceiling narrowed by the request. */
export async function runOne(sb: UserSandbox, opts: ExecuteOptions, perms: Permissions, timeoutSec: number, settings: RunSettings): Promise<ExecuteResult> {
  // Cancelled while it waited for its turn (its caller went away): it never starts. A
  // cancel sent to the runner now would name a run it does not know, and the code would run.
  if (opts.signal?.aborted) {
    return { exitCode: null, durationMs: 0, timedOut: false, killed: true, restarted: false, truncated: { stdout: 0, stderr: 0 }, files: [], notice: 'Execution cancelled before it started.', language: opts.language, stdout: '', stderr: '' };
  }
  const id = opts.keep ?? `x${crypto.randomBytes(6).toString('hex')}`;
  const request: ExecRequest = {
    op: 'exec',
    id,
    language: opts.language,
    code: opts.code,
    timeoutMs: timeoutSec * 1000,
    outputLimit: settings.outputLimitKb * 1024,
    // The proxy variables always: without a grant, the relay answers with the grant that is missing.
    env: { ...BASE_ENV, ...threadEnv(settings.cpus), ...egressEnv(settings.egress) },
    denoFlags: denoRunFlags(perms, settings.egress?.registries),
    fs: fsNarrowing(perms, sb.workspaceWritable),
    reuseSnapshot: !sb.hostWrote,
    ...(opts.reset ? { reset: true } : {}),
    ...(opts.keep ? { keep: true } : {}),
  };
  sb.hostWrote = false;
  // The grant the egress proxy applies to connections this run opens (egress-route.ts).
  sb.runNet = perms.net;
  try {
    return (await follow(sb, id, request, opts, timeoutSec, settings, opts.onStart))!;
  } finally {
    sb.runNet = undefined;
    sb.endEgress?.(id);
  }
}

/** What an adopted sandbox's runner still has of earlier gateways' runs (its `pong`). */
export interface RunnerRuns {
  /** The kept runs it holds; undefined from a runner that keeps none (an older image). */
  kept?: KeptRun[];
  /** The ids of the runs running or queued in it, kept or not (none from an older image). */
  execs: string[];
}

/** What the sandbox's runner has of earlier runs; undefined when it does not answer within 5 s. */
export function runsOf(sb: Pick<UserSandbox, 'handle'>): Promise<RunnerRuns | undefined> {
  const id = `kept-${crypto.randomBytes(4).toString('hex')}`;
  return new Promise((resolve) => {
    const done = (v: RunnerRuns | undefined) => {
      clearTimeout(timer);
      off();
      offExit();
      resolve(v);
    };
    const off = sb.handle.onEvent((e) => {
      if (e.type === 'pong' && e.id === id) done({ kept: e.kept, execs: e.execs ?? [] });
    });
    const offExit = sb.handle.onExit(() => done(undefined));
    const timer = setTimeout(() => done(undefined), 5000);
    try {
      sb.handle.send({ op: 'ping', id });
    } catch {
      done(undefined);
    }
  });
}

/**
 * Follows a kept execution (`keep` when it was started) that this gateway did not see
 * to its end: its sandbox was adopted after a restart, and the runner replays what the
 * run sent so far and goes on live. Undefined when the runner does not know it (it was
 * never kept, already released, or the sandbox was replaced). `timeoutSec` is the run's
 * own: it started earlier, so the gateway's backstop from now on is later than the runner's.
 */
export async function claimOne(sb: UserSandbox, execId: string, opts: Pick<ExecuteOptions, 'language' | 'signal' | 'onOutput'>, timeoutSec: number, settings: RunSettings): Promise<ExecuteResult | undefined> {
  return follow(sb, execId, { op: 'claim', id: `k${execId}`, target: execId }, opts, timeoutSec, settings);
}

/**
 * Sends `request` (an exec, or a claim of one) and gathers the events of execution `id`
 * into its result; for a claim, only from the runner's `claimed` on (events before it are
 * the ones its replay repeats), and undefined when the runner does not know the run.
 */
async function follow(
  sb: UserSandbox,
  id: string,
  request: ExecRequest | ClaimRequest,
  opts: Pick<ExecuteOptions, 'language' | 'signal' | 'onOutput'>,
  timeoutSec: number,
  settings: RunSettings,
  sent?: () => void,
): Promise<ExecuteResult | undefined> {
  const { driver, log } = settings;
  const owner = sb.owner;
  const limit = settings.outputLimitKb * 1024;
  sb.running++;
  sb.inFlight = id;
  sb.lastActivity = Date.now();
  const output = { stdout: [] as string[], stderr: [] as string[] };
  // What the gateway keeps of each stream and what it dropped, whatever the runner sends.
  const kept = { stdout: 0, stderr: 0 };
  const dropped = { stdout: 0, stderr: 0 };
  let received = 0;
  // A claim counts events only once the runner has said it knows the run.
  let counting = request.op === 'exec';
  const started = performance.now();
  try {
    const done = await new Promise<ExecDone | undefined>((resolve) => {
      let settled = false;
      const finish = (d: ExecDone | undefined) => {
        if (settled) return;
        settled = true;
        clearTimeout(backstop);
        off();
        offExit();
        opts.signal?.removeEventListener('abort', onAbort);
        resolve(d);
      };
      const off = sb.handle.onEvent((e: RunnerEvent) => {
        if (e.type === 'claimed' && request.op === 'claim' && e.id === request.id && e.target === id) {
          if (e.state === 'unknown') return finish(undefined);
          counting = true;
          return;
        }
        // Only events of the run in flight count; a `done` for anything else is nothing.
        if (!counting || !('id' in e) || e.id !== id) return;
        if (e.type === 'stdout' || e.type === 'stderr') {
          const bytes = Buffer.byteLength(e.data);
          received += bytes;
          if (received > outputViolationBytes(limit)) {
            log.error({ user: owner.name, bytes: received }, 'sandbox sent far more output than its limit; stopping it');
            void driver.stop(sb.handle.id).catch(() => {});
            return finish(
              died(
                `The sandbox sent far more output than the ${settings.outputLimitKb} KiB limit allows, so it was stopped. ` +
                  'Files in /workspace are kept; Python variables are lost.',
              ),
            );
          }
          if (kept[e.type] + bytes > limit + OUTPUT_SLACK) {
            dropped[e.type] += bytes;
            return;
          }
          kept[e.type] += bytes;
          output[e.type].push(e.data);
          opts.onOutput?.(e.type, e.data);
        } else if (e.type === 'done') finish(sb.stopNotice ? { ...e, notice: sb.stopNotice } : e);
      });
      const died = (notice: string): ExecDone => ({
        type: 'done',
        id,
        exitCode: null,
        durationMs: performance.now() - started,
        timedOut: false,
        killed: true,
        restarted: true,
        truncated: { stdout: 0, stderr: 0 },
        files: [],
        notice,
      });
      const offExit = sb.handle.onExit((reason) => {
        if (sb.letGo) {
          return finish({ ...died('This gateway let the sandbox go during the run (it is stopping, or handed the sandbox over): the gateway that takes the sandbox over stops the run.'), detached: true } as ExecDone);
        }
        log.warn({ user: owner.name, reason }, 'sandbox died during an execution');
        finish(
          died(
            sb.stopNotice ??
              'The sandbox stopped during this execution (it ran out of memory or processes, or was stopped). ' +
                'It is replaced on the next run; files in /workspace are kept, Python variables are lost.',
          ),
        );
      });
      // The runner enforces the timeout; this only covers a runner that stopped answering.
      const backstop = setTimeout(() => {
        log.error({ user: owner.name }, 'runner missed a timeout; killing the sandbox');
        void driver.stop(sb.handle.id);
        finish({ ...died(`The execution exceeded its ${timeoutSec} s limit and the sandbox had to be killed. Files in /workspace are kept; Python variables are lost.`), timedOut: true });
      }, timeoutSec * 1000 + TIMEOUT_GRACE_MS);
      const onAbort = () => {
        try {
          sb.handle.send({ op: 'cancel', id: `c${id}`, target: id });
        } catch {
          /* runner gone: onExit settles */
        }
      };
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      try {
        sb.handle.send(request);
        sent?.();
      } catch (e) {
        finish(died(sb.stopNotice ?? `The sandbox was not reachable (${(e as Error).message}); it is replaced on the next run.`));
      }
      // After the exec: a cancel the runner can match to it.
      if (opts.signal?.aborted) onAbort();
    });
    if (!done) return undefined;
    sb.unrecorded = (sb.unrecorded ?? 0) + 1;
    const { type: _t, id: _i, ...rest } = done;
    const truncated = { stdout: done.truncated.stdout + dropped.stdout, stderr: done.truncated.stderr + dropped.stderr };
    return { ...rest, truncated, language: opts.language, stdout: output.stdout.join(''), stderr: output.stderr.join('') };
  } finally {
    if (sb.inFlight === id) sb.inFlight = undefined;
    sb.running--;
    sb.lastActivity = Date.now();
  }
}
