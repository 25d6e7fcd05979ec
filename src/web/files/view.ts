/**
 * What the files page's templates (views/web/files) are given: a folder's listing with
 * its crumbs, a file's preview, a page of a table. Everything is read through the
 * workspace's confined helper. A preview decides how a file may be shown: raster images
 * as images, CSV/TSV as a table, Markdown made safe, everything else (HTML and SVG
 * included) as text; JSON is indented only within bounds.
 */
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import type { Request } from 'express';
import { indentedExtent, prettyJson } from '../../bounded-json.js';
import { GatewayError } from '../../errors.js';
import { WorkspaceError, type Workspace } from '../../sandboxes/workspace.js';
import { formatBytes } from '../../text.js';
import { renderMarkdownFor } from '../markdown.js';
import { userOf } from '../../auth/session-middleware.js';
import { PreviewCache } from './preview-cache.js';

/** Text shown in a preview; a longer file shows its start and a note. */
const PREVIEW_BYTES = 256 * 1024;
/** Rows of a table page, and the bytes read to find them. */
const TABLE_ROWS = 100;
const TABLE_CHUNK = 512 * 1024;
const TABLE_COLUMNS = 50;
const CELL_CHARS = 200;
/** Longest time a preview's Markdown may take to format (an answer's may take longer). */
const PREVIEW_FORMAT_MS = 2_000;
/** Entries listed in one folder. */
const LIST_LIMIT = 1000;

/** The raster image types, by extension: the only files shown (and served) as images. */
export const RASTER: Record<string, string> = { '.png': 'image/png', '.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.gif': 'image/gif', '.webp': 'image/webp' };

function crumbsOf(dir: string): { name: string; path: string }[] {
  const parts = dir.split('/').filter(Boolean);
  return parts.map((name, i) => ({ name, path: parts.slice(0, i + 1).join('/') }));
}

function looksBinary(b: Buffer): boolean {
  const n = Math.min(b.length, 8000);
  for (let i = 0; i < n; i++) if (b[i] === 0) return true;
  return false;
}

function lastNewline(b: Buffer): number {
  return b.lastIndexOf(0x0a);
}

/** Aborted when the browser goes away before `req`'s response is sent. */
function requestEnd(req: Request): AbortSignal {
  const ended = new AbortController();
  const res = req.res;
  res?.once('close', () => {
    if (!res.writableFinished) ended.abort();
  });
  return ended.signal;
}

/** A folder's panel (where uploads and new folders go). */
export const folderView = (dir: string, uploadMaxMb: number) => ({ dir, maxMb: uploadMaxMb });

/** A folder's listing: folders first, then files, each by name; at most LIST_LIMIT entries. */
export async function treeView(w: Workspace, dir: string) {
  const rel = w.relative(dir);
  const listing = await w.list(rel, { limit: LIST_LIMIT });
  const entries = listing
    .map((e) => ({ ...e, name: path.posix.basename(e.path), path: rel ? `${rel}/${path.posix.basename(e.path)}` : path.posix.basename(e.path), sizeText: formatBytes(e.size) }))
    .sort((a, b) => (a.type === b.type ? a.name.localeCompare(b.name) : a.type === 'dir' ? -1 : 1));
  return { dir: rel, crumbs: crumbsOf(rel), entries, more: listing.stopped === 'limit' };
}

/** One page of a CSV/TSV from byte `offset` (0: the first row after the header), without reading the whole file. */
export async function tableView(w: Workspace, rel: string, offset: number, first: number) {
  const delimiter = rel.toLowerCase().endsWith('.tsv') ? '\t' : ',';
  const options = { delimiter, relax_column_count: true, relax_quotes: true, skip_empty_lines: true, info: true, bom: true } as const;
  const head = (await w.read(rel, { length: TABLE_CHUNK })).data;
  const headerRecords = parse(head.subarray(0, lastNewline(head) + 1 || head.length), { ...options, to: 1 }) as unknown as { record: string[]; info: { bytes: number } }[];
  const header = (headerRecords[0]?.record ?? []).slice(0, TABLE_COLUMNS).map((h) => h.slice(0, CELL_CHARS));
  const start = offset > 0 ? offset : (headerRecords[0]?.info.bytes ?? 0);
  const { data, size } = await w.read(rel, { offset: start, length: TABLE_CHUNK });
  const complete = start + data.length >= size ? data : data.subarray(0, lastNewline(data) + 1);
  let records: { record: string[]; info: { bytes: number } }[] = [];
  try {
    records = parse(complete, { ...options, to: TABLE_ROWS }) as unknown as typeof records;
  } catch (e) {
    throw new GatewayError(`This file could not be read as a table near byte ${start}: ${(e as Error).message.slice(0, 200)}`, { reason: 'invalid_request', status: 422 });
  }
  const rows = records.map((r) => r.record.slice(0, TABLE_COLUMNS).map((c) => (c.length > CELL_CHARS ? `${c.slice(0, CELL_CHARS)}…` : c)));
  const consumed = records.at(-1)?.info.bytes ?? complete.length;
  const next = start + consumed < size && rows.length === TABLE_ROWS ? start + consumed : null;
  return { path: rel, header, rows, first, next, pageSize: TABLE_ROWS, truncatedColumns: records.some((r) => r.record.length > TABLE_COLUMNS) };
}

/** Previews of one gateway: formatted Markdown is kept (./preview-cache.ts) for the next time the same file is opened. */
export class Previews {
  private readonly cache = new PreviewCache();

  /** What the preview of `p` shows; `req`'s user owns the formatting, which is skipped if `req` ends before it starts. */
  async of(req: Request, w: Workspace, p: string) {
    const rel = w.relative(p);
    const st = await w.stat(rel);
    if (st.type === 'dir') throw new WorkspaceError('EISDIR', `"${rel}" is a folder`);
    const ext = path.posix.extname(rel).toLowerCase();
    const base = { path: rel, name: path.posix.basename(rel), size: st.size, sizeText: formatBytes(st.size) };
    if (RASTER[ext]) return { ...base, kind: 'image' };
    if (ext === '.csv' || ext === '.tsv') return { ...base, kind: 'table', table: await tableView(w, rel, 0, 1) };
    const markdown = ext === '.md' || ext === '.markdown';
    const key = { userId: userOf(req).id, path: rel, mtimeMs: st.mtimeMs, size: st.size };
    const cutNote = (shown: number) => (st.size > shown ? `Only the first ${formatBytes(shown)} are shown.` : undefined);
    const kept = markdown ? this.cache.get(key) : undefined;
    if (kept !== undefined) return { ...base, kind: 'markdown', html: kept, note: cutNote(Math.min(st.size, PREVIEW_BYTES)) };
    const { data } = await w.read(rel, { length: PREVIEW_BYTES });
    if (looksBinary(data)) return { ...base, kind: 'none', note: 'This file is not text: download it to open it.' };
    const cut = cutNote(data.length);
    const text = data.toString('utf8');
    if (markdown) {
      const r = await renderMarkdownFor(text, { owner: key.userId, signal: requestEnd(req), timeLimitMs: PREVIEW_FORMAT_MS });
      if (r.lasting) this.cache.set(key, r.html);
      return { ...base, kind: 'markdown', html: r.html, note: cut };
    }
    // JSON is indented only within bounds, known from a scan of the text before it is parsed: indenting multiplies a nested file's size.
    const jsonDepth = 64;
    const jsonChars = 2 * PREVIEW_BYTES;
    let unformatted: string | undefined;
    if (ext === '.json' && !cut) {
      const extent = indentedExtent(text, { maxDepth: jsonDepth, maxChars: jsonChars });
      if (extent.deeper) unformatted = `Shown as it is: this JSON is nested more than ${jsonDepth} levels deep.`;
      else if (extent.longer) unformatted = `Shown as it is: indented, this JSON would be longer than ${formatBytes(jsonChars)}.`;
      else {
        try {
          const pretty = prettyJson(JSON.parse(text), { maxDepth: jsonDepth, maxChars: jsonChars });
          if (!pretty.longer) return { ...base, kind: 'text', text: pretty.text };
          unformatted = `Shown as it is: indented, this JSON would be longer than ${formatBytes(jsonChars)}.`;
        } catch {
          /* not valid JSON: shown as it is */
        }
      }
    }
    const active = ['.html', '.htm', '.svg', '.xml'].includes(ext) ? 'Shown as source text: pages and images that can run code are never opened here.' : undefined;
    return { ...base, kind: 'text', text, note: [active, unformatted, cut].filter(Boolean).join(' ') || undefined };
  }
}
