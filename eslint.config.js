// @ts-check
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import importX from 'eslint-plugin-import-x';
import { createTypeScriptImportResolver } from 'eslint-import-resolver-typescript';

const pkg = JSON.parse(fs.readFileSync(new globalThis.URL('./package.json', import.meta.url), 'utf8'));
/** Packages only tests, benches and the build may use. */
const devOnly = Object.keys(pkg.devDependencies).filter((name) => !name.startsWith('@types/'));
const escape = (s) => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
/** What ships imports neither test code nor a dev dependency (by whole name: "openai" is not "@ai-sdk/openai"). */
const shippedPatterns = [
  { group: ['**/test/**', '../../test/*', '**/testing/**'], message: 'src/ must not import test code (it lives in test/support).' },
  { regex: `^(${devOnly.map(escape).join('|')})(/.*)?$`, message: 'a dev dependency: src/ may use only "dependencies".' },
];

/**
 * The layers of src/, lowest first (docs/architecture.md says what each holds). A file
 * may import its own layer and the ones below it, never one above: the store knows no
 * domain, a domain no page, a page not the composition. Type-only imports count too, so
 * the picture holds for a reader and not only at run time.
 */
export const LAYERS = [
  ['src/{errors,reasons,logger,dates,paths,bounded-json,text,config,addresses}.ts', 'src/host/**', 'src/secrets/**', 'src/telemetry/**'],
  ['src/store/**'],
  ['src/accounts/**', 'src/tokens/**', 'src/limits/**', 'src/replicas/**', 'src/oauth/**'],
  ['src/auth/**', 'src/audit/**', 'src/pii/**'],
  ['src/sandboxes/**', 'src/skills/**'],
  ['src/upstream/**', 'src/egress/**', 'src/mcp/**', 'src/agent/**'],
  ['src/users/**'],
  ['src/http/**', 'src/web/**'],
  ['src/{app,routes,gateway,main,migrations}.ts', 'src/cli/**'],
];
/** How import-x finds and reads our modules: TypeScript's resolution (".js" names the ".ts" file). */
const here = path.dirname(fileURLToPath(import.meta.url));
const importSettings = {
  'import-x/resolver-next': [createTypeScriptImportResolver({ project: path.join(here, 'tsconfig.json') })],
  'import-x/extensions': ['.ts', '.js', '.mjs'],
  'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
};
const layerZones = LAYERS.slice(0, -1).map((target, i) => ({
  target,
  from: LAYERS.slice(i + 1).flat(),
  message: `a lower layer imports a higher one (layer ${i} may import layers 0-${i} only; see LAYERS in eslint.config.js and docs/architecture.md).`,
}));

export default tseslint.config(
  { ignores: ['node_modules/**', 'data/**', 'test/fixtures/import-cycle/**', 'static/vendor/**', 'tools/**', 'sandbox/**', 'coverage/**', '.scratch/**', '.*.mts'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    // Every store call is asynchronous: a promise nobody awaits or catches is a write
    // that may fail unseen, or a check that never happens. Typed rules catch those.
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: here } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
    },
  },
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      '@typescript-eslint/no-non-null-assertion': 'off',
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  {
    // What ships: no test code, no dev dependency.
    files: ['src/**/*.ts'],
    ignores: ['src/**/*.test.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: shippedPatterns,
        },
      ],
    },
  },
  {
    // Domain modules never see HTTP: only the app, the route table, the gateway's composition, main,
    // src/http/ (the endpoints), src/auth/ (sign-in and bearer middleware) and src/web/ (the pages).
    files: ['src/**/*.ts'],
    ignores: ['src/**/*.test.ts', 'src/app.ts', 'src/routes.ts', 'src/gateway.ts', 'src/main.ts', 'src/http/**', 'src/auth/**', 'src/web/**'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: [{ name: 'express', message: 'domain modules never import express: routes live in src/http/, src/auth/ and src/web/.' }],
          patterns: shippedPatterns,
        },
      ],
    },
  },
  {
    // No import circle anywhere (type-only imports excepted: they vanish at run time).
    files: ['src/**/*.ts', 'test/**/*.ts', 'bench/**/*.ts', 'scripts/**/*.ts'],
    plugins: { 'import-x': importX },
    settings: importSettings,
    rules: { 'import-x/no-cycle': ['error', { ignoreExternal: true }] },
  },
  {
    // Lower layers never import higher ones (tests may reach across to set things up).
    files: ['src/**/*.ts'],
    ignores: ['src/**/*.test.ts'],
    plugins: { 'import-x': importX },
    settings: importSettings,
    rules: { 'import-x/no-restricted-paths': ['error', { basePath: here, zones: layerZones }] },
  },
  {
    // The page script runs in browsers.
    files: ['static/**/*.js'],
    languageOptions: { sourceType: 'script', globals: { window: 'readonly', document: 'readonly', navigator: 'readonly', HTMLTextAreaElement: 'readonly', HTMLFormElement: 'readonly', Element: 'readonly' } },
  },
  {
    files: ['**/*.js', '**/*.cjs', '**/*.mjs'],
    languageOptions: { globals: { process: 'readonly', console: 'readonly' } },
  },
  {
    files: ['**/*.mjs'],
    languageOptions: { globals: { fetch: 'readonly', URL: 'readonly', AbortSignal: 'readonly' } },
  },
  {
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: { require: 'readonly', module: 'writable' } },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
);
