/**
 * The gateway's access to one user's workspace (the directory mounted at /workspace).
 *
 * The sandbox owns this directory's contents and may change them at any moment, so the
 * gateway never opens a path inside it: every operation here is a request to that
 * workspace's confined helper (workspace-helper.ts, host/workspace_helper.py), a process
 * chrooted into the workspace that acts as the sandbox's own user with no capability.
 * Even a won race between a check and a use can then reach nothing outside this
 * workspace and can do nothing the sandbox's code could not do itself.
 *
 * Here, paths are normalised and may not climb out with `..`; the helper walks them one
 * component at a time and refuses symlinks, FIFOs and devices. Errors are WorkspaceErrors
 * with a code and a message a user can act on: a user's mistake (a missing file, a name
 * too long, a full workspace) is never an internal error.
 */
import { GatewayError } from '../errors.js';
import { HelperError, type HelperReply, type HelperRequests } from './workspace-helper.js';

export const SANDBOX_UID = 1000;
export const SANDBOX_GID = 1000;

import type { WorkspaceErrorCode } from '../reasons.js';
export { WORKSPACE_ERROR_CODES, type WorkspaceErrorCode } from '../reasons.js';

/** Each code's reason (src/errors.ts) and HTTP status. */
const WORKSPACE_REASONS: Record<WorkspaceErrorCode, [string, number]> = {
  ENOENT: ['not_found', 404],
  EOUTSIDE: ['outside_workspace', 403],
  EISDIR: ['is_a_folder', 400],
  ENOTDIR: ['not_a_folder', 400],
  ETOOBIG: ['too_large', 413],
  ENOSPC: ['workspace_full', 507],
  EEXIST: ['already_exists', 409],
  EINVAL: ['invalid_path', 400],
  ENAMETOOLONG: ['name_too_long', 400],
  EACCES: ['access_denied', 403],
  EROFS: ['read_only', 403],
  EBUSY: ['in_use', 409],
  EUNAVAILABLE: ['workspace_unavailable', 503],
};

/** A file operation that cannot be done; `code` says why (the audit log keeps it). */
export class WorkspaceError extends GatewayError {
  override name = 'WorkspaceError';
  constructor(
    readonly code: WorkspaceErrorCode,
    message: string,
  ) {
    const [reason, status] = WORKSPACE_REASONS[code];
    super(message, { reason, status });
  }

  override get auditClass(): string {
    return this.code;
  }
}

export interface WorkspaceEntry {
  /** Relative to the workspace root, '/'-separated. */
  path: string;
  type: 'file' | 'dir';
  size: number;
  mtimeMs: number;
}

export interface WorkspaceListing extends Array<WorkspaceEntry> {
  /** Set when a bound cut the listing short: its entry limit, its depth, or its time. */
  stopped?: 'limit' | 'depth' | 'time';
}

/** Longest read the gateway serves in one call; callers page with offset/length. */
export const MAX_READ_BYTES = 8 * 1024 * 1024;

export class Workspace {
  /**
   * @param helper the confined helper of this workspace (or one on another host, reached through a gateway there).
   * @param onChange called after every change the gateway makes (write, mkdir, remove).
   */
  constructor(
    private readonly helper: HelperRequests,
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

  private async ask(rel: string, header: Record<string, unknown>, data?: Buffer): Promise<{ reply: HelperReply; data?: Buffer }> {
    let answer: { reply: HelperReply; data?: Buffer };
    try {
      answer = await this.helper.request(header, data);
    } catch (e) {
      if (e instanceof HelperError) throw new WorkspaceError('EUNAVAILABLE', e.message);
      throw e;
    }
    if (!answer.reply.ok) throw refusalOf(answer.reply, rel);
    return answer;
  }

  async stat(userPath: string): Promise<Omit<WorkspaceEntry, 'path'>> {
    const rel = this.relative(userPath);
    const { reply } = await this.ask(rel, { op: 'stat', path: rel });
    if (reply.type === 'symlink') throw new WorkspaceError('EOUTSIDE', `"${rel}" is a symbolic link, which the gateway does not follow`);
    return { type: reply.type === 'dir' ? 'dir' : 'file', size: Number(reply.size) || 0, mtimeMs: Number(reply.mtimeMs) || 0 };
  }

  async read(userPath: string, range: { offset?: number; length?: number } = {}): Promise<{ data: Buffer; size: number }> {
    const rel = this.relative(userPath);
    const length = Math.min(range.length ?? MAX_READ_BYTES, MAX_READ_BYTES);
    const { reply, data } = await this.ask(rel, { op: 'read', path: rel, offset: range.offset ?? 0, length });
    return { data: data ?? Buffer.alloc(0), size: Number(reply.size) || 0 };
  }

  async write(userPath: string, data: Buffer | string, opts: { append?: boolean } = {}): Promise<{ size: number }> {
    const rel = this.relative(userPath);
    if (!rel) throw new WorkspaceError('EISDIR', 'cannot write to the workspace root; give a file name');
    this.onChange();
    const { reply } = await this.ask(rel, { op: 'write', path: rel, append: opts.append === true }, typeof data === 'string' ? Buffer.from(data) : data);
    return { size: Number(reply.size) || 0 };
  }

  /** Creates a folder and its parents; a symlink on the way is refused. */
  async mkdirs(userPath: string): Promise<void> {
    const rel = this.relative(userPath);
    if (!rel) return;
    this.onChange();
    await this.ask(rel, { op: 'mkdirs', path: rel });
  }

  /** Deletes a file or a folder with everything in it (links are removed, never followed). */
  async remove(userPath: string): Promise<void> {
    const rel = this.relative(userPath);
    if (!rel) throw new WorkspaceError('EINVAL', 'refusing to delete the workspace root');
    this.onChange();
    await this.ask(rel, { op: 'remove', path: rel });
  }

  /** Moves a file or folder; the target must not exist. */
  async rename(fromPath: string, toPath: string): Promise<void> {
    const from = this.relative(fromPath);
    const to = this.relative(toPath);
    if (!from || !to) throw new WorkspaceError('EINVAL', 'cannot rename the workspace root');
    this.onChange();
    await this.ask(from, { op: 'rename', from, to });
  }

  /**
   * Lists a folder (optionally recursively, never through symlinks), breadth first, up
   * to `limit` entries and `depth` levels; `stopped` on the result says what cut it short.
   */
  async list(userPath = '', opts: { recursive?: boolean; limit?: number; depth?: number } = {}): Promise<WorkspaceListing> {
    const rel = this.relative(userPath);
    const { reply } = await this.ask(rel, { op: 'list', path: rel, recursive: opts.recursive === true, limit: opts.limit ?? 10_000, depth: opts.depth });
    const listing: WorkspaceListing = [];
    for (const e of Array.isArray(reply.entries) ? (reply.entries as WorkspaceEntry[]) : []) {
      if (typeof e?.path === 'string' && (e.type === 'file' || e.type === 'dir')) listing.push({ path: e.path, type: e.type, size: Number(e.size) || 0, mtimeMs: Number(e.mtimeMs) || 0 });
    }
    if (reply.stopped === 'limit' || reply.stopped === 'depth' || reply.stopped === 'time') listing.stopped = reply.stopped;
    return listing;
  }
}

/** A helper's refusal as the WorkspaceError a user reads, naming the path they gave. */
function refusalOf(reply: HelperReply, rel: string): WorkspaceError {
  const shown = rel || '/workspace';
  switch (reply.code) {
    case 'ENOENT':
      return new WorkspaceError('ENOENT', `no such file or directory: ${shown}`);
    case 'ELOOP':
      return new WorkspaceError('EOUTSIDE', `"${shown}" goes through a symbolic link, which the gateway does not follow`);
    case 'EISDIR':
      return new WorkspaceError('EISDIR', `"${shown}" is a directory`);
    case 'ENOTDIR':
      return new WorkspaceError('ENOTDIR', typeof reply.message === 'string' ? reply.message : `a parent of "${shown}" is not a directory`);
    case 'ENOSPC':
    case 'EDQUOT':
      return new WorkspaceError('ENOSPC', 'the workspace is full (its size limit is reached); delete files to make room');
    case 'EEXIST':
      return new WorkspaceError('EEXIST', `"${shown}" already exists`);
    case 'ENAMETOOLONG':
      return new WorkspaceError('ENAMETOOLONG', `"${shown.slice(0, 200)}${shown.length > 200 ? '…' : ''}": a file name is longer than 255 bytes, or the path longer than 4096`);
    case 'EACCES':
    case 'EPERM':
      return new WorkspaceError('EACCES', `permission denied: ${shown} (its permissions do not let the sandbox user do this; change them with execute_code)`);
    case 'EROFS':
      return new WorkspaceError('EROFS', 'the workspace is read-only');
    case 'E2BIG':
      return new WorkspaceError('ETOOBIG', typeof reply.message === 'string' ? reply.message : `"${shown}" is too large to do this at once`);
    case 'EBUSY':
    case 'ETXTBSY':
      return new WorkspaceError('EBUSY', `"${shown}" is in use; try again`);
    case 'EINVAL':
      return new WorkspaceError('EINVAL', typeof reply.message === 'string' ? reply.message : `"${shown}" cannot be used this way`);
    default:
      // Not the user's doing (EIO, EMFILE, ...): a clear error, and callers log it.
      return new WorkspaceError('EUNAVAILABLE', `"${shown}" could not be used (${String(reply.code).slice(0, 20)}); try again`);
  }
}
