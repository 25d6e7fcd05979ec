/**
 * Secrets for one host: a credential the egress proxy adds to requests for that host as
 * a header, so code in a sandbox can call an API whose key it never sees.
 *
 * - The team's, from SANDGATE_EGRESS_SECRETS (an admin's): {"WEATHER_KEY": {"host":
 *   "api.weather.example", "value": "...", "header": "authorization", "prefix": "Bearer "}}.
 * - A user's own, from their settings page, sealed at rest like their upstream
 *   credentials (stored under the server name `egress:<host>`); theirs wins for them.
 *
 * A value goes into the header of a request to its host, made by the proxy over TLS it
 * verifies; never into a sandbox, the workspace, a log line or an audit row, and never to
 * another host: the proxy picks the secret by the host it connects to, not by anything
 * the sandbox sends.
 */
import type { Db } from '../store/store.js';
import type { CredentialStore } from '../upstream/credentials.js';
import { parseNetEntry } from '../sandboxes/net-grants.js';

export interface HostSecret {
  name: string;
  /** Lower case. */
  host: string;
  /** The TLS port the proxy connects to (443 unless set). */
  port: number;
  /** Lower case header name. */
  header: string;
  prefix: string;
  value: string;
}

/** The namespace of egress secrets among a user's stored credentials. */
export const SECRET_SERVER_PREFIX = 'egress:';
const NAME = /^[A-Z][A-Z0-9_]{0,63}$/;
const HEADER = /^[a-z0-9][a-z0-9-]{0,63}$/;
const HEADER_VALUE = /^[\t\x20-\x7e]*$/;

/** Checks one secret's fields (the settings' or a form's); throws a readable Error. */
export function checkSecret(
  name: string,
  raw: {
    host?: unknown;
    value?: unknown;
    header?: unknown;
    prefix?: unknown;
    port?: unknown;
  },
): HostSecret {
  if (!NAME.test(name)) throw new Error(`secret name "${name}": use capitals, digits and _ (e.g. WEATHER_KEY)`);
  const entry = typeof raw.host === 'string' ? parseNetEntry(raw.host) : undefined;
  if (!entry || entry.host.startsWith('*.') || entry.port !== undefined) throw new Error(`secret ${name}: "host" must be one host name (api.example.com)`);
  // What a header may carry (visible ASCII, spaces and tabs): anything else would be refused when the request is made.
  if (typeof raw.value !== 'string' || !raw.value || raw.value.length > 8192 || !HEADER_VALUE.test(raw.value)) throw new Error(`secret ${name}: "value" must be one line of printable ASCII`);
  const header = raw.header === undefined ? 'authorization' : typeof raw.header === 'string' ? raw.header.toLowerCase() : '';
  if (!HEADER.test(header) || header === 'host' || header.startsWith('proxy-')) throw new Error(`secret ${name}: "header" must be a header name (authorization, x-api-key)`);
  const prefix = raw.prefix === undefined ? (header === 'authorization' ? 'Bearer ' : '') : raw.prefix;
  if (typeof prefix !== 'string' || !HEADER_VALUE.test(prefix) || prefix.length > 64) throw new Error(`secret ${name}: "prefix" must be a short line of printable ASCII`);
  const port = raw.port === undefined ? 443 : raw.port;
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`secret ${name}: "port" must be a TCP port`);
  return { name, host: entry.host, port, header, prefix, value: raw.value };
}

/** SANDGATE_EGRESS_SECRETS, checked; throws with every problem named. */
export function parseTeamSecrets(text: string): HostSecret[] {
  if (!text.trim()) return [];
  const raw = JSON.parse(text) as unknown;
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new Error('expected an object of secrets by name');
  const out = Object.entries(raw as Record<string, Record<string, unknown>>).map(([name, s]) => checkSecret(name, typeof s === 'object' && s ? s : {}));
  const hosts = new Set<string>();
  for (const s of out) {
    if (hosts.has(s.host)) throw new Error(`two secrets for ${s.host}: one host has at most one`);
    hosts.add(s.host);
  }
  return out;
}

export class EgressSecrets {
  private readonly team = new Map<string, HostSecret>();

  constructor(
    team: HostSecret[],
    private readonly store: CredentialStore,
    private readonly db: Db,
  ) {
    for (const s of team) this.team.set(s.host, s);
  }

  /** The secret requests from `userId`'s sandbox to `host` carry, if any: their own, else the team's. */
  async forHost(userId: number, host: string): Promise<HostSecret | undefined> {
    const h = host.toLowerCase().replace(/\.$/, '');
    const own = await this.store.get(userId, SECRET_SERVER_PREFIX + h);
    for (const [name, text] of Object.entries(own)) {
      try {
        const v = JSON.parse(text) as Record<string, unknown>;
        return checkSecret(name, { ...v, host: h });
      } catch {
        /* a value from another version: ignored */
      }
    }
    return this.team.get(h);
  }

  /** Stores a user's own secret for a host (one per host: it replaces theirs). */
  async set(userId: number, name: string, fields: { host: string; value: string; header?: string; prefix?: string; port?: number }): Promise<HostSecret> {
    const s = checkSecret(name, fields);
    await this.store.delete(userId, SECRET_SERVER_PREFIX + s.host);
    await this.store.set(userId, SECRET_SERVER_PREFIX + s.host, s.name, JSON.stringify({ value: s.value, header: s.header, prefix: s.prefix, port: s.port }));
    return s;
  }

  /** Removes a user's own secret for a host; whether there was one. */
  async remove(userId: number, host: string): Promise<boolean> {
    return (await this.store.delete(userId, SECRET_SERVER_PREFIX + host.toLowerCase())) > 0;
  }

  /** What a user's settings page lists: names and hosts, never values (their own first, then the team's they do not replace). */
  async list(userId: number): Promise<{ name: string; host: string; own: boolean }[]> {
    const rows = await this.db
      .selectFrom('upstream_credentials')
      .select(['server', 'name'])
      .where('user_id', '=', userId)
      .where('server', 'like', `${SECRET_SERVER_PREFIX}%`)
      .orderBy('server')
      .execute();
    const out = rows.map((r) => ({ name: r.name, host: r.server.slice(SECRET_SERVER_PREFIX.length), own: true }));
    for (const s of this.team.values()) if (!out.some((o) => o.host === s.host)) out.push({ name: s.name, host: s.host, own: false });
    return out;
  }
}
