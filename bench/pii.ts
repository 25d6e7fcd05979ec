/**
 * PII layer figures: single-core throughput on typical tool output (CSV, JSON, logs)
 * and per-entity precision / recall / F2 on the labelled corpus, next to redact-pii's
 * own patterns and pipeline as a baseline.
 *
 *   npx tsx bench/pii.ts [--quick]
 *
 * Node runs this on one thread, so MB/s is per core. Time is the process's CPU time
 * (user + system), not wall-clock time, so a busy machine slows the run without
 * skewing the figures much. Each figure is the median of several runs after warm-up.
 */
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { usSocialSecurityNumber, emailAddress, phoneNumber, creditCardNumber, ipAddress } from 'redact-pii/lib/built-ins/simple-regexp-patterns.js';
import { generateCorpus, type CorpusDoc, type CorpusKind } from '../test/support/pii-corpus.js';
import { createDetector, resolveOverlaps } from '../src/pii/detector.js';
import type { PiiEntityType, Span } from '../src/pii/entities.js';
import { formatErrors, formatScores, scoreCorpus } from '../test/support/pii-metrics.js';
import { generateHeldOut } from '../test/support/pii-heldout.js';
import { preloadWordKnowledge } from '../src/pii/recognizers/word-knowledge.js';
import { openTestVault } from '../test/support/pii.js';
import { createPiiBoundary } from '../src/pii/pii-boundary.js';
import type { Caller } from '../src/auth/caller.js';
import type { User } from '../src/accounts/accounts.js';

const quick = process.argv.includes('--quick');
const RUNS = quick ? 3 : 7;
const TUNING_SEED = 7;
const HELD_OUT_SEED = 20_240_601;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** Median MB/s of `fn` over `text`, per CPU second of this process (an asynchronous `fn` is awaited). */
async function throughput(text: string, fn: (text: string) => unknown, runs = RUNS): Promise<number> {
  await fn(text.slice(0, 200_000)); // warm-up: JIT, lazily loaded word knowledge
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = cpuMs();
    await fn(text);
    times.push(cpuMs() - t0);
  }
  return Buffer.byteLength(text) / 1e6 / (median(times) / 1000);
}

/** Cuts text into tool results of about `size` characters, at line breaks. */
function toolResults(text: string, size: number): string[] {
  const out: string[] = [];
  for (let at = 0; at < text.length; ) {
    const nl = text.indexOf('\n', at + size);
    const end = nl < 0 ? text.length : nl + 1;
    out.push(text.slice(at, end));
    at = end;
  }
  return out;
}

function joinKinds(docs: readonly CorpusDoc[], kinds: readonly CorpusKind[]): string {
  return docs
    .filter((d) => kinds.includes(d.kind))
    .map((d) => d.text)
    .join('\n');
}

// ---- typical tool output ----

const docs = generateCorpus({ seed: TUNING_SEED, docsPerKind: quick ? 40 : 120 });
const workloads: Array<[string, string]> = [
  ['CSV exports', joinKinds(docs, ['csv'])],
  ['JSON API responses', joinKinds(docs, ['json', 'json-compact'])],
  ['logs (app, JSON lines, access)', joinKinds(docs, ['text-log', 'jsonl-log', 'access-log'])],
  ['mixed (all kinds)', docs.map((d) => d.text).join('\n')],
];

preloadWordKnowledge();
const detector = createDetector();
const vault = await openTestVault();
const userId = await vault.userId('bench');
const boundary = createPiiBoundary(vault.vault);
const callerWith = (p: { tokenId: number; tokenName: string }): Caller => ({ user: { id: userId, name: 'bench' } as User, via: { kind: 'token', ...p } });

console.log(`PII throughput, one core (median of ${RUNS} runs)\n`);
console.log(
  `${'workload'.padEnd(32)} ${'size'.padStart(8)} ${'values/KB'.padStart(9)} ${'detect'.padStart(10)} ${'tokenize'.padStart(10)} ${'  (new)'.padStart(10)} ${'stream 4K'.padStart(10)} ${'MCP 4K'.padStart(10)} ${'  (new)'.padStart(10)}`,
);
let scopeN = 0;
let tokenN = 1_000_000;
for (const [name, text] of workloads) {
  const values = detector.detect(text).length;
  const detect = await throughput(text, (t) => detector.detect(t));
  // Tokenize with values already in the vault (a new PiiScope object per run, as per
  // MCP request) and with a fresh scope per run (every value new: hashed, sealed, stored).
  const warmRef = { userId, kind: 'token' as const, id: `warm-${scopeN++}` };
  await (await vault.vault.scope(warmRef)).tokenize(text);
  const tokenizeWarm = await throughput(text, async (t) => (await vault.vault.scope(warmRef)).tokenize(t));
  const tokenizeNew = await throughput(text, async (t) => (await vault.vault.scope({ userId, kind: 'token', id: `new-${scopeN++}` })).tokenize(t), Math.min(RUNS, 3));
  // Each chunk awaited before the next is pushed, as output is forwarded.
  const stream = await throughput(text, async (t) => {
    const s = (await vault.vault.scope(warmRef)).stream();
    for (let i = 0; i < t.length; i += 4096) await s.push(t.slice(i, i + 4096));
    await s.end();
  });
  // As the MCP endpoint does it: one boundary call (a scope lookup) per tool result.
  const results = (t: string) => toolResults(t, 4096);
  const warmPrincipal = { tokenId: tokenN++, tokenName: 'warm' };
  for (const r of results(text)) await boundary.toModel(callerWith(warmPrincipal), r);
  const mcpWarm = await throughput(text, async (t) => {
    for (const r of results(t)) await boundary.toModel(callerWith(warmPrincipal), r);
  });
  const mcpNew = await throughput(
    text,
    async (t) => {
      const principal = { tokenId: tokenN++, tokenName: 'new' };
      for (const r of results(t)) await boundary.toModel(callerWith(principal), r);
    },
    Math.min(RUNS, 3),
  );
  const mb = (x: number) => `${x.toFixed(1)} MB/s`.padStart(10);
  console.log(
    `${name.padEnd(32)} ${`${(Buffer.byteLength(text) / 1e6).toFixed(2)} MB`.padStart(8)} ${((values * 1000) / text.length).toFixed(1).padStart(9)} ${mb(detect)} ${mb(tokenizeWarm)} ${mb(tokenizeNew)} ${mb(stream)} ${mb(mcpWarm)} ${mb(mcpNew)}`,
  );
}
console.log(
  '\ndetect: finding spans; tokenize: detect + vault lookups (values known); (new): every value new to the vault; stream: 4 KiB chunks, values known;\n' +
    'MCP 4K: tool results of ~4 KiB, each through the MCP boundary as a tool call does (a vault scope per call), values known, then all new.',
);

// ---- accuracy ----

function report(seed: number, label: string): void {
  const corpus = generateCorpus({ seed, docsPerKind: 40 });
  const chars = corpus.reduce((n, d) => n + d.text.length, 0);
  const { scores } = scoreCorpus(corpus, (t) => detector.detect(t));
  console.log(`\nsandgate detector, ${label} corpus (seed ${seed}, ${corpus.length} documents, ${(chars / 1e6).toFixed(2)} MB):`);
  console.log(formatScores(scores));
}
report(TUNING_SEED, 'tuning');
report(HELD_OUT_SEED, 'held-out');

// ---- names, addresses, dates of birth: the held-out split (test/support/pii-heldout.ts) ----

for (const split of ['train', 'test'] as const) {
  const corpus = generateHeldOut(split);
  const chars = corpus.reduce((n, d) => n + d.text.length, 0);
  // Misses are printed for the train split only: the test split is scored, never read.
  const detail = scoreCorpus(corpus, (t) => detector.detect(t), split === 'train' ? 15 : 0);
  console.log(`\nnames, addresses, dates of birth: ${split} split (${corpus.length} documents, ${(chars / 1e6).toFixed(2)} MB; decoys: look-alikes that must stay):`);
  console.log(formatScores(detail.scores.filter((s) => s.truePositives + s.falseNegatives + s.falsePositives > 0)));
  if (split === 'train') console.log(`where it fails (up to 15 per type):\n${formatErrors(detail)}`);
  if (split === 'test') {
    const text = corpus.map((d) => d.text).join('\n');
    console.log(`detect on this split: ${(await throughput(text, (t) => detector.detect(t))).toFixed(1)} MB/s`);
  }
}

// ---- baseline: redact-pii ----

/** redact-pii's own patterns, mapped to our types, overlaps resolved as ours are. */
const REDACT_PII_PATTERNS: Array<[PiiEntityType, RegExp]> = [
  ['EMAIL', emailAddress],
  ['PHONE', phoneNumber],
  ['CARD', creditCardNumber],
  ['IP', ipAddress],
  ['SSN', usSocialSecurityNumber],
];
function redactPiiSpans(text: string): Span[] {
  const spans: Span[] = [];
  for (const [type, re] of REDACT_PII_PATTERNS) {
    for (const m of text.matchAll(new RegExp(re.source, re.flags))) spans.push({ type, start: m.index, end: m.index + m[0].length });
  }
  return resolveOverlaps(spans);
}
const heldOut = generateCorpus({ seed: HELD_OUT_SEED, docsPerKind: 40 });
const baseline = scoreCorpus(heldOut, redactPiiSpans).scores.filter((s) => REDACT_PII_PATTERNS.some(([t]) => t === s.type));
console.log('\nredact-pii 3.4 built-in patterns alone, held-out corpus (it has no IBAN, secret or name-span recognizer):');
console.log(formatScores(baseline));

const require = createRequire(import.meta.url);
const t0 = performance.now();
const { SyncRedactor } = require('redact-pii') as { SyncRedactor: new () => { redact(text: string): string } };
const requireMs = performance.now() - t0;
const redactor = new SyncRedactor();
const sample = workloads[3][1].slice(0, quick ? 100_000 : 300_000);
const redactPiiMBs = await throughput(sample, (t) => redactor.redact(t), 3);
console.log(`\nredact-pii SyncRedactor (full pipeline): require('redact-pii') ${requireMs.toFixed(0)} ms (it loads @google-cloud/dlp), ${redactPiiMBs.toFixed(2)} MB/s on mixed tool output`);

await vault.cleanup();
