/**
 * Host-side access to one user's workspace (the directory mounted at /workspace).
 *
 * The sandbox owns this directory's contents and may plant symlinks in it, so every
 * operation here treats it as hostile: paths are normalised and may not climb out with
 * `..`; no path component may be a symlink (checked with lstat on each step); the final
 * open uses O_NOFOLLOW; and the opened descriptor's real path (/proc/self/fd) is
 * verified to be inside the root before any byte is read or written, which also
 * catches a directory swapped for a symlink between the check and the open.
 * Files the gateway creates are owned by the sandbox user (uid 1000).
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';

export const SANDBOX_UID = 1000;
export const SANDBOX_GID = 1000;

export type WorkspaceErrorCode = 'ENOENT' | 'EOUTSIDE' | 'EISDIR' | 'ENOTDIR' | 'ETOOBIG' | 'ENOSPC' | 'EEXIST' | 'EINVAL';

export class WorkspaceError extends Error {
  override name = 'WorkspaceError';
  constructor(
    readonly code: WorkspaceErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export interface WorkspaceEntry {
  /** Relative to the workspace root, '/'-separated. */
  path: string;
  type: 'file' | 'dir';
  size: number;
  mtimeMs: number;
}

/** Longest read the gateway serves in one call; callers page with offset/length. */
export const MAX_READ_BYTES = 8 * 1024 * 1024;

export class Workspace {
  /**
   * @param root absolute host path of the workspace (its realpath).
   * @param onChange called after every change the gateway makes (write, mkdir, remove).
   */
  constructor(
    readonly root: string,
    private readonly onChange: () => void = () => {},
  ) {}

  /**
   * Turns a user path into a safe relative path. Accepts `a/b`, `/workspace/a/b`;
   * rejects anything that leaves the workspace.
   */
  relative(userPath: string): string {
    if (typeof userPath !== 'string' || userPath.includes('\0')) throw new WorkspaceError('EINVAL', 'invalid path');
    let p = userPath.replace(/\\/g, '/');
    if (p === '/workspace' || p.startsWith('/workspace/')) p = p.slice('/workspace'.length);
    else if (p.startsWith('/')) throw new WorkspaceError('EOUTSIDE', `"${userPath}" is outside the workspace (paths are relative to /workspace)`);
    const parts: string[] = [];
    for (const seg of p.split('/')) {
      if (seg === '' || seg === '.') continue;
      if (seg === '..') {
        if (!parts.length) throw new WorkspaceError('EOUTSIDE', `"${userPath}" climbs out of the workspace`);
        parts.pop();
      } else parts.push(seg);
    }
    return parts.join('/');
  }

  /** lstat each component; a symlink anywhere is refused. Returns the host path. */
  private async resolve(rel: string, opts: { mustExist: boolean }): Promise<string> {
    let cur = this.root;
    const parts = rel ? rel.split('/') : [];
    for (let i = 0; i < parts.length; i++) {
      cur = path.join(cur, parts[i]!);
      let st: fs.Stats;
      try {
        st = await fsp.lstat(cur);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
          if (opts.mustExist || i < parts.length - 1) {
            if (!opts.mustExist) return path.join(this.root, ...parts);
            throw new WorkspaceError('ENOENT', `no such file or directory: ${rel}`);
          }
          return cur;
        }
        throw e;
      }
      if (st.isSymbolicLink()) throw new WorkspaceError('EOUTSIDE', `"${rel}" goes through a symbolic link, which the gateway does not follow`);
      if (i < parts.length - 1 && !st.isDirectory()) throw new WorkspaceError('ENOTDIR', `"${parts.slice(0, i + 1).join('/')}" is not a directory`);
    }
    return cur;
  }

  /** Throws unless the open descriptor is really inside the root. */
  private async verifyFd(fh: fsp.FileHandle, rel: string): Promise<void> {
    const real = await fsp.readlink(`/proc/self/fd/${fh.fd}`);
    if (real !== this.root && !real.startsWith(this.root + '/')) {
      throw new WorkspaceError('EOUTSIDE', `"${rel}" resolved outside the workspace`);
    }
  }

  async stat(userPath: string): Promise<Omit<WorkspaceEntry, 'path'>> {
    const rel = this.relative(userPath);
    const p = await this.resolve(rel, { mustExist: true });
    const st = await fsp.lstat(p);
    return { type: st.isDirectory() ? 'dir' : 'file', size: st.size, mtimeMs: st.mtimeMs };
  }

  async read(userPath: string, range: { offset?: number; length?: number } = {}): Promise<{ data: Buffer; size: number }> {
    const rel = this.relative(userPath);
    const p = await this.resolve(rel, { mustExist: true });
    let fh: fsp.FileHandle;
    try {
      fh = await fsp.open(p, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
    } catch (e) {
      throw mapFsError(e, rel);
    }
    try {
      await this.verifyFd(fh, rel);
      const st = await fh.stat();
      if (st.isDirectory()) throw new WorkspaceError('EISDIR', `"${rel}" is a directory; list it instead`);
      if (!st.isFile()) throw new WorkspaceError('EINVAL', `"${rel}" is not a regular file`);
      const offset = Math.max(0, Math.min(range.offset ?? 0, st.size));
      const length = Math.min(range.length ?? st.size - offset, st.size - offset, MAX_READ_BYTES);
      const data = Buffer.alloc(Math.max(0, length));
      if (length > 0) await fh.read(data, 0, length, offset);
      return { data, size: st.size };
    } finally {
      await fh.close();
    }
  }

  async write(userPath: string, data: Buffer | string, opts: { append?: boolean } = {}): Promise<{ size: number }> {
    const rel = this.relative(userPath);
    if (!rel) throw new WorkspaceError('EISDIR', 'cannot write to the workspace root; give a file name');
    const parts = rel.split('/');
    await this.mkdirs(parts.slice(0, -1).join('/'));
    const p = await this.resolve(rel, { mustExist: false });
    const flags = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_NOFOLLOW | (opts.append ? fs.constants.O_APPEND : fs.constants.O_TRUNC);
    let fh: fsp.FileHandle;
    try {
      fh = await fsp.open(p, flags, 0o644);
    } catch (e) {
      throw mapFsError(e, rel);
    }
    try {
      await this.verifyFd(fh, rel);
      const st = await fh.stat();
      if (!st.isFile()) throw new WorkspaceError('EINVAL', `"${rel}" is not a regular file`);
      await fh.chown(SANDBOX_UID, SANDBOX_GID).catch(() => {});
      this.onChange();
      await fh.writeFile(data);
      return { size: (await fh.stat()).size };
    } catch (e) {
      throw mapFsError(e, rel);
    } finally {
      await fh.close();
    }
  }

  /** Creates directories one component at a time, refusing symlinks on the way. */
  async mkdirs(userPath: string): Promise<void> {
    const rel = this.relative(userPath);
    if (!rel) return;
    let cur = '';
    for (const seg of rel.split('/')) {
      cur = cur ? `${cur}/${seg}` : seg;
      const p = path.join(this.root, cur);
      try {
        await fsp.mkdir(p, { mode: 0o755 });
        this.onChange();
        await fsp.chown(p, SANDBOX_UID, SANDBOX_GID).catch(() => {});
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw mapFsError(e, cur);
      }
      const st = await fsp.lstat(p);
      if (st.isSymbolicLink()) throw new WorkspaceError('EOUTSIDE', `"${cur}" is a symbolic link, which the gateway does not follow`);
      if (!st.isDirectory()) throw new WorkspaceError('ENOTDIR', `"${cur}" is not a directory`);
    }
  }

  async remove(userPath: string): Promise<void> {
    const rel = this.relative(userPath);
    if (!rel) throw new WorkspaceError('EINVAL', 'refusing to delete the workspace root');
    const parent = rel.split('/').slice(0, -1).join('/');
    if (parent) await this.resolve(parent, { mustExist: true });
    const p = path.join(this.root, rel);
    // rm never follows a symlink it removes; parents were checked above.
    this.onChange();
    await fsp.rm(p, { recursive: true, force: false }).catch((e) => {
      throw mapFsError(e, rel);
    });
  }

  /** Lists a directory (optionally recursively, never through symlinks), up to `limit` entries. */
  async list(userPath = '', opts: { recursive?: boolean; limit?: number } = {}): Promise<WorkspaceEntry[]> {
    const rel = this.relative(userPath);
    const start = await this.resolve(rel, { mustExist: true });
    const st = await fsp.lstat(start);
    if (!st.isDirectory()) throw new WorkspaceError('ENOTDIR', `"${rel}" is not a directory`);
    const limit = opts.limit ?? 10_000;
    const out: WorkspaceEntry[] = [];
    const queue: string[] = [rel];
    while (queue.length && out.length < limit) {
      const dirRel = queue.shift()!;
      let entries: fs.Dirent[];
      try {
        entries = await fsp.readdir(path.join(this.root, dirRel), { withFileTypes: true });
      } catch {
        continue;
      }
      entries.sort((a, b) => a.name.localeCompare(b.name));
      for (const d of entries) {
        if (out.length >= limit) break;
        if (d.isSymbolicLink() || !(d.isFile() || d.isDirectory())) continue;
        const childRel = dirRel ? `${dirRel}/${d.name}` : d.name;
        const s = await fsp.lstat(path.join(this.root, childRel)).catch(() => undefined);
        if (!s) continue;
        out.push({ path: childRel, type: d.isDirectory() ? 'dir' : 'file', size: d.isDirectory() ? 0 : s.size, mtimeMs: s.mtimeMs });
        if (d.isDirectory() && opts.recursive) queue.push(childRel);
      }
    }
    return out;
  }
}

function mapFsError(e: unknown, rel: string): Error {
  if (e instanceof WorkspaceError) return e;
  const code = (e as NodeJS.ErrnoException).code;
  switch (code) {
    case 'ENOENT':
      return new WorkspaceError('ENOENT', `no such file or directory: ${rel}`);
    case 'ELOOP':
      return new WorkspaceError('EOUTSIDE', `"${rel}" is a symbolic link, which the gateway does not follow`);
    case 'EISDIR':
      return new WorkspaceError('EISDIR', `"${rel}" is a directory`);
    case 'ENOTDIR':
      return new WorkspaceError('ENOTDIR', `a parent of "${rel}" is not a directory`);
    case 'ENOSPC':
    case 'EDQUOT':
      return new WorkspaceError('ENOSPC', `the workspace is full (its size limit is reached); delete files to make room`);
    case 'EEXIST':
      return new WorkspaceError('EEXIST', `"${rel}" already exists`);
    default:
      return e as Error;
  }
}
