import crypto from 'node:crypto';
import path from 'node:path';

/** A short id for this gateway's containers: one per data directory. */
export function gatewayIdFor(dataDir: string): string {
  return crypto.createHash('sha256').update(path.resolve(dataDir)).digest('hex').slice(0, 10);
}
