/**
 * The gateway's error tree: every error it raises on purpose is a GatewayError.
 *
 * - `message` is what a person or a model may read: it says what happened and, where
 *   there is one, what to change (a setting, a command, a path).
 * - `reason` is a stable label in one spelling (snake_case): the audit log's error
 *   class, a metrics label, what tests and callers branch on.
 * - `status` is the HTTP status it ends a request with.
 * - `logMessage` is what the operator log gets beyond `message` (the foreign error it
 *   came from, a host path); never shown to a user.
 * - `operator`: whether an operator must act (logged at warn); a user's own mistake (a
 *   missing file, a permission the user lacks) is logged at debug level only.
 *
 * Each boundary maps errors once: src/app.ts (HTTP: JSON for APIs, a page for
 * browsers), src/mcp/context.ts (a tool result a model can read), src/cli/program.ts and
 * src/main.ts (a line on stderr and an exit code). Anything that is not a GatewayError
 * is an internal error there: logged with its stack, shown as "internal error".
 */
export interface GatewayErrorOptions {
  reason: string;
  status?: number;
  logMessage?: string;
  operator?: boolean;
  cause?: unknown;
}

export class GatewayError extends Error {
  override name = 'GatewayError';
  readonly reason: string;
  readonly status: number;
  readonly logMessage?: string;
  readonly operator: boolean;

  constructor(message: string, opts: GatewayErrorOptions) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.reason = opts.reason;
    this.status = opts.status ?? 500;
    this.logMessage = opts.logMessage;
    this.operator = opts.operator ?? this.status >= 500;
  }

  /** The class the audit log keeps for it (see src/audit/audit.ts): its reason unless a subclass says otherwise. */
  get auditClass(): string {
    return this.reason;
  }
}

/** A setting is invalid or conflicts with another: the gateway does not start. */
export class ConfigError extends GatewayError {
  override name = 'ConfigError';
  constructor(message: string) {
    super(message, { reason: 'config_invalid', operator: true });
  }
}

/** A key file (the PII vault's, the upstream credentials') is missing, malformed or readable by others. */
export class KeyFileError extends GatewayError {
  override name = 'KeyFileError';
  constructor(message: string) {
    super(message, { reason: 'key_invalid', operator: true });
  }
}
