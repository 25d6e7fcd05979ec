/**
 * Deno-style permissions: deny by default; each grant is `true` (all) or a list.
 *
 * An admin sets a ceiling per user (config default, or the user's row in the store).
 * A request may only narrow it: `narrowPermissions` rejects any grant the ceiling lacks
 * and names the missing one the way Deno does. The effective policy then decides, for
 * every language, what is mounted and writable and which variables are passed; for
 * TS/JS `denoFlags` turns it into --allow-* flags so Deno enforces it again in-process.
 */
import path from 'node:path/posix';
import { z } from 'zod';
import { GatewayError } from '../errors.js';
import { entryText, entryWithin, expandNet, parseNetEntry, REGISTRIES, type NetEntry } from './net-grants.js';

export const GRANT_NAMES = ['read', 'write', 'net', 'env', 'run', 'sys', 'ffi'] as const;
export type GrantName = (typeof GRANT_NAMES)[number];
/** true: everything; a list: only those; false / []: nothing. */
export type Grant = boolean | string[];
export type Permissions = Record<GrantName, Grant>;

export const grantSchema = z.union([z.boolean(), z.array(z.string().min(1).max(4096)).max(256)]);
export const permissionsSchema = z
  .object(Object.fromEntries(GRANT_NAMES.map((g) => [g, grantSchema.optional()])) as Record<GrantName, z.ZodOptional<typeof grantSchema>>)
  .strict();

export const DENY_ALL: Permissions = { read: false, write: false, net: false, env: false, run: false, sys: false, ffi: false };

/** Paths that code may never be granted, whatever the ceiling says. */
const PATH_GRANTS: ReadonlySet<GrantName> = new Set(['read', 'write']);

/** A grant the user's ceiling (or the run's narrowing) does not give; the message names the fix, as Deno's do. */
export class PermissionError extends GatewayError {
  override name = 'PermissionError';
  constructor(
    message: string,
    readonly grant: GrantName,
  ) {
    super(message, { reason: 'permission_denied', status: 403 });
  }

  override get auditClass(): string {
    return 'PermissionError';
  }
}

/** Ceilings parsed from JSON text (each execution reads one), by their text. */
const parsedCeilings = new Map<string, Permissions>();
const MAX_PARSED_CEILINGS = 1000;

/** Parses a JSON or object ceiling, filling missing grants with deny. */
export function parsePermissions(input: unknown): Permissions {
  if (typeof input !== 'string') return parsePermissionsObject(input);
  let p = parsedCeilings.get(input);
  if (!p) {
    p = parsePermissionsObject(JSON.parse(input) as unknown);
    if (parsedCeilings.size >= MAX_PARSED_CEILINGS) parsedCeilings.clear();
    parsedCeilings.set(input, p);
  }
  // A copy: callers may narrow or extend what they get.
  return Object.fromEntries(Object.entries(p).map(([g, v]) => [g, Array.isArray(v) ? [...v] : v])) as Permissions;
}

function parsePermissionsObject(obj: unknown): Permissions {
  const parsed = permissionsSchema.parse(obj);
  const out: Permissions = { ...DENY_ALL };
  for (const g of GRANT_NAMES) {
    const v = parsed[g];
    if (v !== undefined) out[g] = PATH_GRANTS.has(g) && Array.isArray(v) ? v.map(normalizePath) : v;
  }
  return out;
}

function normalizePath(p: string): string {
  if (!p.startsWith('/')) throw new Error(`permission paths must be absolute: "${p}"`);
  const n = path.normalize(p);
  return n.length > 1 && n.endsWith('/') ? n.slice(0, -1) : n;
}

function pathWithin(child: string, parent: string): boolean {
  return parent === '/' || child === parent || child.startsWith(parent + '/');
}

function itemAllowed(grant: GrantName, ceiling: Grant, item: string): boolean {
  if (ceiling === true) return true;
  if (ceiling === false) return false;
  return PATH_GRANTS.has(grant) ? ceiling.some((c) => pathWithin(item, c)) : ceiling.includes(item);
}

/** The message Deno prints, with sandgate's fix. */
export function denialMessage(grant: GrantName, what?: string): string {
  const kind = grant === 'sys' ? 'sys' : grant;
  const target = what ? ` to "${what}"` : '';
  return `Requires ${kind} access${target}, run again with --allow-${grant}${what ? `=${what}` : ''} (your permission ceiling does not grant it; an admin can raise it)`;
}

/**
 * Intersects a request with the ceiling. Anything the request names beyond the ceiling
 * is an error (never silently dropped), so a caller learns which grant is missing.
 * Grants the request leaves out keep the ceiling's value.
 */
export function narrowPermissions(ceiling: Permissions, request: Partial<Record<GrantName, Grant>> | undefined, registries: readonly NetEntry[] = []): Permissions {
  if (!request) return { ...ceiling };
  const out: Permissions = { ...ceiling };
  for (const g of GRANT_NAMES) {
    const want = request[g];
    if (want === undefined) continue;
    const have = ceiling[g];
    if (want === false || (Array.isArray(want) && want.length === 0)) {
      out[g] = false;
    } else if (g === 'net' && Array.isArray(want)) {
      out.net = narrowNet(have, want, registries);
    } else if (want === true) {
      if (have !== true) throw new PermissionError(denialMessage(g), g);
      out[g] = true;
    } else {
      const items = PATH_GRANTS.has(g) ? want.map(normalizePath) : want;
      for (const item of items) if (!itemAllowed(g, have, item)) throw new PermissionError(denialMessage(g, item), g);
      out[g] = items;
    }
  }
  return out;
}

/**
 * A run's `net` entries within the ceiling's: each must meet one of the ceiling's, and the
 * run gets what both allow (`pypi.org` under a ceiling of `pypi.org:443` is `pypi.org:443`;
 * `api.example.com` under `*.example.com` is `api.example.com`).
 */
function narrowNet(have: Grant, want: string[], registries: readonly NetEntry[]): string[] {
  const out = new Set<string>();
  const outer = have === true ? undefined : have === false ? [] : expandNet(have, registries);
  for (const item of want) {
    if (item.trim().toLowerCase() === REGISTRIES) {
      if (have !== true && !(Array.isArray(have) && have.some((h) => h.trim().toLowerCase() === REGISTRIES))) throw new PermissionError(denialMessage('net', REGISTRIES), 'net');
      out.add(REGISTRIES);
      continue;
    }
    const r = parseNetEntry(item);
    if (!r) throw new PermissionError(`"${item}" is not a host for the net permission: write host, host:port or *.domain (IP addresses are never reached)`, 'net');
    if (!outer) {
      out.add(entryText(r));
      continue;
    }
    let met = false;
    for (const c of outer) {
      const port = r.port ?? c.port;
      if (r.port !== undefined && c.port !== undefined && r.port !== c.port) continue;
      const host = entryWithin({ host: r.host }, { host: c.host }) ? r.host : entryWithin({ host: c.host }, { host: r.host }) ? c.host : undefined;
      if (host === undefined) continue;
      out.add(entryText(port === undefined ? { host } : { host, port }));
      met = true;
    }
    if (!met) throw new PermissionError(denialMessage('net', item), 'net');
  }
  return [...out];
}

export function allows(p: Permissions, grant: GrantName, item: string): boolean {
  const v = p[grant];
  if (v === true) return true;
  if (v === false) return false;
  const n = PATH_GRANTS.has(grant) ? normalizePath(item) : item;
  return itemAllowed(grant, v, n);
}

/**
 * The Deno flags for a policy. `extra` adds the gateway's own channels (the bridge
 * socket and its two variables), which the user's grants neither give nor take away.
 */
export function denoFlags(p: Permissions, extra: Partial<Record<GrantName, string[]>> = {}, registries: readonly NetEntry[] = []): string[] {
  const flags: string[] = [];
  for (const g of GRANT_NAMES) {
    let v = p[g];
    if (g === 'net' && Array.isArray(v) && v.length) {
      // Deno takes names and ports; `registries` is spelled out, and a wildcard (which
      // Deno does not take) opens Deno's check: the egress proxy still applies the entry.
      const entries = expandNet(v, registries);
      v = entries.some((e) => e.host.startsWith('*.')) ? true : entries.map(entryText);
    }
    const more = extra[g];
    if (more?.length && v !== true) v = [...(v === false ? [] : v), ...more];
    if (v === true) flags.push(`--allow-${g}`);
    else if (Array.isArray(v) && v.length) flags.push(`--allow-${g}=${v.join(',')}`);
  }
  return flags;
}

/** Everything either grants (a team's grants added to a member's ceiling). */
export function widenPermissions(a: Permissions, b: Permissions): Permissions {
  const out: Permissions = { ...a };
  for (const g of GRANT_NAMES) {
    const x = a[g];
    const y = b[g];
    if (x === true || y === true) out[g] = true;
    else if (Array.isArray(y) && y.length) out[g] = [...new Set([...(Array.isArray(x) ? x : []), ...y])];
  }
  return out;
}

/** Whether a grant gives anything at all. */
export function grants(v: Grant | undefined): boolean {
  return v === true || (Array.isArray(v) && v.length > 0);
}
