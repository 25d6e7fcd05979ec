/**
 * The entries of a `net` grant, as Deno names them, and what each covers:
 *
 *   api.example.com        that host, any port
 *   api.example.com:443    that host, that port
 *   *.example.com[:port]   every name under example.com (not example.com itself)
 *   registries             the package registries from the settings (pip's index and
 *                          its file host, npm's registry): what `pip install` and `npm:`
 *                          imports need, and nothing else
 *
 * IP addresses are not entries: the egress proxy reaches names only, resolved by itself.
 */
import type { Config } from '../config.js';

export const REGISTRIES = 'registries';

export interface NetEntry {
  /** Lower case; `*.example.com` for a wildcard. */
  host: string;
  port?: number;
}

const LABEL = '[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?';
const NAME = new RegExp(`^(?:\\*\\.)?${LABEL}(?:\\.${LABEL})*$`);

/** Parses one entry; undefined when it is not a host[:port] Deno would take (or is an IP literal). */
export function parseNetEntry(raw: string): NetEntry | undefined {
  const m = /^([^:\s]+)(?::(\d{1,5}))?$/.exec(raw.trim().toLowerCase());
  if (!m) return undefined;
  const host = m[1]!.replace(/\.$/, '');
  const port = m[2] === undefined ? undefined : Number(m[2]);
  if (port !== undefined && (port < 1 || port > 65535)) return undefined;
  if (!NAME.test(host) || /^[\d.]+$/.test(host)) return undefined;
  return port === undefined ? { host } : { host, port };
}

/** Whether `entry` lets code reach host:port. */
export function entryCovers(entry: NetEntry, host: string, port: number): boolean {
  if (entry.port !== undefined && entry.port !== port) return false;
  const h = host.toLowerCase().replace(/\.$/, '');
  if (entry.host.startsWith('*.')) return h.endsWith(entry.host.slice(1)) && h.length > entry.host.length - 1;
  return h === entry.host;
}

/** Whether the entry `outer` allows everything `inner` does (a run may narrow to `inner`). */
export function entryWithin(inner: NetEntry, outer: NetEntry): boolean {
  if (outer.port !== undefined && inner.port !== outer.port) return false;
  if (inner.host.startsWith('*.')) return outer.host.startsWith('*.') && (inner.host === outer.host || inner.host.endsWith(outer.host.slice(1)));
  return entryCovers({ host: outer.host }, inner.host, 0);
}

/** The hosts `registries` stands for, from the registry URLs in the settings. */
export function registryEntries(urls: readonly string[]): NetEntry[] {
  const out: NetEntry[] = [];
  for (const u of urls) {
    try {
      const url = new URL(u);
      const e = parseNetEntry(url.host);
      if (e) out.push(url.port ? e : { host: e.host, port: url.protocol === 'http:' ? 80 : 443 });
    } catch {
      /* not a URL: checked at start */
    }
  }
  return out;
}

/** The registry URLs of the settings: pip's index, its file hosts, npm's registry. */
export function registryUrls(config: Pick<Config, 'egressPipIndex' | 'egressPipFiles' | 'egressNpmRegistry'>): string[] {
  return [
    config.egressPipIndex,
    ...config.egressPipFiles
      .split(',')
      .map((u) => u.trim())
      .filter(Boolean),
    config.egressNpmRegistry,
  ];
}

/** A grant's entries with `registries` spelled out; the names that are not entries are dropped. */
export function expandNet(grant: readonly string[], registries: readonly NetEntry[]): NetEntry[] {
  const out: NetEntry[] = [];
  for (const item of grant) {
    if (item.trim().toLowerCase() === REGISTRIES) out.push(...registries);
    else {
      const e = parseNetEntry(item);
      if (e) out.push(e);
    }
  }
  return out;
}

export const entryText = (e: NetEntry): string => (e.port === undefined ? e.host : `${e.host}:${e.port}`);
