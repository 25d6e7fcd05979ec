/**
 * A backup directory is input: `restore` takes only plain files and directories from
 * it, whatever its manifest says, and writes only into an empty data directory.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { restore, BackupError } from './backup.js';

function craftedBackup(manifest: object): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-crafted-'));
  fs.mkdirSync(path.join(dir, 'workspaces'));
  fs.writeFileSync(path.join(dir, 'manifest.json'), JSON.stringify({ format: 1, createdAt: '', database: 'sqlite', schemaVersion: 1, files: [], workspaces: [], ...manifest }));
  return dir;
}

const emptyDataDir = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-target-')), 'data');

describe('restore refuses a crafted backup', () => {
  it('a workspace that is a link to a host path', async () => {
    const dir = craftedBackup({ workspaces: [{ id: 'abcdef123456', kind: 'directory' }] });
    fs.symlinkSync('/', path.join(dir, 'workspaces', 'abcdef123456'));
    const target = emptyDataDir();
    await expect(restore(dir, target)).rejects.toThrow(/is not a directory \(a link or special file\).*nothing was restored/);
    expect(fs.existsSync(target)).toBe(false);
  });

  it('a workspace image or a key that is a link (to a device, to a file elsewhere)', async () => {
    const img = craftedBackup({ workspaces: [{ id: 'abcdef123456', kind: 'image' }] });
    fs.symlinkSync('/dev/zero', path.join(img, 'workspaces', 'abcdef123456.img'));
    await expect(restore(img, emptyDataDir())).rejects.toThrow(BackupError);
    const key = craftedBackup({ files: ['pii.key'] });
    fs.symlinkSync('/etc/shadow', path.join(key, 'pii.key'));
    await expect(restore(key, emptyDataDir())).rejects.toThrow(/pii\.key is not a plain file/);
  });

  it('names that leave the backup', async () => {
    await expect(restore(craftedBackup({ files: ['../../etc/passwd'] }), emptyDataDir())).rejects.toThrow(/names a file outside the backup/);
    await expect(restore(craftedBackup({ workspaces: [{ id: '../x', kind: 'directory' }] }), emptyDataDir())).rejects.toThrow(/names a file outside the backup/);
  });

  it('a data directory that is not empty', async () => {
    const target = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-target-'));
    fs.writeFileSync(path.join(target, 'sandgate.db'), 'mine');
    await expect(restore(craftedBackup({}), target)).rejects.toThrow(/is not empty: restore into an empty data directory/);
    expect(fs.readFileSync(path.join(target, 'sandgate.db'), 'utf8')).toBe('mine');
  });

  it('a workspace store id that is not one', async () => {
    for (const storeId of ['../../etc', 'a\nb', 'short', 42]) {
      await expect(restore(craftedBackup({ storeId }), emptyDataDir()), String(storeId)).rejects.toThrow(/has a workspace store id that is not one/);
    }
  });
});

describe('restore puts the workspaces folder back as the store it was', () => {
  it('with its store id, so the users whose files it holds are found there again', async () => {
    const target = emptyDataDir();
    await restore(craftedBackup({ storeId: 'Zx9_store-id-01' }), target);
    expect(fs.readFileSync(path.join(target, 'workspaces', '.store-id'), 'utf8')).toBe('Zx9_store-id-01\n');
    // A backup of an earlier release has none: the folder gets a new one at the gateway's start.
    const older = emptyDataDir();
    await restore(craftedBackup({}), older);
    expect(fs.existsSync(path.join(older, 'workspaces', '.store-id'))).toBe(false);
  });
});
