// @ts-check
import fs from 'node:fs';
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const pkg = JSON.parse(fs.readFileSync(new globalThis.URL('./package.json', import.meta.url), 'utf8'));
/** Packages only tests, benches and the build may use. */
const devOnly = Object.keys(pkg.devDependencies).filter((name) => !name.startsWith('@types/'));
const escape = (s) => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
/** What ships imports neither test code nor a dev dependency (by whole name: "openai" is not "@ai-sdk/openai"). */
const shippedPatterns = [
  { group: ['**/test/**', '../../test/*', '**/testing/**'], message: 'src/ must not import test code (it lives in test/support).' },
  { regex: `^(${devOnly.map(escape).join('|')})(/.*)?$`, message: 'a dev dependency: src/ may use only "dependencies".' },
];

export default tseslint.config(
  { ignores: ['node_modules/**', 'data/**', 'static/vendor/**', 'tools/**', 'sandbox/**', 'coverage/**', '.scratch/**', '.*.mts'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
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
    // Domain modules never see HTTP: only the app, the gateway's composition, main,
    // src/http/ (the endpoints), src/auth/ (sign-in and bearer middleware) and src/web/ (the pages).
    files: ['src/**/*.ts'],
    ignores: ['src/**/*.test.ts', 'src/app.ts', 'src/gateway.ts', 'src/main.ts', 'src/http/**', 'src/auth/**', 'src/web/**'],
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
