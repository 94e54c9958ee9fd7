// Lint the TypeScript sources with the type-aware recommended rules, and the import layers.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { importX } from 'eslint-plugin-import-x';
import { createTypeScriptImportResolver } from 'eslint-import-resolver-typescript';

/**
 * Imports go one way: ops <- plans <- lineage <- sdfg <- stages <- cli (docs/architecture.md).
 * Each zone lists what a folder must not import: every folder after it. plans/gen (the plan
 * generators and the bug catalog) sits beside plans and uses ops and the plan file's types
 * (plans/raw.ts, which the loader reads) only; nothing in the product imports the generators
 * but the CLI, nor the tests or benchmarks.
 * test/layers.test.ts shows each rule failing on a backward import.
 */
const layers = ['ops', 'plans', 'lineage', 'sdfg', 'stages', 'cli'];
const product = [...layers.map((l) => `./${l}`), './index.ts'];
export const layerZones = [
  ...layers.map((l, i) => ({
    // plans/gen has its own zone below: the plans layer is the folder's own files.
    target: l === 'plans' ? './plans/*.ts' : `./${l}`,
    from: [...layers.slice(i + 1).map((x) => `./${x}`), ...(l === 'cli' ? [] : ['./plans/gen']), './index.ts'],
    message: `${l}/ is below ${[...layers.slice(i + 1), ...(l === 'cli' ? [] : ['plans/gen'])].join(', ')}: imports go ops <- plans <- lineage <- sdfg <- stages <- cli (docs/architecture.md)`,
  })),
  { target: './plans/gen', from: ['./plans', ...layers.slice(2).map((x) => `./${x}`), './index.ts'], except: ['./gen', './raw.ts'], message: 'plans/gen uses ops and plans/raw.ts only (docs/architecture.md)' },
  // plans/import (exported ATen graphs to a plan) is part of the plans layer: ops and plans only.
  { target: './plans/import', from: [...layers.slice(2).map((x) => `./${x}`), './plans/gen', './index.ts'], message: 'plans/import is in the plans layer: it uses ops and plans only (docs/architecture.md)' },
  { target: product, from: ['./test', './bench'], message: 'the product never imports tests or benchmarks' },
  // How a plan is proved is decided in one place, stages/pipeline.ts (issue 36): cli/ parses
  // options and prints, so it imports no engine and no way of shrinking a stage (the reports of
  // shape reduction and per-stage reduction are printed from those two files' formatters).
  { target: './cli', from: './stages/engines', message: 'cli/ does not pick engines: stages/pipeline.ts decides how a plan is proved (docs/architecture.md)' },
  { target: './cli', from: './stages/shrink', except: ['./reduced-verify.ts', './stage-reduce.ts'], message: 'cli/ does not shrink stages: stages/pipeline.ts decides how a plan is proved (docs/architecture.md)' },
];

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', 'plans/*.validate.cjs', 'ops/*.validate.cjs'] },
  js.configs.recommended,
  // Plain Node scripts (tools/run-tests.mjs): Node's globals.
  { files: ['**/*.mjs'], languageOptions: { globals: { process: 'readonly', console: 'readonly' } } },
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  {
    files: ['**/*.ts'],
    plugins: { 'import-x': importX },
    settings: {
      // no-cycle follows imports by parsing each file: .ts needs the TypeScript parser.
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
      'import-x/resolver-next': [createTypeScriptImportResolver({ project: './tsconfig.json' })],
    },
    rules: {
      'import-x/no-restricted-paths': ['error', { zones: layerZones }],
      // Type-only imports count: a file cycle is a cycle for a reader whatever it carries.
      'import-x/no-cycle': ['error', { ignoreExternal: true }],
    },
  },
);
