/** Command-line options shared by the benchmark scripts. */
import yargs from 'yargs';

export interface BenchArgs {
  readonly runs: number;
  readonly only?: Set<string>;
  readonly json?: string;
}

export function parseBenchArgs(argv: string[], script: string): BenchArgs {
  const a = yargs(argv)
    .scriptName(script)
    .option('runs', { type: 'number', default: 3, describe: 'timed runs per case (median reported)' })
    .option('only', { type: 'string', describe: 'comma-separated case names' })
    .option('json', { type: 'string', describe: 'also write the rows as JSON to this file' })
    .strict()
    .parseSync();
  return {
    runs: Math.max(1, a.runs),
    ...(a.only === undefined ? {} : { only: new Set(a.only.split(',')) }),
    ...(a.json === undefined ? {} : { json: a.json }),
  };
}
