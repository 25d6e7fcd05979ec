/**
 * Warm `execute_code` over MCP on this tree against another revision, in one process
 * with both gateways side by side, for a change's cost on the request path: two runs of
 * bench/mcp-overhead.ts on this 2-core host differ by more than a millisecond from
 * noise alone (other processes, idle sandboxes, CPU frequency), more than the changes
 * worth knowing about. Here each gateway has one user and one sandbox; their calls
 * alternate in short blocks (the order swapped each round), so whatever slows the host
 * slows both alike, and the difference of their p50s is the change's.
 *
 *   node --import tsx bench/mcp-versus.ts      (BENCH_BASE, the other revision, default 5261b0a: the
 *                                               synchronous SQLite store; BENCH_CALLS, BENCH_WARMUP,
 *                                               SANDGATE_PII_TOKENIZE=false for the boundary off)
 *
 * The other revision is exported with `git archive` into a temporary directory and run
 * with this tree's node_modules, so it must need no package this tree lacks. Both
 * gateways keep their store in SQLite; the client is a bare keep-alive HTTP client on
 * 2026-07-28 in this process (its CPU is the same for both). Prints per gateway the
 * p50 and p95 of the MCP call and of the same call made directly on the sandbox manager,
 * the process CPU per call, and the gateway's own time (its audit rows), then the
 * differences.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { SandboxOwner } from '../src/sandboxes/types.js';
import { REPO_ROOT } from '../src/paths.js';

const BASE = process.env.BENCH_BASE ?? '5261b0a';
const CALLS = Number(process.env.BENCH_CALLS ?? 4000);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 5000);
const BLOCK = 20;
const PII = process.env.SANDGATE_PII_TOKENIZE !== 'false';
const ARGS = { language: 'python', code: '1+1' } as const;
const MODERN = '2026-07-28';

/** What both revisions' test harness offers (test/support/mcp.ts), as far as this bench uses it. */
interface Harness {
  startGateway(o: { env: Record<string, string>; pii: boolean }): Promise<{
    mcpUrl: string;
    dataDir: string;
    tokenFor(user: string, name: string): string | Promise<string>;
    harness: { user(name: string): SandboxOwner | Promise<SandboxOwner>; manager: { execute(o: SandboxOwner, a: typeof ARGS): Promise<{ result?: string }> } };
    close(): Promise<void>;
  }>;
}

interface Side {
  label: string;
  call: () => Promise<void>;
  direct: () => Promise<void>;
  audit: Database.Database;
  close: () => Promise<void>;
  mcp: number[];
  directTimes: number[];
  mcpCpuUs: number;
  directCpuUs: number;
  firstAuditId: number;
}

/** One tools/call of execute_code as a 2026-07-28 client sends it, on one keep-alive connection. */
function caller(url: string, token: string): () => Promise<void> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const u = new URL(url);
  let id = 0;
  const meta = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientInfo': { name: 'bench', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': {} };
  return () =>
    new Promise<void>((resolve, reject) => {
      const body = JSON.stringify({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name: 'execute_code', arguments: ARGS, _meta: meta } });
      const headers = {
        authorization: `Bearer ${token}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': MODERN,
        'mcp-method': 'tools/call',
        'mcp-name': 'execute_code',
        'content-length': Buffer.byteLength(body),
      };
      const req = http.request({ agent, host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => (res.statusCode === 200 && text.includes('[result] 2') ? resolve() : reject(new Error(`HTTP ${res.statusCode}: ${text.slice(0, 300)}`))));
      });
      req.on('error', reject);
      req.end(body);
    });
}

async function startSide(label: string, root: string): Promise<Side> {
  const { startGateway } = (await import(path.join(root, 'test/support/mcp.ts'))) as Harness;
  const gw = await startGateway({ env: { SANDGATE_LOG_LEVEL: 'silent', SANDGATE_RATE_LIMIT_PER_MIN: '1000000', SANDGATE_RATE_LIMIT_BURST: '1000000' }, pii: PII });
  const token = await gw.tokenFor('bench', 'bench');
  const owner = await gw.harness.user('bench');
  const direct = async () => {
    const r = await gw.harness.manager.execute(owner, ARGS);
    if (r.result !== '2') throw new Error(`${label}: unexpected result ${r.result}`);
  };
  await direct(); // the sandbox starts
  return {
    label,
    call: caller(gw.mcpUrl, token),
    direct,
    audit: new Database(path.join(gw.dataDir, 'sandgate.db'), { readonly: true }),
    close: () => gw.close(),
    mcp: [],
    directTimes: [],
    mcpCpuUs: 0,
    directCpuUs: 0,
    firstAuditId: 0,
  };
}

/** Times `n` calls of `f` into `into`; returns the process CPU they took, µs. */
async function block(n: number, f: () => Promise<void>, into: number[]): Promise<number> {
  const cpu = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await f();
    into.push(performance.now() - t);
  }
  const used = process.cpuUsage(cpu);
  return used.user + used.system;
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

async function main(): Promise<void> {
  const baseDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-base-'));
  const sides: Side[] = [];
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', `${BASE}^{commit}`], { cwd: REPO_ROOT, encoding: 'utf8' }).trim();
    execFileSync('sh', ['-c', `git archive "${commit}" | tar -x -C "${baseDir}"`], { cwd: REPO_ROOT });
    fs.symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(baseDir, 'node_modules'));
    process.stderr.write(`starting both gateways (${commit} and this tree), PII boundary ${PII ? 'on' : 'off'}…\n`);
    sides.push(await startSide(commit, baseDir), await startSide('this tree', REPO_ROOT));

    process.stderr.write(`warming up: ${WARMUP} calls each…\n`);
    for (let i = 0; i < WARMUP; i++) {
      for (const s of sides) {
        await s.call();
        if (i % 4 === 0) await s.direct();
      }
    }
    for (const s of sides) s.firstAuditId = (s.audit.prepare('SELECT coalesce(max(id), 0) AS id FROM audit_log').get() as { id: number }).id;

    process.stderr.write(`timing ${CALLS} calls each, in blocks of ${BLOCK}…\n`);
    for (let round = 0; round < CALLS / BLOCK; round++) {
      for (const s of round % 2 ? sides : [...sides].reverse()) {
        s.directCpuUs += await block(BLOCK, s.direct, s.directTimes);
        s.mcpCpuUs += await block(BLOCK, s.call, s.mcp);
      }
    }

    const f = (n: number) => n.toFixed(2).padStart(7);
    const signed = (n: number) => `${n >= 0 ? '+' : ''}${n.toFixed(2)}`.padStart(7);
    const rows = sides.map((s) => {
      const own = (s.audit.prepare("SELECT duration_ms AS d FROM audit_log WHERE id > ? AND method = 'tools/call'").all(s.firstAuditId) as { d: number }[]).map((r) => r.d);
      return {
        label: s.label,
        mcp50: pct(s.mcp, 50),
        mcp95: pct(s.mcp, 95),
        mcpCpu: s.mcpCpuUs / 1000 / s.mcp.length,
        own50: pct(own, 50),
        direct50: pct(s.directTimes, 50),
        directCpu: s.directCpuUs / 1000 / s.directTimes.length,
      };
    });
    console.log(`\nexecute_code of 1+1 (python) over MCP 2026-07-28, ${CALLS} calls per gateway after ${WARMUP} untimed; PII boundary ${PII ? 'on' : 'off'}; ms`);
    console.log(`CPU/call: this process's CPU (both gateways' code, the client, not the sandboxes) per call\n`);
    console.log(`${'gateway'.padEnd(10)} ${'MCP p50'.padStart(7)} ${'p95'.padStart(7)} ${'CPU/call'.padStart(8)} ${'own p50'.padStart(7)} | ${'direct p50'.padStart(10)} ${'CPU/call'.padStart(8)}`);
    for (const r of rows) console.log(`${r.label.padEnd(10)} ${f(r.mcp50)} ${f(r.mcp95)} ${f(r.mcpCpu).padStart(8)} ${f(r.own50)} | ${f(r.direct50).padStart(10)} ${f(r.directCpu).padStart(8)}`);
    const [a, b] = rows as [(typeof rows)[0], (typeof rows)[0]];
    console.log(
      `${'change'.padEnd(10)} ${signed(b.mcp50 - a.mcp50)} ${signed(b.mcp95 - a.mcp95)} ${signed(b.mcpCpu - a.mcpCpu).padStart(8)} ${signed(b.own50 - a.own50)} | ${signed(b.direct50 - a.direct50).padStart(10)} ${signed(b.directCpu - a.directCpu).padStart(8)}`,
    );
  } finally {
    for (const s of sides) {
      s.audit.close();
      await s.close();
    }
    fs.rmSync(baseDir, { recursive: true, force: true });
  }
}

await main();
