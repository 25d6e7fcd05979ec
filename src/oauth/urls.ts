/**
 * Where the gateway's authorization server and its protected resource are, from
 * SANDGATE_PUBLIC_URL: the issuer is the public URL itself, the resource is its /mcp,
 * and each metadata document sits at its well-known path (RFC 8414 §3, RFC 9728 §3:
 * the well-known segment goes before the path of the URL it describes).
 */
import type { Config } from '../config.js';

const base = (config: Pick<Config, 'publicUrl'>) => config.publicUrl.replace(/\/+$/, '');

/** The issuer identifier (RFC 8414): the public URL, no trailing slash. */
export const issuerOf = (config: Pick<Config, 'publicUrl'>): string => base(config);

/** The protected resource (RFC 8707, RFC 9728): this gateway's MCP endpoint. */
export const mcpResource = (config: Pick<Config, 'publicUrl'>): string => `${base(config)}/mcp`;

/** `/.well-known/<name>` inserted before the path of `url`, as both RFCs place it. */
function wellKnown(url: string, name: string): URL {
  const u = new URL(url);
  const path = u.pathname.replace(/\/+$/, '');
  return new URL(`/.well-known/${name}${path}`, u.origin);
}

/** The protected resource metadata's URL, named in every 401 from /mcp. */
export const resourceMetadataUrl = (config: Pick<Config, 'publicUrl'>): string => wellKnown(mcpResource(config), 'oauth-protected-resource').href;

/** The path of the protected resource metadata on this gateway. */
export const resourceMetadataPath = (config: Pick<Config, 'publicUrl'>): string => new URL(resourceMetadataUrl(config)).pathname;

/** The path of the authorization server metadata on this gateway. */
export const serverMetadataPath = (config: Pick<Config, 'publicUrl'>): string => wellKnown(issuerOf(config), 'oauth-authorization-server').pathname;

/** An endpoint of the authorization server (`/oauth/token`, …) as a URL. */
export const endpoint = (config: Pick<Config, 'publicUrl'>, path: string): string => `${base(config)}${path}`;
