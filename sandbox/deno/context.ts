/**
 * A Deno worker that runs cells (see cells.ts) with one set of permissions, which Deno
 * enforces for everything in it. Its global object is the state that cells share. The
 * user's code runs here, so what this file needs it takes before any cell runs; what
 * the code does to the worker (replacing `onmessage`, closing it) harms its own runs
 * only: the host waits for a reply naming the execution and otherwise times it out.
 */
/// <reference lib="deno.worker" />

const post = globalThis.postMessage.bind(globalThis);
// Indirect: the cell runs in the global scope, not in this file's.
const evaluate = (js: string) => (0, globalThis.eval)(js) as Promise<unknown>;
const inspect = Deno.inspect;
const encoder = new TextEncoder();
const stderr = Deno.stderr;

/** A stack as the cell's author reads it: their cells' lines, not this file's. */
function cleanStack(stack: string): string {
  return stack
    .split('\n')
    .filter((line) => !line.includes(import.meta.url) && !line.includes('(ext:deno_web/02_event.js') && !/^\s+at eval \(<anonymous>\)$/.test(line))
    .map((line) => line.replace(/ \((cell-\d+\.[jt]s), <anonymous>:/, ' ($1:'))
    .join('\n');
}

function printError(prefix: string, err: unknown): void {
  const text = `${prefix}${err instanceof Error ? cleanStack(err.stack ?? String(err)) : inspect(err)}\n`;
  try {
    const bytes = encoder.encode(text);
    let off = 0;
    while (off < bytes.length) off += stderr.writeSync(bytes.subarray(off));
  } catch {
    /* stderr closed */
  }
}

/** Thrown by Deno.exit() and close(): they end the execution, not the worker and its state. */
class ExitRequest {
  constructor(readonly code: number) {}
}
Deno.exit = ((code?: number) => {
  throw new ExitRequest(Number.isInteger(code) ? code! : (Deno.exitCode ?? 0));
}) as typeof Deno.exit;
globalThis.close = () => {
  throw new ExitRequest(0);
};

// What a cell leaves running (timers, promises) may fail later: say so, as Deno would,
// and keep the worker and its state alive.
globalThis.addEventListener('unhandledrejection', (e) => {
  e.preventDefault();
  if (!(e.reason instanceof ExitRequest)) printError('error: Uncaught (in promise) ', e.reason);
});
globalThis.addEventListener('error', (e) => {
  e.preventDefault();
  if (!(e.error instanceof ExitRequest)) printError('error: Uncaught ', e.error ?? e.message);
});

globalThis.onmessage = async (e: MessageEvent) => {
  const { id, js } = e.data as { id: string; js: string };
  try {
    const value = await evaluate(js);
    post({ id, exitCode: 0, result: value === undefined ? undefined : inspect(value, { depth: 4, colors: false }) });
  } catch (err) {
    if (err instanceof ExitRequest) return post({ id, exitCode: err.code });
    printError('error: Uncaught ', err);
    const error = err instanceof Error
      ? { name: err.name, message: err.message, traceback: cleanStack(err.stack ?? '') }
      : { name: 'Error', message: inspect(err), traceback: '' };
    post({ id, exitCode: 1, error });
  }
};
post({ ready: true });
