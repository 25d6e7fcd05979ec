/**
 * What a warm run of each language costs through the sandbox manager, and what the
 * long-lived Deno host and bash shell cost a sandbox while idle:
 *
 * 1. Warm round trips, back to back and with a pause between runs (as a person or a model
 *    would leave): Python `print(1)`, TypeScript and JavaScript `console.log(1+1)`, bash
 *    `echo 1`. Beside them, the cost of a fresh `deno run` and a fresh `bash -c`, timed
 *    from Python inside the same sandbox: what each TypeScript or bash run paid when it
 *    started a process of its own.
 * 2. A typed upstream-style import kept between runs: the first run that imports a module
 *    against the next one that only calls it.
 * 3. The Deno host's own memory (its processes' resident memory, inside the sandbox, and
 *    what it adds to the sandbox's cgroup) and its CPU while idle and awake (ms of CPU
 *    per second, its processes only).
 *
 *   node --import tsx bench/languages.ts   (BENCH_N: runs per figure, default 200)
 */
import type { Language } from '../src/sandboxes/protocol.js';
import { sampleCgroup } from '../src/sandboxes/cgroup.js';
import { createHarness } from '../test/support/harness.js';

const N = Number(process.env.BENCH_N ?? 200);
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const line = (name: string, xs: number[]) =>
  console.log(`  ${name.padEnd(44)} p50 ${pct(xs, 50).toFixed(2).padStart(7)} ms   p95 ${pct(xs, 95).toFixed(2).padStart(7)} ms   (n=${xs.length})`);

const CODE: Record<Language, string> = {
  python: 'print(1)',
  typescript: 'console.log(1+1)',
  javascript: 'console.log(1+1)',
  bash: 'echo 1',
};

async function main(): Promise<void> {
  // Not frozen between runs: this measures the languages, bench/idle.ts the freezing.
  const h = await createHarness({ env: { SANDGATE_FREEZE_AFTER_MS: '0' } });
  try {
    const owner = await h.user('bench');
    const run = async (language: Language, code: string) => {
      const t = performance.now();
      const r = await h.manager.execute(owner, { language, code });
      if (r.exitCode !== 0) throw new Error(`${language}: ${r.stderr} ${r.notice ?? ''}`);
      return { ms: performance.now() - t, r };
    };
    for (const language of Object.keys(CODE) as Language[]) await run(language, CODE[language]);
    await sleep(2000);

    console.log('1. warm runs through the sandbox manager');
    for (const language of Object.keys(CODE) as Language[]) {
      const xs: number[] = [];
      for (let i = 0; i < N; i++) xs.push((await run(language, CODE[language])).ms);
      line(`${language}, back to back`, xs);
    }
    for (const language of Object.keys(CODE) as Language[]) {
      const xs: number[] = [];
      for (let i = 0; i < Math.min(N, 40); i++) {
        await sleep(250);
        xs.push((await run(language, CODE[language])).ms);
      }
      line(`${language}, 250 ms after the last run`, xs);
    }
    // Timed by bash itself ($EPOCHREALTIME, microseconds), one sample per line.
    const fresh = await run(
      'bash',
      [
        'echo "console.log(1+1)" > /tmp/one.ts',
        't() { for i in {1..15}; do s=${EPOCHREALTIME/./}; "$@" > /dev/null; e=${EPOCHREALTIME/./}; echo "$1 $(( e - s ))"; done; }',
        't deno run --quiet --no-prompt /tmp/one.ts',
        't bash -c "echo 1"',
      ].join('\n'),
    );
    const samples = (name: string) => fresh.r.stdout.split('\n').filter((l) => l.startsWith(`${name} `)).map((l) => Number(l.split(' ')[1]) / 1000);
    console.log(
      `  a fresh process per run, inside the sandbox: deno run p50 ${pct(samples('deno'), 50).toFixed(1)} ms, bash -c p50 ${pct(samples('bash'), 50).toFixed(1)} ms (what a run paid before, plus the round trip)`,
    );

    console.log('2. an import kept between TypeScript runs');
    const imports: number[] = [];
    const calls: number[] = [];
    for (let i = 0; i < 20; i++) {
      // A module of its own each time, so the first run really loads it.
      await run('bash', `mkdir -p lib && printf 'export const add = (a: number, b: number) => a + b;\\n' > lib/m${i}.ts`);
      imports.push((await run('typescript', `import { add as add${i} } from "./lib/m${i}.ts"; add${i}(1, 2)`)).ms);
      calls.push((await run('typescript', `add${i}(3, 4)`)).ms);
    }
    line('first run: import and call', imports);
    line('next run: call only', calls);

    console.log('3. the Deno host while idle');
    const probe = (await run(
      'python',
      [
        'import os, json',
        'def procs():',
        '    out = {}',
        '    for pid in filter(str.isdigit, os.listdir("/proc")):',
        '        try:',
        '            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")',
        '            if b"host.js" not in b" ".join(cmd): continue',
        '            st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()',
        '            rss = next(int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS"))',
        '            out[pid] = {"ticks": int(st[11]) + int(st[12]), "rss_kb": rss}',
        '        except (OSError, StopIteration):',
        '            pass',
        '    return out',
        'print(json.dumps(procs()))',
      ].join('\n'),
    )).r.stdout;
    const before = JSON.parse(probe) as Record<string, { ticks: number; rss_kb: number }>;
    await sleep(20_000);
    const after = JSON.parse((await run('python', 'print(json.dumps(procs()))')).r.stdout) as typeof before;
    const rss = Object.values(after).reduce((s, p) => s + p.rss_kb, 0) / 1024;
    const ticks = Object.keys(after).reduce((s, pid) => s + (after[pid]!.ticks - (before[pid]?.ticks ?? after[pid]!.ticks)), 0);
    console.log(`  resident memory of the Deno host: ${rss.toFixed(0)} MiB (inside the sandbox; VmRSS)`);
    console.log(`  its CPU while idle and awake: ${((ticks * 10) / 20).toFixed(2)} ms per s over 20 s (its own processes, 10 ms ticks; frozen with the sandbox after SANDGATE_FREEZE_AFTER_MS)`);
    // What the host adds to the sandbox's cgroup: its memory with the host, then without
    // (the host ended from inside; the next TypeScript run would start another).
    const containerId = (await h.manager.list()).find((s) => s.userId === owner.userId)!.containerId;
    const cgroupMiB = async () => {
      await sleep(2000);
      return (sampleCgroup(containerId)?.memoryBytes ?? NaN) / 1048576;
    };
    const withHost = await cgroupMiB();
    await run('python', 'import signal\nfor pid in procs(): os.kill(int(pid), signal.SIGKILL)');
    const withoutHost = await cgroupMiB();
    console.log(`  the sandbox's cgroup: ${withHost.toFixed(0)} MiB with the host, ${withoutHost.toFixed(0)} MiB without: the host holds ${(withHost - withoutHost).toFixed(0)} MiB`);
  } finally {
    await h.close();
  }
}

await main();
