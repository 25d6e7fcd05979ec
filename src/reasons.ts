/**
 * The stable reason codes that parts of the gateway raise and the audit log keeps as
 * they are (src/audit/audit.ts reduces anything else to `other`). They sit here, at
 * the bottom, so that the audit log can know every producer's vocabulary without
 * importing the producers: each producer takes its list from this file (and re-exports
 * it where its callers look for it).
 */

/** Why a bearer token was refused (src/tokens/tokens.ts). */
export const TOKEN_FAILURES = ['missing', 'malformed', 'unknown', 'expired', 'revoked', 'disabled', 'suspended', 'unverified'] as const;
export type TokenFailure = (typeof TOKEN_FAILURES)[number];

/** A workspace file operation's failure (src/sandboxes/workspace.ts). */
export const WORKSPACE_ERROR_CODES = [
  'ENOENT',
  'EOUTSIDE',
  'EISDIR',
  'ENOTDIR',
  'ETOOBIG',
  'ENOSPC',
  'EEXIST',
  'EINVAL',
  'ENAMETOOLONG',
  'EACCES',
  'EROFS',
  'EBUSY',
  'EUNAVAILABLE',
] as const;
export type WorkspaceErrorCode = (typeof WORKSPACE_ERROR_CODES)[number];

/** Why a sandbox could not run code (src/sandboxes/errors.ts). */
export const SANDBOX_ERROR_REASONS = ['image_missing', 'runtime_missing', 'docker_unreachable', 'start_failed', 'runner_died', 'busy', 'invalid_request', 'account_disabled', 'held_elsewhere'] as const;
export type SandboxErrorReason = (typeof SANDBOX_ERROR_REASONS)[number];

/** Why an upstream MCP call failed (src/upstream/errors.ts). */
export const UPSTREAM_ERROR_REASONS = ['unknown_server', 'denied', 'unknown_tool', 'missing_credential', 'unavailable', 'timeout', 'failed', 'rate_limited'] as const;
export type UpstreamErrorReason = (typeof UPSTREAM_ERROR_REASONS)[number];

/** Why a connection out of a sandbox was refused or ended (src/egress). */
export const EGRESS_REASONS = ['not_allowed', 'ip_literal', 'unresolved', 'private_address', 'own_address', 'secret_host', 'limit', 'unreachable', 'sni_mismatch'] as const;
export type EgressReason = (typeof EGRESS_REASONS)[number];
