/**
 * Scoring a detector against the labelled corpus: exact-span precision, recall and F2
 * per entity type. A span counts as found only if type, start and end all match; a
 * name found without its last word is a miss and a false positive, as it should be,
 * since the unfound word still reaches the model.
 */
import { PII_ENTITY_TYPES, type PiiEntityType, type Span } from '../../src/pii/entities.js';
import type { CorpusDoc } from './pii-corpus.js';

export interface EntityScore {
  type: PiiEntityType;
  truePositives: number;
  falsePositives: number;
  falseNegatives: number;
  precision: number;
  recall: number;
  /** F-beta with beta = 2: recall weighs four times as much as precision. */
  f2: number;
}

export interface ScoreDetail {
  scores: EntityScore[];
  /** Up to `keepErrors` examples per type of what was missed or wrongly found. */
  misses: Array<{ type: PiiEntityType; value: string; context: string }>;
  falsePositives: Array<{ type: PiiEntityType; value: string; context: string }>;
}

function fBeta(p: number, r: number, beta: number): number {
  const b2 = beta * beta;
  return p + r === 0 ? 0 : ((1 + b2) * p * r) / (b2 * p + r);
}

function context(text: string, s: { start: number; end: number }): string {
  return text.slice(Math.max(0, s.start - 40), Math.min(text.length, s.end + 40)).replaceAll('\n', '⏎');
}

export function scoreCorpus(docs: readonly CorpusDoc[], detect: (text: string) => Span[], keepErrors = 0): ScoreDetail {
  const counts = new Map<PiiEntityType, { tp: number; fp: number; fn: number }>(PII_ENTITY_TYPES.map((t) => [t, { tp: 0, fp: 0, fn: 0 }]));
  const misses: ScoreDetail['misses'] = [];
  const falsePositives: ScoreDetail['falsePositives'] = [];
  const keep = (list: ScoreDetail['misses'], type: PiiEntityType, text: string, s: Span | CorpusDoc['spans'][number]) => {
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
  }
  const scores = PII_ENTITY_TYPES.map((type) => {
    const { tp, fp, fn } = counts.get(type)!;
    const precision = tp + fp ? tp / (tp + fp) : 1;
    const recall = tp + fn ? tp / (tp + fn) : 1;
    return { type, truePositives: tp, falsePositives: fp, falseNegatives: fn, precision, recall, f2: fBeta(precision, recall, 2) };
  });
  return { scores, misses, falsePositives };
}

/** The scores as a fixed-width table, for test output and the benchmark. */
export function formatScores(scores: readonly EntityScore[]): string {
  const rows = scores.map(
    (s) =>
      `${s.type.padEnd(7)} ${String(s.truePositives + s.falseNegatives).padStart(6)} ${s.precision.toFixed(4).padStart(9)} ${s.recall.toFixed(4).padStart(7)} ${s.f2.toFixed(4).padStart(7)} ${String(s.falsePositives).padStart(5)} ${String(s.falseNegatives).padStart(5)}`,
  );
  return [`${'entity'.padEnd(7)} ${'labels'.padStart(6)} ${'precision'.padStart(9)} ${'recall'.padStart(7)} ${'F2'.padStart(7)} ${'FP'.padStart(5)} ${'FN'.padStart(5)}`, ...rows].join('\n');
}
