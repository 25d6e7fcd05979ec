/**
 * What one MCP client waits for the workspace file tools and a warm execution: p50 and
 * p95 of `read_file` and `write_file` of a 4 KiB text file, `list_files` of a folder of
 * 20 files, and `execute_code` of Python `1+1`, each over MCP (the SDK's client over real
 * HTTP to the gateway with the PII boundary on, as main.ts composes it), plus the same
 * execution made directly on the sandbox manager for reference. Real sandbox (Docker +
 * runsc), real store, real token.
 *
 *   node --import tsx bench/file-tools.ts   (BENCH_CALLS, BENCH_WARMUP)
 */
import { setMaxListeners } from 'node:events';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startGateway } from '../test/support/mcp.js';

const CALLS = Number(process.env.BENCH_CALLS ?? 300);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 300);

/** 4 KiB of plain prose (no personal data, so the boundary scans but replaces nothing). */
const TEXT = 'The quick brown fox jumps over the lazy dog while the river keeps flowing. '.repeat(60).slice(0, 4096);

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function time(label: string, once: () => Promise<unknown>): Promise<void> {
  for (let i = 0; i < WARMUP; i++) await once();
  const times: number[] = [];
  for (let i = 0; i < CALLS; i++) {
    const t0 = performance.now();
    await once();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  console.log(`${label.padEnd(34)} p50 ${pct(times, 50).toFixed(2).padStart(7)} ms   p95 ${pct(times, 95).toFixed(2).padStart(7)} ms`);
}

async function main(): Promise<void> {
  // The SDK client's transport adds an abort listener per request to one AbortSignal and
  // lets them go only with the requests: thousands of calls trip Node's leak warning.
  setMaxListeners(0);
  // A bench client calls far faster than the default per-token limit allows.
  const gw = await startGateway({ pii: true, env: { SANDGATE_RATE_LIMIT_PER_MIN: '1000000', SANDGATE_RATE_LIMIT_BURST: '1000000' } });
  const token = await gw.tokenFor('bench');
  const client = new Client({ name: 'bench', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gw.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  const call = async (name: string, args: Record<string, unknown>) => {
    const r = (await client.callTool({ name, arguments: args })) as { isError?: boolean; content: { text?: string }[] };
    if (r.isError) throw new Error(`${name} failed: ${r.content[0]?.text}`);
    return r;
  };
  try {
    await call('write_file', { path: 'bench/read-me.txt', content: TEXT });
    for (let i = 0; i < 20; i++) await call('write_file', { path: `bench/dir/f${i}.txt`, content: 'x' });
    console.log(`file tools and a warm execution, one client, ${CALLS} timed calls each after ${WARMUP} untimed`);
    await time('read_file 4 KiB (MCP)', () => call('read_file', { path: 'bench/read-me.txt' }));
    await time('write_file 4 KiB (MCP)', () => call('write_file', { path: 'bench/write-me.txt', content: TEXT }));
    await time('list_files 20 entries (MCP)', () => call('list_files', { path: 'bench/dir' }));
    await time('execute_code python 1+1 (MCP)', () => call('execute_code', { language: 'python', code: '1+1' }));
    const owner = await gw.harness.user('bench');
    await time('execute python 1+1 (manager)', () => gw.harness.manager.execute(owner, { language: 'python', code: '1+1' }));
  } finally {
    await client.close();
    await gw.close();
  }
}

await main();
