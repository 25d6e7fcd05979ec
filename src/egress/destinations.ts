/**
 * Where a connection out of a sandbox may go, decided once per connection and at the
 * moment it is made: the name is resolved here (never by the sandbox), every address it
 * resolves to is checked, and the connection goes to the address that was checked, so a
 * name cannot point somewhere else between the check and the use (DNS rebinding).
 *
 * Refused whatever a grant says: IP literals (a grant names hosts), loopback,
 * link-local (the cloud metadata endpoint), multicast, reserved and unspecified
 * addresses, the gateway host's own addresses, and private ranges unless an admin
 * listed them (SANDGATE_EGRESS_PRIVATE_NETS, for an internal API).
 */
import { Resolver } from 'node:dns/promises';
import net from 'node:net';
import os from 'node:os';
import ipaddr from 'ipaddr.js';
import { isPublicAddress } from '../addresses.js';
import type { EgressReason } from '../reasons.js';
import { entryCovers, expandNet, type NetEntry } from '../sandboxes/net-grants.js';
import type { Grant } from '../sandboxes/permissions.js';

/** Why a destination is refused, by class (the audit log's error class), with the message code gets. */
export type Refusal = { ok: false; why: EgressReason; message: string };
export type Verdict = { ok: true; address: string; port: number } | Refusal;

/**
 * Host lookups the proxy waits for at once (c-ares, off libuv's thread pool), in all and
 * per user: names whose servers never answer hold a lookup for seconds, and one user's
 * cannot use up everyone's.
 */
const MAX_LOOKUPS = 64;
const MAX_LOOKUPS_PER_USER = 4;
const LOOKUP_WAIT_MS = 3000;
/**
 * Metadata services that sit in ranges an admin may list as private networks (AWS's over
 * IPv6 in unique-local space, Alibaba's in carrier-grade NAT space) or in public space
 * (Azure's wire server), refused whatever the settings say; link-local (169.254.169.254
 * and the rest) is never allowed anyway.
 */
const METADATA = new Set(['fd00:ec2::254', '100.100.100.200', '168.63.129.16'].map((a) => ipaddr.parse(a).toNormalizedString()));
/**
 * Answers are kept for their TTL, at most this long, and at most this many names: a
 * connection costs no lookup when the last one is fresh. The addresses are checked again
 * at every connection whatever the cache holds, so a cached answer cannot bypass a check.
 */
const CACHE_MAX_MS = 10_000;
const CACHE_NAMES = 1000;

export interface DestinationOptions {
  /** DNS servers (ip or ip:port); empty: the host's. */
  dns: string[];
  /** Private networks allowed names may resolve to (CIDR). */
  privateNets: string[];
  /** What `registries` names. */
  registries: NetEntry[];
}

export class Destinations {
  private readonly resolver = new Resolver({ timeout: 3000, tries: 2 });
  private readonly privateNets: [ipaddr.IPv4 | ipaddr.IPv6, number][];
  private own = new Set<string>();
  private ownAt = 0;
  private lookups = 0;
  private readonly lookupsBy = new Map<number, number>();
  private readonly pending = new Map<string, Promise<string[]>>();
  private readonly answers = new Map<string, { addresses: string[]; until: number }>();

  constructor(private readonly opts: DestinationOptions) {
    if (opts.dns.length) this.resolver.setServers(opts.dns);
    this.privateNets = opts.privateNets.map((c) => ipaddr.parseCIDR(c));
  }

  /** Whether a run's grant lets it reach host:port (before any lookup). */
  granted(grant: Grant, host: string, port: number): boolean {
    if (grant === true) return true;
    if (grant === false) return false;
    return expandNet(grant, this.opts.registries).some((e) => entryCovers(e, host, port));
  }

  /** Whether a run's grant names `host` at all, on any port (a secret is looked up only then). */
  grantedHost(grant: Grant, host: string): boolean {
    if (grant === true) return true;
    if (grant === false) return false;
    const h = host.toLowerCase().replace(/\.$/, '');
    return expandNet(grant, this.opts.registries).some((e) => entryCovers({ host: e.host }, h, 0));
  }

  /** The gateway host's own addresses (every interface), looked at again every minute. */
  private ownAddresses(): Set<string> {
    if (Date.now() - this.ownAt > 60_000) {
      const set = new Set<string>();
      for (const list of Object.values(os.networkInterfaces())) for (const a of list ?? []) set.add(normal(a.address));
      this.own = set;
      this.ownAt = Date.now();
    }
    return this.own;
  }

  private async addressesOf(host: string, who: number): Promise<string[]> {
    const cached = this.answers.get(host);
    if (cached && cached.until > Date.now()) return cached.addresses;
    // Connections that ask for the same name at once share one lookup.
    const pending = this.pending.get(host);
    if (pending) return pending;
    // A user past their lookups waits a little for one of theirs to end, then is refused.
    for (let waited = 0; (this.lookupsBy.get(who) ?? 0) >= MAX_LOOKUPS_PER_USER || this.lookups >= MAX_LOOKUPS; waited += 50) {
      if (waited >= LOOKUP_WAIT_MS) throw new Error('too many lookups at once');
      await new Promise((r) => setTimeout(r, 50));
    }
    const lookup = this.lookup(host, who);
    this.pending.set(host, lookup);
    try {
      return await lookup;
    } finally {
      this.pending.delete(host);
    }
  }

  private async lookup(host: string, who: number): Promise<string[]> {
    this.lookups++;
    this.lookupsBy.set(who, (this.lookupsBy.get(who) ?? 0) + 1);
    try {
      const found = await Promise.allSettled([this.resolver.resolve4(host, { ttl: true }), this.resolver.resolve6(host, { ttl: true })]);
      const records = found.flatMap((r) => (r.status === 'fulfilled' ? r.value : []));
      const addresses = records.map((r) => r.address);
      if (records.length) {
        const ttlMs = Math.min(CACHE_MAX_MS, ...records.map((r) => r.ttl * 1000));
        if (this.answers.size >= CACHE_NAMES) this.answers.clear();
        if (ttlMs > 0) this.answers.set(host, { addresses, until: Date.now() + ttlMs });
      }
      return addresses;
    } finally {
      this.lookups--;
      const left = (this.lookupsBy.get(who) ?? 1) - 1;
      if (left > 0) this.lookupsBy.set(who, left);
      else this.lookupsBy.delete(who);
    }
  }

  /** Whether an address may be reached at all (whatever name led to it). */
  addressRefusal(address: string, host: string): Refusal | undefined {
    if (METADATA.has(normal(address))) {
      return { ok: false, why: 'private_address', message: `${host} resolves to ${address}, a cloud metadata service, which sandboxes never reach` };
    }
    if (this.ownAddresses().has(normal(address))) {
      return {
        ok: false,
        why: 'own_address',
        message: `${host} resolves to ${address}, an address of the sandgate host itself`,
      };
    }
    if (isPublicAddress(address)) return undefined;
    let parsed: ipaddr.IPv4 | ipaddr.IPv6;
    try {
      parsed = ipaddr.process(address);
    } catch {
      return {
        ok: false,
        why: 'private_address',
        message: `${host} resolves to ${address}, not an address`,
      };
    }
    const range = parsed.range();
    const listed = ['private', 'uniqueLocal', 'carrierGradeNat'].includes(range) && this.privateNets.some(([net, bits]) => net.kind() === parsed.kind() && parsed.match(net, bits));
    if (listed) return undefined;
    return {
      ok: false,
      why: 'private_address',
      message: `${host} resolves to ${address}, a ${range === 'unicast' ? 'reserved' : range} address, which sandboxes never reach`,
    };
  }

  /** Decides where a connection for host:port under `grant` may go, resolving the name once. */
  async decide(grant: Grant, rawHost: string, port: number, who = 0): Promise<Verdict> {
    const host = (rawHost.startsWith('[') && rawHost.endsWith(']') ? rawHost.slice(1, -1) : rawHost).toLowerCase().replace(/\.$/, '');
    if (!host || !Number.isInteger(port) || port < 1 || port > 65535) return { ok: false, why: 'not_allowed', message: 'not a host and port' };
    if (net.isIP(host))
      return {
        ok: false,
        why: 'ip_literal',
        message: `${host} is an IP address: sandboxes reach hosts by name only`,
      };
    if (!this.granted(grant, host, port)) {
      return {
        ok: false,
        why: 'not_allowed',
        message: `Requires net access to "${host}:${port}", run again with --allow-net=${host} (the permission ceiling of this run does not grant it; an admin can)`,
      };
    }
    let addresses: string[];
    try {
      addresses = await this.addressesOf(host, who);
    } catch (e) {
      const busy = (e as Error).message === 'too many lookups at once';
      return { ok: false, why: 'unresolved', message: `${host} could not be resolved now${busy ? ' (too many lookups at once: try again)' : ''}` };
    }
    if (!addresses.length)
      return {
        ok: false,
        why: 'unresolved',
        message: `${host} has no address`,
      };
    for (const a of addresses) {
      const refused = this.addressRefusal(a, host);
      if (refused) return refused;
    }
    return { ok: true, address: addresses[0]!, port };
  }
}

/** An address as os.networkInterfaces and the resolver both write it. */
function normal(address: string): string {
  try {
    return ipaddr.process(address).toNormalizedString();
  } catch {
    return address;
  }
}
