/**
 * Every failure of an upstream call becomes an UpstreamError whose message is written
 * for the code (and the model reading its output) that made the call: it says what
 * failed and, where there is one, what to change. `reason` doubles as the audit outcome.
 */
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { GatewayError } from '../errors.js';

import type { UpstreamErrorReason } from '../reasons.js';
export { UPSTREAM_ERROR_REASONS, type UpstreamErrorReason } from '../reasons.js';

const UPSTREAM_STATUS: Record<UpstreamErrorReason, number> = {
  unknown_server: 404,
  denied: 403,
  unknown_tool: 404,
  missing_credential: 409,
  unavailable: 503,
  timeout: 504,
  failed: 502,
  rate_limited: 429,
};

export class UpstreamError extends GatewayError {
  override name = 'UpstreamError';
  declare readonly reason: UpstreamErrorReason;
  constructor(message: string, reason: UpstreamErrorReason, options?: { cause?: unknown }) {
    // Upstream trouble is the upstream's or the user's, not the gateway's: no operator alarm.
    super(message, { reason, status: UPSTREAM_STATUS[reason], operator: false, cause: options?.cause });
  }
}

/** Maps an error thrown by the SDK during a call to an UpstreamError, once, here. */
export function fromCallError(e: unknown, label: string, timeoutMs: number): UpstreamError {
  if (e instanceof UpstreamError) return e;
  if (e instanceof McpError) {
    if (e.code === ErrorCode.RequestTimeout) {
      return new UpstreamError(
        `${label} timed out after ${Math.round(timeoutMs / 1000)} s (the limit is sandgate.timeoutSec in the server's config)`,
        'timeout',
        { cause: e },
      );
    }
    if (e.code === ErrorCode.ConnectionClosed) {
      return new UpstreamError(`${label} failed: the upstream server closed the connection during the call`, 'unavailable', { cause: e });
    }
    // The SDK prefixes "MCP error <code>: "; the rest is the server's own words.
    const text = e.message.replace(/^MCP error -?\d+:\s*/, '');
    return new UpstreamError(`${label} failed: ${text}`, 'failed', { cause: e });
  }
  const msg = e instanceof Error ? e.message : String(e);
  return new UpstreamError(`${label} failed: ${msg}`, 'unavailable', { cause: e });
}
