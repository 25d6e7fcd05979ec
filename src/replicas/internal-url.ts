/**
 * Where the other replicas reach this one: SANDGATE_INTERNAL_URL when set; otherwise the
 * address the gateway listens on, with the port it got. A gateway listening on every
 * address (0.0.0.0 or ::) is reached at this host's first non-loopback IPv4 address.
 */
import os from 'node:os';
import type { Config } from '../config.js';

export function internalUrlFor(config: Pick<Config, 'internalUrl' | 'host'>, port: number): string {
  if (config.internalUrl) return config.internalUrl.replace(/\/+$/, '');
  let host = config.host;
  if (host === '0.0.0.0' || host === '::') {
    const addresses = Object.values(os.networkInterfaces()).flatMap((list) => list ?? []);
    host = addresses.find((a) => a.family === 'IPv4' && !a.internal)?.address ?? '127.0.0.1';
  } else if (host === 'localhost') {
    host = '127.0.0.1';
  }
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}
