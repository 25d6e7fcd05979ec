/**
 * Debian's HAProxy in front of gateway replicas, with the configuration the project ships
 * (deploy/haproxy/haproxy.cfg): round robin, no stickiness, each server checked on
 * /readyz, a request whose connection a server refused sent to another, nothing else
 * retried. Only the addresses change: it listens on a free loopback port, and its
 * servers are the given loopback ports instead of compose's service names.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from './ports.js';
import { REPO_ROOT } from '../../src/paths.js';

export interface Haproxy {
  /** Where clients reach the replicas through it. */
  url: string;
  child: ChildProcess;
  output(): string;
  stop(): Promise<void>;
}

const SHIPPED = path.join(REPO_ROOT, 'deploy/haproxy/haproxy.cfg');

/** The shipped configuration, listening on `port`, balancing over gateways on loopback `ports`. */
export function configFor(port: number, ports: number[]): string {
  const lines = fs.readFileSync(SHIPPED, 'utf8').split('\n');
  const out: string[] = [];
  let inResolvers = false;
  for (const line of lines) {
    if (/^resolvers /.test(line)) {
      inResolvers = true;
      continue;
    }
    if (inResolvers && /^\S/.test(line)) inResolvers = false;
    if (inResolvers) continue;
    if (/^\s*bind /.test(line)) out.push(`  bind 127.0.0.1:${port}`);
    else if (/^\s*server /.test(line)) continue;
    else out.push(line.replace(/ resolvers docker init-addr \S+/, ''));
  }
  const at = out.findIndex((l) => /^\s*default-server /.test(l));
  if (at < 0) throw new Error(`${SHIPPED} has no default-server line`);
  out.splice(at + 1, 0, ...ports.map((p, i) => `  server g${i + 1} 127.0.0.1:${p}`));
  return out.join('\n');
}

export const HAPROXY = fs.existsSync('/usr/sbin/haproxy') ? '/usr/sbin/haproxy' : 'haproxy';

/** HAProxy balancing over gateways on these loopback ports. */
export async function startHaproxy(ports: number[]): Promise<Haproxy> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-haproxy-'));
  const port = await freePort();
  const config = configFor(port, ports);
  fs.writeFileSync(path.join(dir, 'haproxy.cfg'), config);
  const child = spawn(HAPROXY, ['-db', '-f', path.join(dir, 'haproxy.cfg')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<void>((r) => child.on('exit', () => r()));
  const url = `http://127.0.0.1:${port}`;
  for (const end = Date.now() + 15_000; (await fetch(`${url}/healthz`).catch(() => undefined))?.status !== 200; ) {
    if (Date.now() > end || child.exitCode !== null) throw new Error(`HAProxy did not start: ${out}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    child,
    output: () => out,
    async stop() {
      child.kill('SIGTERM');
      await exited;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
