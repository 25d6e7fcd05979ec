/**
 * Context that says a capitalized word run is, or is not, a person's name: the key or
 * CSV column it is the value of, the word before it, the header line it sits on.
 * These are lists of *contexts* (field names, greetings, mail headers), never of names.
 */
import { keyWords } from './context.js';

/**
 * How strongly a context says "person", which decides how much the words must prove:
 * `field` (a person-like key, column or mail header: any capitalized run will do),
 * `strong` (a greeting, a title, `customer`), `weak` (`by`, `with`, a bare `name`
 * key), `none`, or `negative` (a `company` or `city` key: never a person).
 */
export type Cue = 'field' | 'strong' | 'weak' | 'none' | 'negative';

/** Field words that name a person on their own (`author`, `customer_name`, `assignee`). */
const PERSON_FIELDS = new Set([
  'author', 'owner', 'actor', 'assignee', 'customer', 'contact', 'employee', 'recipient', 'sender', 'manager', 'reviewer',
  'approver', 'holder', 'cardholder', 'applicant', 'patient', 'member', 'person', 'requester', 'reporter', 'creator', 'editor',
  'committer', 'signer', 'beneficiary', 'payee', 'payer', 'driver', 'agent', 'attendee', 'guest', 'user', 'username',
  'firstname', 'lastname', 'fullname', 'givenname', 'surname', 'forename', 'nickname', 'displayname', 'accountholder',
]);
/** Words that, before `name`, make it a person's name (`first_name`, `legal_name`). */
const PERSON_NAME_QUALIFIERS = new Set(['first', 'last', 'given', 'family', 'middle', 'full', 'legal', 'display', 'nick', 'maiden', 'sur', 'fore', 'real', 'preferred', 'contact', 'customer', 'user', 'holder', 'card', 'account', 'billing', 'shipping', 'author', 'owner', 'employee', 'patient', 'sender', 'recipient', 'person']);
/** Field words whose values are not people even when capitalized. */
const NON_PERSON_FIELDS = new Set([
  'company', 'org', 'organization', 'organisation', 'city', 'street', 'country', 'region', 'state', 'province', 'title', 'job',
  'department', 'dept', 'product', 'item', 'sku', 'service', 'app', 'application', 'project', 'repo', 'repository', 'file',
  'filename', 'host', 'hostname', 'node', 'server', 'cluster', 'zone', 'team', 'group', 'brand', 'type', 'kind', 'status',
  'plan', 'category', 'tag', 'label', 'queue', 'topic', 'bucket', 'table', 'column', 'field', 'event', 'msg', 'message',
  'description', 'domain', 'method', 'path', 'url', 'env', 'branch', 'model', 'vendor', 'merchant', 'store', 'shop', 'venue',
  'place', 'location', 'address', 'building', 'room', 'currency', 'reason', 'error', 'level', 'role', 'provider', 'version',
  'summary', 'subject', 'text', 'body', 'note', 'notes', 'comment', 'query', 'key', 'bank', 'school', 'university', 'employer',
]);

/** The cue a key or column header gives its value. */
export function fieldCue(field: string): Cue {
  const words = keyWords(field);
  if (!words.length) return 'none';
  const last = words[words.length - 1];
  if (last === 'name' || last === 'names') {
    const before = words.slice(0, -1);
    if (before.some((w) => NON_PERSON_FIELDS.has(w))) return 'negative';
    if (before.some((w) => PERSON_NAME_QUALIFIERS.has(w) || PERSON_FIELDS.has(w))) return 'field';
    return 'weak';
  }
  if (PERSON_FIELDS.has(last) || PERSON_FIELDS.has(words.join(''))) return 'field';
  if (NON_PERSON_FIELDS.has(last)) return 'negative';
  return 'none';
}

/** Words right before a name that introduce a person. */
export const STRONG_PRECEDERS: ReadonlySet<string> = new Set([
  'customer', 'user', 'holder', 'cardholder', 'applicant', 'assignee', 'author', 'owner', 'manager', 'contact', 'employee',
  'patient', 'recipient', 'sender', 'reviewer', 'approver', 'agent', 'driver', 'member', 'mr', 'mrs', 'ms', 'mx', 'dr', 'prof',
  'sir', 'madam', 'attn', 'colleague', 'client', 'tenant', 'landlord', 'candidate', 'signed', 'called', 'emailed', 'phoned', 'met',
  'contacted', 'told', 'asked', 'invited', 'spoke', 'visited', 'thanked', 'escalated', 'ask', 'tell', 'call', 'email', 'ping', 'cc',
]);
const GREETINGS = new Set(['hi', 'hello', 'hey', 'dear', 'thanks', 'thank', 'morning', 'afternoon', 'evening', 'welcome', 'congratulations']);
/**
 * A preposition after a verb whose object is a person: `assigned to`, `forwarded this
 * to`, `spoke with`, `escalated by`.
 */
const PERSON_PHRASE_BEFORE =
  /\b(?:(?:assigned|reassigned|forwarded|handed|introduced|escalated|passed|replied|wrote|talked|spoke|sent)(?: (?:it|this|them|that))? to|(?:spoke|spoken|talked|met|meeting|chatted|dealt|spoke again) with|(?:escalated|signed|approved|reviewed|reported|submitted|requested|raised|opened|authored|written|assigned) by)[ \t]*$/i;
/** Prepositions and conjunctions often before a name, and as often before anything else. */
const WEAK_PRECEDERS = new Set(['by', 'with', 'to', 'for', 'from', 'of', 'and', 'cc', 'via', 'per', 'at']);

export interface PrecedingCue {
  cue: Cue;
  greeting: boolean;
}

/** The cue from the word(s) before `pos` on the same line. */
export function precedingCue(line: string, pos: number): PrecedingCue {
  let end = pos;
  while (end > 0 && (line[end - 1] === ' ' || line[end - 1] === '\t')) end--;
  // `Dr. Roe`, `Attn: Roe`, `Hi, Roe`; but in `Agent, Cole, Renner` the comma separates.
  // `TODO(ann)`, `FIXME(Ann Roe)`: the person who owns the note.
  if (line[end - 1] === '(' && /(?:TODO|FIXME|XXX|HACK)\($/.test(line.slice(Math.max(0, end - 6), end))) return { cue: 'field', greeting: false };
  const punct = end > 0 && '.:,'.includes(line[end - 1]) ? line[--end] : '';
  let start = end;
  while (start > 0 && end - start < 20 && /[A-Za-z]/.test(line[start - 1])) start--;
  if (start === end) return { cue: 'none', greeting: false };
  const word = line.slice(start, end).toLowerCase();
  if (GREETINGS.has(word)) return { cue: 'strong', greeting: true };
  if (punct === ',') return { cue: 'none', greeting: false };
  if (STRONG_PRECEDERS.has(word)) return { cue: 'strong', greeting: false };
  if (WEAK_PRECEDERS.has(word)) {
    return { cue: PERSON_PHRASE_BEFORE.test(line.slice(Math.max(0, pos - 32), pos)) ? 'strong' : 'weak', greeting: false };
  }
  return { cue: 'none', greeting: false };
}

/**
 * What follows a run, as evidence it is a person: `born` (`Jane Roe (born 1984)`,
 * `Jane Roe, born …`, `Jane Roe was born`), which only people are; or a verb people
 * rather than things are the subject of (`Jane Roe signed`, `Jane Roe will send`),
 * which the words must then back up.
 */
export function followingCue(line: string, end: number): 'born' | 'verb' | 'none' {
  const next = line.slice(end, end + 24);
  if (BORN_AFTER.test(next)) return 'born';
  return PERSON_VERB_AFTER.test(next) ? 'verb' : 'none';
}
const BORN_AFTER = /^(?:,? born\b| \(born\b| (?:was|is) born\b| née\b)/;
const PERSON_VERB_AFTER =
  /^ (?:(?:will|has|had|did|then|also) )?(?:signed|sign|sent|send|wrote|write|said|says|called|emailed|phoned|replied|asked|moved|joined|paid|ordered|agreed|confirmed|complained|booked|cancelled|canceled)\b/;

/** Mail and commit headers whose value starts with a person's name. */
export const PERSON_HEADER = /^[ \t]*(?:From|To|Cc|Bcc|Reply-To|Sender|Author|Committer|Co-authored-by|Signed-off-by|Reviewed-by|Reported-by|Acked-by|Tested-by|Suggested-by|Assignee|Reporter)[ \t]*:/i;

/** A line that ends a letter, so the next line is usually the writer's name. */
export const SIGN_OFF = /^[ \t]*(?:best(?: regards| wishes)?|kind regards|warm regards|regards|many thanks|thanks(?: again)?|thank you|cheers|sincerely|yours(?: sincerely| truly)?|all the best|br)[ \t]*[,.!]?[ \t]*$/i;

/**
 * Whether the email address right after a run (`Jane Roe <jane.roe@x>`,
 * `Jane Roe (jroe@x)`) spells one of its words: people's addresses are made of their
 * names far more often than anything else's are.
 */
export function emailSpellsRun(line: string, runEnd: number, words: readonly string[]): boolean {
  let i = runEnd;
  while (line[i] === ' ' || line[i] === '\t') i++;
  if (line[i] !== '<' && line[i] !== '(') return false;
  const m = /^[ \t]*[<(]["']?([A-Za-z0-9._%+-]{2,64})@/.exec(line.slice(runEnd, runEnd + 80));
  if (!m) return false;
  return localSpells(m[1], words);
}

function localSpells(localPart: string, words: readonly string[]): boolean {
  const local = localPart.toLowerCase();
  return words.some((w) => {
    const folded = w.normalize('NFD').replace(/\p{M}/gu, '').toLowerCase().replace(/[^a-z]/g, '');
    return folded.length >= 2 && local.includes(folded);
  });
}

/**
 * Whether the next cell or list item after a run (`Jane Roe,jane.roe@x.com`, `Jane Roe -
 * jroe@x.com`) is an email address that spells one of its words: a headerless export
 * or a pasted list says whose address it is the same way a mail header does.
 */
export function nextCellEmailSpellsRun(line: string, runEnd: number, words: readonly string[]): boolean {
  const m = /^[ \t]*(?:[,;\t|]|[-–—:][ \t])[ \t]*"?([A-Za-z0-9._%+-]{2,64})@/.exec(line.slice(runEnd, runEnd + 80));
  return m !== null && localSpells(m[1], words);
}
