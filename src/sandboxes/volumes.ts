/**
 * Where workspaces live on the host, and how their size is limited.
 *
 * `loop` (the default): each workspace is an ext4 filesystem in a sparse image file,
 * `<dataDir>/workspaces/<id>.img`, loop-mounted at `<dataDir>/workspaces/<id>/`. The
 * kernel enforces the size: code that fills it gets ENOSPC, and neither the host disk
 * nor another user's workspace is touched. The image only takes the space actually
 * written. Needs root and loop devices.
 *
 * `directory`: a plain directory with no size limit. Only with an explicit
 * SANDGATE_WORKSPACE_BACKEND=directory, and logged as a warning at start.
 *
 * Both survive container and gateway restarts: remounting at next use is idempotent.
 */
import { execFile, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { SANDBOX_GID, SANDBOX_UID } from './workspace.js';
import { WorkspaceHelper } from './workspace-helper.js';
import type { StoreProbes, WorkspaceStore } from './types.js';

const run = promisify(execFile);

export type WorkspaceBackend = 'loop' | 'directory';

export interface WorkspaceVolumesOptions {
  dir: string;
  backend: WorkspaceBackend;
  sizeMb: number;
  onDiagnostic?: (message: string) => void;
}

export class WorkspaceVolumes implements WorkspaceStore {
  private readonly pending = new Map<string, Promise<string>>();
  private readonly ready = new Map<string, string>();
  /** The confined helper of each ready workspace (workspace-helper.ts), made on first use. */
  private readonly helpers = new Map<string, WorkspaceHelper>();

  /** This folder's id (`storeIdOf`): gateways that share the folder share it. */
  readonly storeId: string;
  readonly probes: StoreProbes;

  constructor(private readonly opts: WorkspaceVolumesOptions) {
    fs.mkdirSync(opts.dir, { recursive: true, mode: 0o711 });
    this.storeId = storeIdOf(opts.dir);
    this.probes = storeProbes(opts.dir);
  }

  /** Every workspace in the folder: an image (loop) or a directory with no image beside it (directory). */
  async localIds(): Promise<string[]> {
    const entries = await fsp.readdir(this.opts.dir, { withFileTypes: true });
    const names = new Set(entries.map((e) => e.name));
    const ok = (id: string) => /^[A-Za-z0-9_-]{6,64}$/.test(id);
    return entries
      .map((e) => (e.isFile() && e.name.endsWith('.img') ? e.name.slice(0, -4) : e.isDirectory() && !names.has(`${e.name}.img`) ? e.name : ''))
      .filter(ok);
  }

  /** A fresh, unused workspace id. */
  newId(): string {
    return crypto.randomBytes(9).toString('base64url');
  }

  hostPath(id: string): string {
    if (!/^[A-Za-z0-9_-]{6,64}$/.test(id)) throw new Error(`invalid workspace id "${id}"`);
    return path.join(this.opts.dir, id);
  }

  /** Makes the workspace ready (creating and mounting as needed); returns its host path. */
  ensure(id: string): Promise<string> {
    // Only this gateway mounts and unmounts workspaces, so a mount it made stays made.
    const ready = this.ready.get(id);
    if (ready) return Promise.resolve(ready);
    let p = this.pending.get(id);
    if (!p) {
      p = this.doEnsure(id)
        .then((path) => {
          this.ready.set(id, path);
          return path;
        })
        .finally(() => this.pending.delete(id));
      this.pending.set(id, p);
    }
    return p;
  }

  private async doEnsure(id: string): Promise<string> {
    const mnt = this.hostPath(id);
    await fsp.mkdir(mnt, { recursive: true, mode: 0o755 });
    if (this.opts.backend === 'directory') {
      await fsp.chown(mnt, SANDBOX_UID, SANDBOX_GID).catch(() => {});
      return fsp.realpath(mnt);
    }
    if (await isMountPoint(mnt)) return fsp.realpath(mnt);
    // Replicas on one host share the workspaces: of two making the same one ready at once,
    // one creates and mounts it while the other waits, then finds it mounted.
    return withHostLock(`${mnt}.lock`, async () => {
      if (await isMountPoint(mnt)) return fsp.realpath(mnt);
      const img = `${mnt}.img`;
      if (!fs.existsSync(img)) {
        const tmp = `${img}.new`;
        await fsp.rm(tmp, { force: true });
        const fh = await fsp.open(tmp, 'w', 0o600);
        await fh.truncate(this.opts.sizeMb * 1024 * 1024);
        await fh.close();
        // -m 0: no blocks reserved for root; root_owner: the sandbox user owns the top.
        await run('mkfs.ext4', ['-q', '-F', '-m', '0', '-E', `root_owner=${SANDBOX_UID}:${SANDBOX_GID}`, tmp]);
        await fsp.rename(tmp, img);
      } else {
        await this.resizeIfNeeded(img);
      }
      await run('mount', ['-o', 'loop,nosuid,nodev', img, mnt]);
      await fsp.rmdir(path.join(mnt, 'lost+found')).catch(() => {});
      return fsp.realpath(mnt);
    });
  }

  /** Grows an image when the configured size went up; never shrinks (that could lose data). */
  private async resizeIfNeeded(img: string): Promise<void> {
    const want = this.opts.sizeMb * 1024 * 1024;
    const st = await fsp.stat(img);
    if (st.size >= want) return;
    const fh = await fsp.open(img, 'r+');
    await fh.truncate(want);
    await fh.close();
    await run('e2fsck', ['-f', '-p', img]).catch(() => {});
    await run('resize2fs', [img]);
  }

  /**
   * The helper through which the gateway reaches the files of a workspace. Only for a
   * workspace `ensure` made ready: on an unmounted mount point the files would land on
   * the host disk below it.
   */
  async helper(id: string): Promise<WorkspaceHelper> {
    const root = await this.ensure(id);
    let helper = this.helpers.get(id);
    if (!helper) {
      helper = new WorkspaceHelper({ root, uid: SANDBOX_UID, gid: SANDBOX_GID, onDiagnostic: this.opts.onDiagnostic });
      this.helpers.set(id, helper);
    }
    return helper;
  }

  /** Bytes used and the limit, for stats. */
  async usage(id: string): Promise<{ usedBytes: number; limitBytes: number | null }> {
    const mnt = this.hostPath(id);
    const s = await fsp.statfs(mnt);
    if (this.opts.backend === 'loop') {
      return { usedBytes: (s.blocks - s.bfree) * s.bsize, limitBytes: s.blocks * s.bsize };
    }
    return { usedBytes: await duBytes(mnt), limitBytes: null };
  }

  /** Unmounts (at gateway shutdown of tests; workspaces stay on disk). */
  async release(id: string): Promise<void> {
    this.ready.delete(id);
    // Its helper lives inside the mount (chrooted there): it goes first.
    const helper = this.helpers.get(id);
    this.helpers.delete(id);
    await helper?.close(true);
    const mnt = this.hostPath(id);
    if (this.opts.backend === 'loop' && (await isMountPoint(mnt))) {
      await run('umount', [mnt]).catch(() => run('umount', ['-l', mnt]));
    }
  }

  /**
   * Unmounts every workspace under the workspaces directory but those in `keep`, whoever
   * mounted it: this gateway, or an earlier one whose sandboxes this one adopted. At
   * shutdown, sandboxes left running keep theirs for the next gateway to adopt; nothing
   * else needs to stay mounted, and a mount left behind keeps the data directory busy.
   */
  async releaseAll(keep: ReadonlySet<string> = new Set()): Promise<void> {
    await Promise.all([...this.pending.values()].map((p) => p.catch(() => {})));
    for (const id of this.ready.keys()) if (!keep.has(id)) this.ready.delete(id);
    for (const [id, helper] of [...this.helpers]) {
      this.helpers.delete(id);
      await helper.close(true);
    }
    if (this.opts.backend !== 'loop') return;
    const dir = await fsp.realpath(this.opts.dir).catch(() => this.opts.dir);
    for (const mnt of await mountPoints()) {
      const id = path.basename(mnt);
      if (path.dirname(mnt) === dir && !keep.has(id)) await this.release(id).catch(() => {});
    }
  }

  /** Deletes a workspace and its data for good. */
  async destroy(id: string): Promise<void> {
    await this.release(id);
    const mnt = this.hostPath(id);
    await fsp.rm(mnt, { recursive: true, force: true });
    await fsp.rm(`${mnt}.img`, { force: true });
    // The lock file stays: another process may hold it, and a new file beside it would be another lock.
  }
}

/**
 * The id of the workspaces folder `dir`, made once and kept in it (`.store-id`): every
 * gateway that mounts this folder (replicas on one host, or hosts sharing the folder on
 * network storage) reads the same id, and a folder on another host's own disk has another.
 */
export function storeIdOf(dir: string): string {
  const found = readStoreId(dir);
  if (found) return found;
  // Written aside and linked into place: of two gateways starting at once, one id wins and both read it.
  const file = path.join(dir, STORE_ID_FILE);
  const tmp = `${file}.${process.pid}.${crypto.randomBytes(4).toString('hex')}`;
  fs.writeFileSync(tmp, `${crypto.randomBytes(12).toString('base64url')}\n`, { mode: 0o644 });
  try {
    fs.linkSync(tmp, file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  } finally {
    fs.rmSync(tmp, { force: true });
  }
  return readStoreId(dir)!;
}

/** A replica id as a probe's file name: nothing else is ever one. */
const PROBE_NAME = /^[A-Za-z0-9_-]{1,100}$/;

/**
 * The store probes of workspaces folder `dir` (WorkspaceStore.probes): files
 * `.store-probe-<replica id>`, the gateway's alone (0600), never a workspace's name.
 */
export function storeProbes(dir: string): StoreProbes {
  const file = (id: string) => {
    if (!PROBE_NAME.test(id)) throw new Error('not a replica id');
    return path.join(dir, `.store-probe-${id}`);
  };
  return {
    write(id) {
      const word = crypto.randomBytes(16).toString('base64url');
      fs.writeFileSync(file(id), word, { mode: 0o600 });
      return word;
    },
    read(id) {
      if (!PROBE_NAME.test(id)) return undefined;
      try {
        const fd = fs.openSync(file(id), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
        try {
          return fs.readFileSync(fd, 'utf8').slice(0, 64);
        } finally {
          fs.closeSync(fd);
        }
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
        throw e;
      }
    },
    remove(id) {
      fs.rmSync(file(id), { force: true });
    },
  };
}

/** Where a workspaces folder keeps its store id. */
export const STORE_ID_FILE = '.store-id';

/** Whether `id` has the shape of a workspaces folder's store id. */
export function isStoreId(id: unknown): id is string {
  return typeof id === 'string' && /^[A-Za-z0-9_-]{8,64}$/.test(id);
}

/** The store id kept in workspaces folder `dir` (never through a link), without making one: undefined when it has none. */
export function readStoreId(dir: string): string | undefined {
  let id: string;
  try {
    const fd = fs.openSync(path.join(dir, STORE_ID_FILE), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
    try {
      id = fs.readFileSync(fd, 'utf8').trim();
    } finally {
      fs.closeSync(fd);
    }
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  if (!isStoreId(id)) throw new Error(`${path.join(dir, STORE_ID_FILE)} does not hold a workspace store id: remove it and a new one is made (this folder is then a new store: users whose files it holds are named again at the next start)`);
  return id;
}

/**
 * Runs `fn` holding an exclusive flock(2) on `file`, against other gateway processes on
 * this host. The file is opened here (created 0600, never through a link), and util-linux's
 * flock (Node has no flock) locks that open file, inherited as its fd 3, then exits: the
 * lock stays with the file this process holds open, and goes when it is closed, by
 * `fn`'s end or by this process dying, so a gateway killed mid-way leaves no lock behind.
 * Only root (the gateway) can open the file, so no other local user can hold the lock.
 * Gives up after 120 s.
 */
async function withHostLock<T>(file: string, fn: () => Promise<T>): Promise<T> {
  const fd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_NOFOLLOW, 0o600);
  try {
    await new Promise<void>((resolve, reject) => {
      const child = spawn('flock', ['-x', '-w', '120', '3'], { stdio: ['ignore', 'ignore', 'pipe', fd], env: { PATH: process.env.PATH ?? '/usr/bin:/bin' } });
      let err = '';
      child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      child.on('error', reject);
      child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`could not lock ${file} (flock ended ${code}): ${err.trim() || 'held elsewhere for 120 s'}`))));
    });
    return await fn();
  } finally {
    fs.closeSync(fd);
  }
}

/** Where something is mounted, from /proc/self/mountinfo (which writes a space in a path as \040). */
export async function mountPoints(): Promise<string[]> {
  const info = await fsp.readFile('/proc/self/mountinfo', 'utf8');
  return info
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((p): p is string => !!p)
    .map((p) => p.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8))));
}

async function isMountPoint(p: string): Promise<boolean> {
  const real = await fsp.realpath(p).catch(() => p);
  return (await mountPoints()).includes(real);
}

async function duBytes(dir: string): Promise<number> {
  const { stdout } = await run('du', ['-sb', dir]).catch(() => ({ stdout: '0' }));
  return Number(stdout.split(/\s/)[0]) || 0;
}

/** Why the loop backend cannot work here, or undefined when it can. */
export async function loopBackendProblem(): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return 'the gateway is not running as root (loop mounts need root)';
  for (const bin of ['mkfs.ext4', 'mount', 'losetup']) {
    try {
      await run('sh', ['-c', `command -v ${bin}`]);
    } catch {
      return `${bin} is not installed (apt-get install e2fsprogs mount)`;
    }
  }
  if (!fs.existsSync('/dev/loop-control')) return '/dev/loop-control is missing (no loop device support)';
  return undefined;
}
