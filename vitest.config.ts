import { defineConfig } from 'vitest/config';

/**
 * The test files that also run against Postgres (the `postgres` project), each with a fresh
 * database on a throw-away cluster (test/support/postgres.ts). Every test file runs against
 * SQLite (the `sqlite` project). A file listed here gets its database from testDatabaseUrl().
 */
export const POSTGRES_SUITES = [
  'test/support/postgres.test.ts',
  'src/store/**/*.test.ts',
  'src/accounts/**/*.test.ts',
  'src/tokens/**/*.test.ts',
  'src/oauth/**/*.test.ts',
  'src/auth/sessions.test.ts',
  'src/auth/login-links.test.ts',
  'src/auth/authenticator.test.ts',
  'src/audit/**/*.test.ts',
  'src/pii/vault.test.ts',
  'src/pii/vault-memory.test.ts',
  'src/pii/pii-boundary.test.ts',
  'src/limits/**/*.test.ts',
  'src/agent/conversations.test.ts',
  'src/agent/loop.test.ts',
  'src/upstream/credentials.test.ts',
  'src/upstream/identities.test.ts',
  'src/users/**/*.test.ts',
  'src/replicas/**/*.test.ts',
  'src/sandboxes/shutdown-replicas.test.ts',
  'src/sandboxes/lease-lapse.test.ts',
  'src/web/live/hub.test.ts',
  'test/api-store.test.ts',
  'test/db-copy.test.ts',
  // Egress audit rows, users' secrets and the admin page's hourly counts are stored.
  'test/egress.test.ts',
  'test/replicas.test.ts',
  'test/replicas-rolling.test.ts',
  'test/replicas-web.test.ts',
  'test/replicas-sweep.test.ts',
  'test/replicas-hosts.test.ts',
  'test/mcp-tasks.test.ts',
  // An install an earlier release wrote on Postgres, restored and upgraded.
  'test/upgrade.test.ts',
  // Query metrics carry the store's dialect.
  'test/observability.test.ts',
];

/**
 * The end-to-end suites of the doors (MCP, the agent, the web pages in Chromium, /v1), run
 * on Postgres as two gateway replicas behind HAProxy (the `replicas` project): every request
 * they send may land on either replica (test/support/mcp.ts). They run on SQLite, one
 * gateway, in the `sqlite` project like every file.
 */
export const REPLICA_SUITES = ['test/mcp-http.test.ts', 'test/agent.test.ts', 'test/web.test.ts', 'test/openai-api.test.ts', 'test/oauth.test.ts'];

/**
 * The suites that run with sandboxes on a cluster (the `kubernetes` project): the Kubernetes
 * driver through a stand-in API server (test/support/kube.ts) that backs each pod with a
 * runsc container, one gateway on SQLite.
 */
export const KUBERNETES_SUITES = ['test/mcp-http.test.ts', 'test/kubernetes.test.ts'];

/**
 * As the Helm chart runs it (the `kubernetes-replicas` project): two gateways on Postgres
 * behind HAProxy, their sandboxes pods through the stand-in; every request may land on either.
 */
export const KUBERNETES_REPLICA_SUITES = ['test/mcp-http.test.ts'];

// Not in the root config: a project that extends it would run the setup a second time.
// Every temporary file of the run goes under one directory, removed at the end; for the
// postgres project the setup also starts the cluster.
const globalSetup = ['test/support/global-setup.ts'];

export default defineConfig({
  test: {
    // Sandbox tests start real gVisor containers: give them room, and run files one
    // at a time on these 2-core machines so timings stay honest (across projects too).
    testTimeout: 120_000,
    hookTimeout: 180_000,
    fileParallelism: false,
    pool: 'forks',
    projects: [
      {
        extends: true,
        test: {
          name: 'sqlite',
          include: ['src/**/*.test.ts', 'test/**/*.test.ts', 'scripts/**/*.test.ts'],
          globalSetup,
          // Set, not left out: a SANDGATE_TEST_DATABASE in the shell must not turn these to Postgres.
          env: { SANDGATE_TEST_DATABASE: 'sqlite', SANDGATE_TEST_REPLICAS: '0', SANDGATE_TEST_DRIVER: 'docker' },
        },
      },
      {
        extends: true,
        test: {
          name: 'postgres',
          include: POSTGRES_SUITES,
          globalSetup,
          env: { SANDGATE_TEST_DATABASE: 'postgres', SANDGATE_TEST_REPLICAS: '0', SANDGATE_TEST_DRIVER: 'docker' },
        },
      },
      {
        extends: true,
        test: {
          name: 'replicas',
          include: REPLICA_SUITES,
          globalSetup,
          env: { SANDGATE_TEST_DATABASE: 'postgres', SANDGATE_TEST_REPLICAS: '2', SANDGATE_TEST_DRIVER: 'docker' },
        },
      },
      {
        extends: true,
        test: {
          name: 'kubernetes',
          include: KUBERNETES_SUITES,
          globalSetup,
          env: { SANDGATE_TEST_DATABASE: 'sqlite', SANDGATE_TEST_REPLICAS: '0', SANDGATE_TEST_DRIVER: 'kubernetes' },
        },
      },
      {
        extends: true,
        test: {
          name: 'kubernetes-replicas',
          include: KUBERNETES_REPLICA_SUITES,
          globalSetup,
          env: { SANDGATE_TEST_DATABASE: 'postgres', SANDGATE_TEST_REPLICAS: '2', SANDGATE_TEST_DRIVER: 'kubernetes' },
        },
      },
    ],
  },
});
