/**
 * Sandbox errors (a branch of src/errors.ts), and the one place where Docker's errors are
 * mapped to them. `message` is what a user (or model) may read; `logMessage` is for the
 * operator log.
 */
import { GatewayError } from '../errors.js';

import type { SandboxErrorReason } from '../reasons.js';
export { SANDBOX_ERROR_REASONS, type SandboxErrorReason } from '../reasons.js';

const SANDBOX_STATUS: Record<SandboxErrorReason, number> = {
  image_missing: 503,
  runtime_missing: 503,
  docker_unreachable: 503,
  start_failed: 503,
  runner_died: 503,
  busy: 429,
  invalid_request: 400,
  // The account is disabled (or suspended by the GitHub membership check): the user's to know, not the operator's to fix.
  account_disabled: 403,
  // Another gateway replica holds the user's sandbox: a retry (or the owner) serves it.
  held_elsewhere: 503,
};

export class SandboxError extends GatewayError {
  override name = 'SandboxError';
  declare readonly reason: SandboxErrorReason;
  constructor(message: string, reason: SandboxErrorReason, logMessage?: string) {
    super(message, { reason, status: SANDBOX_STATUS[reason], logMessage, operator: SANDBOX_STATUS[reason] >= 500 });
  }

  override get auditClass(): string {
    return `SandboxError:${this.reason}`;
  }
}

/** Another live replica holds the user's sandbox: which one, and where it takes hops (null: it takes none). */
export class HeldElsewhere extends SandboxError {
  constructor(
    message: string,
    readonly holder: { id: string; internalUrl: string | null },
  ) {
    super(message, 'held_elsewhere');
  }
}

/** This replica is stopping: it takes no new sandbox (a run for one goes to another replica). */
export class Draining extends SandboxError {
  constructor(message: string) {
    super(message, 'held_elsewhere');
  }
}

interface DockerishError {
  statusCode?: number;
  code?: string;
  json?: { message?: string };
  message?: string;
}

/** Maps an error from dockerode to a SandboxError, once, at the boundary. */
export function fromDockerError(e: unknown, what: string, ctx: { image?: string; runtime?: string } = {}): SandboxError {
  const err = (e ?? {}) as DockerishError;
  const detail = err.json?.message ?? err.message ?? String(e);
  if (err.code === 'ENOENT' || err.code === 'ECONNREFUSED' || err.code === 'EACCES') {
    return new SandboxError(
      'the sandbox service is unavailable (Docker is not reachable); an operator must start dockerd (scripts/setup-runtime.sh)',
      'docker_unreachable',
      `${what}: ${detail}`,
    );
  }
  if (err.statusCode === 404 && /image/i.test(detail)) {
    return new SandboxError(
      `the sandbox image ${ctx.image ?? ''} is missing; an operator must run scripts/build-sandbox-image.sh`,
      'image_missing',
      `${what}: ${detail}`,
    );
  }
  if (/unknown runtime|runtime .* not found/i.test(detail)) {
    return new SandboxError(
      `the container runtime ${ctx.runtime ?? 'runsc'} is not registered with Docker; an operator must run scripts/setup-runtime.sh`,
      'runtime_missing',
      `${what}: ${detail}`,
    );
  }
  return new SandboxError(`the sandbox could not be started (${what})`, 'start_failed', `${what}: ${detail}`);
}
