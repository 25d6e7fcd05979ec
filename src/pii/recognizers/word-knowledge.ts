/**
 * What the name recognizer knows about a single capitalized word, from two maintained
 * sources and no list of our own:
 * - compromise's lexicon says whether a word is a person's name (given or family) or
 *   something else it knows (a place, an organization, a month, a verb, ...);
 * - the Hunspell English dictionary (dictionary-en, through nspell) says whether the
 *   lower-case word is an ordinary English word: "Server Error" and "Lake View" are
 *   made of ordinary words, "Giada Hornung" is not. compromise alone cannot tell them
 *   apart: it tags any capitalized unknown word a proper noun.
 *
 * Both load lazily on first use (≈0.3 s together) and answers are cached per word.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import nlp from 'compromise';
import nspell from 'nspell';

export interface WordInfo {
  /** compromise lists it as a given name or family name. */
  person: boolean;
  /** compromise knows it as something other than a person (place, org, verb, ...). */
  otherKnown: boolean;
  /** compromise knows it as a function word (determiner, pronoun, preposition, ...). */
  functionWord: boolean;
  /** The lower-case word is an ordinary English word. */
  common: boolean;
}

const PERSON_TAGS = new Set(['FirstName', 'MaleName', 'FemaleName', 'LastName', 'Person']);
const FUNCTION_TAGS = new Set(['Determiner', 'Pronoun', 'Preposition', 'Conjunction', 'Expression', 'QuestionWord', 'Modal', 'Negative', 'Copula']);
const CACHE_LIMIT = 50_000;

let lexicon: Record<string, string | string[]> | undefined;
let speller: { correct(word: string): boolean } | undefined;
const cache = new Map<string, WordInfo>();

function load(): void {
  lexicon = (nlp.model() as { one: { lexicon: Record<string, string | string[]> } }).one.lexicon;
  // dictionary-en's entry point reads these files with a top-level await, which cannot
  // be loaded from CommonJS; reading them here also defers the cost to first use.
  const dir = path.dirname(createRequire(import.meta.url).resolve('dictionary-en'));
  speller = nspell({ aff: fs.readFileSync(path.join(dir, 'index.aff')), dic: fs.readFileSync(path.join(dir, 'index.dic')) });
}

/** Lower case without diacritics, as compromise's lexicon keys are (`françoise` → `francoise`). */
function fold(word: string): string {
  return word.normalize('NFD').replace(/\p{M}/gu, '').toLowerCase();
}

export function wordInfo(word: string): WordInfo {
  let info = cache.get(word);
  if (info) return info;
  if (!lexicon) load();
  const lower = word.toLowerCase();
  const entry = lexicon![fold(word)];
  const tags = entry === undefined ? [] : Array.isArray(entry) ? entry : [entry];
  const person = tags.some((t) => PERSON_TAGS.has(t));
  info = {
    person,
    otherKnown: !person && tags.length > 0,
    functionWord: tags.some((t) => FUNCTION_TAGS.has(t)),
    common: !person && speller!.correct(lower),
  };
  if (cache.size >= CACHE_LIMIT) cache.clear();
  cache.set(word, info);
  return info;
}

/** Loads both sources now rather than on the first name candidate. */
export function preloadWordKnowledge(): void {
  if (!lexicon) load();
}

/**
 * Whether compromise's lexicon lists the phrase, or two or three consecutive words of
 * it, as something other than a person (`San Francisco`, `Hong Kong`): the words alone
 * would pass for a given name and a surname.
 */
export function knownAsOther(words: readonly string[]): boolean {
  if (!lexicon) load();
  for (let len = Math.min(3, words.length); len >= 2; len--) {
    for (let i = 0; i + len <= words.length; i++) {
      const entry = lexicon![fold(words.slice(i, i + len).join(' '))];
      if (entry === undefined) continue;
      const tags = Array.isArray(entry) ? entry : [entry];
      if (!tags.some((t) => PERSON_TAGS.has(t))) return true;
    }
  }
  return false;
}

export type PhraseVerdict = 'person' | 'other' | 'unknown';

const PHRASE_CACHE_LIMIT = 20_000;
const phraseCache = new Map<string, PhraseVerdict>();

/**
 * compromise's reading of a capitalized phrase on its own: a person, something else
 * it recognizes (an organization or a place), or neither. ≈0.4 ms per new phrase, so
 * callers ask only about runs the lexicon cannot settle; answers are cached by phrase,
 * which also keeps them independent of the surrounding text.
 */
export function phraseVerdict(phrase: string): PhraseVerdict {
  let v = phraseCache.get(phrase);
  if (v) return v;
  const doc = nlp(phrase);
  v = doc.has('#Organization') || doc.has('#Place') ? 'other' : doc.has('#Person') ? 'person' : 'unknown';
  if (phraseCache.size >= PHRASE_CACHE_LIMIT) phraseCache.clear();
  phraseCache.set(phrase, v);
  return v;
}
