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
import * as metrics from '../telemetry/metrics.js';
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
 * Rows each user's connections may write per window: every one, up to this many; past
 * it, a loop of connections (reached or refused) is counted, not written, and one row at
 * the window's end says how many (`method: summary`), so the audit log cannot be flooded.
 */
const ROWS_PER_WINDOW = 60;
const ROW_WINDOW_MS = 10_000;

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

  const windows = new Map<number, { until: number; written: number; dropped: number; refused: number }>();
  const record = (r: EgressRecord) => {
    metrics.egressConnections.inc({ outcome: r.outcome });
    if (r.sent) metrics.egressBytes.inc({ direction: 'sent' }, r.sent);
    if (r.received) metrics.egressBytes.inc({ direction: 'received' }, r.received);
    let w = windows.get(r.userId);
    if (!w || w.until <= Date.now()) {
      if (windows.size > 10_000) windows.clear();
      w = { until: Date.now() + ROW_WINDOW_MS, written: 0, dropped: 0, refused: 0 };
      windows.set(r.userId, w);
    }
    if (w.written < ROWS_PER_WINDOW) {
      w.written++;
      return write(r);
    }
    if (!w.dropped) {
      const counted = w;
      setTimeout(() => summary(r.userId, counted), Math.max(0, counted.until - Date.now())).unref();
    }
    w.dropped++;
    if (r.outcome !== 'ok') w.refused++;
  };
  const summary = (userId: number, w: { dropped: number; refused: number }) =>
    void deps
      .audit({ userId, kind: 'egress', method: 'summary', tool: null, argsShape: { connections: w.dropped, refused: w.refused }, durationMs: ROW_WINDOW_MS, outcome: 'ok' })
      .catch((e: unknown) => log.warn({ err: e }, 'could not write an egress audit row'));
  const write = (r: EgressRecord) =>
    void deps
      .audit({
        userId: r.userId,
        kind: 'egress',
        method: r.method,
        // The audit log keeps tool names to 64 characters: a longer host is cut (the row still says who, when and how much).
        tool: `${r.host.slice(0, 64)}/${r.port}`,
        argsShape: { sent: r.sent, received: r.received },
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
