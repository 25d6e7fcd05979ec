/**
 * Which IP addresses are public: what the gateway may reach on behalf of someone else
 * (an upstream server's egress, an OAuth client's metadata document) without reaching
 * into its own network.
 */
import ipaddr from 'ipaddr.js';

const PUBLIC_RANGES = new Set(['unicast']);

/**
 * Whether an address is a public unicast one: not loopback, private, link-local,
 * unique-local, carrier-grade NAT, multicast or reserved (an IPv4-mapped IPv6 address
 * is judged as its IPv4 one, and an IPv4-compatible one, ::a.b.c.d, is never public).
 */
export function isPublicAddress(address: string): boolean {
  let parsed: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    parsed = ipaddr.parse(address);
  } catch {
    return false;
  }
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) parsed = (parsed as ipaddr.IPv6).toIPv4Address();
  // The deprecated IPv4-compatible form (::a.b.c.d) reaches the IPv4 address through some tunnels: never public.
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).parts.slice(0, 6).every((p) => p === 0)) return false;
  return PUBLIC_RANGES.has(parsed.range());
}

