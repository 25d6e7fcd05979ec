/**
 * The sandbox error tree, and the one place where Docker's errors are mapped to it.
 * `message` is what a user (or model) may read; `logMessage` is for the operator log.
 */

export const SANDBOX_ERROR_REASONS = ['image_missing', 'runtime_missing', 'docker_unreachable', 'start_failed', 'runner_died', 'busy', 'invalid_request'] as const;
export type SandboxErrorReason = (typeof SANDBOX_ERROR_REASONS)[number];

export class SandboxError extends Error {
  override name = 'SandboxError';
  constructor(
    message: string,
    readonly reason: SandboxErrorReason,
    readonly logMessage?: string,
  ) {
    super(message);
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
