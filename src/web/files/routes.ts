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
import type { Readable } from 'node:stream';
import busboy from 'busboy';
import { parse } from 'csv-parse/sync';
import express, { type Request, type Response, type Router } from 'express';
import { GatewayError } from '../../errors.js';
import { formatBytes } from '../../text.js';
import type { SandboxManager } from '../../sandboxes/manager.js';
import { WorkspaceError, type Workspace } from '../../sandboxes/workspace.js';
import { renderMarkdownFor } from '../markdown.js';
import { indentedExtent, prettyJson } from '../../bounded-json.js';
import type { Config } from '../../config.js';
import type { RateLimiter } from '../../limits/rate-limit.js';
import { userOf, type WebAuth } from '../sign-in/routes.js';
import { webRateLimit } from '../limits.js';
import { pathParam, pathQuery, shownPath } from './paths.js';
import { renderPage, renderPartial } from '../render.js';
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

/** `filename*` for Content-Disposition (RFC 6266/5987), and a plain ASCII fallback; a byte of the name that is not UTF-8 as U+FFFD. */
function disposition(kind: 'inline' | 'attachment', name: string): string {
  const shown = shownPath(name);
  const ascii = shown.replace(/[^\x20-\x7e]|["\\%/;]/g, '_') || 'file';
  return `${kind}; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(shown)}`;
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

/** Every route opens the user's workspace, so each takes from the user's request budget (`limiter`, shared with their tokens). */
export function filesRoutes(deps: { config: Config; sandboxes: SandboxManager; auth: WebAuth; limiter: RateLimiter }): Router {
  const { auth, sandboxes } = deps;
  const limited = webRateLimit(deps.limiter);
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

  const previews = new PreviewCache();

  /** What the preview of `p` shows; `req`'s user owns the formatting, which is skipped if `req` ends before it starts. */
  async function previewOf(req: Request, w: Workspace, p: string) {
    const rel = w.relative(p);
    const st = await w.stat(rel);
    if (st.type === 'dir') throw new WorkspaceError('EISDIR', `"${rel}" is a folder`);
    const ext = path.posix.extname(rel).toLowerCase();
    const base = { path: rel, name: path.posix.basename(rel), size: st.size, sizeText: formatBytes(st.size) };
    if (RASTER[ext]) return { ...base, kind: 'image' };
    if (ext === '.csv' || ext === '.tsv') return { ...base, kind: 'table', table: await tablePage(w, rel, 0, 1) };
    const markdown = ext === '.md' || ext === '.markdown';
    const key = { userId: userOf(req).id, path: rel, mtimeMs: st.mtimeMs, size: st.size };
    const cutNote = (shown: number) => (st.size > shown ? `Only the first ${formatBytes(shown)} are shown.` : undefined);
    const kept = markdown ? previews.get(key) : undefined;
    if (kept !== undefined) return { ...base, kind: 'markdown', html: kept, note: cutNote(Math.min(st.size, PREVIEW_BYTES)) };
    const { data } = await w.read(rel, { length: PREVIEW_BYTES });
    if (looksBinary(data)) return { ...base, kind: 'none', note: 'This file is not text: download it to open it.' };
    const cut = cutNote(data.length);
    const text = data.toString('utf8');
    if (markdown) {
      const r = await renderMarkdownFor(text, { owner: key.userId, signal: requestEnd(req), timeLimitMs: PREVIEW_FORMAT_MS });
      if (r.lasting) previews.set(key, r.html);
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

  router.get('/files', auth.requireUser, limited, async (req, res) => {
    const w = await ws(req);
    const file = pathParam(req, 'path') ?? '';
    const dir = file ? path.posix.dirname(w.relative(file)).replace(/^\.$/, '') : (pathParam(req, 'dir') ?? '');
    const tree = await treeOf(w, dir);
    const preview = file ? await previewOf(req, w, file).catch((e: unknown) => (e instanceof WorkspaceError ? undefined : Promise.reject(e))) : undefined;
    renderPage(res, 'files', { user: userOf(req), csrf: auth.csrfToken(req), live: 'files' }, { folder: folderOf(tree.dir), tree, preview });
  });

  router.get('/files/tree', auth.requireUser, limited, async (req, res) => {
    res.type('html').send(renderPartial('tree', await treeOf(await ws(req), pathParam(req, 'dir') ?? '')));
  });

  /** Opening a folder: its actions panel, and its listing out of band into the tree. */
  router.get('/files/open', auth.requireUser, limited, async (req, res) => {
    const tree = await treeOf(await ws(req), pathParam(req, 'dir') ?? '');
    res
      .type('html')
      .send(renderPartial('folder', folderOf(tree.dir)) + `<nav id="tree" class="tree" aria-label="Files" hx-get="/files/tree?dir=${pathQuery(tree.dir)}" hx-trigger="files-changed from:body" hx-swap="innerHTML" hx-swap-oob="true">${renderPartial('tree', tree)}</nav>`);
  });

  router.get('/files/preview', auth.requireUser, limited, async (req, res) => {
    res.type('html').send(renderPartial('preview', await previewOf(req, await ws(req), pathParam(req, 'path') ?? '')));
  });

  router.get('/files/table', auth.requireUser, limited, async (req, res) => {
    const offset = Math.max(0, Math.floor(Number(req.query.offset) || 0));
    const first = Math.max(1, Math.floor(Number(req.query.first) || 1));
    const w = await ws(req);
    res.type('html').send(renderPartial('table', await tablePage(w, w.relative(pathParam(req, 'path') ?? ''), offset, first)));
  });

  router.get('/files/raw', auth.requireUser, limited, async (req: Request, res: Response) => {
    const w = await ws(req);
    const rel = w.relative(pathParam(req, 'path') ?? '');
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

  router.post('/files/upload', auth.requireUser, auth.csrf, limited, async (req, res) => {
    const w = await ws(req);
    const saved = await receiveUpload(req, w, deps.config.uploadMaxMb);
    res.type('html').send(renderPartial('uploaded', { tree: await treeOf(w, saved.dir), message: `Uploaded ${saved.name}.` }));
  });

  router.post('/files/mkdir', auth.requireUser, body, auth.csrf, limited, async (req, res) => {
    const w = await ws(req);
    const dir = w.relative(pathParam(req, 'dir') ?? str(req.body?.dir));
    const name = str(req.body?.name);
    if (!name || name.includes('/') || name === '.' || name === '..') throw new WorkspaceError('EINVAL', 'a folder name cannot contain / or be . or ..');
    await w.mkdirs(dir ? `${dir}/${name}` : name);
    res.type('html').send(renderPartial('tree', await treeOf(w, dir)));
  });

  router.post('/files/rename', auth.requireUser, body, auth.csrf, limited, async (req, res) => {
    const w = await ws(req);
    const from = w.relative(pathParam(req, 'path') ?? str(req.body?.path));
    const to = str(req.body?.to);
    if (!to || to.includes('/') || to === '.' || to === '..') throw new WorkspaceError('EINVAL', 'a new name cannot contain / or be . or ..');
    const dir = path.posix.dirname(from).replace(/^\.$/, '');
    const target = dir ? `${dir}/${to}` : to;
    await w.rename(from, target);
    res.set('HX-Trigger', 'files-changed').type('html').send(renderPartial('preview', await previewOf(req, w, target)));
  });

  router.post('/files/delete', auth.requireUser, body, auth.csrf, limited, async (req, res) => {
    const w = await ws(req);
    const rel = w.relative(pathParam(req, 'path') ?? str(req.body?.path));
    await w.remove(rel);
    res.set('HX-Trigger', 'files-changed').type('html').send(renderPartial('notice', { message: `Deleted ${shownPath(rel)}.` }));
  });

  return router;
}

function lastNewline(b: Buffer): number {
  return b.lastIndexOf(0x0a);
}

/** Longest file name the workspace's filesystem takes, in bytes (ext4's limit). */
const MAX_NAME_BYTES = 255;

const badForm = (e: unknown) =>
  new GatewayError(`The upload could not be read: ${e instanceof Error ? e.message.slice(0, 200) : 'malformed form'}. Send one file as multipart/form-data.`, { reason: 'invalid_request', status: 400 });

/**
 * Reads a multipart upload (an optional `dir` field, then one file) into the workspace.
 *
 * Settles only once the form has been read to its end and the file is either complete or
 * gone: a refused or failed upload leaves nothing half-written, and the answer is never
 * sent while the browser is still sending. Every failure is a GatewayError the error
 * handler answers: a bad form, name or folder 400 (403 outside the workspace or through a
 * symbolic link), over the upload limit 413, a full workspace 507.
 */
function receiveUpload(req: Request, w: Workspace, maxMb: number): Promise<{ dir: string; name: string }> {
  return new Promise((resolve, reject) => {
    let form: busboy.Busboy;
    try {
      // Browsers send a file's name as UTF-8 bytes (busboy would read them as Latin-1).
      form = busboy({ headers: req.headers, defParamCharset: 'utf8', limits: { fileSize: maxMb * 1024 * 1024, files: 1, fields: 5, fieldSize: 4096 } });
    } catch (e) {
      req.resume();
      return reject(badForm(e));
    }
    let dir = '';
    let saving: Promise<{ dir: string; name: string }> | undefined;
    let formError: unknown;
    form.on('field', (name, value) => {
      if (name === 'dir') dir = value;
    });
    form.on('file', (_field, stream, info) => {
      // Its errors (a form cut short) reach saveUpload through the stream's state, even
      // before it reads: an 'error' event nobody listens to would end the process.
      stream.on('error', () => {});
      // The folder is named in the address, as the files page sends it, or else in the `dir` field;
      // read in the promise, so that a malformed address is refused like a bad name.
      saving = Promise.resolve().then(() => saveUpload(w, pathParam(req, 'dir') ?? dir, info.filename, stream, maxMb));
      // Handled here at once (its outcome is read when the form ends): a refused file is
      // still read to its end, so that the form can finish.
      saving.catch(() => stream.resume());
    });
    form.on('error', (e) => {
      formError ??= e;
      req.unpipe(form);
      req.resume();
      // Some of the parser's errors (a malformed part header) leave it open: ended here, it closes.
      if (!form.destroyed) form.destroy();
    });
    // Always after 'error' too: the file is settled first, so that its cleanup is done before the answer.
    form.on('close', () => {
      const outcome = saving ?? Promise.reject(new GatewayError('There is no file in the upload.', { reason: 'invalid_request', status: 400 }));
      outcome.then(
        async (saved) => {
          if (formError === undefined) return resolve(saved);
          await w.remove(saved.dir ? `${saved.dir}/${saved.name}` : saved.name).catch(() => {});
          reject(badForm(formError));
        },
        (e: unknown) => reject(formError === undefined ? e : badForm(formError)),
      );
    });
    // A browser that goes away mid-upload: the parser stops and the part written is removed.
    req.on('close', () => {
      if (!req.complete) form.destroy(new Error('the upload was cut off'));
    });
    req.pipe(form);
  });
}

/** The name an uploaded file is saved under: its own, refused when the workspace could not hold it. */
function uploadName(filename: string | undefined): string {
  const name = path.posix.basename(String(filename ?? '').replace(/\\/g, '/'));
  if (!name || name === '.' || name === '..') throw new WorkspaceError('EINVAL', 'The file has no usable name (it is empty, "." or ".."). Rename it and upload it again.');
  if (name.includes('\0')) throw new WorkspaceError('EINVAL', 'A file name cannot contain a NUL character. Rename the file and upload it again.');
  const bytes = Buffer.byteLength(name);
  if (bytes > MAX_NAME_BYTES) throw new WorkspaceError('ENAMETOOLONG', `The file name is ${bytes} bytes long; the workspace takes names of at most ${MAX_NAME_BYTES} bytes. Rename the file and upload it again.`);
  return name;
}

/**
 * Writes one uploaded file under a free name in `dirField`, in steps. On any failure it
 * removes what it wrote at once (a full workspace is freed for its sandbox), reads the
 * rest of the file to its end (the form must end before the answer), then throws.
 */
async function saveUpload(w: Workspace, dirField: string, filename: string | undefined, stream: Readable & { truncated?: boolean }, maxMb: number): Promise<{ dir: string; name: string }> {
  const dir = w.relative(dirField);
  const target = await freeName(w, dir, uploadName(filename));
  let started = false;
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let failure: { error: unknown } | undefined;
  const flush = async () => {
    const data = Buffer.concat(pending);
    pending = [];
    pendingBytes = 0;
    const append = started;
    started = true;
    await w.write(target, data, { append });
  };
  const fail = async (error: unknown) => {
    failure ??= { error };
    pending = [];
    pendingBytes = 0;
    // The name was free before the first write: whatever is there now is this upload's part.
    if (started) await w.remove(target).catch(() => {});
    started = false;
  };
  try {
    // Never left early: leaving a `for await` destroys the stream, and the form would then never end.
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      if (failure) continue;
      pending.push(chunk);
      pendingBytes += chunk.length;
      if (pendingBytes >= UPLOAD_CHUNK) await flush().catch(fail);
    }
    if (!failure && stream.truncated) await fail(new GatewayError(`The file is larger than ${maxMb} MB, the upload limit (SANDGATE_UPLOAD_MAX_MB).`, { reason: 'too_large', status: 413 }));
    if (!failure) await flush().catch(fail);
  } catch (e) {
    // The stream itself failed: the form was cut short or malformed.
    await fail(e);
  }
  if (failure) throw failure.error;
  return { dir, name: path.posix.basename(target) };
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
