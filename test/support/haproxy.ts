/**
 * Debian's HAProxy in front of gateway replicas, with the configuration the project ships
 * (deploy/haproxy/haproxy.cfg): round robin, no stickiness, each server checked on
 * /readyz, a request whose connection a server refused sent to another, nothing else
 * retried. Only the addresses change: it listens on a loopback port, and its servers are
 * the given loopback ports instead of compose's service names. A test may add a log of
 * every request (which server answered it), and pin one path prefix to one server.
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

export interface HaproxyOptions {
  /** The port to listen on (a test that must name it before the gateways start); else a free one. */
  port?: number;
  /** One line a request on its output (HAProxy's httplog: the server that answered, the request line). */
  log?: boolean;
  /**
   * Requests whose path begins with `prefix` go to the gateway on `port` alone, every other
   * request to the other gateways: a test that needs to know which replica serves what.
   */
  pin?: { prefix: string; port: number };
}

/** The shipped configuration, listening on `port`, balancing over gateways on loopback `ports`. */
export function configFor(port: number, ports: number[], opts: Pick<HaproxyOptions, 'log' | 'pin'> = {}): string {
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
  // Servers keep their names (g1, g2, … in the order of `ports`) whichever backend they are in.
  const server = (p: number) => `  server g${ports.indexOf(p) + 1} 127.0.0.1:${p}`;
  const pin = opts.pin;
  out.splice(at + 1, 0, ...ports.filter((p) => p !== pin?.port).map(server));
  if (pin) {
    if (!ports.includes(pin.port)) throw new Error(`the pinned port ${pin.port} is not one of ${ports.join(', ')}`);
    const backend = out.findIndex((l) => /^backend /.test(l));
    const fallback = out.findIndex((l) => /^\s*default_backend /.test(l));
    if (backend < 0 || fallback < 0) throw new Error(`${SHIPPED} has no backend or no default_backend line`);
    // The same checks and defaults as the shipped backend, with the one server.
    const pinned = [...out.slice(backend, out.findIndex((l, i) => i > backend && /^\s*server /.test(l))).map((l) => l.replace(/^backend \S+/, 'backend pinned')), server(pin.port), ''];
    out.splice(fallback, 0, `  use_backend pinned if { path_beg ${pin.prefix} }`);
    out.push('', ...pinned);
  }
  if (opts.log) {
    const global = out.findIndex((l) => /^global\b/.test(l));
    out.splice(global + 1, 0, '  log stdout format raw local0');
    const defaults = out.findIndex((l) => /^defaults\b/.test(l));
    out.splice(defaults + 1, 0, '  log global', '  option httplog');
  }
  return out.join('\n');
}

export const HAPROXY = fs.existsSync('/usr/sbin/haproxy') ? '/usr/sbin/haproxy' : 'haproxy';

/** HAProxy balancing over gateways on these loopback ports. */
export async function startHaproxy(ports: number[], opts: HaproxyOptions = {}): Promise<Haproxy> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-haproxy-'));
  const port = opts.port ?? (await freePort());
  const config = configFor(port, ports, opts);
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
