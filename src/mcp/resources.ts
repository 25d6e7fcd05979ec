/**
 * Workspace files as MCP resources: one template, file:///workspace/{+path}, listed and
 * completed from the caller's own workspace. Clients may hand any of it to a model, so
 * everything passes the model boundary: listed names and URIs, completions and text
 * contents go out through `toModel` (a file named after a customer is listed by its
 * token), and URIs and completion input come back through `fromModel`. Binary files
 * come back as base64 blobs, which the boundary cannot read. A name that is not UTF-8
 * keeps its bytes in the URI (./uri-path.ts), so its link opens that very file.
 */
import { ProtocolError, ProtocolErrorCode, ResourceNotFoundError, ResourceTemplate, type McpServer, type ReadResourceResult } from '@modelcontextprotocol/server';
import { allows, denialMessage } from '../sandboxes/permissions.js';
import { MAX_READ_BYTES, WorkspaceError } from '../sandboxes/workspace.js';
import { forCall, fromModel, toModel, unknownTokensNote, workspaceUri, type ToolContext } from './context.js';
import { mimeTypeOf } from './mime.js';
import { decodeChunk } from '../text.js';
import { decodePathSegment } from './uri-path.js';

/** Files resources/list returns; the template still reaches every file. */
export const MAX_LISTED_RESOURCES = 500;
/** Largest file served as one resource: one read of the gateway. */
export const MAX_RESOURCE_BYTES = MAX_READ_BYTES;

export const WORKSPACE_TEMPLATE = 'file:///workspace/{+path}';

function relFromVariable(v: string | string[] | undefined): string {
  const raw = Array.isArray(v) ? v.join('/') : (v ?? '');
  try {
    return raw.split('/').map(decodePathSegment).join('/');
  } catch {
    throw new ProtocolError(ProtocolErrorCode.InvalidParams, `bad percent-encoding in resource path "${raw}"`);
  }
}

export function registerWorkspaceResources(server: McpServer, ctx: ToolContext): void {
  const readable = async (rel: string) => allows(await ctx.sandboxes.ceiling(ctx.owner), 'read', rel ? `/workspace/${rel}` : '/workspace');

  const template = new ResourceTemplate(WORKSPACE_TEMPLATE, {
    list: async () => {
      if (!(await readable(''))) return { resources: [] };
      const ws = await ctx.sandboxes.openWorkspace(ctx.owner);
      const files = (await ws.list('', { recursive: true, limit: MAX_LISTED_RESOURCES * 4 })).filter((e) => e.type === 'file').slice(0, MAX_LISTED_RESOURCES);
      const resources = await Promise.all(
        files.map(async (f) => {
          const shown = await toModel(ctx, f.path);
          // A title of its own (the path), so that clients which show titles list files apart, not one "Workspace file" each.
          return { uri: workspaceUri(shown), name: shown, title: `/workspace/${shown}`, mimeType: mimeTypeOf(f.path), size: f.size };
        }),
      );
      return { resources };
    },
    complete: {
      path: async (typed) => {
        const value = await fromModel(forCall(ctx), typed);
        const ws = await ctx.sandboxes.openWorkspace(ctx.owner);
        const dir = value.includes('/') ? value.slice(0, value.lastIndexOf('/')) : '';
        const entries = await ws.list(dir, { limit: 1000 }).catch(() => []);
        const matches = entries
          .map((e) => (e.type === 'dir' ? `${e.path}/` : e.path))
          .filter((p) => p.startsWith(value))
          .slice(0, 100);
        return Promise.all(matches.map(async (p) => toModel(ctx, p)));
      },
    },
  });

  server.registerResource(
    'workspace-file',
    template,
    { title: 'Workspace file', description: 'A file in your sandgate workspace (/workspace in your sandbox).' },
    async (uri, variables): Promise<ReadResourceResult> => {
      const call = forCall(ctx);
      // A failure's message names the real path: it passes the boundary like any text.
      const failureText = async (message: string) => {
        const note = unknownTokensNote(call.unknownTokens);
        const shown = await toModel(call, message);
        return note ? `${shown} ${note}` : shown;
      };
      const failure = async (message: string) => new ProtocolError(ProtocolErrorCode.InvalidParams, await failureText(message));
      const rel = await fromModel(call, relFromVariable(variables.path));
      if (!(await readable(rel))) throw await failure(denialMessage('read', `/workspace/${rel}`));
      try {
        const ws = await ctx.sandboxes.openWorkspace(ctx.owner);
        const st = await ws.stat(rel);
        if (st.type === 'dir') throw new WorkspaceError('EISDIR', `/workspace/${rel} is a directory`);
        if (st.size > MAX_RESOURCE_BYTES) {
          throw new WorkspaceError('ETOOBIG', `/workspace/${rel} is ${st.size} bytes; resources are served up to ${MAX_RESOURCE_BYTES}. Use read_file with offset and length.`);
        }
        const { data } = await ws.read(rel);
        const decoded = decodeChunk(data, 0, true);
        const mimeType = decoded && mimeTypeOf(rel) === 'application/octet-stream' ? 'text/plain' : mimeTypeOf(rel);
        return {
          contents: [decoded ? { uri: uri.href, mimeType, text: await toModel(call, decoded.text) } : { uri: uri.href, mimeType, blob: data.toString('base64') }],
        };
      } catch (e) {
        // The SDK answers a missing resource with -32602 and the URI as data, on every protocol version.
        if (e instanceof WorkspaceError && e.code === 'ENOENT') throw new ResourceNotFoundError(uri.href, await failureText(e.message));
        if (e instanceof WorkspaceError) throw await failure(e.message);
        if (e instanceof ProtocolError) throw e;
        ctx.logger.error({ err: e, user: ctx.owner.name, uri: uri.href }, 'resource read failed');
        throw new ProtocolError(ProtocolErrorCode.InternalError, 'The file could not be read because of an internal error in the gateway (it has been logged).');
      }
    },
  );
}
