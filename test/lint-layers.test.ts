/**
 * The structure rules of eslint.config.js hold: an import circle anywhere, or a lower
 * layer importing a higher one, fails the lint step of `npm test` (and so the build).
 * Each case lints real code with the project's own configuration; the clean tree
 * passing is the lint step itself.
 */
import fs from 'node:fs';
import path from 'node:path';
import { ESLint } from 'eslint';
import { minimatch } from 'minimatch';
import { describe, expect, it } from 'vitest';

const root = path.resolve(import.meta.dirname, '..');
// The cases lint text under file names that do not exist, which type information cannot
// cover: the typed rules are left out here (the lint step runs them on the real tree).
const eslint = new ESLint({
  cwd: root,
  ignore: false,
  overrideConfig: {
    languageOptions: { parserOptions: { projectService: false } },
    rules: { '@typescript-eslint/no-floating-promises': 'off', '@typescript-eslint/await-thenable': 'off' },
  },
});

const ruleIds = (results: ESLint.LintResult[]) => results.flatMap((r) => r.messages.map((m) => m.ruleId));

describe('structure rules', () => {
  it('refuses an import circle', async () => {
    const results = await eslint.lintFiles(['test/fixtures/import-cycle/first.ts', 'test/fixtures/import-cycle/second.ts']);
    expect(ruleIds(results).filter((id) => id === 'import-x/no-cycle')).toHaveLength(2);
  });

  it('refuses the store importing a domain above it', async () => {
    const code = "import { recordAudit } from '../audit/audit.js';\nexport const probe = recordAudit;\n";
    const results = await eslint.lintText(code, { filePath: path.join(root, 'src/store/probe.ts') });
    expect(results[0]!.messages.map((m) => [m.ruleId, m.message.includes('a lower layer imports a higher one')])).toEqual([['import-x/no-restricted-paths', true]]);
  });

  it('refuses a domain importing a page, and a type-only import counts', async () => {
    const code = "import type { WebApp } from '../web/index.js';\nexport type Probe = WebApp;\n";
    const results = await eslint.lintText(code, { filePath: path.join(root, 'src/sandboxes/probe.ts') });
    expect(ruleIds(results)).toEqual(['import-x/no-restricted-paths']);
  });

  it('places every shipped file of src/ in exactly one layer, so none escapes the rule', async () => {
    const { LAYERS } = (await import(path.join(root, 'eslint.config.js'))) as { LAYERS: string[][] };
    const files = (fs.readdirSync(path.join(root, 'src'), { recursive: true }) as string[])
      .map((f) => path.posix.join('src', f.split(path.sep).join('/')))
      .filter((f) => /\.(ts|mjs)$/.test(f) && !f.endsWith('.test.ts'));
    expect(files.length).toBeGreaterThan(100);
    const misplaced = files
      .map((f) => ({ f, layers: LAYERS.flatMap((globs, i) => (globs.some((g) => minimatch(f, g)) ? [i] : [])) }))
      .filter(({ layers }) => layers.length !== 1);
    expect(misplaced).toEqual([]);
  });

  it('lets a page import a domain below it', async () => {
    const code = "import { recordAudit } from '../../audit/audit.js';\nexport const probe = recordAudit;\n";
    const results = await eslint.lintText(code, { filePath: path.join(root, 'src/web/chat/probe.ts') });
    expect(ruleIds(results)).toEqual([]);
  });
});
