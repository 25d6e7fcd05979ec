/**
 * Renders the Helm chart (deploy/helm/sandgate) for the tests with Helm's own template
 * engine: Go's text/template and sprig (Debian's golang-go and
 * golang-github-masterminds-sprig-dev; `npm test` installs them), driven by
 * test/support/helm-render/main.go, built here once per process.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import yaml from 'js-yaml';
import { REPO_ROOT } from '../../src/paths.js';

export const CHART_DIR = path.join(REPO_ROOT, 'deploy/helm/sandgate');
const DEBIAN_GOPATH = '/usr/share/gocode';

let binary: string | undefined;

/** The renderer, built with Debian's Go in GOPATH mode (the v3 import paths mapped onto Debian's source). */
export function helmRenderer(): string {
  if (binary) return binary;
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-helm-render-'));
  const gopath = path.join(work, 'gopath');
  for (const [module, dir] of [
    ['github.com/Masterminds/sprig/v3', 'github.com/Masterminds/sprig'],
    ['github.com/Masterminds/semver/v3', 'github.com/Masterminds/semver'],
  ] as const) {
    fs.mkdirSync(path.dirname(path.join(gopath, 'src', module)), { recursive: true });
    fs.symlinkSync(path.join(DEBIAN_GOPATH, 'src', dir), path.join(gopath, 'src', module));
  }
  const out = path.join(work, 'helm-render');
  const r = spawnSync('go', ['build', '-o', out, '.'], {
    cwd: path.join(REPO_ROOT, 'test/support/helm-render'),
    env: { PATH: process.env.PATH, HOME: work, GO111MODULE: 'off', GOPATH: `${gopath}:${DEBIAN_GOPATH}`, GOCACHE: path.join(work, 'cache'), GOFLAGS: '' },
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`building the chart renderer failed (are golang-go and golang-github-masterminds-sprig-dev installed?): ${r.stderr || r.error?.message}`);
  binary = out;
  return out;
}

export interface Rendered {
  ok: boolean;
  /** The objects, as YAML gave them (nothing dropped or renamed). */
  objects: Record<string, any>[]; // eslint-disable-line @typescript-eslint/no-explicit-any
  stderr: string;
}

/** `helm template` of the chart with these values files and --set pairs. */
export function renderChart(opts: { values?: string[]; set?: Record<string, string>; namespace?: string; upgrade?: boolean } = {}): Rendered {
  const args = [...(opts.upgrade ? ['--is-upgrade'] : []),...(opts.values ?? []).flatMap((f) => ['-f', f]), ...Object.entries(opts.set ?? {}).flatMap(([k, v]) => ['--set', `${k}=${v}`]), '--namespace', opts.namespace ?? 'sandgate', CHART_DIR];
  const r = spawnSync(helmRenderer(), args, { encoding: 'utf8' });
  if (r.status !== 0) return { ok: false, objects: [], stderr: r.stderr };
  return { ok: true, objects: (yaml.loadAll(r.stdout) as (Record<string, unknown> | null)[]).filter((o): o is Record<string, any> => !!o), stderr: r.stderr }; // eslint-disable-line @typescript-eslint/no-explicit-any
}
