/**
 * The set-up scripts: mirror discovery from apt sources (never a hard-coded host),
 * an idempotent runtime set-up, the image's content hash, and compose.yaml's validity.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HAPROXY } from '../test/support/haproxy.js';
import { describe, expect, it } from 'vitest';

const root = path.resolve(import.meta.dirname, '..');

function mirror(files: Record<string, string>): { out: string; code: number | null } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-apt-'));
  fs.mkdirSync(path.join(dir, 'sources.list.d'));
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text);
  const r = spawnSync('bash', ['-c', `. ${root}/scripts/lib.sh; debian_mirror`], {
    env: { PATH: process.env.PATH, SANDGATE_APT_SOURCES_DIR: path.join(dir, 'sources.list.d'), SANDGATE_APT_SOURCES_LIST: path.join(dir, 'sources.list') },
    encoding: 'utf8',
  });
  return { out: r.stdout.trim(), code: r.status };
}

describe('scripts', () => {
  it('reads the mirror from deb822 sources, skipping the security archive', () => {
    const r = mirror({
      'sources.list.d/debian.sources':
        'Types: deb\nURIs: http://mirror.internal/debian-security\nSuites: bookworm-security\nComponents: main\n\nTypes: deb\nURIs: http://mirror.internal/debian\nSuites: bookworm bookworm-updates\nComponents: main\n',
    });
    expect(r).toEqual({ out: 'http://mirror.internal/debian', code: 0 });
  });

  it('reads the mirror from a one-line sources.list', () => {
    const r = mirror({ 'sources.list': '# comment\ndeb http://security.debian.org/debian-security bookworm-security main\ndeb [arch=amd64] https://ftp.example.org/debian bookworm main\n' });
    expect(r).toEqual({ out: 'https://ftp.example.org/debian', code: 0 });
  });

  it('fails with the fix when no mirror is configured', () => {
    const r = mirror({});
    expect(r.code).not.toBe(0);
  });

  it('runtime set-up run again changes nothing and passes its preflight', () => {
    if (process.getuid?.() !== 0) return;
    const before = fs.readFileSync('/etc/docker/daemon.json', 'utf8');
    // The suite's own set-up ran it once already; this is the second run.
    const r = spawnSync('bash', [path.join(root, 'scripts/setup-runtime.sh')], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/preflight passed: runsc \((systrap|ptrace)\)/);
    expect(r.stderr).not.toMatch(/apt-get|registered runtime|starting dockerd|reloading/);
    expect(fs.readFileSync('/etc/docker/daemon.json', 'utf8')).toBe(before);
    const cfg = JSON.parse(before) as { runtimes: { runsc: { runtimeArgs: string[] } } };
    expect(cfg.runtimes.runsc.runtimeArgs).toContain('--network=none');
  });

  it('the image tag is a content hash that the built image carries', () => {
    const tag = execFileSync('bash', [path.join(root, 'scripts/build-sandbox-image.sh'), '--print-tag'], { encoding: 'utf8' }).trim();
    expect(tag).toMatch(/^sandgate\/sandbox:[0-9a-f]{16}$/);
    const r = spawnSync('docker', ['image', 'inspect', '--format', '{{index .Config.Labels "org.sandgate.image-hash"}}', tag], { encoding: 'utf8' });
    expect(r.status, `${tag} is not built: run scripts/build-sandbox-image.sh`).toBe(0);
    expect(r.stdout.trim()).toBe(tag.split(':')[1]);
  });

  it('compose.yaml is valid and runs sandboxes under runsc', () => {
    const r = spawnSync('docker-compose', ['-f', path.join(root, 'compose.yaml'), 'config'], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/SANDGATE_SANDBOX_RUNTIME: runsc/);
    expect(r.stdout).toMatch(/\/var\/run\/docker.sock/);
    expect(r.stdout).toMatch(/runtime: runsc/);
  });

  it('compose.replicas.yaml is valid: two gateways on one Postgres behind HAProxy, and no default database password', () => {
    const file = path.join(root, 'compose.replicas.yaml');
    const withoutPassword = spawnSync('docker-compose', ['-f', file, 'config'], { encoding: 'utf8', env: { PATH: process.env.PATH } });
    expect(withoutPassword.status).not.toBe(0);
    expect(withoutPassword.stderr).toMatch(/set POSTGRES_PASSWORD/);
    const r = spawnSync('docker-compose', ['-f', file, 'config'], { encoding: 'utf8', env: { PATH: process.env.PATH, POSTGRES_PASSWORD: 'secret' } });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/SANDGATE_INTERNAL_URL: http:\/\/sandgate:8787/);
    expect(r.stdout).toMatch(/SANDGATE_INTERNAL_URL: http:\/\/sandgate-2:8787/);
    expect(r.stdout.match(/SANDGATE_DATABASE_URL: postgres:\/\/sandgate:secret@postgres:5432\/sandgate/g)).toHaveLength(2);
    expect(r.stdout).toMatch(/runtime: runsc/);
    // Only HAProxy publishes a port, on loopback.
    expect(r.stdout.match(/127\.0\.0\.1:8787:8787/g)).toHaveLength(1);
  });

  it('the shipped HAProxy configuration is valid for Debian’s HAProxy', () => {
    const r = spawnSync(HAPROXY, ['-c', '-f', path.join(root, 'deploy/haproxy/haproxy.cfg')], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout + r.stderr).toMatch(/Configuration file is valid/);
  });
});
