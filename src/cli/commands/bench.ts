import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import type { CliContext } from '../context.js';
import { CliError, EXIT } from '../errors.js';

// The workloads of bench/run.ts run as `bench/run.ts <name>`.
const WORKLOADS = [
  ...['ledger', 'latency', 'cost', 'capacity', 'classes', 'rate', 'fairness', 'shapes', 'schedules', 'queues'],
  ...['dashboard', 'tracing', 'fleet', 'steady'],
];
const SUITES: Record<string, string> = {
  compare: 'bench/compare.ts',
  ...Object.fromEntries(WORKLOADS.map((w) => [w, 'bench/run.ts'])),
};
const DEFAULT_SUITE = 'compare';

const isSuite = (s: string): boolean => Object.hasOwn(SUITES, s);

function shellQuote(s: string): string {
  return /^[A-Za-z0-9_./:,=@%+-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * `lanewake bench [compare|<workload>] [-- args]`: the benchmark harnesses
 * of a source checkout (they are not part of the built package), run with
 * tsx. The default, compare, is the side-by-side run against the peers
 * (docs/BENCHMARKS.md); `lanewake bench --runs 1` passes the flags to it.
 */
export function benchCommand(program: Command, _ctx: CliContext): void {
  program
    .command('bench')
    .description(
      'run a benchmark harness of this checkout: compare (side by side with BullMQ, graphile-worker, ' +
        'pg-boss; the default) or a workload of ' +
        `bench/run.ts (${WORKLOADS.join(', ')})`,
    )
    .argument('[suite]', `compare or ${WORKLOADS.join(', ')}`, DEFAULT_SUITE)
    .argument('[args...]', 'passed on, e.g. --runs 1 --scale 0.2 --json')
    .allowUnknownOption(true)
    .action(async (suiteArg: string, rest: string[]) => {
      // `lanewake bench --runs 1`: no suite named, the flags belong to the default one.
      const named = !suiteArg.startsWith('-');
      const suite = named ? suiteArg : DEFAULT_SUITE;
      const args = named ? rest : [suiteArg, ...rest];
      if (!isSuite(suite))
        throw new CliError(`unknown suite '${suite}': use ${Object.keys(SUITES).join(', ')}`, EXIT.usage);
      const root = fileURLToPath(new URL('../../../', import.meta.url));
      const script = `${root}${SUITES[suite]}`;
      if (!existsSync(script))
        throw new CliError(`${SUITES[suite]} is not here: benchmarks run from a source checkout`, EXIT.failure);
      const passed = [...(named ? [suite] : []), ...args];
      const typed =
        process.env.npm_lifecycle_event === 'bench'
          ? `npm run bench${passed.length > 0 ? ` -- ${passed.map(shellQuote).join(' ')}` : ''}`
          : ['lanewake', 'bench', ...passed].map(shellQuote).join(' ');
      const code = await new Promise<number>((resolve) => {
        const workload = SUITES[suite] === 'bench/run.ts' ? [suite] : [];
        const child = spawn(process.execPath, ['--import', 'tsx', script, ...workload, ...args], {
          cwd: root,
          stdio: 'inherit',
          env: { ...process.env, LANEWAKE_BENCH_COMMAND: process.env.LANEWAKE_BENCH_COMMAND ?? typed },
        });
        child.on('exit', (c) => resolve(c ?? 1));
      });
      if (code !== 0) throw new CliError(`bench ${suite} exited ${code}`, EXIT.failure);
    });
}
