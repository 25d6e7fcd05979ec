/**
 * Gives a test run its own temporary directory and removes it when the run ends. Tests,
 * and the gateway code they drive, make their files with os.tmpdir(); pointing TMPDIR here
 * keeps a run from leaving data directories, workspace images and scratch files in /tmp
 * (a failed test skips its own clean-up). The test processes are forked after this runs,
 * so they inherit it.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { mountPoints } from '../../src/sandboxes/volumes.js';

export default function setup(): () => Promise<void> {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-run-')));
  // Passable (not listable) by other users: stdio upstream servers run as uids of their
  // own and must reach their homes below it, as they must below SANDGATE_UPSTREAM_HOME_DIR.
  fs.chmodSync(dir, 0o711);
  const previous = process.env.TMPDIR;
  process.env.TMPDIR = dir;
  return async () => {
    if (previous === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = previous;
    const mounts = (await mountPoints()).filter((p) => p === dir || p.startsWith(`${dir}/`));
    if (mounts.length) {
      // rm would go into the mounts and delete what is inside: leave it all for a person to look at.
      console.warn(`test run: kept ${dir}, still mounted: ${mounts.join(', ')}`);
      return;
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
}
