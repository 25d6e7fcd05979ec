/**
 * Workspace files as MCP resources: one template, file:///workspace/{+path}, listed and
 * completed from the caller's own workspace. Text comes back as text (through the model
 * boundary, since clients may hand it to a model), anything else as a base64 blob.
 */
import { ResourceTemplate, type McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { ReadResourceResult } from '@modelcontextprotocol/sdk/types.js';
import { McpError, ErrorCode } from '@modelcontextprotocol/sdk/types.js';
import { allows, denialMessage } from '../sandboxes/permissions.js';
import { WorkspaceError } from '../sandboxes/workspace.js';
import { toModel, workspaceUri, type ToolContext } from './context.js';
import { mimeTypeOf } from './mime.js';
import { decodeChunk } from './text.js';

/** Files resources/list returns; the template still reaches every file. */
export const MAX_LISTED_RESOURCES = 500;
/** Largest file served as one resource. */
export const MAX_RESOURCE_BYTES = 8 * 1024 * 1024;

export const WORKSPACE_TEMPLATE = 'file:///workspace/{+path}';

function relFromVariable(v: string | string[] | undefined): string {
  const raw = Array.isArray(v) ? v.join('/') : (v ?? '');
  try {
    return raw.split('/').map(decodeURIComponent).join('/');
  } catch {
    throw new McpError(ErrorCode.InvalidParams, `bad percent-encoding in resource path "${raw}"`);
  }
}

export function registerWorkspaceResources(server: McpServer, ctx: ToolContext): void {
  const readable = (rel: string) => allows(ctx.sandboxes.ceiling(ctx.owner), 'read', rel ? `/workspace/${rel}` : '/workspace');

  const template = new ResourceTemplate(WORKSPACE_TEMPLATE, {
    list: async () => {
      if (!readable('')) return { resources: [] };
      const ws = await ctx.sandboxes.openWorkspace(ctx.owner);
      const files = (await ws.list('', { recursive: true, limit: MAX_LISTED_RESOURCES * 4 })).filter((e) => e.type === 'file').slice(0, MAX_LISTED_RESOURCES);
      return {
        resources: files.map((f) => ({ uri: workspaceUri(f.path), name: f.path, mimeType: mimeTypeOf(f.path), size: f.size })),
      };
    },
    complete: {
      path: async (value) => {
        const ws = await ctx.sandboxes.openWorkspace(ctx.owner);
        const dir = value.includes('/') ? value.slice(0, value.lastIndexOf('/')) : '';
        const entries = await ws.list(dir, { limit: 1000 }).catch(() => []);
        return entries
          .map((e) => (e.type === 'dir' ? `${e.path}/` : e.path))
          .filter((p) => p.startsWith(value))
          .slice(0, 100);
      },
    },
  });

  server.registerResource(
    'workspace-file',
    template,
    { title: 'Workspace file', description: 'A file in your sandgate workspace (/workspace in your sandbox).' },
    async (uri, variables): Promise<ReadResourceResult> => {
      const rel = relFromVariable(variables.path);
      if (!readable(rel)) throw new McpError(ErrorCode.InvalidParams, denialMessage('read', `/workspace/${rel}`));
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
          contents: [decoded ? { uri: uri.href, mimeType, text: await toModel(ctx, decoded.text) } : { uri: uri.href, mimeType, blob: data.toString('base64') }],
        };
      } catch (e) {
        if (e instanceof WorkspaceError) throw new McpError(e.code === 'ENOENT' ? -32002 : ErrorCode.InvalidParams, e.message);
        throw e;
      }
    },
  );
}
