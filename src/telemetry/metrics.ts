/**
 * What an operator graphs, for Prometheus (prom-client). Every metric of the gateway is
 * defined here, in one registry, so the names a dashboard may use are in one place
 * (deploy/grafana/sandgate.json uses only these; test/metrics.test.ts checks that).
 *
 * Counters and histograms are counted where things happen (the sandboxes, the agent,
 * the upstream hub, the store, the HTTP app) by importing the metric from here. What is
 * a state rather than an event (sandboxes by state, runs waiting) is read when scraped,
 * from the sources a gateway registers (`observe`), so it is never out of date and costs
 * nothing between scrapes.
 *
 * Labels take a few known values only (a route's template, never its path; an outcome,
 * never a message): a hostile client cannot grow the registry.
 */
import client from 'prom-client';

export const registry = new client.Registry();
// The process: memory, CPU, open handles, event-loop lag, garbage collection.
client.collectDefaultMetrics({ register: registry });

/** Seconds: runs are milliseconds warm, seconds cold, minutes at most. */
const RUN_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
/** Seconds, for requests and model rounds. */
const REQUEST_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120];
/** Seconds, for database queries. */
const QUERY_BUCKETS = [0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5];

export const executions = new client.Counter({
  name: 'sandgate_executions_total',
  help: 'Code executions in sandboxes, by language and outcome (ok, error, timeout, killed, failed).',
  labelNames: ['language', 'outcome'] as const,
  registers: [registry],
});

export const executionSeconds = new client.Histogram({
  name: 'sandgate_execution_duration_seconds',
  help: 'How long code ran in its sandbox, by language and outcome.',
  labelNames: ['language', 'outcome'] as const,
  buckets: RUN_BUCKETS,
  registers: [registry],
});

export const sandboxStarts = new client.Counter({
  name: 'sandgate_sandbox_starts_total',
  help: "Sandboxes made ready for a user: 'cold' (a container started for them), 'pool' (taken from the warm pool), 'adopted' (one an earlier holder left).",
  labelNames: ['kind'] as const,
  registers: [registry],
});

export const coldStartSeconds = new client.Histogram({
  name: 'sandgate_sandbox_cold_start_seconds',
  help: 'How long a sandbox took to start when none was waiting (container, runtime and runner).',
  buckets: [0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 60],
  registers: [registry],
});

export const freezes = new client.Counter({
  name: 'sandgate_sandbox_freezes_total',
  help: 'Idle sandboxes frozen (their cgroup: no CPU while idle).',
  registers: [registry],
});

export const thaws = new client.Counter({
  name: 'sandgate_sandbox_thaws_total',
  help: 'Frozen sandboxes thawed for use.',
  registers: [registry],
});

export const modelRounds = new client.Counter({
  name: 'sandgate_model_rounds_total',
  help: "Rounds of the built-in agent with its model, by provider and outcome ('ok', 'error', 'aborted').",
  labelNames: ['provider', 'outcome'] as const,
  registers: [registry],
});

export const modelRoundSeconds = new client.Histogram({
  name: 'sandgate_model_round_duration_seconds',
  help: 'How long a model round took, from the request to its last token, by provider.',
  labelNames: ['provider'] as const,
  buckets: REQUEST_BUCKETS,
  registers: [registry],
});

export const modelTokens = new client.Counter({
  name: 'sandgate_model_tokens_total',
  help: "Tokens the models reported, by provider and direction ('input', 'output').",
  labelNames: ['provider', 'direction'] as const,
  registers: [registry],
});

export const httpRequests = new client.Counter({
  name: 'sandgate_http_requests_total',
  help: "HTTP requests, by method, route template (e.g. '/c/:id'; 'unmatched' for no route) and status ('aborted': the client left before the answer ended).",
  labelNames: ['method', 'route', 'status'] as const,
  registers: [registry],
});

export const httpSeconds = new client.Histogram({
  name: 'sandgate_http_request_duration_seconds',
  help: 'How long requests took until their answer was written, by method and route template.',
  labelNames: ['method', 'route'] as const,
  buckets: REQUEST_BUCKETS,
  registers: [registry],
});

export const dbQuerySeconds = new client.Histogram({
  name: 'sandgate_db_query_duration_seconds',
  help: "Database queries, by the store's dialect (sqlite, postgres) and statement (select, insert, update, delete, other).",
  labelNames: ['dialect', 'statement'] as const,
  buckets: QUERY_BUCKETS,
  registers: [registry],
});

export const dbQueryErrors = new client.Counter({
  name: 'sandgate_db_query_errors_total',
  help: 'Database queries that failed, by dialect.',
  labelNames: ['dialect'] as const,
  registers: [registry],
});

export const upstreamCalls = new client.Counter({
  name: 'sandgate_upstream_calls_total',
  help: "Calls to upstream MCP servers' tools, by server and outcome ('ok', or why it failed).",
  labelNames: ['server', 'outcome'] as const,
  registers: [registry],
});

export const upstreamSeconds = new client.Histogram({
  name: 'sandgate_upstream_call_duration_seconds',
  help: "How long upstream servers' tools took to answer, by server.",
  labelNames: ['server'] as const,
  buckets: REQUEST_BUCKETS,
  registers: [registry],
});

export const egressConnections = new client.Counter({
  name: 'sandgate_egress_connections_total',
  help: "Connections out of sandboxes through the egress proxy, by outcome (ok, denied, error, rate_limited).",
  labelNames: ['outcome'] as const,
  registers: [registry],
});

export const egressBytes = new client.Counter({
  name: 'sandgate_egress_bytes_total',
  help: "Bytes through the egress proxy, by direction ('sent' from sandboxes, 'received' by them).",
  labelNames: ['direction'] as const,
  registers: [registry],
});

/** The states a sandbox is counted in. */
export const SANDBOX_STATES = ['starting', 'idle', 'frozen', 'running', 'pooled'] as const;
export type SandboxState = (typeof SANDBOX_STATES)[number];

/** What a gateway says of its sandboxes when scraped. */
export interface SandboxCounts {
  byState: Record<SandboxState, number>;
  /** Runs waiting for their sandbox's current run to end. */
  queued: number;
}

const sources = new Set<() => SandboxCounts>();

/**
 * Counts `source`'s sandboxes in the gauges from now on; returns the function that stops
 * it (a gateway closing). Several gateways in one process (tests) add up.
 */
export function observe(source: () => SandboxCounts): () => void {
  sources.add(source);
  return () => sources.delete(source);
}

function counted(): SandboxCounts {
  const total: SandboxCounts = { byState: { starting: 0, idle: 0, frozen: 0, running: 0, pooled: 0 }, queued: 0 };
  for (const source of sources) {
    try {
      const c = source();
      for (const s of SANDBOX_STATES) total.byState[s] += c.byState[s];
      total.queued += c.queued;
    } catch {
      /* a gateway closing meanwhile: counted at the next scrape */
    }
  }
  return total;
}

new client.Gauge({
  name: 'sandgate_sandboxes',
  help: 'Sandboxes this gateway holds, by state (starting, idle, frozen, running, pooled: waiting in the warm pool).',
  labelNames: ['state'] as const,
  registers: [registry],
  collect() {
    const { byState } = counted();
    for (const s of SANDBOX_STATES) this.set({ state: s }, byState[s]);
  },
});

new client.Gauge({
  name: 'sandgate_run_queue_depth',
  help: "Runs waiting behind their sandbox's current run, across users.",
  registers: [registry],
  collect() {
    this.set(counted().queued);
  },
});

/** The text a scrape gets, and its content type. */
export async function exposition(): Promise<{ contentType: string; body: string }> {
  return { contentType: registry.contentType, body: await registry.metrics() };
}

/** Seconds since `start` (a performance.now() reading). */
export function secondsSince(start: number): number {
  return (performance.now() - start) / 1000;
}
