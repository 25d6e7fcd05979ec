/**
 * Controlled network for sandbox code. A sandbox has no network interface; a sandbox
 * whose ceiling grants `net` has one door: its runner's relay on its own loopback
 * (sandbox/runner/sandgate_runner/parent/egress_relay.py), whose connections travel over
 * the runner's channel to this proxy. Here each connection is checked against the `net`
 * grant of the run that opened it, the address rules (destinations.ts) and the user's
 * limits (limits.ts); hosts with a secret (secrets.ts) get it added; every connection is
 * an audit row (kind `egress`).
 *
 *   createEgress(deps) → { handler } → the sandbox manager's setEgressHandler
 *                      → { secrets }  → the settings page (a user's own secrets)
 */
import fs from 'node:fs';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { AuditEntry } from '../audit/audit.js';
import type { Db } from '../store/store.js';
import type { EgressHandler } from '../sandboxes/egress-route.js';
import { egressSettings } from '../sandboxes/run.js';
import type { CredentialStore } from '../upstream/credentials.js';
import { Destinations } from './destinations.js';
import { EgressLimits } from './limits.js';
import { EgressProxy, type EgressRecord } from './proxy.js';
import { EgressSecrets, parseTeamSecrets } from './secrets.js';

export { EgressSecrets } from './secrets.js';
export type { EgressRecord } from './proxy.js';

export interface EgressDeps {
  config: Pick<
    Config,
    'egressPipIndex' | 'egressPipFiles' | 'egressNpmRegistry' | 'egressDns' | 'egressPrivateNets' | 'egressCaFile' | 'egressMaxConnections' | 'egressMbPerHour' | 'egressKbPerSec' | 'egressSecrets'
  >;
  db: Db;
  credentials: CredentialStore;
  audit: (e: AuditEntry) => Promise<unknown>;
  logger: Logger;
}

export interface Egress {
  handler: EgressHandler;
  secrets: EgressSecrets;
  close(): Promise<void>;
}

const list = (s: string) =>
  s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);

/**
 * Refusals each user's rows may hold per window: every one, up to this many; past it, a
 * loop of refused connections is counted, not written, and the count goes into the next
 * row written for that user (`refusedBefore`), so the audit log cannot be flooded.
 */
const REFUSALS_PER_WINDOW = 30;
const REFUSAL_WINDOW_MS = 10_000;

export function createEgress(deps: EgressDeps): Egress {
  const { config } = deps;
  const log = deps.logger.child({ module: 'egress' });
  let team;
  try {
    team = parseTeamSecrets(config.egressSecrets);
  } catch (e) {
    throw new Error(`SANDGATE_EGRESS_SECRETS is not valid: ${(e as Error).message}`);
  }
  const secrets = new EgressSecrets(team, deps.credentials, deps.db);
  const destinations = new Destinations({
    dns: list(config.egressDns),
    privateNets: list(config.egressPrivateNets),
    registries: egressSettings(config).registries,
  });
  const limits = new EgressLimits({
    maxConnections: config.egressMaxConnections,
    bytesPerHour: config.egressMbPerHour * 1048576,
    bytesPerSec: config.egressKbPerSec * 1024,
  });
  const ca = config.egressCaFile ? [fs.readFileSync(config.egressCaFile, 'utf8')] : undefined;

  const refusals = new Map<number, { until: number; written: number; dropped: number }>();
  const record = (r: EgressRecord) => {
    let q = refusals.get(r.userId);
    if (!q || q.until <= Date.now()) {
      if (refusals.size > 10_000) refusals.clear();
      q = { until: Date.now() + REFUSAL_WINDOW_MS, written: 0, dropped: q?.dropped ?? 0 };
      refusals.set(r.userId, q);
    }
    if (r.outcome === 'denied' || r.outcome === 'rate_limited') {
      if (q.written >= REFUSALS_PER_WINDOW) {
        q.dropped++;
        return;
      }
      q.written++;
    }
    const dropped = q.dropped;
    q.dropped = 0;
    write(r, dropped);
  };
  const write = (r: EgressRecord, refusedBefore: number) =>
    void deps
      .audit({
        userId: r.userId,
        kind: 'egress',
        method: r.method,
        tool: `${r.host}/${r.port}`,
        argsShape: {
          sent: r.sent,
          received: r.received,
          ...(refusedBefore ? { refusedBefore } : {}),
        },
        durationMs: r.durationMs,
        outcome: r.outcome,
        errorClass: r.why ?? null,
      })
      .catch((e: unknown) => log.warn({ err: e }, 'could not write an egress audit row'));

  const proxy = new EgressProxy({
    destinations,
    limits,
    secrets,
    ...(ca && { ca }),
    record,
    log,
  });
  return {
    handler: proxy.handle,
    secrets,
    close: () => proxy.close(),
  };
}
