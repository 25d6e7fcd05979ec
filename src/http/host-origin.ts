/**
 * DNS-rebinding protection for /mcp (CVE-2025-66414: the SDK's HTTP handler performs no
 * validation of its own). The Host header must name this gateway (the host of
 * SANDGATE_PUBLIC_URL, localhost, or SANDGATE_MCP_ALLOWED_HOSTS), checked with the SDK's
 * `validateHostHeader`; a request that carries an Origin header must come from the
 * gateway's own origin, a loopback origin when the gateway itself is on loopback, or
 * SANDGATE_MCP_ALLOWED_ORIGINS. The Origin check is ours: the SDK's `validateOriginHeader`
 * compares host names only, so it would admit any scheme and port of an allowed host.
 */
import type { RequestHandler } from 'express';
import { validateHostHeader } from '@modelcontextprotocol/server';
import type { Config } from '../config.js';

const LOOPBACK_HOSTNAMES = ['localhost', '127.0.0.1', '[::1]'];

const list = (s: string) =>
  s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);

export function allowedHostnames(config: Config): string[] {
  const own = new URL(config.publicUrl).hostname;
  return [...new Set([own, ...LOOPBACK_HOSTNAMES, ...list(config.mcpAllowedHosts).map((h) => h.toLowerCase())])];
}

export interface OriginPolicy {
  origins: Set<string>;
  /** Any http(s)://<loopback>:<port>, for a gateway that is itself only on loopback. */
  anyLoopback: boolean;
}

export function originPolicy(config: Config): OriginPolicy {
  const pub = new URL(config.publicUrl);
  const origins = new Set([pub.origin, ...list(config.mcpAllowedOrigins).map((o) => new URL(o).origin)]);
  return { origins, anyLoopback: LOOPBACK_HOSTNAMES.includes(pub.hostname) };
}

export function originAllowed(policy: OriginPolicy, origin: string): boolean {
  if (policy.origins.has(origin)) return true;
  if (!policy.anyLoopback) return false;
  try {
    const u = new URL(origin);
    return (u.protocol === 'http:' || u.protocol === 'https:') && LOOPBACK_HOSTNAMES.includes(u.hostname);
  } catch {
    return false;
  }
}

function forbidden(message: string) {
  return { jsonrpc: '2.0' as const, error: { code: -32000, message }, id: null };
}

export function hostValidation(allowed: string[]): RequestHandler {
  return function validateHost(req, res, next) {
    const result = validateHostHeader(req.headers.host, allowed);
    if (result.ok) return next();
    res.status(403).json(forbidden(result.message));
  };
}

export function originValidation(policy: OriginPolicy): RequestHandler {
  return function validateOrigin(req, res, next) {
    const origin = req.headers.origin;
    if (origin === undefined || originAllowed(policy, origin)) return next();
    res.status(403).json(forbidden(`Origin ${origin} may not call this endpoint. An operator can allow it with SANDGATE_MCP_ALLOWED_ORIGINS.`));
  };
}

/** Host check then Origin check, for every method on /mcp. */
export function hostAndOriginValidation(config: Config): RequestHandler[] {
  return [hostValidation(allowedHostnames(config)), originValidation(originPolicy(config))];
}
