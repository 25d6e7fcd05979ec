/**
 * How a stdio upstream server is started: never as the gateway's user.
 * host/upstream_launcher.py does the work inside fresh pid, network and IPC namespaces
 * (see there); this module builds its command line and environment, and prepares the
 * connection's home, owned by the connection's own uid (identities.ts).
 *
 * A server's network is its `sandgate.network` policy: `none` leaves it an empty network
 * namespace; `public` and `allow` add a relay to the gateway's egress proxy
 * (egress-proxy.ts) and point HTTP_PROXY / HTTPS_PROXY at it; `host` keeps the host's
 * network (no network namespace), which is what the policy's UNSAFE warning says.
 */
import fs from 'node:fs';
import path from 'node:path';
import { HOST_PYTHON } from '../host/python.js';
import { UPSTREAM_LAUNCHER, UPSTREAM_PROXY_PRELOAD } from '../paths.js';
import type { NetworkPolicy } from './config.js';

/** Where the relay listens inside the server's network namespace. */
export const PROXY_PORT = 3128;

export interface IsolatedStart {
  uid: number;
  gid: number;
  home: string;
  cwd: string;
  policy: NetworkPolicy;
  /** The egress proxy's socket, for `public` and `allow`. */
  proxySocket?: string;
  command: string;
  args: string[];
  /** The server's environment (HOME and PATH included); proxy variables are added here. */
  env: Record<string, string>;
}

/** The command, arguments and environment that start a server as `IsolatedStart` says. */
export function isolatedCommand(s: IsolatedStart): { command: string; args: string[]; env: Record<string, string> } {
  const root = process.getuid?.() === 0;
  const env = { ...s.env };
  if (s.proxySocket) {
    const proxy = `http://127.0.0.1:${PROXY_PORT}`;
    Object.assign(env, { HTTP_PROXY: proxy, HTTPS_PROXY: proxy, http_proxy: proxy, https_proxy: proxy, NO_PROXY: '', no_proxy: '' });
    env.NODE_OPTIONS = `${env.NODE_OPTIONS ? `${env.NODE_OPTIONS} ` : ''}--require ${JSON.stringify(UPSTREAM_PROXY_PRELOAD)}`;
  }
  const spec = { uid: root ? s.uid : -1, gid: root ? s.gid : -1, cwd: s.cwd, env: Object.keys(env), proxy: s.proxySocket ? { socket: s.proxySocket, port: PROXY_PORT } : null };
  const args = [
    // Not root: a user namespace of its own gives the launcher the rights it needs there.
    ...(root ? [] : ['--user', '--map-root-user']),
    ...(s.policy.kind === 'host' ? [] : ['--net']),
    '--pid',
    '--fork',
    '--kill-child',
    '--ipc',
    '--',
    HOST_PYTHON,
    '-I',
    '-S',
    UPSTREAM_LAUNCHER,
    JSON.stringify(spec),
    '--',
    s.command,
    ...s.args,
  ];
  return { command: 'unshare', args, env };
}

/**
 * Makes sure the folders above `dir` can be passed by other users: a server runs as its
 * own uid and must reach its home. Returns the first folder that cannot, or undefined.
 */
export function unreachableAncestor(dir: string): string | undefined {
  let cur = path.resolve(dir);
  for (;;) {
    const parent = path.dirname(cur);
    if (parent === cur) return undefined;
    cur = parent;
    let st: fs.Stats;
    try {
      st = fs.statSync(cur);
    } catch {
      continue;
    }
    if (!(st.mode & 0o001)) return cur;
  }
}

/**
 * Creates a connection's home (0700, owned by its uid) under a base that others may
 * pass through but not list (0711). A home an earlier version kept under the data
 * directory (`legacy`) is moved here first, so a server keeps its files.
 */
export function prepareHome(base: string, home: string, uid: number, gid: number, legacy?: string): void {
  fs.mkdirSync(base, { recursive: true, mode: 0o711 });
  for (let dir = path.dirname(home); dir.startsWith(base) && dir !== base; dir = path.dirname(dir)) {
    fs.mkdirSync(dir, { recursive: true, mode: 0o711 });
  }
  if (legacy && !fs.existsSync(home) && fs.existsSync(legacy)) {
    fs.mkdirSync(path.dirname(home), { recursive: true, mode: 0o711 });
    try {
      fs.renameSync(legacy, home);
    } catch {
      fs.cpSync(legacy, home, { recursive: true, verbatimSymlinks: true });
      fs.rmSync(legacy, { recursive: true, force: true });
    }
  }
  fs.mkdirSync(home, { recursive: true, mode: 0o700 });
  if (process.getuid?.() !== 0) return;
  const st = fs.lstatSync(home);
  if (st.uid !== uid) chownTree(home, uid, gid);
  fs.chmodSync(home, 0o700);
}

/** lchown of a tree that never follows a link (the tree was a server's to fill). */
function chownTree(dir: string, uid: number, gid: number): void {
  fs.lchownSync(dir, uid, gid);
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) chownTree(p, uid, gid);
    else fs.lchownSync(p, uid, gid);
  }
}
