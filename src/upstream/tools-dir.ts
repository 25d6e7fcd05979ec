/**
 * The host directory mounted read-only at /tools in a user's sandbox:
 * `<dataDir>/tools/<userId>/` (or a directory the sandbox manager chose), holding the static tool library (a copy of the repo's
 * tools/ folder) plus generated wrappers for exactly the servers that user may use, so
 * a user never sees wrappers of servers they may not call.
 *
 * The directory is updated in place (never replaced), because a running sandbox has it
 * bind-mounted: replacing it would leave the sandbox looking at the old one. Files are
 * written atomically (temp file + rename) and only when their content changed; files no
 * longer generated are removed. When an upstream server's tool list changes, every
 * directory generated so far is brought up to date.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from '../logger.js';
import { TOOLS_DIR } from '../paths.js';
import type { SandboxOwner } from '../sandboxes/types.js';
import type { UpstreamServerConfig } from './config.js';
import type { UpstreamHub } from './hub.js';
import { generateServerFiles, generateServersIndex } from './wrappers.js';

/** The repo's static library: tools/sandgate.ts, tools/python/sandgate_tools/, tools/README.md. */
export const STATIC_TOOLS_DIR = `${TOOLS_DIR}/`;

export interface ToolsDirOptions {
  hub: UpstreamHub;
  dataDir: string;
  staticDir?: string;
  logger?: Logger;
  /** Coalesce regenerations after catalogue changes for this long. */
  regenerateDelayMs?: number;
}

export interface ToolsDirs {
  /** Brings `<dataDir>/tools/<userId>/` up to date for the user and returns it. */
  toolsDirFor(owner: SandboxOwner): Promise<string>;
  /**
   * Fills (or updates) `dir` for the owner: the static library plus the wrappers of the
   * servers the owner may use; only the static library for a pooled sandbox (no owner).
   * The directory is then kept up to date when tool lists change, until it is removed.
   * This is the sandbox manager's `prepareTools`.
   */
  prepareTools(dir: string, owner: SandboxOwner | undefined): Promise<void>;
  /** Stops regenerating on catalogue changes. */
  close(): void;
}

/** Paths under the static dir that are generated, never copied. */
const GENERATED = [/^servers(\/|$)/, /^python\/sandgate_tools\/servers(\/|$)/, /(^|\/)__pycache__(\/|$)/, /(^|\/)\./];

export function createToolsDirs(opts: ToolsDirOptions): ToolsDirs {
  const staticDir = opts.staticDir ?? STATIC_TOOLS_DIR;
  const root = path.join(opts.dataDir, 'tools');
  /** Directories to keep current, with their owner. */
  const tracked = new Map<string, SandboxOwner>();
  const queues = new Map<string, Promise<unknown>>();
  const written = new Map<string, string>();
  let timer: NodeJS.Timeout | undefined;

  const generate = async (dir: string, owner: SandboxOwner | undefined): Promise<void> => {
    const files = readStatic(staticDir);
    const servers: { server: UpstreamServerConfig; tools: Tool[] }[] = [];
    let unavailable: { server: string; error: string }[] = [];
    if (owner) {
      const listing = await opts.hub.listTools(owner);
      unavailable = listing.unavailable;
      const down = new Set(unavailable.map((u) => u.server));
      for (const server of await opts.hub.serversFor(owner)) {
        if (down.has(server.name)) continue;
        servers.push({ server, tools: listing.tools.filter((t) => t.server === server).map((t) => t.tool) });
      }
    }
    for (const { server, tools } of servers) {
      for (const [rel, content] of await generateServerFiles(server, tools)) files.set(rel, content);
    }
    for (const [rel, content] of generateServersIndex(servers, unavailable)) files.set(rel, content);

    const hash = crypto.createHash('sha256');
    for (const [rel, content] of [...files.entries()].sort(([a], [b]) => a.localeCompare(b))) hash.update(`${rel}\0${content}\0`);
    const digest = hash.digest('hex');
    if (written.get(dir) === digest && fs.existsSync(dir)) return;
    syncDir(dir, files);
    written.set(dir, digest);
    opts.logger?.debug({ dir, userId: owner?.userId, files: files.size, unavailable: unavailable.length }, 'tools directory updated');
  };

  const enqueue = (dir: string, owner: SandboxOwner | undefined): Promise<void> => {
    const prev = queues.get(dir) ?? Promise.resolve();
    const next = prev.catch(() => undefined).then(() => generate(dir, owner));
    queues.set(dir, next);
    void next
      .finally(() => {
        if (queues.get(dir) === next) queues.delete(dir);
      })
      .catch(() => undefined);
    return next;
  };

  const unsubscribe = opts.hub.onCatalogChange(() => {
    if (timer) return;
    timer = setTimeout(() => {
      timer = undefined;
      for (const [dir, owner] of tracked) {
        if (!fs.existsSync(dir)) {
          tracked.delete(dir);
          written.delete(dir);
          continue;
        }
        enqueue(dir, owner).catch((e: Error) => opts.logger?.warn({ dir, userId: owner.userId, err: e.message }, 'regenerating a tools directory failed'));
      }
    }, opts.regenerateDelayMs ?? 500);
    timer.unref();
  });

  const prepareTools = async (dir: string, owner: SandboxOwner | undefined): Promise<void> => {
    const abs = path.resolve(dir);
    if (owner) tracked.set(abs, owner);
    else tracked.delete(abs);
    await enqueue(abs, owner);
  };

  return {
    async toolsDirFor(owner) {
      const dir = path.join(root, String(owner.userId));
      await prepareTools(dir, owner);
      return path.resolve(dir);
    },
    prepareTools,
    close() {
      unsubscribe();
      if (timer) clearTimeout(timer);
    },
  };
}

function readStatic(dir: string): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (rel: string) => {
    for (const e of fs.readdirSync(path.join(dir, rel), { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (GENERATED.some((re) => re.test(r))) continue;
      if (e.isDirectory()) walk(r);
      else if (e.isFile()) files.set(r, fs.readFileSync(path.join(dir, r), 'utf8'));
    }
  };
  walk('');
  return files;
}

/** Makes `dir` hold exactly `files` (relative path → content), touching only what differs. */
export function syncDir(dir: string, files: Map<string, string>): void {
  const resolved = path.resolve(dir);
  fs.mkdirSync(resolved, { recursive: true, mode: 0o755 });
  fs.chmodSync(resolved, 0o755);
  for (const [rel, content] of files) {
    const abs = path.resolve(resolved, rel);
    if (!abs.startsWith(resolved + path.sep)) throw new Error(`refusing to write outside the tools directory: ${rel}`);
    mkdirReadable(resolved, path.dirname(abs));
    let current: string | undefined;
    try {
      current = fs.readFileSync(abs, 'utf8');
    } catch {
      current = undefined;
    }
    if (current === content) continue;
    const tmp = `${abs}.${crypto.randomBytes(4).toString('hex')}.tmp`;
    fs.writeFileSync(tmp, content, { mode: 0o644 });
    fs.chmodSync(tmp, 0o644); // the sandbox user must read it, whatever the gateway's umask
    fs.renameSync(tmp, abs);
  }
  const keep = new Set([...files.keys()].map((rel) => path.resolve(resolved, rel)));
  const prune = (d: string): boolean => {
    let empty = true;
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const abs = path.join(d, e.name);
      if (e.isDirectory()) {
        if (prune(abs)) fs.rmdirSync(abs);
        else empty = false;
      } else if (!keep.has(abs)) {
        fs.rmSync(abs, { force: true });
      } else {
        empty = false;
      }
    }
    return empty;
  };
  prune(resolved);
}

/** mkdir -p below `root`, each new directory 0755 whatever the umask. */
function mkdirReadable(root: string, dir: string): void {
  if (dir === root || fs.existsSync(dir)) return;
  mkdirReadable(root, path.dirname(dir));
  fs.mkdirSync(dir, { mode: 0o755 });
  fs.chmodSync(dir, 0o755);
}
