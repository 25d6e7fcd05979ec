/**
 * The admin's list of upstream MCP servers: the `mcpServers` JSON that MCP clients
 * already use (Claude Desktop, Claude Code, Cursor), plus a `sandgate` block per server
 * that says who may use it and whose credentials it runs with.
 *
 * ```json
 * {
 *   "mcpServers": {
 *     "memory": {
 *       "command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"],
 *       "env": { "MEMORY_FILE_PATH": "${SANDGATE_WORKDIR}/memory.jsonl" },
 *       "sandgate": { "scope": "per-user", "allowUsers": ["*"] }
 *     },
 *     "github": {
 *       "command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
 *       "sandgate": { "scope": "per-user", "allowTeams": ["acme/dev"],
 *                     "userCredentials": ["GITHUB_PERSONAL_ACCESS_TOKEN"] }
 *     },
 *     "docs": {
 *       "url": "https://mcp.example.com/mcp", "headers": { "Authorization": "Bearer ${DOCS_TOKEN}" },
 *       "sandgate": { "allowUsers": ["alice", "bob"], "denyTools": ["delete_page"] }
 *     }
 *   }
 * }
 * ```
 *
 * `${NAME}` and `${NAME:-default}` in `args`, `env`, `url`, `headers` and `cwd` are
 * taken from the gateway's environment when the file is loaded (so secrets of shared
 * servers can stay out of the file); `${SANDGATE_WORKDIR}` (a private directory per
 * connection), `${SANDGATE_USER}` and `${SANDGATE_USER_ID}` are filled in per connection.
 * Nothing else of the gateway's environment reaches a stdio server except PATH.
 */
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { serverId } from './names.js';
import { GatewayError } from '../errors.js';

/** Placeholders filled in per connection, not from the gateway's environment. */
export const CONNECTION_PLACEHOLDERS = ['SANDGATE_WORKDIR', 'SANDGATE_USER', 'SANDGATE_USER_ID'] as const;

/** Default time limit for one upstream call. */
export const DEFAULT_UPSTREAM_TIMEOUT_SEC = 60;

/**
 * What a stdio server may reach (its `sandgate.network`). A server that fetches what
 * its arguments name does so for code in a sandbox, so its reach is the sandbox's reach:
 * - `none` (the default): no network at all, not even the host's loopback;
 * - `public`: hosts on the internet, never loopback, private or link-local addresses;
 * - `allow`: only the listed hosts (`name`, `*.domain`, optionally `:port`);
 * - `host`: the gateway host's own network, loopback included. UNSAFE: warned at start.
 */
export type NetworkPolicy = { kind: 'none' } | { kind: 'public' } | { kind: 'allow'; hosts: { host: string; port?: number }[] } | { kind: 'host' };

export type UpstreamTransportConfig =
  | { type: 'stdio'; command: string; args: string[]; env: Record<string, string>; cwd?: string }
  | { type: 'http' | 'sse'; url: string; headers: Record<string, string> };

export interface UpstreamServerConfig {
  /** The key under `mcpServers`: what code passes to callMCPTool. */
  name: string;
  /** Directory and Python package name under /tools (`github-tools` → `github_tools`). */
  id: string;
  transport: UpstreamTransportConfig;
  /**
   * `shared`: one connection for everyone, running with the admin's settings.
   * `per-user`: one connection per user, with that user's own credentials injected
   * (env for stdio, headers for http). Credentials never enter a sandbox either way.
   */
  scope: 'shared' | 'per-user';
  /** Login names that may use the server; `*` means every signed-in user. */
  allowUsers: string[];
  /** GitHub teams (`org/team`) whose members may use the server. */
  allowTeams: string[];
  /** When set, only these tools are offered and callable. */
  allowTools?: string[];
  /** Tools never offered nor callable. */
  denyTools: string[];
  /** Env var names (stdio) or header names (http) each user must supply; per-user only. */
  userCredentials: string[];
  /** Hard limit for one call, in milliseconds. */
  timeoutMs: number;
  /** Shown in search results and in the server's generated index. */
  description?: string;
  /** What a stdio server may reach; `none` unless the config says otherwise (url servers: `none`, unused). */
  network: NetworkPolicy;
}

/** The upstream server config file is invalid: the message names each server and field. */
export class UpstreamConfigError extends GatewayError {
  override name = 'UpstreamConfigError';
  constructor(message: string) {
    super(message, { reason: 'upstream_config_invalid', operator: true });
  }
}

const SERVER_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
const TEAM = /^[A-Za-z0-9][A-Za-z0-9-]*\/[A-Za-z0-9_.-]+$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** An allow-list entry: a host name, `*.` and a domain, or an IP address ([v6] with a port), and an optional port. */
const HOST_RULE = /^(\*\.)?([A-Za-z0-9-]+\.)*[A-Za-z0-9-]+(:\d{1,5})?$|^\d{1,3}(\.\d{1,3}){3}(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/;

function hostRule(entry: string): { host: string; port?: number } {
  const m = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(entry)!;
  const host = m[1]!.startsWith('[') ? m[1]!.slice(1, -1) : m[1]!;
  return { host: host.toLowerCase(), ...(m[2] ? { port: Number(m[2]) } : {}) };
}

const sandgateSchema = z
  .object({
    scope: z.enum(['shared', 'per-user']).default('shared'),
    allowUsers: z.array(z.string().min(1)).default([]),
    allowTeams: z.array(z.string().regex(TEAM, 'must be "org/team" (a GitHub team slug)')).default([]),
    allowTools: z.array(z.string().min(1)).optional(),
    denyTools: z.array(z.string().min(1)).default([]),
    userCredentials: z.array(z.string().min(1)).default([]),
    timeoutSec: z.number().positive().max(3600).default(DEFAULT_UPSTREAM_TIMEOUT_SEC),
    description: z.string().max(2000).optional(),
    network: z
      .union([
        z.enum(['none', 'public', 'host']),
        z.object({ allow: z.array(z.string().regex(HOST_RULE, 'must be a host name, *.domain or IP address, with an optional :port')).min(1) }).strict(),
      ])
      .optional(),
  })
  .strict();

const serverSchema = z
  .object({
    type: z.enum(['stdio', 'http', 'streamable-http', 'streamableHttp', 'sse']).optional(),
    command: z.string().min(1).optional(),
    args: z.array(z.string()).default([]),
    env: z.record(z.string(), z.string()).default({}),
    cwd: z.string().min(1).optional(),
    url: z.string().url().optional(),
    headers: z.record(z.string(), z.string()).default({}),
    disabled: z.boolean().default(false),
    sandgate: sandgateSchema.optional(),
  })
  .strict();

const fileSchema = z.object({ mcpServers: z.record(z.string(), z.unknown()) }).passthrough();

/**
 * Validates a parsed config file. Throws UpstreamConfigError listing every problem,
 * each naming the server and the field. Disabled servers are left out.
 */
export function parseUpstreamConfig(
  json: unknown,
  opts: { source?: string; env?: Record<string, string | undefined> } = {},
): UpstreamServerConfig[] {
  const source = opts.source ?? 'the upstream server config';
  const env = opts.env ?? process.env;
  const top = fileSchema.safeParse(json);
  if (!top.success) {
    throw new UpstreamConfigError(`${source}: expected {"mcpServers": {"<name>": {...}, ...}}`);
  }
  const errors: string[] = [];
  const out: UpstreamServerConfig[] = [];
  const ids = new Map<string, string>();
  for (const [name, raw] of Object.entries(top.data.mcpServers)) {
    const at = (field?: string) => `mcpServers.${name}${field ? `.${field}` : ''}`;
    const fail = (field: string | undefined, message: string) => errors.push(`${at(field)}: ${message}`);
    if (!SERVER_NAME.test(name)) {
      fail(undefined, 'server names are 1-64 letters, digits, "_", "-" or ".", starting with a letter or digit');
      continue;
    }
    const parsed = serverSchema.safeParse(raw);
    if (!parsed.success) {
      for (const issue of parsed.error.issues) {
        const message =
          issue.code === 'unrecognized_keys'
            ? `unknown field(s) ${issue.keys.map((k) => `"${k}"`).join(', ')}`
            : issue.message;
        fail(issue.path.join('.') || undefined, message);
      }
      continue;
    }
    const s = parsed.data;
    if (s.disabled) continue;
    const before = errors.length;
    const expand = (value: string, field: string) => expandEnv(value, env, (msg) => fail(field, msg));

    let transport: UpstreamTransportConfig | undefined;
    const wantsHttp = s.type !== undefined && s.type !== 'stdio';
    if (s.command !== undefined && s.url !== undefined) fail(undefined, 'give either "command" (stdio) or "url" (http), not both');
    else if (s.command !== undefined) {
      if (wantsHttp) fail('type', `"${s.type}" needs "url", not "command"`);
      if (Object.keys(s.headers).length) fail('headers', '"headers" only apply to url servers; stdio servers take "env"');
      for (const k of Object.keys(s.env)) if (!ENV_NAME.test(k)) fail(`env.${k}`, 'not a valid environment variable name');
      transport = {
        type: 'stdio',
        command: expand(s.command, 'command'),
        args: s.args.map((a, i) => expand(a, `args.${i}`)),
        env: Object.fromEntries(Object.entries(s.env).map(([k, v]) => [k, expand(v, `env.${k}`)])),
        ...(s.cwd !== undefined ? { cwd: expand(s.cwd, 'cwd') } : {}),
      };
    } else if (s.url !== undefined) {
      if (s.type === 'stdio') fail('type', '"stdio" needs "command", not "url"');
      if (s.args.length) fail('args', '"args" only apply to stdio servers');
      if (Object.keys(s.env).length) fail('env', '"env" only applies to stdio servers; url servers take "headers"');
      const url = expand(s.url, 'url');
      if (!/^https?:\/\//.test(url)) fail('url', 'must be an http:// or https:// URL');
      for (const k of Object.keys(s.headers)) if (!HEADER_NAME.test(k)) fail(`headers.${k}`, 'not a valid HTTP header name');
      transport = {
        type: s.type === 'sse' ? 'sse' : 'http',
        url,
        headers: Object.fromEntries(Object.entries(s.headers).map(([k, v]) => [k, expand(v, `headers.${k}`)])),
      };
    } else {
      fail(undefined, 'needs "command" (a stdio server) or "url" (a Streamable HTTP or SSE server)');
    }

    const g = s.sandgate;
    if (!g) {
      fail('sandgate', 'missing: say who may use this server, e.g. "sandgate": {"allowUsers": ["*"]} for every user');
    } else {
      if (!g.allowUsers.length && !g.allowTeams.length) {
        fail('sandgate', 'nobody may use this server: list users in "allowUsers" (["*"] for every user) or teams in "allowTeams"');
      }
      if (g.network !== undefined && transport && transport.type !== 'stdio') {
        fail('sandgate.network', 'applies to stdio servers only: the gateway itself connects to a url server');
      }
      if (g.scope === 'shared' && g.userCredentials.length) {
        fail('sandgate.userCredentials', 'users can only supply credentials to a "per-user" server (set "scope": "per-user")');
      }
      const credName = transport?.type === 'stdio' ? ENV_NAME : HEADER_NAME;
      g.userCredentials.forEach((c, i) => {
        if (!credName.test(c)) {
          fail(`sandgate.userCredentials.${i}`, `"${c}" is not a valid ${transport?.type === 'stdio' ? 'environment variable' : 'header'} name`);
        }
      });
    }

    const id = serverId(name);
    const clash = ids.get(id);
    if (clash) fail(undefined, `its directory name "${id}" is the same as server "${clash}"'s: rename one of them`);
    ids.set(id, name);

    if (errors.length > before || !transport || !g) continue;
    out.push({
      name,
      id,
      transport,
      scope: g.scope,
      allowUsers: g.allowUsers,
      allowTeams: g.allowTeams.map((t) => t.toLowerCase()),
      ...(g.allowTools ? { allowTools: g.allowTools } : {}),
      denyTools: g.denyTools,
      userCredentials: g.userCredentials,
      timeoutMs: Math.round(g.timeoutSec * 1000),
      ...(g.description !== undefined ? { description: g.description } : {}),
      network:
        g.network === undefined || g.network === 'none'
          ? { kind: 'none' }
          : g.network === 'public' || g.network === 'host'
            ? { kind: g.network }
            : { kind: 'allow', hosts: g.network.allow.map(hostRule) },
    });
  }
  if (errors.length) throw new UpstreamConfigError(`invalid upstream server config in ${source}:\n  - ${errors.join('\n  - ')}`);
  return out;
}

/**
 * Reads and validates the config file. A missing file means no upstream servers.
 */
export function loadUpstreamConfig(file: string, env: Record<string, string | undefined> = process.env): UpstreamServerConfig[] {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new UpstreamConfigError(`cannot read ${file}: ${(e as Error).message}. Check SANDGATE_MCP_SERVERS_FILE.`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new UpstreamConfigError(`${file} is not valid JSON: ${(e as Error).message}`);
  }
  return parseUpstreamConfig(json, { source: file, env });
}

/** Where the config file is: SANDGATE_MCP_SERVERS_FILE, else `<dataDir>/mcp-servers.json`. */
export function upstreamConfigFile(config: { dataDir: string; mcpServersFile: string }): string {
  return config.mcpServersFile ? path.resolve(config.mcpServersFile) : path.join(config.dataDir, 'mcp-servers.json');
}

/**
 * Fills in `${NAME}` / `${NAME:-default}` from `vars`. Connection placeholders are left
 * for `fillConnectionPlaceholders` unless `vars` has them.
 */
export function expandEnv(
  value: string,
  vars: Record<string, string | undefined>,
  onMissing: (message: string) => void,
  keep: readonly string[] = CONNECTION_PLACEHOLDERS,
): string {
  return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (whole, name: string, def: string | undefined) => {
    if (keep.includes(name)) return whole;
    const v = vars[name];
    if (v !== undefined && v !== '') return v;
    if (def !== undefined) return def;
    onMissing(`\${${name}} is not set in the gateway's environment (use \${${name}:-default} for a fallback)`);
    return '';
  });
}

/** Fills in the per-connection placeholders. */
export function fillConnectionPlaceholders(value: string, vars: Record<(typeof CONNECTION_PLACEHOLDERS)[number], string>): string {
  return value.replace(/\$\{(SANDGATE_WORKDIR|SANDGATE_USER|SANDGATE_USER_ID)\}/g, (_w, name: keyof typeof vars) => vars[name]);
}
