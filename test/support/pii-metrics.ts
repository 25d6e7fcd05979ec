/**
 * Scoring a detector against the labelled corpus: exact-span precision, recall and F2
 * per entity type. A span counts as found only if type, start and end all match; a
 * name found without its last word is a miss and a false positive, as it should be,
 * since the unfound word still reaches the model.
 */
import { PII_ENTITY_TYPES, type PiiEntityType, type Span } from '../../src/pii/entities.js';
import type { LabelledSpan } from './pii-corpus.js';

/** A labelled document: the sensitive values in it and, optionally, its labelled decoys. */
export interface ScoredDoc {
  text: string;
  spans: readonly LabelledSpan[];
  decoys?: readonly LabelledSpan[];
}

export interface EntityScore {
  type: PiiEntityType;
  truePositives: number;
  falsePositives: number;
  falseNegatives: number;
  precision: number;
  recall: number;
  /** F-beta with beta = 2: recall weighs four times as much as precision. */
  f2: number;
  /** Labelled decoys resembling this type, and the share of them no span touched (1 without decoys). */
  decoys: number;
  decoysKept: number;
}

export interface ScoreDetail {
  scores: EntityScore[];
  /** Up to `keepErrors` examples per type of what was missed or wrongly found. */
  misses: Array<{ type: PiiEntityType; value: string; context: string }>;
  falsePositives: Array<{ type: PiiEntityType; value: string; context: string }>;
  /** Up to `keepErrors` examples per type of decoys that a span touched. */
  decoysTaken: Array<{ type: PiiEntityType; value: string; context: string }>;
}

function fBeta(p: number, r: number, beta: number): number {
  const b2 = beta * beta;
  return p + r === 0 ? 0 : ((1 + b2) * p * r) / (b2 * p + r);
}

function context(text: string, s: { start: number; end: number }): string {
  return text.slice(Math.max(0, s.start - 40), Math.min(text.length, s.end + 40)).replaceAll('\n', '⏎');
}

export function scoreCorpus(docs: readonly ScoredDoc[], detect: (text: string) => Span[], keepErrors = 0): ScoreDetail {
  const counts = new Map<PiiEntityType, { tp: number; fp: number; fn: number; decoys: number; taken: number }>(
    PII_ENTITY_TYPES.map((t) => [t, { tp: 0, fp: 0, fn: 0, decoys: 0, taken: 0 }]),
  );
  const misses: ScoreDetail['misses'] = [];
  const falsePositives: ScoreDetail['falsePositives'] = [];
  const decoysTaken: ScoreDetail['decoysTaken'] = [];
  const keep = (list: ScoreDetail['misses'], type: PiiEntityType, text: string, s: Span | LabelledSpan) => {
    if (list.filter((e) => e.type === type).length < keepErrors) list.push({ type, value: text.slice(s.start, s.end), context: context(text, s) });
  };
  for (const doc of docs) {
    const found = detect(doc.text).filter((s) => s.type !== 'TOKEN');
    const key = (s: { type: string; start: number; end: number }) => `${s.type}:${s.start}:${s.end}`;
    const truth = new Set(doc.spans.map(key));
    const got = new Set(found.map(key));
    for (const s of doc.spans) {
      const c = counts.get(s.type)!;
      if (got.has(key(s))) c.tp++;
      else {
        c.fn++;
        keep(misses, s.type, doc.text, s);
      }
    }
    for (const s of found) {
      if (truth.has(key(s))) continue;
      counts.get(s.type as PiiEntityType)!.fp++;
      keep(falsePositives, s.type as PiiEntityType, doc.text, s);
    }
    // A decoy is kept when no span of any type touches it.
    for (const d of doc.decoys ?? []) {
      const c = counts.get(d.type)!;
      c.decoys++;
      if (found.some((s) => s.start < d.end && d.start < s.end)) {
        c.taken++;
        keep(decoysTaken, d.type, doc.text, d);
      }
    }
  }
  const scores = PII_ENTITY_TYPES.map((type) => {
    const { tp, fp, fn, decoys, taken } = counts.get(type)!;
    const precision = tp + fp ? tp / (tp + fp) : 1;
    const recall = tp + fn ? tp / (tp + fn) : 1;
    const decoysKept = decoys ? (decoys - taken) / decoys : 1;
    return { type, truePositives: tp, falsePositives: fp, falseNegatives: fn, precision, recall, f2: fBeta(precision, recall, 2), decoys, decoysKept };
  });
  return { scores, misses, falsePositives, decoysTaken };
}

/** The scores as a fixed-width table, for test output and the benchmark. */
export function formatScores(scores: readonly EntityScore[]): string {
  const withDecoys = scores.some((s) => s.decoys > 0);
  const rows = scores.map(
    (s) =>
      `${s.type.padEnd(7)} ${String(s.truePositives + s.falseNegatives).padStart(6)} ${s.precision.toFixed(4).padStart(9)} ${s.recall.toFixed(4).padStart(7)} ${s.f2.toFixed(4).padStart(7)} ${String(s.falsePositives).padStart(5)} ${String(s.falseNegatives).padStart(5)}` +
      (withDecoys ? ` ${String(s.decoys).padStart(6)} ${s.decoys ? s.decoysKept.toFixed(4).padStart(7) : '-'.padStart(7)}` : ''),
  );
  const head = `${'entity'.padEnd(7)} ${'labels'.padStart(6)} ${'precision'.padStart(9)} ${'recall'.padStart(7)} ${'F2'.padStart(7)} ${'FP'.padStart(5)} ${'FN'.padStart(5)}`;
  return [head + (withDecoys ? ` ${'decoys'.padStart(6)} ${'kept'.padStart(7)}` : ''), ...rows].join('\n');
}

/** The misses, wrong finds and decoys taken of a score, one line each, for the next person to read. */
export function formatErrors(detail: ScoreDetail): string {
  return [
    ...detail.misses.map((m) => `  missed ${m.type} ${JSON.stringify(m.value)} in …${m.context}…`),
    ...detail.falsePositives.map((m) => `  wrongly ${m.type} ${JSON.stringify(m.value)} in …${m.context}…`),
    ...detail.decoysTaken.map((m) => `  decoy taken (${m.type}) ${JSON.stringify(m.value)} in …${m.context}…`),
  ].join('\n');
}
