/**
 * `sandgate backup DIR` and `sandgate restore DIR`: everything a data directory holds,
 * taken while the gateway runs, and put back into an empty one.
 *
 * A backup holds the store (SQLite: a consistent copy through SQLite's online backup;
 * Postgres: not here, pg_dump takes it, see README), every key file (`*.key`), the
 * upstream servers file when it lives in the data directory, and every workspace. A
 * loop-mounted workspace is copied as its image (sparse), with the filesystem frozen
 * (fsfreeze) for the moment of the copy so the image is one consistent moment; a plain
 * directory workspace is copied file by file. `manifest.json` says what is there.
 */
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Store } from '../store/store.js';
import { isStoreId, mountPoints, readStoreId, STORE_ID_FILE } from '../sandboxes/volumes.js';

const run = promisify(execFile);

export const MANIFEST = 'manifest.json';
const STORE_FILE = 'sandgate.db';
const OTHER_FILES = ['mcp-servers.json'];

export interface BackupManifest {
  format: 1;
  createdAt: string;
  /** Where the store was: only a SQLite store is in the backup. */
  database: 'sqlite' | 'postgres';
  schemaVersion: number;
  files: string[];
  workspaces: { id: string; kind: 'image' | 'directory' }[];
  /**
   * The workspaces folder's store id (src/sandboxes/volumes.ts), put back by a restore: the
   * users whose files the folder holds are found there again. Absent from a backup of a
   * folder that had none, or taken by an earlier release.
   */
  storeId?: string;
}

export class BackupError extends Error {
  override name = 'BackupError';
}

async function emptyOrAbsent(dir: string): Promise<boolean> {
  try {
    return (await fsp.readdir(dir)).length === 0;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return true;
    throw e;
  }
}

/** Copies `from` to `to` keeping holes (an image is mostly unwritten) and the mode. */
async function copySparse(from: string, to: string): Promise<void> {
  await run('cp', ['--sparse=always', '--preserve=mode,ownership,timestamps', from, to]);
}

/**
 * Copies a workspace image, its filesystem frozen for the copy when it is mounted (asked
 * at that moment: a sandbox may have mounted it since the backup began). False when the
 * workspace went away meanwhile (its user was deleted). A frozen filesystem is thawed
 * however the copy ends, and if this process is interrupted meanwhile.
 */
async function copyImage(mnt: string, to: string): Promise<boolean> {
  const img = `${mnt}.img`;
  const live = (await mountPoints()).includes(await fsp.realpath(mnt).catch(() => mnt));
  const thaw = () => {
    try {
      execFileSync('fsfreeze', ['--unfreeze', mnt], { stdio: 'ignore' });
    } catch {
      // Not frozen (any more).
    }
  };
  const interrupted = (signal: NodeJS.Signals) => {
    thaw();
    process.kill(process.pid, signal);
  };
  if (live) {
    await run('fsfreeze', ['--freeze', mnt]);
    process.once('exit', thaw);
    process.once('SIGINT', interrupted);
    process.once('SIGTERM', interrupted);
  }
  try {
    await copySparse(img, to);
    return true;
  } catch (e) {
    if (!fs.existsSync(img)) return false;
    throw e;
  } finally {
    if (live) {
      process.removeListener('SIGINT', interrupted);
      process.removeListener('SIGTERM', interrupted);
      process.removeListener('exit', thaw);
      await run('fsfreeze', ['--unfreeze', mnt]);
    }
  }
}

/** Takes a backup of `dataDir` (and of `store`, when it is SQLite) into `dir`, a new or empty directory. */
export async function backup(store: Store, dataDir: string, dir: string, say: (line: string) => void = () => {}): Promise<BackupManifest> {
  if (!(await emptyOrAbsent(dir))) throw new BackupError(`${dir} is not empty: back up into a new or empty directory`);
  await fsp.mkdir(dir, { recursive: true, mode: 0o700 });
  await fsp.chmod(dir, 0o700);
  const manifest: BackupManifest = { format: 1, createdAt: new Date().toISOString(), database: store.dialect, schemaVersion: store.version, files: [], workspaces: [] };

  if (store.backup) {
    await store.backup(path.join(dir, STORE_FILE));
    await fsp.chmod(path.join(dir, STORE_FILE), 0o600);
    manifest.files.push(STORE_FILE);
    say(`store: ${STORE_FILE} (schema version ${store.version})`);
  } else {
    say('store: on Postgres, not in this directory: take it with pg_dump (README, Backups)');
  }
  for (const name of (await fsp.readdir(dataDir)).sort()) {
    if (!name.endsWith('.key') && !OTHER_FILES.includes(name)) continue;
    await fsp.copyFile(path.join(dataDir, name), path.join(dir, name));
    await fsp.chmod(path.join(dir, name), 0o600);
    manifest.files.push(name);
  }
  say(`keys and settings: ${manifest.files.filter((f) => f !== STORE_FILE).join(', ') || 'none'}`);

  const from = path.join(dataDir, 'workspaces');
  const to = path.join(dir, 'workspaces');
  await fsp.mkdir(to, { mode: 0o711 });
  const entries = fs.existsSync(from) ? await fsp.readdir(from, { withFileTypes: true }) : [];
  let storeId: string | undefined;
  try {
    storeId = fs.existsSync(from) ? readStoreId(from) : undefined;
  } catch (e) {
    throw new BackupError(`${(e as Error).message}: remove it and start the gateway once (it makes a new one), then back up again`);
  }
  if (storeId) manifest.storeId = storeId;
  for (const e of entries) {
    if (e.isFile() && e.name.endsWith('.img')) {
      const id = e.name.slice(0, -'.img'.length);
      const copied = await copyImage(path.join(from, id), path.join(to, e.name));
      if (copied) manifest.workspaces.push({ id, kind: 'image' });
    } else if (e.isDirectory() && !entries.some((o) => o.name === `${e.name}.img`)) {
      await run('cp', ['-a', path.join(from, e.name), path.join(to, e.name)]);
      manifest.workspaces.push({ id: e.name, kind: 'directory' });
    }
  }
  say(`workspaces: ${manifest.workspaces.length}${storeId ? ` (workspace store ${storeId})` : ''}`);
  await fsp.writeFile(path.join(dir, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`, { mode: 0o600 });
  return manifest;
}

/** Reads and checks a backup's manifest. */
export async function readManifest(dir: string): Promise<BackupManifest> {
  let m: BackupManifest;
  try {
    m = JSON.parse(await fsp.readFile(path.join(dir, MANIFEST), 'utf8')) as BackupManifest;
  } catch {
    throw new BackupError(`${dir} is not a sandgate backup (no readable ${MANIFEST})`);
  }
  if (m.format !== 1 || !Array.isArray(m.files) || !Array.isArray(m.workspaces)) throw new BackupError(`${dir}/${MANIFEST} is not in a format this sandgate reads`);
  const safe = (n: unknown) => typeof n === 'string' && /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(n);
  if (!m.files.every(safe) || !m.workspaces.every((w) => safe(w.id) && (w.kind === 'image' || w.kind === 'directory'))) {
    throw new BackupError(`${dir}/${MANIFEST} names a file outside the backup`);
  }
  if (m.storeId !== undefined && !isStoreId(m.storeId)) throw new BackupError(`${dir}/${MANIFEST} has a workspace store id that is not one`);
  return m;
}

async function expectKind(p: string, kind: 'file' | 'directory'): Promise<void> {
  const st = await fsp.lstat(p).catch(() => undefined);
  const ok = st && (kind === 'file' ? st.isFile() : st.isDirectory());
  if (!ok) throw new BackupError(`${p} is not a ${kind === 'file' ? 'plain file' : 'directory'} (${st ? 'a link or special file' : 'missing'}): this backup is damaged or was altered; nothing was restored`);
}

/**
 * Puts the backup in `dir` into `dataDir`, which must be empty (or absent): a restore
 * never mixes with data already there. The gateway must not be running on `dataDir`.
 */
export async function restore(dir: string, dataDir: string, say: (line: string) => void = () => {}): Promise<BackupManifest> {
  const m = await readManifest(dir);
  if (!(await emptyOrAbsent(dataDir))) throw new BackupError(`${dataDir} is not empty: restore into an empty data directory (move the old one aside first)`);
  // Only what a backup holds: plain files and directories, no links, no devices (a link
  // made to look like a workspace would bring a host path into a user's sandbox).
  for (const f of m.files) await expectKind(path.join(dir, f), 'file');
  for (const w of m.workspaces) await expectKind(path.join(dir, 'workspaces', w.kind === 'image' ? `${w.id}.img` : w.id), w.kind === 'image' ? 'file' : 'directory');
  await fsp.mkdir(dataDir, { recursive: true, mode: 0o700 });
  await fsp.chmod(dataDir, 0o700);
  for (const f of m.files) {
    await fsp.copyFile(path.join(dir, f), path.join(dataDir, f), fs.constants.COPYFILE_EXCL);
    await fsp.chmod(path.join(dataDir, f), 0o600);
  }
  const to = path.join(dataDir, 'workspaces');
  await fsp.mkdir(to, { mode: 0o711 });
  // The folder is the store it was: where the database says these users' files are.
  if (m.storeId) await fsp.writeFile(path.join(to, STORE_ID_FILE), `${m.storeId}\n`, { mode: 0o644, flag: 'wx' });
  for (const w of m.workspaces) {
    if (w.kind === 'image') await copySparse(path.join(dir, 'workspaces', `${w.id}.img`), path.join(to, `${w.id}.img`));
    else await run('cp', ['-a', path.join(dir, 'workspaces', w.id), path.join(to, w.id)]);
  }
  say(`restored ${m.files.length} files and ${m.workspaces.length} workspaces into ${dataDir}`);
  if (m.database === 'postgres') say('the store was on Postgres: restore it with pg_restore into an empty database (README, Backups)');
  return m;
}
