/**
 * execute_code: runs code in the caller's own sandbox and reports what happened:
 * output, the value of a final Python expression, the error, and the files the run
 * created, changed or deleted (as resource links the client can open).
 *
 * The code and the permission values pass `fromModel` (tokens become the real values the
 * sandbox works with); everything reported, progress included, passes the boundary
 * back, so the sandbox and the workspace hold real values and the model sees tokens.
 */
import type { CallToolResult, McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { jsonSchemaOnce } from '../schema-cache.js';
import type { Config } from '../../config.js';
import { LANGUAGES, type Language } from '../../sandboxes/protocol.js';
import type { ExecuteOptions, ExecuteResult } from '../../sandboxes/types.js';
import { SandboxError } from '../../sandboxes/errors.js';
import { declaresTasks } from '../tasks/extension.js';
import { registerAppTool } from '@modelcontextprotocol/ext-apps/server';
import { RUN_VIEW_URI } from '../ui/run-view.js';
import { TaskError, Tasks, type TaskView } from '../tasks/tasks.js';
import { errorResult, forCall, fromModel, fromModelDeep, modelResourceLink, supportsResourceLinks, textResult, toModelStream, type ToolContext } from '../context.js';
import { formatBytes } from '../../text.js';

/** Files listed by name in one result; the rest are counted. */
const MAX_FILES_LISTED = 50;
/** Output shown in one progress notification; the final result has all of it. */
const MAX_PROGRESS_CHARS = 500;

/**
 * The grants a run may narrow. Each is spelled out (no shared sub-schema) so the JSON
 * schema has no $ref, which some clients cannot resolve; `net` is left out because
 * sandboxes have no network to grant, and sys/ffi keep the ceiling's value.
 */
const pathGrant = () => z.union([z.boolean(), z.array(z.string().startsWith('/'))]).optional();
const nameGrant = () => z.union([z.boolean(), z.array(z.string())]).optional();
const permissionsInput = z
  .object({ read: pathGrant(), write: pathGrant(), net: nameGrant(), env: nameGrant(), run: nameGrant() })
  .strict()
  .describe(
    'Narrow this run below your permission ceiling, Deno-style: true, false, or a list of absolute paths (read, write), hosts (net: "pypi.org", "api.example.com:443", "registries" for the package registries), variable names (env) or programs (run). Omit to keep your ceiling. The network is reached through a proxy (HTTP_PROXY is set): pip, curl, urllib, requests and fetch use it.',
  );

/** Renders a result as the text a model reads. Output blocks only when non-empty. */
export function formatExecution(r: ExecuteResult): string {
  const parts: string[] = [];
  if (r.stdout) parts.push(r.stdout.endsWith('\n') ? r.stdout.slice(0, -1) : r.stdout);
  if (r.stderr) parts.push(`[stderr]\n${r.stderr.endsWith('\n') ? r.stderr.slice(0, -1) : r.stderr}`);
  if (r.truncated.stdout || r.truncated.stderr) {
    parts.push(`[output cut: ${r.truncated.stdout} bytes of stdout and ${r.truncated.stderr} of stderr not shown; write large output to a file and read the part you need]`);
  }
  if (r.result !== undefined && r.result !== null) parts.push(`[result] ${r.result}`);
  if (r.error) parts.push(`[error] ${r.error.name}: ${r.error.message}${r.error.traceback ? `\n${r.error.traceback.trimEnd()}` : ''}`);
  if (r.timedOut) parts.push('[timed out: the process was killed; raise timeout_seconds or make the code faster]');
  else if (r.killed) parts.push('[killed before it finished]');
  if (r.restarted) {
    parts.push(r.language === 'python' ? '[the Python interpreter was restarted: earlier variables and imports are gone]' : r.language === 'bash' ? '[restarted]' : '[the Deno host was restarted: earlier top-level names and imports are gone]');
  }
  if (r.notice) parts.push(`[notice] ${r.notice}`);
  if (r.files.length) {
    const listed = r.files.slice(0, MAX_FILES_LISTED).map((f) => `${f.change} ${f.path}${f.change === 'deleted' ? '' : ` (${formatBytes(f.size)})`}`);
    const more = r.files.length > MAX_FILES_LISTED ? `, and ${r.files.length - MAX_FILES_LISTED} more` : '';
    parts.push(`[files in /workspace] ${listed.join(', ')}${more}`);
  }
  parts.push(`[${r.language} · exit ${r.exitCode ?? 'none'} · ${Math.round(r.durationMs)} ms]`);
  return parts.join('\n');
}

/**
 * Output as progress notifications, in order. Each output stream of the run has its own
 * model stream, so a value printed in pieces (even a character at a time) is sent only
 * once it is whole, as its token. A notification whose text is still held back goes out
 * without a message: it still tells the client the run is alive. Sending failures are
 * ignored (the client may be gone; the result carries all output anyway).
 */
function outputProgress(ctx: ToolContext, send: (n: number, message: string | undefined) => Promise<void>) {
  const streams = { stdout: toModelStream(ctx), stderr: toModelStream(ctx) };
  let n = 0;
  let queue: Promise<void> = Promise.resolve();
  const report = (stream: 'stdout' | 'stderr', shown: string) =>
    send(++n, shown ? `${stream}: ${shown.length > MAX_PROGRESS_CHARS ? `${shown.slice(0, MAX_PROGRESS_CHARS)}…` : shown}` : undefined);
  return {
    onOutput(stream: 'stdout' | 'stderr', data: string): void {
      queue = queue.then(async () => report(stream, await streams[stream].push(data))).catch(() => {});
    },
    /** Waits for queued notifications and sends what the streams still held back. */
    async finish(): Promise<void> {
      await queue;
      for (const stream of ['stdout', 'stderr'] as const) {
        const tail = await streams[stream].end();
        if (tail) await report(stream, tail).catch(() => {});
      }
    },
  };
}

/** Why a run counts as failed (for isError and the audit log), or undefined when it succeeded. */
export function failureClass(r: ExecuteResult): string | undefined {
  if (r.timedOut) return 'timeout';
  if (r.error) return `code:${r.error.name}`;
  if (r.killed) return 'killed';
  if (r.exitCode !== 0) return 'exit';
  return undefined;
}

/** The input schema depends on the configured time limits only; built once per configuration. */
const inputs = new WeakMap<Config, ReturnType<typeof buildInput>>();
function buildInput({ execTimeoutSec, execMaxTimeoutSec }: Config) {
  return jsonSchemaOnce(
    z.object({
      language: z.enum(LANGUAGES as [Language, ...Language[]]).describe('python, typescript, javascript or bash'),
      code: z.string().min(1).describe('The program to run'),
      timeout_seconds: z
        .number()
        .int()
        .min(1)
        .max(execMaxTimeoutSec)
        .optional()
        .describe(`Kill the run after this long (default ${execTimeoutSec}, at most ${execMaxTimeoutSec})`),
      permissions: permissionsInput.optional(),
      reset: z
        .boolean()
        .optional()
        .describe('Forget what earlier runs of this language kept (variables, functions, imports) before this run'),
      background: z
        .boolean()
        .optional()
        .describe('Answer at once with a task to poll instead of waiting (for long runs; only clients that support MCP tasks get one, others wait for the result)'),
    }),
  );
}
export function executeCodeInput(config: Config) {
  let shape = inputs.get(config);
  if (!shape) inputs.set(config, (shape = buildInput(config)));
  return shape;
}

export function registerExecuteCode(server: McpServer, ctx: ToolContext): void {
  registerAppTool(
    server,
    'execute_code',
    {
      title: 'Run code in your sandbox',
      description:
        'Run code in your private sandbox (no network; files in /workspace persist). ' +
        'python keeps variables and imports between calls, like a notebook, and shows the value of a final expression; pandas, numpy, scipy, matplotlib, sklearn are installed. ' +
        'typescript/javascript run under Deno and keep top-level names and imports between calls the same way (per set of permissions); bash runs a shell script. ' +
        'reset: true starts the language afresh. ' +
        'Call upstream tools from code via the wrappers under /tools/servers/ (find them with search_tools). ' +
        'Returns output, the result or error, and the files the run changed.',
      inputSchema: executeCodeInput(ctx.config),
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
      // Hosts that render UI resources show the run with this view (src/mcp/ui/run-view.ts).
      _meta: { ui: { resourceUri: RUN_VIEW_URI } },
    },
    async ({ language, code, timeout_seconds, permissions, reset, background }, { mcpReq }): Promise<CallToolResult> => {
      const call = forCall(ctx);
      try {
        const progressToken = mcpReq._meta?.progressToken;
        // Long runs report output as progress, which also keeps clients from timing out.
        let reporting = progressToken !== undefined;
        const progress =
          progressToken === undefined
            ? undefined
            : outputProgress(call, (n, message) =>
                reporting ? mcpReq.notify({ method: 'notifications/progress', params: { progressToken, progress: n, ...(message ? { message } : {}) } }) : Promise.resolve(),
              );
        const opts: ExecuteOptions = {
          language,
          code: await fromModel(call, code),
          timeoutSec: timeout_seconds,
          reset,
          permissions: permissions && (await fromModelDeep(call, permissions)),
          // Once the call is a task nobody reads its progress: output is no longer passed through the boundary for it.
          onOutput: progress && ((stream, data) => void (reporting && progress.onOutput(stream, data))),
        };
        const tasks = ctx.tasks && declaresTasks(mcpReq) ? ctx.tasks : undefined;
        const outcome = tasks ? await runOrTask(call, tasks, opts, mcpReq.signal, background === true) : await ctx.sandboxes.execute(ctx.owner, { ...opts, signal: mcpReq.signal });
        if ('taskId' in outcome) {
          reporting = false;
          // The extension's CreateTaskResult in place of the call's result (resultType "task").
          return { resultType: 'task', ...outcome } as unknown as CallToolResult;
        }
        await progress?.finish();
        return await presentExecution(call, outcome);
      } catch (e) {
        return errorResult(call, 'execute_code', e);
      }
    },
  );
}

/** A run's result as the caller's model reads it: the text, and links to the files it wrote. */
export async function presentExecution(call: ToolContext, result: ExecuteResult): Promise<CallToolResult> {
  const changed = supportsResourceLinks(call) ? result.files.filter((f) => f.change !== 'deleted').slice(0, MAX_FILES_LISTED) : [];
  const links = await Promise.all(changed.map((f) => modelResourceLink(call, f.path, f.size)));
  return textResult(call, formatExecution(result), links, failureClass(result));
}

/**
 * For a client that supports tasks: the run as a kept run; its result when it ends
 * within SANDGATE_MCP_TASK_AFTER_SEC (at once with `background`), else a task that
 * follows it from then on (src/mcp/tasks/). A sandbox another replica holds runs the
 * call there, as any call, and the client waits.
 */
async function runOrTask(call: ToolContext, tasks: Tasks, opts: ExecuteOptions, signal: AbortSignal, background: boolean): Promise<ExecuteResult | TaskView> {
  const execId = Tasks.execId();
  const abort = new AbortController();
  // Until it is a task, the run is the request's: a client that goes away cancels it.
  const cancel = () => abort.abort();
  signal.addEventListener('abort', cancel, { once: true });
  // The threshold counts from the moment the runner has the run: a run refused before
  // (its sandbox held elsewhere, a permission, a full queue) is answered as any call's.
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  const run = call.sandboxes.execute(call.owner, { ...opts, keep: execId, signal: abort.signal, onStart: () => started() });
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const early = await Promise.race([
      run.then((r) => ({ r })),
      running.then(
        () =>
          new Promise<undefined>((resolve) => {
            timer = setTimeout(() => resolve(undefined), background ? 0 : call.config.mcpTaskAfterSec * 1000);
          }),
      ),
    ]);
    if (early) {
      tasks.release(call.owner, execId);
      return early.r;
    }
    const view = await tasks.create(call.caller, execId, { language: opts.language, timeoutSec: opts.timeoutSec ?? call.config.execTimeoutSec, protocolVersion: call.protocolVersion }, run, abort).catch((e: unknown) => {
      if (e instanceof TaskError) return undefined;
      throw e;
    });
    if (!view) {
      // Too many tasks already: this call waits for its run, as without tasks.
      const r = await run;
      tasks.release(call.owner, execId);
      return r;
    }
    signal.removeEventListener('abort', cancel);
    return view;
  } catch (e) {
    // Another replica holds the sandbox (or this one is stopping): the call goes there, as any call.
    if (e instanceof SandboxError && e.reason === 'held_elsewhere') return call.sandboxes.execute(call.owner, { ...opts, signal });
    abort.abort();
    throw e;
  } finally {
    clearTimeout(timer);
  }
}
