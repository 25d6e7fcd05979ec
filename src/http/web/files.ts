/**
 * The artifact browser: the user's workspace as a folder tree, previews, downloads,
 * uploads, new folders, renames and deletes, all through the workspace's confined helper
 * (src/sandboxes/workspace.ts) like every other file access of the gateway.
 *
 * Files are hostile: code in the sandbox writes them, and a model chose their names.
 * Names are always shown as text. Nothing a browser could run is rendered in the app's
 * origin: previews show HTML, SVG and the like as source text; the raw route serves only
 * raster images inline, everything else as a download, all with `nosniff` and a CSP
 * `sandbox` that gives a file opened in its own tab no script and no origin.
 */
import path from 'node:path';
import busboy from 'busboy';
import { parse } from 'csv-parse/sync';
import express, { type Request, type Response, type Router } from 'express';
import { GatewayError } from '../../errors.js';
import { formatBytes } from '../../mcp/text.js';
import type { SandboxManager } from '../../sandboxes/manager.js';
import { WorkspaceError, type Workspace } from '../../sandboxes/workspace.js';
import { renderMarkdown } from '../../web/markdown.js';
import type { Config } from '../../config.js';
import { userOf, type WebAuth } from './auth.js';
import { renderPage, renderPartial } from './render.js';

/** Text shown in a preview; a longer file shows its start and a note. */
const PREVIEW_BYTES = 256 * 1024;
/** Rows of a table page, and the bytes read to find them. */
const TABLE_ROWS = 100;
const TABLE_CHUNK = 512 * 1024;
const TABLE_COLUMNS = 50;
const CELL_CHARS = 200;
/** Entries listed in one folder. */
const LIST_LIMIT = 1000;
/** Bytes read per step of a download. */
const DOWNLOAD_CHUNK = 1024 * 1024;
/** Bytes written per step of an upload (the helper takes writes of this size). */
const UPLOAD_CHUNK = 1024 * 1024;

const RASTER: Record<string, string> = { '.png': 'image/png', '.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.gif': 'image/gif', '.webp': 'image/webp' };
/** What the raster types start with: a file is served as an image only if its bytes agree. */
const MAGIC: [string, (b: Buffer) => boolean][] = [
  ['image/png', (b) => b.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))],
  ['image/jpeg', (b) => b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff],
  ['image/gif', (b) => b.subarray(0, 4).toString('latin1') === 'GIF8'],
  ['image/webp', (b) => b.subarray(0, 4).toString('latin1') === 'RIFF' && b.subarray(8, 12).toString('latin1') === 'WEBP'],
];

/** The CSP on every file the raw route serves: no script, no origin, nothing loaded. */
const FILE_CSP = "sandbox; default-src 'none'; img-src 'self'; style-src 'unsafe-inline'";

const str = (v: unknown) => (typeof v === 'string' ? v : '');

function crumbsOf(dir: string): { name: string; path: string }[] {
  const parts = dir.split('/').filter(Boolean);
  return parts.map((name, i) => ({ name, path: parts.slice(0, i + 1).join('/') }));
}

function looksBinary(b: Buffer): boolean {
  const n = Math.min(b.length, 8000);
  for (let i = 0; i < n; i++) if (b[i] === 0) return true;
  return false;
}

/** `filename*` for Content-Disposition (RFC 6266/5987), and a plain ASCII fallback. */
function disposition(kind: 'inline' | 'attachment', name: string): string {
  const ascii = name.replace(/[^\x20-\x7e]|["\\%/;]/g, '_') || 'file';
  return `${kind}; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(name)}`;
}

export function filesRoutes(deps: { config: Config; sandboxes: SandboxManager; auth: WebAuth }): Router {
  const { auth, sandboxes } = deps;
  const router = express.Router();
  const body = express.urlencoded({ extended: false, limit: '16kb' });
  const ws = (req: Request) => sandboxes.openWorkspace({ userId: userOf(req).id, name: userOf(req).name });

  async function treeOf(w: Workspace, dir: string) {
    const rel = w.relative(dir);
    const listing = await w.list(rel, { limit: LIST_LIMIT });
    const entries = listing
      .map((e) => ({ ...e, name: path.posix.basename(e.path), path: rel ? `${rel}/${path.posix.basename(e.path)}` : path.posix.basename(e.path), sizeText: formatBytes(e.size) }))
      .sort((a, b) => (a.type === b.type ? a.name.localeCompare(b.name) : a.type === 'dir' ? -1 : 1));
    return { dir: rel, crumbs: crumbsOf(rel), entries, more: listing.stopped === 'limit' };
  }

  async function previewOf(w: Workspace, p: string) {
    const rel = w.relative(p);
    const st = await w.stat(rel);
    if (st.type === 'dir') throw new WorkspaceError('EISDIR', `"${rel}" is a folder`);
    const ext = path.posix.extname(rel).toLowerCase();
    const base = { path: rel, name: path.posix.basename(rel), size: st.size, sizeText: formatBytes(st.size) };
    if (RASTER[ext]) return { ...base, kind: 'image' };
    if (ext === '.csv' || ext === '.tsv') return { ...base, kind: 'table', table: await tablePage(w, rel, 0, 1) };
    const { data } = await w.read(rel, { length: PREVIEW_BYTES });
    if (looksBinary(data)) return { ...base, kind: 'none', note: 'This file is not text: download it to open it.' };
    const cut = st.size > data.length ? `Only the first ${formatBytes(data.length)} are shown.` : undefined;
    const text = data.toString('utf8');
    if (ext === '.md' || ext === '.markdown') return { ...base, kind: 'markdown', html: renderMarkdown(text) };
    if (ext === '.json' && !cut) {
      try {
        return { ...base, kind: 'text', text: JSON.stringify(JSON.parse(text), null, 2) };
      } catch {
        /* not valid JSON: shown as it is */
      }
    }
    const active = ['.html', '.htm', '.svg', '.xml'].includes(ext) ? 'Shown as source text: pages and images that can run code are never opened here.' : undefined;
    return { ...base, kind: 'text', text, note: [active, cut].filter(Boolean).join(' ') || undefined };
  }

  /** One page of a CSV/TSV from byte `offset` (0: the first row after the header), without reading the whole file. */
  async function tablePage(w: Workspace, rel: string, offset: number, first: number) {
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

  const folderOf = (dir: string) => ({ dir, maxMb: deps.config.uploadMaxMb });

  router.get('/files', auth.requireUser, async (req, res) => {
    const w = await ws(req);
    const file = str(req.query.path);
    const dir = file ? path.posix.dirname(w.relative(file)).replace(/^\.$/, '') : str(req.query.dir);
    const tree = await treeOf(w, dir);
    const preview = file ? await previewOf(w, file).catch((e: unknown) => (e instanceof WorkspaceError ? undefined : Promise.reject(e))) : undefined;
    renderPage(res, 'files', { user: userOf(req), csrf: auth.csrfToken(req), live: 'files' }, { folder: folderOf(tree.dir), tree, preview });
  });

  router.get('/files/tree', auth.requireUser, async (req, res) => {
    res.type('html').send(renderPartial('tree', await treeOf(await ws(req), str(req.query.dir))));
  });

  /** Opening a folder: its actions panel, and its listing out of band into the tree. */
  router.get('/files/open', auth.requireUser, async (req, res) => {
    const tree = await treeOf(await ws(req), str(req.query.dir));
    res
      .type('html')
      .send(renderPartial('folder', folderOf(tree.dir)) + `<nav id="tree" class="tree" aria-label="Files" hx-get="/files/tree?dir=${encodeURIComponent(tree.dir)}" hx-trigger="files-changed from:body" hx-swap="innerHTML" hx-swap-oob="true">${renderPartial('tree', tree)}</nav>`);
  });

  router.get('/files/preview', auth.requireUser, async (req, res) => {
    res.type('html').send(renderPartial('preview', await previewOf(await ws(req), str(req.query.path))));
  });

  router.get('/files/table', auth.requireUser, async (req, res) => {
    const offset = Math.max(0, Math.floor(Number(req.query.offset) || 0));
    const first = Math.max(1, Math.floor(Number(req.query.first) || 1));
    const w = await ws(req);
    res.type('html').send(renderPartial('table', await tablePage(w, w.relative(str(req.query.path)), offset, first)));
  });

  router.get('/files/raw', auth.requireUser, async (req: Request, res: Response) => {
    const w = await ws(req);
    const rel = w.relative(str(req.query.path));
    const st = await w.stat(rel);
    if (st.type === 'dir') throw new WorkspaceError('EISDIR', `"${rel}" is a folder`);
    const first = await w.read(rel, { length: DOWNLOAD_CHUNK });
    const wanted = RASTER[path.posix.extname(rel).toLowerCase()];
    const sniffed = MAGIC.find(([, test]) => test(first.data))?.[0];
    const inline = !req.query.download && wanted !== undefined && wanted === sniffed;
    res.set({
      'Content-Type': inline ? wanted : 'application/octet-stream',
      'Content-Disposition': disposition(inline ? 'inline' : 'attachment', path.posix.basename(rel)),
      'Content-Security-Policy': FILE_CSP,
      'X-Content-Type-Options': 'nosniff',
      'Cache-Control': 'private, no-cache',
      'Content-Length': String(first.size),
    });
    // Streamed in steps: a large file is never held whole.
    res.write(first.data);
    let offset = first.data.length;
    while (offset < first.size && !res.destroyed) {
      const { data } = await w.read(rel, { offset, length: DOWNLOAD_CHUNK });
      if (!data.length) break;
      if (!res.write(data)) await new Promise((r) => res.once('drain', r));
      offset += data.length;
    }
    res.end();
  });

  router.post('/files/upload', auth.requireUser, auth.csrf, async (req, res) => {
    const w = await ws(req);
    const limit = deps.config.uploadMaxMb * 1024 * 1024;
    const saved = await new Promise<{ dir: string; name: string }>((resolve, reject) => {
      let dir = '';
      let done: Promise<{ dir: string; name: string }> | undefined;
      const bb = busboy({ headers: req.headers, limits: { fileSize: limit, files: 1, fields: 5, fieldSize: 4096 } });
      bb.on('field', (name, value) => {
        if (name === 'dir') dir = value;
      });
      bb.on('file', (_field, stream, info) => {
        done = (async () => {
          const name = path.posix.basename(String(info.filename ?? '').replace(/\\/g, '/'));
          if (!name || name === '.' || name === '..') throw new WorkspaceError('EINVAL', 'the file has no usable name');
          const target = await freeName(w, w.relative(dir), name);
          let wrote = 0;
          let pending = Buffer.alloc(0);
          const flush = async () => {
            await w.write(target, pending, { append: wrote > 0 });
            wrote += pending.length;
            pending = Buffer.alloc(0);
          };
          try {
            for await (const chunk of stream as AsyncIterable<Buffer>) {
              pending = Buffer.concat([pending, chunk]);
              if (pending.length >= UPLOAD_CHUNK) await flush();
            }
            if ((stream as { truncated?: boolean }).truncated) throw new GatewayError(`The file is larger than ${deps.config.uploadMaxMb} MB, the upload limit (SANDGATE_UPLOAD_MAX_MB).`, { reason: 'too_large', status: 413 });
            await flush();
          } catch (e) {
            // Nothing half-written is left behind.
            if (wrote > 0 || pending.length) await w.remove(target).catch(() => {});
            stream.resume();
            throw e;
          }
          return { dir: w.relative(dir), name: path.posix.basename(target) };
        })();
      });
      bb.on('close', () => (done ? done.then(resolve, reject) : reject(new GatewayError('no file in the upload', { reason: 'invalid_request', status: 400 }))));
      bb.on('error', reject);
      req.pipe(bb);
    });
    res.type('html').send(renderPartial('uploaded', { tree: await treeOf(w, saved.dir), message: `Uploaded ${saved.name}.` }));
  });

  router.post('/files/mkdir', auth.requireUser, body, auth.csrf, async (req, res) => {
    const w = await ws(req);
    const dir = w.relative(str(req.body.dir));
    const name = str(req.body.name);
    if (!name || name.includes('/') || name === '.' || name === '..') throw new WorkspaceError('EINVAL', 'a folder name cannot contain / or be . or ..');
    await w.mkdirs(dir ? `${dir}/${name}` : name);
    res.type('html').send(renderPartial('tree', await treeOf(w, dir)));
  });

  router.post('/files/rename', auth.requireUser, body, auth.csrf, async (req, res) => {
    const w = await ws(req);
    const from = w.relative(str(req.body.path));
    const to = str(req.body.to);
    if (!to || to.includes('/') || to === '.' || to === '..') throw new WorkspaceError('EINVAL', 'a new name cannot contain / or be . or ..');
    const dir = path.posix.dirname(from).replace(/^\.$/, '');
    const target = dir ? `${dir}/${to}` : to;
    await w.rename(from, target);
    res.set('HX-Trigger', 'files-changed').type('html').send(renderPartial('preview', await previewOf(w, target)));
  });

  router.post('/files/delete', auth.requireUser, body, auth.csrf, async (req, res) => {
    const w = await ws(req);
    const rel = w.relative(str(req.body.path));
    await w.remove(rel);
    res.set('HX-Trigger', 'files-changed').type('html').send(renderPartial('notice', { message: `Deleted ${rel}.` }));
  });

  return router;
}

function lastNewline(b: Buffer): number {
  return b.lastIndexOf(0x0a);
}

/** `name` in `dir`, or `name (1)`, `name (2)`…: an upload never replaces a file. */
async function freeName(w: Workspace, dir: string, name: string): Promise<string> {
  const ext = path.posix.extname(name);
  const stem = name.slice(0, name.length - ext.length);
  for (let i = 0; i < 1000; i++) {
    const candidate = `${dir ? `${dir}/` : ''}${i ? `${stem} (${i})${ext}` : name}`;
    try {
      await w.stat(candidate);
    } catch (e) {
      if (e instanceof WorkspaceError && e.code === 'ENOENT') return candidate;
      throw e;
    }
  }
  throw new WorkspaceError('EEXIST', `too many files named like ${name}`);
}
