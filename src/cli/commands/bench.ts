import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { CliError, EXIT } from '../errors.js';
import type { CliContext } from '../program.js';

const SUITES = { ledger: 'bench/ledger.ts', engine: 'bench/engine.ts' } as const;

/**
 * `lanewake bench [ledger|engine] [-- args]`: the benchmark harnesses of a
 * source checkout (they are not part of the built package), run with tsx.
 */
export function benchCommand(program: Command, _ctx: CliContext): void {
  program
    .command('bench')
    .description('run a benchmark harness of this checkout: ledger (claim/complete/enqueue) or engine (jobs/s, latency, RSS)')
    .argument('[suite]', 'ledger or engine', 'engine')
    .argument('[args...]', 'passed on, e.g. --runs 1 --scale 0.2 --json')
    .allowUnknownOption(true)
    .action(async (suite: string, args: string[]) => {
      if (suite !== 'ledger' && suite !== 'engine') throw new CliError(`unknown suite '${suite}': use ledger or engine`, EXIT.usage);
      const root = fileURLToPath(new URL('../../../', import.meta.url));
      const script = `${root}${SUITES[suite]}`;
      if (!existsSync(script)) throw new CliError(`${SUITES[suite]} is not here: benchmarks run from a source checkout`, EXIT.failure);
      const code = await new Promise<number>((resolve) => {
        const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], { cwd: root, stdio: 'inherit' });
        child.on('exit', (c) => resolve(c ?? 1));
      });
      if (code !== 0) throw new CliError(`bench ${suite} exited ${code}`, EXIT.failure);
    });
}
