/**
 * read_file, write_file, list_files: the user's /workspace (read-write, within their
 * permission ceiling) and the built-in /skills (read-only), served host-side without
 * starting a sandbox. Text comes back in pages of bytes (ending at a line break where
 * possible, so a page does not end in part of a value); binary files are described, never dumped
 * into the model's context. Paths and written content pass `fromModel`: the workspace
 * keeps real values, and what a model reads of it passes the boundary back.
 */
import type { McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { jsonSchemaOnce } from '../schema-cache.js';
import { allows, denialMessage, PermissionError } from '../../sandboxes/permissions.js';
import type { Workspace, WorkspaceEntry } from '../../sandboxes/workspace.js';
import { WorkspaceError } from '../../sandboxes/workspace.js';
import { errorResult, forCall, fromModel, modelResourceLink, supportsResourceLinks, textResult, workspaceUri, type ToolContext } from '../context.js';
import { mimeTypeOf } from '../mime.js';
import type { SkillsDir } from '../../skills/skills.js';
import { decodeChunk, formatBytes, pageLength } from '../../text.js';

/** Bytes one page of read_file holds when no length is given, and at most (the gateway reads up to MAX_PAGE_BYTES at once). */
export const DEFAULT_PAGE_BYTES = 64 * 1024;
export const MAX_PAGE_BYTES = 256 * 1024;
/** Entries list_files returns when no limit is given, and at most. */
export const DEFAULT_LIST_LIMIT = 200;
export const MAX_LIST_LIMIT = 2000;
/** Largest text write_file accepts (the HTTP body limit is a little above). */
export const MAX_WRITE_BYTES = 2 * 1024 * 1024;

type Area = { kind: 'workspace'; files: Workspace; rel: string; shown: string } | { kind: 'skills'; files: SkillsDir; rel: string; shown: string };

const OUTSIDE =
  'These tools reach two places: /workspace (your files; relative paths start there) and /skills (built-in skills, read-only). Use execute_code for anything else in the sandbox.';

/** Maps a path a model gave to the place it names, checking the user's ceiling for `access`. */
export async function resolveArea(ctx: ToolContext, rawPath: string, access: 'read' | 'write'): Promise<Area> {
  const p = (await fromModel(ctx, rawPath)).trim().replace(/\\/g, '/') || '.';
  const ceiling = await ctx.sandboxes.ceiling(ctx.owner);
  if (p === '/skills' || p.startsWith('/skills/')) {
    const rel = ctx.skills.relative(p);
    if (access === 'write') {
      throw new WorkspaceError('EINVAL', `/skills is read-only. Save your own skills as /workspace/skills/<name>/SKILL.md (with name and description in YAML front matter).`);
    }
    if (!allows(ceiling, 'read', `/skills/${rel}`)) throw new PermissionError(denialMessage('read', `/skills/${rel}`), 'read');
    return { kind: 'skills', files: ctx.skills, rel, shown: rel ? `/skills/${rel}` : '/skills' };
  }
  if (p.startsWith('/') && p !== '/workspace' && !p.startsWith('/workspace/')) throw new WorkspaceError('EOUTSIDE', `"${p}" is outside what these tools reach. ${OUTSIDE}`);
  const files = await ctx.sandboxes.openWorkspace(ctx.owner);
  const rel = files.relative(p);
  const full = rel ? `/workspace/${rel}` : '/workspace';
  if (!allows(ceiling, access, full)) throw new PermissionError(denialMessage(access, full), access);
  return { kind: 'workspace', files, rel, shown: full };
}

function describeBinary(area: Area, size: number): string {
  const how =
    area.kind === 'workspace'
      ? `Process it with execute_code (e.g. Python), or read it as the resource ${workspaceUri(area.rel)} if your client shows resources.`
      : 'Process it with execute_code.';
  return `${area.shown} is a binary file (${mimeTypeOf(area.rel)}, ${formatBytes(size)}), so its bytes are not shown here. ${how}`;
}

// Input schemas are built once: every request builds a fresh server that reuses them.
export const READ_FILE_INPUT = jsonSchemaOnce(
  z.object({
    path: z.string().min(1).max(4096).describe('File path, e.g. data/report.csv or /skills/data-analysis/SKILL.md'),
    offset: z.number().int().min(0).optional().describe('First byte to read (default 0)'),
    length: z.number().int().min(1).max(MAX_PAGE_BYTES).optional().describe(`Bytes to read (default ${DEFAULT_PAGE_BYTES}, at most ${MAX_PAGE_BYTES})`),
  }),
);

export const WRITE_FILE_INPUT = jsonSchemaOnce(
  z.object({
    path: z.string().min(1).max(4096).describe('File path, e.g. scripts/clean.py'),
    content: z.string().describe('The complete text to write (UTF-8)'),
    append: z.boolean().optional().describe('Append instead of replacing (default false)'),
  }),
);

export const LIST_FILES_INPUT = jsonSchemaOnce(
  z.object({
    path: z.string().max(4096).optional().describe('Folder, e.g. data or /skills (default /workspace)'),
    recursive: z.boolean().optional().describe('Include subfolders (default false)'),
    limit: z.number().int().min(1).max(MAX_LIST_LIMIT).optional().describe(`Most entries to return (default ${DEFAULT_LIST_LIMIT})`),
  }),
);

export function registerReadFile(server: McpServer, ctx: ToolContext): void {
  server.registerTool(
    'read_file',
    {
      title: 'Read a file',
      description:
        'Read a text file from /workspace (your files) or /skills (built-in skills, read-only). Relative paths start at /workspace. ' +
        `Returns up to ${DEFAULT_PAGE_BYTES / 1024} KiB by default; for larger files pass offset and length (bytes) to read further pages. ` +
        'Binary files are described, not shown.',
      inputSchema: READ_FILE_INPUT,
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async ({ path, offset = 0, length = DEFAULT_PAGE_BYTES }) => {
      const call = forCall(ctx);
      try {
        const area = await resolveArea(call, path, 'read');
        const st = await area.files.stat(area.rel);
        if (st.type === 'dir') throw new WorkspaceError('EISDIR', `${area.shown} is a directory; use list_files to see what is in it.`);
        if (offset > 0 && offset >= st.size) return textResult(call, `${area.shown} has ${st.size} bytes; offset ${offset} is past its end.`);
        const read = await area.files.read(area.rel, { offset, length });
        const { size } = read;
        const data = read.data.subarray(0, pageLength(read.data, offset, size));
        const reachesEnd = offset + data.length >= size;
        const decoded = decodeChunk(data, offset, reachesEnd);
        if (!decoded) return textResult(call, describeBinary(area, size));
        if (decoded.start === 0 && decoded.end >= size) return textResult(call, decoded.text);
        const more = decoded.end < size ? ` Continue with offset=${decoded.end}.` : ' That is the end of the file.';
        const note = `[${area.shown}: bytes ${decoded.start}-${decoded.end} of ${size}.${more}]`;
        return textResult(call, `${decoded.text}\n\n${note}`);
      } catch (e) {
        return errorResult(call, 'read_file', e);
      }
    },
  );
}

export function registerWriteFile(server: McpServer, ctx: ToolContext): void {
  server.registerTool(
    'write_file',
    {
      title: 'Write a file',
      description:
        'Write a text file in /workspace (relative paths start there), creating parent folders. Replaces the file unless append is true. ' +
        'Files written here are visible to code run by execute_code. Save your own skills as /workspace/skills/<name>/SKILL.md.',
      inputSchema: WRITE_FILE_INPUT,
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    },
    async ({ path, content, append }) => {
      const call = forCall(ctx);
      try {
        const area = await resolveArea(call, path, 'write');
        if (area.kind !== 'workspace') throw new WorkspaceError('EINVAL', `${area.shown} is read-only.`);
        const text = await fromModel(call, content);
        const bytes = Buffer.byteLength(text);
        if (bytes > MAX_WRITE_BYTES) {
          throw new WorkspaceError('ETOOBIG', `the content is ${formatBytes(bytes)}; write_file takes at most ${formatBytes(MAX_WRITE_BYTES)}. Generate large files with execute_code instead.`);
        }
        const { size } = await area.files.write(area.rel, text, { append: append === true });
        const links = supportsResourceLinks(call) ? [await modelResourceLink(call, area.rel, size)] : [];
        return textResult(call, `${append ? 'Appended' : 'Wrote'} ${bytes} bytes to ${area.shown} (now ${size} bytes).`, links);
      } catch (e) {
        return errorResult(call, 'write_file', e);
      }
    },
  );
}

export function registerListFiles(server: McpServer, ctx: ToolContext): void {
  server.registerTool(
    'list_files',
    {
      title: 'List files',
      description:
        'List a folder in /workspace (default) or /skills: one entry per line, folders end in "/", files show their size. ' +
        'Set recursive to include subfolders.',
      inputSchema: LIST_FILES_INPUT,
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async ({ path = '/workspace', recursive, limit = DEFAULT_LIST_LIMIT }) => {
      const call = forCall(ctx);
      try {
        const area = await resolveArea(call, path, 'read');
        const entries: WorkspaceEntry[] = await area.files.list(area.rel, { recursive: recursive === true, limit: limit + 1 });
        const shown = entries.slice(0, limit);
        const base = area.rel ? `${area.rel}/` : '';
        const lines = shown.map((e) => {
          const name = e.path.startsWith(base) ? e.path.slice(base.length) : e.path;
          return e.type === 'dir' ? `${name}/` : `${name}  ${formatBytes(e.size)}`;
        });
        const head = `${area.shown}:`;
        if (!lines.length) return textResult(call, `${head} (empty)`);
        const more = entries.length > limit ? `\n[more entries not shown; raise limit (at most ${MAX_LIST_LIMIT}) or list a subfolder]` : '';
        return textResult(call, `${head}\n${lines.join('\n')}${more}`);
      } catch (e) {
        return errorResult(call, 'list_files', e);
      }
    },
  );
}
