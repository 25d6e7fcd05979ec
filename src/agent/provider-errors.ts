/**
 * A failed model request, in words a user understands and a code the API can carry.
 * Retries (429, 5xx, network errors; backoff honouring Retry-After) are the AI SDK's
 * and have happened by the time an error gets here.
 */
import { APICallError, RetryError } from 'ai';
import { providerLabel, type ModelChoice, type ModelCatalog } from './models.js';

export interface DescribedError {
  /** Stable, for the API's error shape and for metrics. */
  code: 'provider_auth' | 'provider_rate_limited' | 'provider_unavailable' | 'provider_refused' | 'model_not_found' | 'provider_timeout' | 'provider_unreachable' | 'provider_error';
  message: string;
}

const MAX_PROVIDER_TEXT = 300;

/** The provider's own words from an error body, shortened. */
function providerWords(e: APICallError): string {
  let text = e.responseBody ?? '';
  try {
    const body = JSON.parse(text) as { error?: { message?: string } | string; message?: string };
    text = (typeof body.error === 'object' ? body.error?.message : body.error) ?? body.message ?? text;
  } catch {
    /* not JSON: the text as it is */
  }
  text = text.replace(/\s+/g, ' ').trim();
  return text.length > MAX_PROVIDER_TEXT ? `${text.slice(0, MAX_PROVIDER_TEXT)}…` : text;
}

export function describeProviderError(err: unknown, choice: ModelChoice, catalog: ModelCatalog, opts: { timeoutSec: number; retries: number }): DescribedError {
  const who = providerLabel(choice.provider);
  let e = err;
  let attempts = 1;
  if (RetryError.isInstance(e)) {
    attempts = e.errors.length;
    e = e.lastError;
  }
  const tries = attempts > 1 ? ` after ${attempts} attempts` : '';
  if (APICallError.isInstance(e)) {
    const status = e.statusCode;
    if (status === 401 || status === 403) {
      return { code: 'provider_auth', message: `${who} refused the API key (HTTP ${status}). An operator checks the team key, or you replace the key you added for ${choice.provider}.` };
    }
    if (status === 404) return { code: 'model_not_found', message: `${who} does not know the model "${choice.model}" (HTTP 404): pick another model, or an operator fixes SANDGATE_MODELS.` };
    if (status === 429) return { code: 'provider_rate_limited', message: `${who} is limiting requests (HTTP 429)${tries}. Wait a minute and send your message again.` };
    if (status !== undefined && status >= 500) return { code: 'provider_unavailable', message: `${who} failed (HTTP ${status})${tries}. Try again in a moment.` };
    if (status !== undefined && status >= 400) return { code: 'provider_refused', message: `${who} refused the request (HTTP ${status}): ${providerWords(e) || 'no reason given'}` };
    const cause = (e.cause as { code?: string; cause?: { code?: string } } | undefined) ?? {};
    const code = cause.code ?? cause.cause?.code;
    return { code: 'provider_unreachable', message: `Could not reach ${who} at ${catalog.baseUrl(choice.provider)}${code ? ` (${code})` : ''}${tries}.` };
  }
  const name = (e as { name?: string })?.name;
  if (name === 'TimeoutError' || /timeout/i.test(String((e as Error)?.message ?? ''))) {
    return { code: 'provider_timeout', message: `${who} sent nothing for ${opts.timeoutSec} s (SANDGATE_AGENT_TIMEOUT_SEC), so the request was given up.` };
  }
  if (e instanceof TypeError && /fetch failed/i.test(e.message)) {
    const code = (e.cause as { code?: string } | undefined)?.code;
    return { code: 'provider_unreachable', message: `Could not reach ${who} at ${catalog.baseUrl(choice.provider)}${code ? ` (${code})` : ''}.` };
  }
  return { code: 'provider_error', message: `${who} answered with something the agent could not use: ${String((e as Error)?.message ?? e).slice(0, MAX_PROVIDER_TEXT)}` };
}
