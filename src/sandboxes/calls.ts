/**
 * Calls from code in a sandbox to the gateway (upstream tools through the bridge): taken
 * only from the execution in flight, a bounded number at once, and answered on the
 * runner channel. Only the call id is kept while a call is out.
 */
import type { UserSandbox } from './live.js';
import type { BridgeHandler } from './types.js';

/** Calls from code to the gateway one sandbox may have waiting at once (the runner's own limit too). */
export const MAX_CALLS_IN_FLIGHT = 8;

/** Answers the calls `sb`'s runner sends, with whatever `bridge()` is at the time. */
export function routeCalls(sb: UserSandbox, bridge: () => BridgeHandler | undefined): void {
  let calls = 0;
  sb.handle.onEvent((e) => {
    if (e.type !== 'call') return;
    const id = e.id;
    const reply = (ok: boolean, result?: unknown, error?: string) => {
      try {
        sb.handle.send({ op: 'call_result', id, ok, result, error });
      } catch {
        /* sandbox gone */
      }
    };
    // The runner takes calls only from the running execution; so does the gateway.
    if (e.execId !== sb.inFlight) return reply(false, undefined, 'calls are accepted only from the execution that is running');
    const handler = bridge();
    if (!handler) return reply(false, undefined, 'no tools are available from this gateway');
    if (calls >= MAX_CALLS_IN_FLIGHT) return reply(false, undefined, `${MAX_CALLS_IN_FLIGHT} calls are already waiting: wait for one to finish`);
    calls++;
    handler(sb.owner, e.method, e.params)
      .then(
        (r) => reply(true, r),
        (err: unknown) => reply(false, undefined, err instanceof Error ? err.message : String(err)),
      )
      .finally(() => calls--);
  });
}
