/**
 * Uploads to the files page: one file of a multipart form, written into the workspace in
 * steps under a name that is free (an upload never replaces a file). A refused or failed
 * upload leaves nothing half-written, and its answer waits until the browser has sent
 * the whole form.
 */
import path from 'node:path';
import type { Readable } from 'node:stream';
import busboy from 'busboy';
import type { Request } from 'express';
import { GatewayError } from '../../errors.js';
import { WorkspaceError, type Workspace } from '../../sandboxes/workspace.js';
import { pathParam } from './paths.js';

/** Bytes written per step of an upload (the helper takes writes of this size). */
const UPLOAD_CHUNK = 1024 * 1024;
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
export function receiveUpload(req: Request, w: Workspace, maxMb: number): Promise<{ dir: string; name: string }> {
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
