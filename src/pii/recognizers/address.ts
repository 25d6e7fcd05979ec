/**
 * Street addresses, as one value from the house to the postcode: `1600 Pennsylvania Ave
 * NW, Washington, DC 20500`, `10 Downing Street, London SW1A 2AA`, `Hauptstraße 5,
 * 10115 Berlin`, `12 rue de la Paix, 75002 Paris`, `Calle Mayor 10, 28013 Madrid`,
 * `Rua Augusta, 25, 1100-048 Lisboa`, `Keizersgracht 123, 1015 CJ Amsterdam`. The whole
 * address is one span (one token), so a model never sees the town of a street it cannot.
 *
 * The street part needs a house number and a street type: an English type after the
 * name (the common USPS Publication 28 suffixes and the British ones), a German or Dutch
 * one joined to it (`-straße`, `-weg`, `-gracht`), or a Romance one before it (`rue`,
 * `Calle`, `Via`, `Rua`). A street without a number (`Salas Street station`) is a place,
 * not an address. A unit (`Apt 4B`, `Suite 200`, `3º B`) and a locality with a postcode
 * (US state and ZIP, UK postcode, European postcode and town) are taken along when they
 * follow. Newline-local: an address written over several lines gives one span per line.
 */
import type { Span } from '../entities.js';
import { keyBefore, keyWords } from './context.js';
import { eachMatch } from './scan.js';
import type { Recognizer } from './types.js';
import { LETTER, UP } from './names.js';

// A capitalized word of a street or town name (`O'Connell`, `Saint-Maur-des-Fossés`).
const W = `[${UP}][${LETTER}'’]*(?:-[${LETTER}'’]+)*`;
const NUM = `\\d{1,5}[A-Za-z]?(?:[-/]\\d{1,4}[A-Za-z]?)?`;
/** English street types after the name (USPS Publication 28's common ones, and British ones). */
const EN_TYPE =
  '(?:Street|St|Avenue|Ave|Av|Road|Rd|Boulevard|Blvd|Drive|Dr|Lane|Ln|Court|Ct|Way|Place|Pl|Parkway|Pkwy|Terrace|Ter|Circle|Cir|' +
  'Highway|Hwy|Trail|Trl|Square|Sq|Plaza|Plz|Loop|Run|Pike|Alley|Aly|Crossing|Xing|Expressway|Expy|Freeway|Fwy|Turnpike|Tpke|Row|' +
  'Close|Crescent|Cres|Grove|Gardens|Gdns|Mews|Walk|Green|Rise|Parade|Hill|View|Park|Gate|Wharf|Quay|Broadway|Causeway|Path|Point|Pt|Ridge|Court|Cove|Bend|Heights|Hts)';
const DIRECTION = '(?:N|S|E|W|NE|NW|SE|SW|North|South|East|West)\\.?';
/** German, Dutch and Nordic street types written joined to the name. */
const JOINED_TYPE =
  '(?:straße|strasse|str\\.|weg|gasse|platz|allee|ring|damm|ufer|chaussee|steig|pfad|markt|graben|stieg|' +
  'straat|laan|gracht|plein|kade|singel|dijk|dreef|hof|park|vej|gade|gatan|vägen|veien|gata)';
const JOINED_TYPE_WORD = '(?:Straße|Strasse|Str\\.|Weg|Gasse|Platz|Allee|Ring|Damm|Ufer|Chaussee|Straat|Laan|Gracht|Plein|Kade|Singel|Dijk)';
/** Romance and Slavic street types before the name. */
const LEADING_TYPE =
  '(?:[Rr]ue|[Aa]venue|[Bb]oulevard|[Bb]d|[Pp]lace|[Cc]hemin|[Aa]llée|[Ii]mpasse|[Qq]uai|[Rr]oute|[Vv]oie|[Cc]ours|[Pp]assage|[Ss]quare|' +
  'Calle|C/|Avenida|Avda\\.?|Av\\.|Plaza|Paseo|Pº|Carrer|Camino|Carretera|Ronda|Travesía|Rambla|Via|Viale|Piazza|P\\.za|Corso|Largo|Vicolo|Strada|' +
  'Rua|R\\.|Travessa|Praça|Alameda|Estrada|Ulica|ul\\.|Aleja|al\\.|Plac)';
const OF = "(?:de la |de l'|de los |de las |del |de |des |du |d'|della |dello |delle |degli |di |da |do |dos |das |l'|la |le |les )";
const NAME = `${W}(?: ${W}){0,3}`;
const UNIT = `(?:,? (?:Apt|Apt\\.|Apartment|Suite|Ste\\.?|Unit|Flat|Floor|Fl\\.|Room|Rm\\.?|Bldg\\.?|#) ?[A-Za-z0-9-]{1,6}|, ?\\d{1,2}[ºª°](?: ?[A-Za-z]{1,4}\\.?)?)?`;

const EN_STREET = `(?:Flat \\d{1,4}[A-Za-z]?, )?${NUM} (?:${DIRECTION} )?(?:\\d{1,3}(?:st|nd|rd|th)|${W})(?: ${W}){0,3} ${EN_TYPE}\\.?(?: ${DIRECTION}(?![${LETTER}]))?`;
const FR_STREET = `${NUM}(?: bis| ter)? ${LEADING_TYPE} ${OF}?${NAME}`;
const JOINED_STREET = `(?:${W}-)*(?:${W}${JOINED_TYPE}|${W}-${JOINED_TYPE_WORD}|${W} ${JOINED_TYPE_WORD}) ${NUM}`;
const LEADING_STREET = `${LEADING_TYPE} ${OF}?${NAME},? (?:n[º°o]\\.? ?)?${NUM}`;
const TOWN = `${W}(?:[ ]${W}){0,2}`;
const UK_POSTCODE = '[A-Z]{1,2}\\d[A-Z\\d]? ?\\d[A-Z]{2}';
const EU_POSTCODE = '(?:\\d{5}|\\d{4} ?[A-Z]{2}|\\d{4}-\\d{3}|\\d{2}-\\d{3}|\\d{4})';
const LOCALITY =
  `(?:,? ${TOWN},? (?:[A-Z]{2} \\d{5}(?:-\\d{4})?|${UK_POSTCODE})` + // US state and ZIP, UK town and postcode
  `|,? (?:[A-Z]{1,2}-)?${EU_POSTCODE} ${TOWN})`; // European postcode and town
const ADDRESS_SOURCE = `(?<![${LETTER}0-9_@./-])(?:${EN_STREET}|${FR_STREET}|${JOINED_STREET}|${LEADING_STREET})${UNIT}(?:${LOCALITY})?(?![${LETTER}0-9])`;
const ADDRESS = new RegExp(ADDRESS_SOURCE, 'g');
/** Every street shape has a house number; a line without a digit and a capital has no address. */
const MAYBE = /\d/;

/** Keys and columns whose value is an address, taken whole when it has a house number. */
const ADDRESS_KEY_WORDS = new Set(['address', 'addr', 'street', 'address1', 'address2', 'line1', 'line2', 'adresse', 'anschrift', 'direccion', 'morada', 'endereco']);

export function isAddressField(field: string): boolean {
  const words = keyWords(field);
  if (words.some((w) => w === 'ip' || w === 'mac' || w === 'email' || w === 'mail' || w === 'wallet' || w === 'url' || w === 'web')) return false;
  return words.some((w) => ADDRESS_KEY_WORDS.has(w));
}

/** A value under an address key or column: letters and a house number, a few words long. */
export const ADDRESS_VALUE = new RegExp(`^(?=.*\\d)(?=.*[${LETTER}]{2})[${LETTER}0-9'’.,#º°ª/ -]{6,120}$`);

export const addressRecognizer: Recognizer = {
  type: 'ADDRESS',
  find(text: string, out: Span[]) {
    if (!MAYBE.test(text)) return;
    eachMatch(ADDRESS, text, (m) => {
      let end = m.index + m[0].length;
      // A trailing period belongs to the sentence unless it ends an abbreviation.
      if (text[end - 1] === '.' && !/(?:St|Ave|Av|Dr|Rd|Blvd|Ln|Ct|Pl|str|Ste|Fl|Rm)\.$/.test(m[0])) end--;
      out.push({ type: 'ADDRESS', start: m.index, end });
    });
    // A quoted value under an address key (`"address": "Via Roma 1, Roma"`) is one whole address.
    if (!text.includes('"') || !ADDRESS_KEY_HINT.test(text)) return;
    eachMatch(QUOTED_VALUE, text, (m) => {
      const start = m.index + 1;
      const ctx = keyBefore(text, start);
      if (ctx && isAddressField(ctx.key) && ADDRESS_VALUE.test(m[1])) out.push({ type: 'ADDRESS', start, end: start + m[1].length });
    });
  },
};

const QUOTED_VALUE = /"([^"\\\n]{6,120})"/g;
const ADDRESS_KEY_HINT = /addr|street|line[12]|adress|anschrift|direcci|morada|endere/i;
