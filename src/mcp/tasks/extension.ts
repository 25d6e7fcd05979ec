/**
 * The tasks extension on one server: `tasks/get`, `tasks/update` and `tasks/cancel`
 * for the caller's own tasks, and the capability in `server/discover`. Only a client
 * that declares the extension on a request gets a task (execute-code.ts) or may ask
 * about one (-32021 otherwise, as the extension says).
 */
import { CLIENT_CAPABILITIES_META_KEY, MissingRequiredClientCapabilityError, ProtocolError, ProtocolErrorCode, type McpServer, type ServerContext } from '@modelcontextprotocol/server';
import { z } from 'zod';
import type { ToolContext } from '../context.js';
import { TASKS_EXTENSION, TaskError, type Tasks } from './tasks.js';

const TASK_PARAMS = z.object({ taskId: z.string().min(1).max(64) }).passthrough();

/** Whether the request declared the tasks extension in its per-request client capabilities (2026-07-28). */
export function declaresTasks(mcpReq: ServerContext['mcpReq']): boolean {
  const caps = (mcpReq.envelope as Record<string, unknown> | undefined)?.[CLIENT_CAPABILITIES_META_KEY] as { extensions?: Record<string, unknown> } | undefined;
  const ext = caps?.extensions;
  return !!ext && typeof ext === 'object' && Object.hasOwn(ext, TASKS_EXTENSION);
}

function requireDeclared(ctx: ServerContext): void {
  if (!declaresTasks(ctx.mcpReq)) {
    throw new MissingRequiredClientCapabilityError({ requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } }, 'Missing required client capability: the tasks extension');
  }
}

async function answer<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (e) {
    if (e instanceof TaskError) throw new ProtocolError(ProtocolErrorCode.InvalidParams, e.message);
    throw e;
  }
}

export function registerTasksExtension(mcp: McpServer, ctx: ToolContext, tasks: Tasks): void {
  const server = mcp.server;
  server.setRequestHandler('tasks/get', { params: TASK_PARAMS }, (params, rctx) => {
    requireDeclared(rctx);
    return answer(async () => ({ ...(await tasks.get(ctx.caller, params.taskId)) }));
  });
  server.setRequestHandler('tasks/cancel', { params: TASK_PARAMS }, (params, rctx) => {
    requireDeclared(rctx);
    return answer(async () => (await tasks.cancel(ctx.caller, params.taskId), {}));
  });
  // No run of ours asks its client for input, so there is never an outstanding request to answer.
  server.setRequestHandler('tasks/update', { params: TASK_PARAMS }, (params, rctx) => {
    requireDeclared(rctx);
    return answer(async () => (await tasks.get(ctx.caller, params.taskId), {}));
  });
  server.registerCapabilities({ extensions: { [TASKS_EXTENSION]: {} } });
}
