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
 *
 * `filesPage` gives the handlers; src/routes.ts places them, each behind the sign-in
 * check and a request from the user's budget (every one opens the workspace). What the
 * templates show is built in ./view.ts; uploads are read in ./upload.ts.
 */
import path from 'node:path';
import type { Request, RequestHandler } from 'express';
import type { Config } from '../../config.js';
import type { SandboxExecution } from '../../sandboxes/execution.js';
import { WorkspaceError } from '../../sandboxes/workspace.js';
import { userOf } from '../../auth/session-middleware.js';
import { renderPage, renderPartial } from '../render.js';
import { pathParam, shownPath } from './paths.js';
import { receiveUpload } from './upload.js';
import { Previews, RASTER, folderView, tableView, treeView } from './view.js';

/** Bytes read per step of a download. */
const DOWNLOAD_CHUNK = 1024 * 1024;

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

/** `filename*` for Content-Disposition (RFC 6266/5987), and a plain ASCII fallback; a byte of the name that is not UTF-8 as U+FFFD. */
function disposition(kind: 'inline' | 'attachment', name: string): string {
  const shown = shownPath(name);
  const ascii = shown.replace(/[^\x20-\x7e]|["\\%/;]/g, '_') || 'file';
  return `${kind}; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(shown)}`;
}

export interface FilesDeps {
  config: Config;
  sandboxes: Pick<SandboxExecution, 'openWorkspace'>;
  auth: { csrfToken(req: Request): string };
}

export interface FilesPage {
  /** GET /files: the page, at a folder (`dir`) or with a file's preview (`path`). */
  browse: RequestHandler;
  /** GET /files/tree?dir=: a folder's listing. */
  tree: RequestHandler;
  /** GET /files/open?dir=: a folder's actions panel, and its listing out of band into the tree. */
  open: RequestHandler;
  /** GET /files/preview?path= */
  preview: RequestHandler;
  /** GET /files/table?path=&offset=&first=: a further page of a table. */
  table: RequestHandler;
  /** GET /files/raw?path=[&download=1]: the file itself, streamed. */
  raw: RequestHandler;
  /** POST /files/upload?dir=: multipart, one file (read here: the CSRF check goes before, on its header). */
  upload: RequestHandler;
  /** POST /files/mkdir?dir= (form: name) */
  mkdir: RequestHandler;
  /** POST /files/rename?path= (form: to) */
  rename: RequestHandler;
  /** POST /files/delete?path= */
  remove: RequestHandler;
}

export function filesPage(deps: FilesDeps): FilesPage {
  const { auth, sandboxes } = deps;
  const ws = (req: Request) => sandboxes.openWorkspace({ userId: userOf(req).id, name: userOf(req).name });
  const previews = new Previews();
  const folderOf = (dir: string) => folderView(dir, deps.config.uploadMaxMb);

  return {
    async browse(req, res) {
      const w = await ws(req);
      const file = pathParam(req, 'path') ?? '';
      const dir = file ? path.posix.dirname(w.relative(file)).replace(/^\.$/, '') : (pathParam(req, 'dir') ?? '');
      const tree = await treeView(w, dir);
      const preview = file ? await previews.of(req, w, file).catch((e: unknown) => (e instanceof WorkspaceError ? undefined : Promise.reject(e))) : undefined;
      renderPage(res, 'files/page', { user: userOf(req), csrf: auth.csrfToken(req), live: 'files' }, { folder: folderOf(tree.dir), tree, preview });
    },

    async tree(req, res) {
      res.type('html').send(renderPartial('files/tree', await treeView(await ws(req), pathParam(req, 'dir') ?? '')));
    },

    async open(req, res) {
      const tree = await treeView(await ws(req), pathParam(req, 'dir') ?? '');
      res.type('html').send(renderPartial('files/opened', { folder: folderOf(tree.dir), tree }));
    },

    async preview(req, res) {
      res.type('html').send(renderPartial('files/preview', await previews.of(req, await ws(req), pathParam(req, 'path') ?? '')));
    },

    async table(req, res) {
      const offset = Math.max(0, Math.floor(Number(req.query.offset) || 0));
      const first = Math.max(1, Math.floor(Number(req.query.first) || 1));
      const w = await ws(req);
      res.type('html').send(renderPartial('files/table', await tableView(w, w.relative(pathParam(req, 'path') ?? ''), offset, first)));
    },

    async raw(req, res) {
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
    },

    async upload(req, res) {
      const w = await ws(req);
      const saved = await receiveUpload(req, w, deps.config.uploadMaxMb);
      res.type('html').send(renderPartial('files/uploaded', { tree: await treeView(w, saved.dir), message: `Uploaded ${saved.name}.` }));
    },

    async mkdir(req, res) {
      const w = await ws(req);
      const dir = w.relative(pathParam(req, 'dir') ?? str(req.body?.dir));
      const name = str(req.body?.name);
      if (!name || name.includes('/') || name === '.' || name === '..') throw new WorkspaceError('EINVAL', 'a folder name cannot contain / or be . or ..');
      await w.mkdirs(dir ? `${dir}/${name}` : name);
      res.type('html').send(renderPartial('files/tree', await treeView(w, dir)));
    },

    async rename(req, res) {
      const w = await ws(req);
      const from = w.relative(pathParam(req, 'path') ?? str(req.body?.path));
      const to = str(req.body?.to);
      if (!to || to.includes('/') || to === '.' || to === '..') throw new WorkspaceError('EINVAL', 'a new name cannot contain / or be . or ..');
      const dir = path.posix.dirname(from).replace(/^\.$/, '');
      const target = dir ? `${dir}/${to}` : to;
      await w.rename(from, target);
      res.set('HX-Trigger', 'files-changed').type('html').send(renderPartial('files/preview', await previews.of(req, w, target)));
    },

    async remove(req, res) {
      const w = await ws(req);
      const rel = w.relative(pathParam(req, 'path') ?? str(req.body?.path));
      await w.remove(rel);
      res.set('HX-Trigger', 'files-changed').type('html').send(renderPartial('notice', { message: `Deleted ${shownPath(rel)}.` }));
    },
  };
}
