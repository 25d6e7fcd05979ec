/**
 * Every setting sandgate reads, in one table: its environment variable, default,
 * validation and documentation. README.md's settings table mirrors SETTINGS (a test
 * keeps the two equal). Values come from the environment, then from an optional `.env`
 * file in the working directory; the environment wins.
 *
 * Defaults are the safe choice. Anything weaker needs an explicit setting, and
 * `loadConfig` returns a warning for it that main.ts logs loudly at start.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parse as parseDotenv } from 'dotenv';
import { z } from 'zod';
import { ConfigError } from './errors.js';

const bool = z.enum(['true', 'false', '1', '0', 'yes', 'no']).transform((v) => ['true', '1', 'yes'].includes(v));
const int = (min: number, max: number) => z.coerce.number().int().min(min).max(max);
const optionalUrl = z.union([z.literal(''), z.string().url().regex(/^https?:\/\//, 'must be an http:// or https:// URL')]);

export interface Setting {
  env: string;
  default: string;
  doc: string;
  schema: z.ZodTypeAny;
}

function setting<K extends string, S extends z.ZodTypeAny>(key: K, env: string, def: string, schema: S, doc: string) {
  return { key, env, default: def, schema, doc } as const;
}

export const SETTINGS = [
  setting('host', 'SANDGATE_HOST', '127.0.0.1', z.string().min(1), 'Address to listen on. Binding beyond loopback needs SANDGATE_PUBLIC_URL.'),
  setting('port', 'SANDGATE_PORT', '8787', int(0, 65535), 'TCP port to listen on (0 picks a free one).'),
  setting('publicUrl', 'SANDGATE_PUBLIC_URL', '', z.union([z.literal(''), z.string().url()]), 'URL users reach the gateway at (https in production). Defaults to http://HOST:PORT.'),
  setting('dataDir', 'SANDGATE_DATA_DIR', './data', z.string().min(1), 'Directory for the keys, the workspaces and (with SANDGATE_DATABASE_URL empty) the SQLite database sandgate.db.'),
  setting('databaseUrl', 'SANDGATE_DATABASE_URL', '', z.union([z.literal(''), z.string().regex(/^postgres(ql)?:\/\/./, 'must be empty or a postgres:// URL')]), 'Where sandgate keeps its data. Empty: a SQLite file in SANDGATE_DATA_DIR (one host). postgres://user:password@host:5432/db: that Postgres database, which several gateways can share (TLS with ?sslmode=verify-full, or see SANDGATE_DATABASE_CA_FILE). Moving an install: sandgate db copy.'),
  setting('databasePoolSize', 'SANDGATE_DATABASE_POOL_SIZE', '10', int(1, 1000), 'Connections each gateway may hold open to Postgres.'),
  setting('replicaLeaseMs', 'SANDGATE_REPLICA_LEASE_MS', '4000', int(1000, 600000), 'How long a gateway that stopped answering keeps its users’ sandboxes before another gateway on the same database takes them over (ms). Each gateway writes a heartbeat to the database every third of it, and stops acting on its sandboxes a fifth of it earlier than the others may take them: the hosts’ clocks must agree within that.'),
  setting('hostLostSec', 'SANDGATE_HOST_LOST_SEC', '300', int(5, 86400), 'With gateways on several sandbox hosts, each keeping workspaces on its own disk: how long a host may have no gateway running before a run of one of its users starts a sandbox on another host, with the files that host has (none of theirs, unless the workspaces are on storage both mount). Until then their runs and file operations are refused with "try again": the host\'s gateway may be restarting, or the host rebooting. File operations never move a user\'s files to another host. Gateways that share a workspaces folder (one host, or shared storage) are one host here.'),
  setting('drainSec', 'SANDGATE_DRAIN_SEC', '30', int(0, 3600), 'On SIGTERM, with other gateways on the same database: how long this one keeps serving while it hands its users\' sandboxes over (each as soon as nothing runs in it; /readyz answers 503 meanwhile, so the load balancer sends it nothing new) before it stops. Runs still going then end as interrupted. Alone (SQLite), it stops at once.'),
  setting('internalUrl', 'SANDGATE_INTERNAL_URL', '', optionalUrl, 'Where the other gateways on the same database reach this one, to run code in a sandbox it holds (the internal hop: signed and sealed with the replica key). Empty: http://HOST:PORT, or with HOST 0.0.0.0 or :: this host\'s first non-loopback IPv4 address. Keep it on a private network: what passes is sealed, but which replica asks which, when and how much, is not.'),
  setting('replicaKey', 'SANDGATE_REPLICA_KEY', '', z.string(), 'Key the gateways on one database sign and seal their internal hops and live updates with (32 bytes, base64 or hex), the same on every one: a gateway whose key is not the running ones\' does not start. Empty: generated once in <data dir>/replicas.key with mode 0600: copy that file to every gateway host.'),
  setting('databaseCaFile', 'SANDGATE_DATABASE_CA_FILE', '', z.string(), 'PEM file of the certificate authority that signed the Postgres server\'s certificate; set, the connection uses TLS and checks the server against it.'),
  setting('logLevel', 'SANDGATE_LOG_LEVEL', 'info', z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']), 'pino log level.'),
  setting('metricsListen', 'SANDGATE_METRICS_LISTEN', '', z.union([z.literal(''), z.string().regex(/^(?:\[[0-9a-fA-F:.]+\]|[^:[\]\s]+):\d{1,5}$/, 'must be host:port, e.g. 127.0.0.1:9464')]), 'host:port of a listener of its own serving Prometheus metrics at GET /metrics, without authentication: loopback or a private network only (any other address is warned at start). Empty: none; an admin\'s API token reads the same at /admin/metrics.'),
  setting('tracesUrl', 'SANDGATE_TRACES_URL', '', optionalUrl, 'OpenTelemetry: the OTLP/HTTP endpoint traces are sent to (e.g. http://collector:4318/v1/traces). Each request, its tool calls, sandbox runs and model rounds are spans, continuing a traceparent the client sends. Empty: no traces, and no cost.'),
  setting('tracesHeaders', 'SANDGATE_TRACES_HEADERS', '', z.string(), 'Headers sent with every export to SANDGATE_TRACES_URL, comma-separated name=value (e.g. authorization=Bearer abc).'),
  setting('tracesSampleRatio', 'SANDGATE_TRACES_SAMPLE_RATIO', '1', z.coerce.number().min(0).max(1), 'The share of new traces recorded (0 to 1) when SANDGATE_TRACES_URL is set; a request continuing a client\'s trace follows its sampled flag.'),
  setting('sandboxDriver', 'SANDGATE_SANDBOX_DRIVER', 'docker', z.enum(['docker', 'kubernetes']), 'Where sandboxes run. docker: containers under runsc on this host\'s dockerd. kubernetes: a Pod per sandbox on a cluster, under a gVisor RuntimeClass, each workspace a PersistentVolumeClaim (see the SANDGATE_K8S_ settings and deploy/helm/sandgate).'),
  setting('k8sNamespace', 'SANDGATE_K8S_NAMESPACE', 'sandgate-sandboxes', z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, 'must be a Kubernetes namespace name'), 'With the kubernetes driver: the namespace sandbox pods, their workspace claims and their NetworkPolicy live in (its own, with the RBAC the Helm chart gives).'),
  setting('k8sKubeconfig', 'SANDGATE_K8S_KUBECONFIG', '', z.string(), 'With the kubernetes driver: a kubeconfig file to reach the cluster with. Empty: the pod\'s service account when the gateway runs on the cluster, else $KUBECONFIG or ~/.kube/config.'),
  setting('k8sRuntimeClass', 'SANDGATE_K8S_RUNTIME_CLASS', 'gvisor', z.string().regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, 'must be a RuntimeClass name'), 'With the kubernetes driver: the RuntimeClass of sandbox pods. It must run them under gVisor: the preflight proves it with a test pod and no sandbox starts otherwise.'),
  setting('k8sStorageClass', 'SANDGATE_K8S_STORAGE_CLASS', '', z.string(), 'With the kubernetes driver: the storage class of workspace claims (each of SANDGATE_WORKSPACE_MB). Empty: the cluster\'s default. Choose one whose volumes enforce their size.'),
  setting('k8sImagePullPolicy', 'SANDGATE_K8S_IMAGE_PULL_POLICY', 'IfNotPresent', z.enum(['IfNotPresent', 'Always', 'Never']), 'With the kubernetes driver: the image pull policy of sandbox pods (SANDGATE_SANDBOX_IMAGE must be in a registry the nodes reach).'),
  setting('sandboxImage', 'SANDGATE_SANDBOX_IMAGE', 'sandgate/sandbox:latest', z.string().min(1), 'Docker image of the sandbox (built by scripts/build-sandbox-image.sh).'),
  setting('sandboxRuntime', 'SANDGATE_SANDBOX_RUNTIME', 'runsc', z.string().min(1), 'OCI runtime for sandboxes. Anything but runsc needs SANDGATE_UNSAFE_ALLOW_NON_GVISOR=true.'),
  setting('unsafeAllowNonGvisor', 'SANDGATE_UNSAFE_ALLOW_NON_GVISOR', 'false', bool, 'Allow a runtime other than runsc (e.g. runc). UNSAFE: without gVisor, model-written code talks to the host kernel directly.'),
  setting('dockerSocket', 'SANDGATE_DOCKER_SOCKET', '/var/run/docker.sock', z.string().min(1), 'Path of the Docker Engine socket.'),
  setting('sandboxMemoryMb', 'SANDGATE_SANDBOX_MEMORY_MB', '1024', int(128, 65536), 'Memory limit per sandbox (MiB); the OOM killer ends code above it.'),
  setting('sandboxCpus', 'SANDGATE_SANDBOX_CPUS', '1', z.coerce.number().min(0.1).max(64), 'CPU limit per sandbox (cores).'),
  setting('sandboxPidsLimit', 'SANDGATE_SANDBOX_PIDS_LIMIT', '1024', int(64, 65536), 'Host-side pids limit per sandbox (gVisor counts its own threads: keep it >= 1024).'),
  setting('sandboxNproc', 'SANDGATE_SANDBOX_NPROC', '64', int(16, 4096), 'Processes per sandbox, enforced inside gVisor (ulimit nproc): fork bombs get EAGAIN.'),
  setting('sandboxTmpMb', 'SANDGATE_SANDBOX_TMP_MB', '256', int(16, 65536), 'Size of the tmpfs at /tmp in each sandbox (MiB).'),
  setting('workspaceMb', 'SANDGATE_WORKSPACE_MB', '1024', int(1, 1048576), 'Size limit of each user workspace (MiB), enforced by a per-user loop-mounted filesystem when possible.'),
  setting('workspaceBackend', 'SANDGATE_WORKSPACE_BACKEND', 'loop', z.enum(['loop', 'directory']), 'loop: each workspace is a loop-mounted ext4 image of SANDGATE_WORKSPACE_MB (the kernel enforces the size; needs root). directory: plain directories WITHOUT a size limit (warned at start).'),
  setting('execTimeoutSec', 'SANDGATE_EXEC_TIMEOUT_SEC', '60', int(1, 3600), 'Default time limit for one execution; the process is killed when it is reached.'),
  setting('execMaxTimeoutSec', 'SANDGATE_EXEC_MAX_TIMEOUT_SEC', '600', int(1, 86400), 'Largest time limit a request may ask for.'),
  setting('mcpTaskAfterSec', 'SANDGATE_MCP_TASK_AFTER_SEC', '20', int(0, 3600), 'An execute_code from an MCP client that supports tasks (the 2026-07-28 tasks extension) and still runs after this long is answered with a task the client polls; the run goes on, and survives a gateway restart. 0: every such call becomes a task at once.'),
  setting('outputLimitKb', 'SANDGATE_OUTPUT_LIMIT_KB', '64', int(1, 16384), 'Output kept per stream per execution (KiB); the rest is cut with a notice.'),
  setting('freezeAfterMs', 'SANDGATE_FREEZE_AFTER_MS', '2000', int(0, 3_600_000), 'Freeze an idle sandbox\'s cgroup this long after its last run (ms): frozen, it costs no CPU, and the next run thaws it in about a millisecond. 0: never freeze.'),
  setting('freezeRewarmSec', 'SANDGATE_FREEZE_REWARM_SEC', '30', int(0, 86400), 'Thaw a frozen sandbox this often (s) for one empty round trip through its runner and Python kernel, then freeze it again: on hosts whose memory goes cold when untouched for a minute (VMs), the first run after minutes frozen is otherwise 5-15 ms slower. Costs about 0.1-0.2 ms of host CPU a second per frozen sandbox. 0: never.'),
  setting('runscPlatform', 'SANDGATE_RUNSC_PLATFORM', 'systrap', z.enum(['systrap', 'ptrace']), 'gVisor platform: systrap (fast syscalls) or ptrace (slow syscalls, which upstream calls unsupported). scripts/setup-runtime.sh registers the runtime for it.'),
  setting('denoHost', 'SANDGATE_DENO_HOST', 'start', z.enum(['start', 'first-use']), 'When a sandbox starts its long-lived Deno host for TypeScript and JavaScript: start (with the sandbox, so the first run is as fast as the next) or first-use (at the first TypeScript or JavaScript run, which then waits about 1-2 s; saves about 37 MiB per sandbox that never runs either).'),
  setting('idleTimeoutSec', 'SANDGATE_IDLE_TIMEOUT_SEC', '900', int(10, 604800), 'Stop a sandbox after this long without an execution (never while one runs).'),
  setting('maxLifetimeSec', 'SANDGATE_MAX_LIFETIME_SEC', '43200', int(60, 2592000), 'Replace a sandbox older than this at its next idle moment.'),
  setting('warmPoolSize', 'SANDGATE_WARM_POOL_SIZE', '1', int(0, 64), 'Pre-started sandboxes waiting for new users.'),
  setting('warmPoolPreload', 'SANDGATE_WARM_POOL_PRELOAD', 'numpy,pandas', z.string(), 'Python modules pooled sandboxes import before they are handed out (comma-separated; empty for none).'),
  setting('defaultPermissions', 'SANDGATE_DEFAULT_PERMISSIONS', '{"read":["/workspace","/skills","/tools"],"write":["/workspace"]}', z.string(), 'Permission ceiling for every user, as Deno-style grants in JSON: read, write, net, env, run, sys, ffi, each true or a list.'),
  setting('maxPermissions', 'SANDGATE_MAX_PERMISSIONS', '', z.string(), 'The team ceiling: the most an admin may grant one user (as SANDGATE_DEFAULT_PERMISSIONS). Empty: the default ceiling is also the most.'),
  setting('teamPermissions', 'SANDGATE_TEAM_PERMISSIONS', '', z.string(), 'Grants added to the ceiling of members of GitHub teams, as JSON: {"org/team": {"net": ["registries"]}}. Each grant widens the member\'s ceiling (their own row, else the default); lists are joined.'),
  setting('egressPipIndex', 'SANDGATE_EGRESS_PIP_INDEX', 'https://pypi.org/simple/', z.string().url(), 'The Python package index (PEP 503) sandboxes install from: pip in a sandbox uses it, and the net entry "registries" names its host.'),
  setting('egressPipFiles', 'SANDGATE_EGRESS_PIP_FILES', 'https://files.pythonhosted.org/', z.string(), 'Where the index\'s files are, when on another host than the index (comma-separated URLs; empty: the index\'s host only). Part of "registries".'),
  setting('egressNpmRegistry', 'SANDGATE_EGRESS_NPM_REGISTRY', 'https://registry.npmjs.org/', z.string().url(), 'The npm registry sandboxes install from (npm: imports in TypeScript and JavaScript). Part of "registries".'),
  setting('egressDns', 'SANDGATE_EGRESS_DNS', '', z.string(), 'DNS servers the egress proxy asks (comma-separated ip or ip:port). Empty: the host\'s (/etc/resolv.conf).'),
  setting('egressPrivateNets', 'SANDGATE_EGRESS_PRIVATE_NETS', '', z.string(), 'Private networks (CIDR, comma-separated) that allowed names may resolve to, for an internal API. Empty: sandboxes reach public addresses only. Loopback, link-local and the gateway host\'s own addresses stay refused. Weaker (warned at start).'),
  setting('egressCaFile', 'SANDGATE_EGRESS_CA_FILE', '', z.string(), 'Extra CA certificates (PEM) the egress proxy trusts when it makes the TLS connection itself (hosts with a secret): for an internal API with a private CA.'),
  setting('egressSecrets', 'SANDGATE_EGRESS_SECRETS', '', z.string(), 'Secrets for one host each, added by the egress proxy as a header to requests for that host, as JSON: {"WEATHER_KEY": {"host": "api.weather.example", "value": "...", "header": "authorization", "prefix": "Bearer "}}. Code requests http://<host>/… and the proxy makes the TLS connection; the value never enters a sandbox. Users may add their own on their settings page.'),
  setting('egressMaxConnections', 'SANDGATE_EGRESS_MAX_CONNECTIONS', '16', int(1, 1024), 'Connections out of sandboxes one user may have open at once; more are refused (503).'),
  setting('egressMbPerHour', 'SANDGATE_EGRESS_MB_PER_HOUR', '2048', int(1, 1048576), 'MiB one user\'s sandboxes may send and receive through the egress proxy per hour; beyond it connections are refused until the hour has passed.'),
  setting('egressKbPerSec', 'SANDGATE_EGRESS_KB_PER_SEC', '4096', int(16, 10485760), 'KiB/s one user\'s egress may carry, across their connections: one user\'s downloads cannot take the gateway\'s CPU from others (each byte crosses the runner\'s channel; at 4 MiB/s a flood leaves others\' warm runs about 2x slower at p95 on a 2-core host). Raise it on a larger host.'),
  setting('mcpServersFile', 'SANDGATE_MCP_SERVERS_FILE', '', z.string(), 'Upstream MCP servers, in the mcpServers JSON format MCP clients use plus a "sandgate" block per server (who may use it, shared or per-user). Empty means DATA_DIR/mcp-servers.json; a missing file means no upstream servers.'),
  setting('upstreamHomeDir', 'SANDGATE_UPSTREAM_HOME_DIR', '/var/lib/sandgate-upstream', z.string().min(1), 'Where stdio upstream servers keep their files: a home per connection, owned by the unprivileged uid it runs as. Every folder above it must be searchable by other users.'),
  setting('rateLimitPerMin', 'SANDGATE_RATE_LIMIT_PER_MIN', '300', int(1, 1000000), 'Requests each user may make per minute (steady rate), one budget across all their tokens and pages: MCP messages, /v1 requests, chat messages sent, file previews, tables, downloads and uploads. Beyond it the answer is 429 with Retry-After. In memory on SQLite (a restart forgives everyone); in the database on Postgres, so gateways sharing it share each user’s budget.'),
  setting('rateLimitBurst', 'SANDGATE_RATE_LIMIT_BURST', '60', int(1, 1000000), 'Requests a user may make at once (across all their tokens and pages) before SANDGATE_RATE_LIMIT_PER_MIN paces them.'),
  setting('maxTokensPerUser', 'SANDGATE_MAX_TOKENS_PER_USER', '20', int(1, 10000), 'Active personal API tokens one user may hold (revoked and expired ones do not count); creating one more is refused until one is revoked. Every token is a credential that can leak: keep this near the devices and apps a person really uses.'),
  setting('storeQuotaMb', 'SANDGATE_STORE_QUOTA_MB', '256', int(1, 1048576), 'What the gateway stores for one user (MiB): the messages of their conversations (web chat and /v1) and the personal data tokenized in them, not the audit log or the workspace (SANDGATE_WORKSPACE_MB bounds that). When it is full, a new chat message or /v1 request is refused, saying what to delete; nothing stored is removed to make room. One turn that is running may go past it by its own tool output. Costs up to this much database disk per user.'),
  setting('apiConversationDays', 'SANDGATE_API_CONVERSATION_DAYS', '30', int(0, 36500), 'Delete a conversation of the /v1 API this many days after its last message (checked at start and hourly), with the personal data tokenized in it; a client that continues it later starts a new one from the history it resends. Chats of the web app are kept until their user deletes them. 0: keep API conversations until their user deletes them (SANDGATE_STORE_QUOTA_MB still bounds them).'),
  setting('mcpAllowedHosts', 'SANDGATE_MCP_ALLOWED_HOSTS', '', z.string(), 'Extra host names (comma-separated) accepted in the Host header of /mcp, besides the host of SANDGATE_PUBLIC_URL and localhost. Every other Host is refused (DNS rebinding protection).'),
  setting('mcpAllowedOrigins', 'SANDGATE_MCP_ALLOWED_ORIGINS', '', z.string(), 'Extra browser origins (comma-separated, e.g. https://app.example.com) allowed to call /mcp, besides the origin of SANDGATE_PUBLIC_URL. Requests with any other Origin header are refused.'),
  setting('oauth', 'SANDGATE_OAUTH', 'true', bool, 'Let MCP clients connect with OAuth (sign-in in a browser, then a consent page) besides personal API tokens: the gateway is its own authorization server for /mcp. false: personal tokens only.'),
  setting('oauthMaxPendingClients', 'SANDGATE_OAUTH_MAX_PENDING_CLIENTS', '200', int(1, 100000), 'OAuth clients registered (RFC 7591) that no one has connected yet, the most kept at once; each goes after a day unused. Bounds what anonymous registration can store.'),
  setting('oauthClientDocumentsPrivate', 'SANDGATE_OAUTH_CLIENT_DOCUMENTS_PRIVATE', 'false', bool, 'Fetch Client ID Metadata Documents (an app whose client_id is an https URL) from loopback and private addresses too. Off: only from public addresses, so an app cannot make the gateway fetch from its own network. On is weaker (warned at start): for apps hosted on the LAN.'),
  setting('oauthClientDocumentsCaFile', 'SANDGATE_OAUTH_CLIENT_DOCUMENTS_CA_FILE', '', z.string(), 'A PEM file of CA certificates to trust, besides the system\'s, when fetching Client ID Metadata Documents (apps hosted on the LAN under an internal CA).'),
  setting('piiTokenize', 'SANDGATE_PII_TOKENIZE', 'true', bool, 'Replace personal data and secrets with tokens ([EMAIL_1]) in everything sent to a model, and restore them in what a model sends. false is UNSAFE: models see raw values (warned at start).'),
  setting('piiEntities', 'SANDGATE_PII_ENTITIES', 'all', z.string().min(1), 'Entity types to tokenize: all, or a comma list of EMAIL, PHONE, CARD, IBAN, IP, SSN, SECRET, NAME, ADDRESS (a street address, as one token), DOB (a date of birth: a date with birth context or in a birth column).'),
  setting('piiAllow', 'SANDGATE_PII_ALLOW', '', z.string(), 'Comma-separated values never tokenized (case-insensitive), e.g. the team support address.'),
  setting('piiTtlHours', 'SANDGATE_PII_TTL_HOURS', '168', int(1, 87600), 'Forget a tokenized value after this many hours without use.'),
  setting('piiKey', 'SANDGATE_PII_KEY', '', z.string(), 'Key that encrypts the PII vault (32 bytes, base64 or hex). Empty: generated once in <data dir>/pii.key with mode 0600.'),
  setting('githubClientId', 'SANDGATE_GITHUB_CLIENT_ID', '', z.string(), 'Client ID of the GitHub OAuth app team members sign in with. Empty: no GitHub; a single user signs in through a one-time link printed at start.'),
  setting('githubClientSecret', 'SANDGATE_GITHUB_CLIENT_SECRET', '', z.string(), 'Client secret of that OAuth app. Its callback URL is <SANDGATE_PUBLIC_URL>/auth/github/callback.'),
  setting('githubUrl', 'SANDGATE_GITHUB_URL', 'https://github.com', z.string().url().regex(/^https?:\/\//, 'must be an http:// or https:// URL'), 'Web address of GitHub, or of a GitHub Enterprise Server (https://github.example.com).'),
  setting('githubApiUrl', 'SANDGATE_GITHUB_API_URL', '', optionalUrl, 'GitHub REST API base. Empty: https://api.github.com for github.com, <SANDGATE_GITHUB_URL>/api/v3 for Enterprise Server.'),
  setting('allowedUsers', 'SANDGATE_ALLOWED_USERS', '', z.string(), 'GitHub logins that may sign in (comma-separated).'),
  setting('allowedOrgs', 'SANDGATE_ALLOWED_ORGS', '', z.string(), 'GitHub organisations whose members may sign in (comma-separated).'),
  setting('allowedTeams', 'SANDGATE_ALLOWED_TEAMS', '', z.string(), 'GitHub teams whose members may sign in, as org/team-slug (comma-separated).'),
  setting('admins', 'SANDGATE_ADMINS', '', z.string(), 'GitHub logins with the admin page (comma-separated); they must also be allowed to sign in. Admin rights are read from here at each check, never kept from an earlier one: a login taken off this list has none from the next start, a member removed from the allow-list none from the re-check.'),
  setting('authRecheckSec', 'SANDGATE_AUTH_RECHECK_SEC', '900', int(1, 86400), 'How often a member is checked against the allow-list again (GitHub org and team membership, and that their GitHub account is still the one bound to them). Someone removed loses access everywhere (sessions, open pages, API tokens, admin rights) at their first request, or their open page\'s check, after this; their tokens are suspended, not revoked. If GitHub does not answer, the last yes holds for one more interval, then requests get 503 until it does.'),
  setting('sessionDays', 'SANDGATE_SESSION_DAYS', '14', int(1, 365), 'A browser session ends after this many days without use.'),
  setting('localUser', 'SANDGATE_LOCAL_USER', 'admin', z.string().regex(/^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$/, 'letters, digits and -'), 'The account of a single-user install (no GitHub app): the one-time sign-in link printed at start signs in as this admin.'),
  setting('uploadMaxMb', 'SANDGATE_UPLOAD_MAX_MB', '100', int(1, 10240), 'Largest file a browser may upload to a workspace (MiB); the workspace size limit applies too.'),
  setting('anthropicApiKey', 'SANDGATE_ANTHROPIC_API_KEY', '', z.string(), "The team's Anthropic API key for the built-in agent. Users may add their own; theirs wins for them."),
  setting('anthropicBaseUrl', 'SANDGATE_ANTHROPIC_BASE_URL', '', optionalUrl, 'Anthropic API base URL (default https://api.anthropic.com/v1), e.g. a proxy.'),
  setting('openaiApiKey', 'SANDGATE_OPENAI_API_KEY', '', z.string(), "The team's OpenAI API key for the built-in agent. Users may add their own; theirs wins for them."),
  setting('openaiBaseUrl', 'SANDGATE_OPENAI_BASE_URL', '', optionalUrl, 'OpenAI API base URL (default https://api.openai.com/v1), e.g. Azure OpenAI or a proxy.'),
  setting('geminiApiKey', 'SANDGATE_GEMINI_API_KEY', '', z.string(), "The team's Google Gemini API key for the built-in agent. Users may add their own; theirs wins for them."),
  setting('geminiBaseUrl', 'SANDGATE_GEMINI_BASE_URL', '', optionalUrl, 'Gemini API base URL (default https://generativelanguage.googleapis.com/v1beta).'),
  setting('compatibleBaseUrl', 'SANDGATE_COMPATIBLE_BASE_URL', '', optionalUrl, 'Base URL of an OpenAI-compatible server (Ollama: http://localhost:11434/v1, vLLM, LM Studio, OpenRouter). Its models must be listed in SANDGATE_MODELS.'),
  setting('compatibleApiKey', 'SANDGATE_COMPATIBLE_API_KEY', '', z.string(), 'API key for SANDGATE_COMPATIBLE_BASE_URL, if it needs one.'),
  setting('compatibleName', 'SANDGATE_COMPATIBLE_NAME', 'local', z.string().regex(/^[a-z][a-z0-9-]{0,31}$/, 'lower-case letters, digits and -'), 'The name models of SANDGATE_COMPATIBLE_BASE_URL go by in SANDGATE_MODELS and in model pickers (e.g. ollama, for ollama:qwen2.5).'),
  setting('models', 'SANDGATE_MODELS', '', z.string(), 'Models offered, comma-separated provider:model (anthropic:claude-sonnet-4-5, openai:gpt-4.1, gemini:gemini-2.5-flash, <SANDGATE_COMPATIBLE_NAME>:<model>). Empty: a default model for each provider with a team key.'),
  setting('defaultModel', 'SANDGATE_DEFAULT_MODEL', '', z.string(), 'The model a new conversation starts with (one of SANDGATE_MODELS). Empty: the first one offered.'),
  setting('agentMaxRounds', 'SANDGATE_AGENT_MAX_ROUNDS', '24', int(1, 1000), 'Tool rounds one turn of the built-in agent may take; the turn then ends and says so.'),
  setting('agentTurnTokens', 'SANDGATE_AGENT_TURN_TOKENS', '400000', int(1000, 100000000), 'Tokens (input plus output, all rounds) one turn may use; the turn then ends and says so.'),
  setting('agentContextTokens', 'SANDGATE_AGENT_CONTEXT_TOKENS', '100000', int(2000, 10000000), 'Largest prompt sent to a model (estimated); older tool output is trimmed to stay below it, never the messages of the user.'),
  setting('agentMaxOutputTokens', 'SANDGATE_AGENT_MAX_OUTPUT_TOKENS', '8192', int(256, 1000000), 'Largest reply asked of a model in one round.'),
  setting('agentRetries', 'SANDGATE_AGENT_RETRIES', '3', int(0, 10), 'Retries of a model request that failed with 429, 5xx or a network error (with backoff, honouring Retry-After).'),
  setting('agentTimeoutSec', 'SANDGATE_AGENT_TIMEOUT_SEC', '120', int(5, 3600), 'A model request fails after this long without a new byte from the provider.'),
] as const;

type SettingKey = (typeof SETTINGS)[number]['key'];
type SettingValue<K extends SettingKey> = z.output<Extract<(typeof SETTINGS)[number], { key: K }>['schema']>;

export type Config = { [K in SettingKey]: SettingValue<K> } & {
  /** Resolved absolute data directory. */
  dataDir: string;
  /** publicUrl with its default applied. */
  publicUrl: string;
  /** Whether SANDGATE_PUBLIC_URL was set (else publicUrl is http://HOST:PORT, and the port may be the one picked at listen). */
  publicUrlSet: boolean;
};

export { ConfigError };

export interface LoadedConfig {
  config: Config;
  /** Weaker-than-default choices, to be logged loudly at start. */
  warnings: string[];
}

/** Reads `.env` (if present) below the environment; the environment wins. */
export function readEnv(env: NodeJS.ProcessEnv = process.env, dotenvPath = '.env'): Record<string, string | undefined> {
  let fromFile: Record<string, string> = {};
  if (fs.existsSync(dotenvPath)) fromFile = parseDotenv(fs.readFileSync(dotenvPath));
  return { ...fromFile, ...env };
}

/**
 * Validates every setting. Throws ConfigError naming each bad setting and how to fix it.
 */
export function loadConfig(env: Record<string, string | undefined> = readEnv()): LoadedConfig {
  const errors: string[] = [];
  const out: Record<string, unknown> = {};
  for (const s of SETTINGS) {
    const raw = env[s.env] ?? s.default;
    const parsed = s.schema.safeParse(raw);
    if (parsed.success) out[s.key] = parsed.data;
    else errors.push(`${s.env}=${JSON.stringify(raw)} is invalid: ${parsed.error.issues.map((i) => i.message).join('; ')}. ${s.doc}`);
  }
  if (errors.length) throw new ConfigError(`invalid configuration:\n  - ${errors.join('\n  - ')}`);
  const config = out as Config;
  const warnings: string[] = [];

  config.dataDir = path.resolve(config.dataDir);
  config.publicUrlSet = config.publicUrl !== '';
  const loopback = ['127.0.0.1', '::1', 'localhost'].includes(config.host);
  if (!config.publicUrl) {
    if (!loopback) {
      errors.push(`SANDGATE_HOST=${config.host} listens beyond loopback but SANDGATE_PUBLIC_URL is empty: set SANDGATE_PUBLIC_URL to the https URL users reach the gateway at (it is used for sign-in redirects and Host/Origin checks).`);
    }
    const h = config.host.includes(':') ? `[${config.host}]` : config.host;
    config.publicUrl = `http://${h}:${config.port}`;
  }
  if (config.databaseUrl) {
    let host = '';
    try {
      host = new URL(config.databaseUrl).hostname;
    } catch {
      errors.push('SANDGATE_DATABASE_URL is not a URL: write it as postgres://user:password@host:5432/database.');
    }
    const local = host === '' || ['localhost', '127.0.0.1', '[::1]', '::1'].includes(host) || host.startsWith('/');
    if (/[?&]sslmode=no-verify\b/.test(config.databaseUrl) && !config.databaseCaFile) {
      warnings.push('SANDGATE_DATABASE_URL has sslmode=no-verify: the connection is encrypted but the server\'s certificate is not checked, so anyone on the path can pose as the database. Use sslmode=verify-full (with SANDGATE_DATABASE_CA_FILE for a private CA).');
    } else if (host && !local && !config.databaseCaFile && !/[?&]sslmode=(require|verify-ca|verify-full)\b/.test(config.databaseUrl)) {
      warnings.push(`SANDGATE_DATABASE_URL reaches ${host} without TLS: everything sandgate stores crosses the network in clear. Add ?sslmode=verify-full, or set SANDGATE_DATABASE_CA_FILE.`);
    }
  }
  if (config.sandboxRuntime === 'runsc' && config.runscPlatform === 'ptrace') {
    warnings.push('SANDGATE_RUNSC_PLATFORM=ptrace: sandboxes run on gVisor\'s ptrace platform (same isolation, syscall-heavy code 6-25x slower; upstream calls it unsupported).');
  }
  if (config.sandboxRuntime !== 'runsc') {
    if (!config.unsafeAllowNonGvisor) {
      errors.push(`SANDGATE_SANDBOX_RUNTIME=${config.sandboxRuntime} runs sandboxes without gVisor; set SANDGATE_SANDBOX_RUNTIME=runsc, or SANDGATE_UNSAFE_ALLOW_NON_GVISOR=true if you accept model-written code talking to the host kernel.`);
    } else {
      warnings.push(`UNSAFE: sandboxes run with runtime "${config.sandboxRuntime}", not gVisor (SANDGATE_UNSAFE_ALLOW_NON_GVISOR=true). Model-written code reaches the host kernel directly.`);
    }
  }
  if (config.workspaceBackend === 'directory') {
    warnings.push('SANDGATE_WORKSPACE_BACKEND=directory: workspace sizes are NOT limited; one user can fill the host disk.');
  }
  if (config.oauth && config.oauthClientDocumentsPrivate) {
    warnings.push('SANDGATE_OAUTH_CLIENT_DOCUMENTS_PRIVATE=true: an app connecting with OAuth can make the gateway fetch its client metadata document from loopback and private addresses (the gateway\'s own network).');
  }
  if (config.metricsListen && !/^(127\.|\[::1\]:|localhost:)/.test(config.metricsListen)) {
    warnings.push(`SANDGATE_METRICS_LISTEN=${config.metricsListen}: metrics are served without authentication to whoever reaches that address (they name routes, upstream servers and counts of users' sandboxes). Keep it on loopback or a private network.`);
  }
  if (!config.piiTokenize) {
    warnings.push('SANDGATE_PII_TOKENIZE=false: personal data and secrets in tool results reach models as they are.');
  }
  if (config.execTimeoutSec > config.execMaxTimeoutSec) {
    errors.push(`SANDGATE_EXEC_TIMEOUT_SEC=${config.execTimeoutSec} exceeds SANDGATE_EXEC_MAX_TIMEOUT_SEC=${config.execMaxTimeoutSec}: lower the first or raise the second.`);
  }
  if (config.sandboxNproc > config.sandboxPidsLimit) {
    errors.push(`SANDGATE_SANDBOX_NPROC=${config.sandboxNproc} exceeds SANDGATE_SANDBOX_PIDS_LIMIT=${config.sandboxPidsLimit}: the host-side pids limit must stay above the in-sandbox process limit.`);
  }
  if (config.githubClientId && !config.githubClientSecret) errors.push('SANDGATE_GITHUB_CLIENT_ID is set but SANDGATE_GITHUB_CLIENT_SECRET is empty: set the OAuth app\'s client secret.');
  if (config.githubClientId && !config.allowedUsers.trim() && !config.allowedOrgs.trim() && !config.allowedTeams.trim()) {
    errors.push('GitHub sign-in is on but nobody is allowed: set SANDGATE_ALLOWED_USERS, SANDGATE_ALLOWED_ORGS or SANDGATE_ALLOWED_TEAMS.');
  }
  for (const team of config.allowedTeams.split(',').map((t) => t.trim()).filter(Boolean)) {
    if (!/^[A-Za-z0-9-]+\/[A-Za-z0-9_.-]+$/.test(team)) errors.push(`SANDGATE_ALLOWED_TEAMS has "${team}": write each team as org/team-slug.`);
  }
  try {
    const perms: unknown = JSON.parse(config.defaultPermissions);
    if (typeof perms !== 'object' || perms === null || Array.isArray(perms)) throw new Error('not an object');
  } catch (e) {
    errors.push(`SANDGATE_DEFAULT_PERMISSIONS is not a JSON object (${(e as Error).message}): use e.g. {"read":["/workspace"],"write":["/workspace"]}.`);
  }
  if (config.maxPermissions.trim()) {
    try {
      const perms: unknown = JSON.parse(config.maxPermissions);
      if (typeof perms !== 'object' || perms === null || Array.isArray(perms)) throw new Error('not an object');
    } catch (e) {
      errors.push(`SANDGATE_MAX_PERMISSIONS is not a JSON object (${(e as Error).message}): use e.g. {"read":["/workspace"],"write":["/workspace"],"net":["api.example.com"]}.`);
    }
  }
  if (config.teamPermissions.trim()) {
    try {
      const teams: unknown = JSON.parse(config.teamPermissions);
      if (typeof teams !== 'object' || teams === null || Array.isArray(teams)) throw new Error('not an object');
      for (const [team, perms] of Object.entries(teams)) {
        if (!/^[A-Za-z0-9-]+\/[A-Za-z0-9_.-]+$/.test(team)) throw new Error(`"${team}" is not org/team-slug`);
        if (typeof perms !== 'object' || perms === null || Array.isArray(perms)) throw new Error(`the grants of "${team}" are not an object`);
      }
    } catch (e) {
      errors.push(`SANDGATE_TEAM_PERMISSIONS is not valid (${(e as Error).message}): use e.g. {"acme/data":{"net":["registries","api.example.com"]}}.`);
    }
  }
  for (const cidr of config.egressPrivateNets.split(',').map((c) => c.trim()).filter(Boolean)) {
    if (!/^[0-9a-fA-F:.]+\/\d{1,3}$/.test(cidr)) errors.push(`SANDGATE_EGRESS_PRIVATE_NETS has "${cidr}": write each network as address/prefix (10.1.2.0/24).`);
  }
  if (config.egressPrivateNets.trim()) {
    warnings.push(`SANDGATE_EGRESS_PRIVATE_NETS=${config.egressPrivateNets}: code in sandboxes whose net grant names a host there may reach these private networks through the egress proxy.`);
  }
  if (errors.length) throw new ConfigError(`invalid configuration:\n  - ${errors.join('\n  - ')}`);
  return { config, warnings };
}

/** A config for tests and tools: defaults plus overrides, validated the same way. */
export function configFor(overrides: Record<string, string> = {}): Config {
  return loadConfig(overrides).config;
}
