/**
 * What every tool handler gets: who is calling, the parts it may use, and the helpers
 * that keep results uniform: errors become `isError` results a model can read (tool
 * failures are data), text passes the model boundary, changed files become links.
 *
 * The model boundary, in both directions, goes through the helpers here: `toModel`,
 * `toModelStream` and `modelResourceLink` for what a model will read; `fromModel` and
 * `fromModelDeep` for what a model wrote. The latter record the token literals the
 * boundary could not resolve on the call's context, and `textResult` tells the model
 * about them, so a tool handler never has to remember to.
 */
import type { CallToolResult, ResourceLink } from '@modelcontextprotocol/server';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { SandboxExecution } from '../sandboxes/execution.js';
import { GatewayError } from '../errors.js';
import { SandboxError } from '../sandboxes/errors.js';
import type { SandboxOwner } from '../sandboxes/types.js';
import type { Db } from '../store/store.js';
import type { Caller } from '../auth/caller.js';
import type { ModelBoundary, ModelStream } from '../pii/boundary.js';
import type { ToolCatalog } from './catalog.js';
import { ERROR_CLASS_META } from './audited-transport.js';
import type { Tasks } from './tasks/tasks.js';
import { mimeTypeOf } from './mime.js';
import { encodePathSegment } from './uri-path.js';
import type { SkillsDir } from '../skills/skills.js';

/** The slice of the sandbox manager the MCP tools use. */
export type SandboxAccess = Pick<SandboxExecution, 'execute' | 'openWorkspace' | 'ceiling'>;

/** Process-wide parts, shared by every request. */
export interface McpDeps {
  config: Config;
  db: Db;
  logger: Logger;
  sandboxes: SandboxAccess;
  skills: SkillsDir;
  /** The upstream hub's catalog; absent when no upstream servers are configured. */
  catalog?: ToolCatalog;
  boundary: ModelBoundary;
  /** MCP tasks (src/mcp/tasks/): long runs answered with a handle; absent where nothing follows them (tests of the tools alone). */
  tasks?: Tasks;
}

/** One request's view: deps plus the authenticated caller. */
export interface ToolContext extends McpDeps {
  caller: Caller;
  /** The caller's user as the sandbox manager knows it. */
  owner: SandboxOwner;
  /** MCP-Protocol-Version the client sent (absent before 2025-06-18). */
  protocolVersion?: string;
  /**
   * Token literals from the model that the boundary could not resolve, collected by
   * `fromModel` for this call's result (see `forCall`).
   */
  unknownTokens: Set<string>;
}

/**
 * The context for one tool call or resource read: the same caller with its own set of
 * unknown tokens, so calls that share a request (a JSON-RPC batch) never mix notes.
 */
export function forCall(ctx: ToolContext): ToolContext {
  return { ...ctx, unknownTokens: new Set() };
}

/** Text for a model to read. */
export const toModel = (ctx: ToolContext, text: string) => ctx.boundary.toModel(ctx.caller, text);

/** Output for a model as it is produced; one stream per run and output stream. */
export function toModelStream(ctx: ToolContext): { push(chunk: string): string | Promise<string>; end(): string | Promise<string> } {
  const stream: ModelStream | undefined = ctx.boundary.toModelStream?.(ctx.caller);
  return stream ?? { push: (chunk) => toModel(ctx, chunk), end: () => '' };
}

/** Text a model wrote, made ready for the sandbox; unresolved tokens are noted on `ctx`. */
export async function fromModel(ctx: ToolContext, text: string): Promise<string> {
  const r = await ctx.boundary.fromModel(ctx.caller, text);
  for (const t of r.unknown) ctx.unknownTokens.add(t);
  return r.text;
}

/** `fromModel` over every string in a JSON-like value (arrays and plain objects), e.g. permission lists. */
export async function fromModelDeep<T>(ctx: ToolContext, value: T): Promise<T> {
  if (typeof value === 'string') return (await fromModel(ctx, value)) as T;
  if (Array.isArray(value)) return (await Promise.all(value.map((v: unknown) => fromModelDeep(ctx, v)))) as T;
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    const entries = await Promise.all(Object.entries(value).map(async ([k, v]) => [k, await fromModelDeep(ctx, v)] as const));
    return Object.fromEntries(entries) as T;
  }
  return value;
}

/**
 * What a model is told about tokens it sent that this scope does not know, or undefined
 * when there were none. The literals are the model's own text, so the note is added
 * after the boundary (tokenizing it would disguise them as other tokens).
 */
export function unknownTokensNote(unknown: ReadonlySet<string> | readonly string[]): string | undefined {
  const list = [...unknown];
  if (!list.length) return undefined;
  const names = list.length === 1 ? list[0] : `${list.slice(0, -1).join(', ')} and ${list[list.length - 1]}`;
  return list.length === 1
    ? `Note: ${names} is not a token this conversation knows; it was passed on unchanged.`
    : `Note: ${names} are not tokens this conversation knows; they were passed on unchanged.`;
}

/** resource_link content exists from protocol 2025-06-18 on; older clients would reject it. */
export function supportsResourceLinks(ctx: ToolContext): boolean {
  return ctx.protocolVersion !== undefined && ctx.protocolVersion >= '2025-06-18';
}

/** The URI of a workspace file: file:///workspace/<path>, each segment percent-encoded, a name's undecodable bytes as themselves (./uri-path.ts). */
export function workspaceUri(rel: string): string {
  return `file:///workspace/${rel.split('/').map(encodePathSegment).join('/')}`;
}

function resourceLink(rel: string, size?: number): ResourceLink {
  return {
    type: 'resource_link',
    uri: workspaceUri(rel),
    name: rel.split('/').pop() || rel,
    title: `/workspace/${rel}`,
    mimeType: mimeTypeOf(rel),
    ...(size !== undefined ? { size } : {}),
  };
}

/** A resource link for a workspace file, its path passed through `toModel` (names can be personal data). */
export async function modelResourceLink(ctx: ToolContext, rel: string, size?: number): Promise<ResourceLink> {
  // The type comes from the real name: tokenizing may swallow an extension (`a@b.csv`).
  return { ...resourceLink(await toModel(ctx, rel), size), mimeType: mimeTypeOf(rel) };
}

/**
 * A tool result whose text passed `toModel`, with a note on any token the call's
 * `fromModel` could not resolve. A failure names its class (for the audit log only:
 * the audited transport removes it before the result is sent). `extra` content must
 * already be fit for a model (see `modelResourceLink`).
 */
export async function textResult(ctx: ToolContext, text: string, extra: CallToolResult['content'] = [], errorClass?: string): Promise<CallToolResult> {
  const note = unknownTokensNote(ctx.unknownTokens);
  const shown = await toModel(ctx, text);
  const result: CallToolResult = { content: [{ type: 'text', text: note ? `${shown}\n\n${note}` : shown }, ...extra] };
  if (errorClass !== undefined) {
    result.isError = true;
    result._meta = { [ERROR_CLASS_META]: errorClass };
  }
  return result;
}

/**
 * Turns a thrown error into a result the model can act on. Errors of our own tree carry
 * messages written for users; anything else is logged and summarised, since its message
 * may describe the host.
 */
export async function errorResult(ctx: ToolContext, tool: string, e: unknown): Promise<CallToolResult> {
  let text: string;
  let errorClass: string;
  if (e instanceof GatewayError) {
    // A user's own mistake (a missing file, a permission they lack) is theirs to read:
    // debug only. What an operator must see (a sandbox that cannot start) is a warning.
    text = e instanceof SandboxError ? `The sandbox could not do this: ${e.message}` : e.message;
    errorClass = e.auditClass;
    ctx.logger[e.operator ? 'warn' : 'debug']({ user: ctx.owner.name, tool, reason: e.reason, ...(e.logMessage ? { detail: e.logMessage } : {}) }, 'tool refused');
  } else {
    ctx.logger.error({ err: e, user: ctx.owner.name, tool }, 'tool failed');
    text = `${tool} failed because of an internal error in the gateway (it has been logged). Try again; if it persists, tell your sandgate admin.`;
    errorClass = 'internal';
  }
  return textResult(ctx, text, [], errorClass);
}
