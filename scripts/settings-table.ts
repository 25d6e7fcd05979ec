/**
 * Prints README's settings table from SETTINGS (src/config.ts), so the two never drift:
 *   node --import tsx scripts/settings-table.ts
 * src/config.test.ts fails when README.md and SETTINGS disagree.
 */
import { SETTINGS } from '../src/config.js';

const cell = (s: string) => s.replace(/\|/g, '\\|');
console.log('| Variable | Default | Meaning |');
console.log('|---|---|---|');
for (const s of SETTINGS) {
  console.log(`| \`${s.env}\` | ${s.default === '' ? '(empty)' : `\`${cell(s.default)}\``} | ${cell(s.doc)} |`);
}
