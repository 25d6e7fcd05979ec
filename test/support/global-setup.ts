/**
 * Gives a test run its own temporary directory and removes it when the run ends. Tests,
 * and the gateway code they drive, make their files with os.tmpdir(); pointing TMPDIR here
 * keeps a run from leaving data directories, workspace images and scratch files in /tmp
 * (a failed test skips its own clean-up). The test processes are forked after this runs,
 * so they inherit it.
 *
 * Each vitest project (sqlite, postgres: see vitest.config.ts) runs this setup, and all of
 * them share the one directory: the first to set up makes it, the last to tear down removes
 * it. The postgres project also starts a throw-away Postgres cluster inside it and tells
 * its tests where through SANDGATE_TEST_POSTGRES_URL (test/support/postgres.ts).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { mountPoints } from '../../src/sandboxes/volumes.js';
import Docker from 'dockerode';
import { startPostgresCluster, type PgCluster } from './postgres.js';
import { STANDIN_LABEL } from './kube-standin.js';

interface RunDir {
  dir: string;
  previous: string | undefined;
  /** Projects set up and not yet torn down. */
  users: number;
}

// Vitest loads this file once per project: the shared directory lives on the process, not the module.
const RUN_DIR = Symbol.for('sandgate.test-run-dir');
const holder = globalThis as { [RUN_DIR]?: RunDir };

function enterRunDir(): RunDir {
  const existing = holder[RUN_DIR];
  if (existing) {
    existing.users += 1;
    return existing;
  }
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-run-')));
  // Passable (not listable) by other users: stdio upstream servers run as uids of their
  // own and must reach their homes below it, as they must below SANDGATE_UPSTREAM_HOME_DIR;
  // the Postgres cluster runs as the postgres user.
  fs.chmodSync(dir, 0o711);
  const run: RunDir = { dir, previous: process.env.TMPDIR, users: 1 };
  process.env.TMPDIR = dir;
  holder[RUN_DIR] = run;
  return run;
}

async function leaveRunDir(run: RunDir): Promise<void> {
  run.users -= 1;
  if (run.users > 0) return;
  delete holder[RUN_DIR];
  const { dir, previous } = run;
  if (previous === undefined) delete process.env.TMPDIR;
  else process.env.TMPDIR = previous;
  const mounts = (await mountPoints()).filter((p) => p === dir || p.startsWith(`${dir}/`));
  if (mounts.length) {
    // rm would go into the mounts and delete what is inside: leave it all for a person to look at.
    console.warn(`test run: kept ${dir}, still mounted: ${mounts.join(', ')}`);
    return;
  }
  fs.rmSync(dir, { recursive: true, force: true });
}

/** The project's own env decides (the sqlite project sets it too, so a shell's value cannot leak in). */
function wantsPostgres(project: TestProject): boolean {
  return (project.config.env?.SANDGATE_TEST_DATABASE ?? process.env.SANDGATE_TEST_DATABASE) === 'postgres';
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const run = enterRunDir();
  let cluster: PgCluster | undefined;
  if (wantsPostgres(project)) {
    try {
      cluster = await startPostgresCluster();
    } catch (err) {
      await leaveRunDir(run);
      throw err;
    }
    process.env.SANDGATE_TEST_POSTGRES_URL = cluster.adminUrl;
  }
  return async () => {
    try {
      if (cluster) {
        delete process.env.SANDGATE_TEST_POSTGRES_URL;
        // Before the directory goes: the cluster's files are in it.
        await cluster.stop();
      }
      // Pods of stand-in API servers (the kubernetes project's) that a test process left.
      if (project.config.env?.SANDGATE_TEST_DRIVER === 'kubernetes') await removeStandinContainers();
    } finally {
      await leaveRunDir(run);
    }
  };
}

async function removeStandinContainers(): Promise<void> {
  const docker = new Docker();
  for (const c of await docker.listContainers({ all: true, filters: { label: [STANDIN_LABEL] } }).catch(() => [])) {
    await docker.getContainer(c.Id).remove({ force: true }).catch(() => {});
  }
}
