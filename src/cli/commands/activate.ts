import type { Command } from 'commander';
import { globalOptions, withLedger, withWake, type CliContext } from '../context.js';
import { withFieldNames } from '../errors.js';
import { println, printJson } from '../io.js';
import { parseInteger } from '../parse.js';

export function activateCommand(program: Command, { io }: CliContext): void {
  program
    .command('activate')
    .description('hand a queue to a deployment under a new ownership epoch; workers of older epochs stop claiming, and their writes are refused')
    .requiredOption('--queue <queue>', 'the queue')
    .requiredOption('--deployment <name>', 'the deployment that owns it from now on')
    .option('--expect-epoch <n>', 'only if the queue is at this epoch now (0: never activated); else exit 3', parseInteger)
    .addHelpText(
      'after',
      '\nPrints the new epoch. With --redis-url the change is also broadcast on the queue\'s control stream,\n' +
        'so running workers learn it at once. Exit 3: --expect-epoch did not match (another activation won).',
    )
    .action(async (opts: { queue: string; deployment: string; expectEpoch?: number }, cmd: Command) => {
      const g = globalOptions(cmd);
      const owner = await withLedger(g, async (ledger) => {
        const o = await withFieldNames({ queue: '--queue', deployment: '--deployment', expectEpoch: '--expect-epoch' }, 'activate', () =>
          ledger.activate({ queue: opts.queue, deployment: opts.deployment, ...(opts.expectEpoch !== undefined ? { expectEpoch: opts.expectEpoch } : {}) }),
        );
        await withWake(g, io, 'the ownership broadcast', (wake) =>
          wake ? wake.publishControl(o.queue, { type: 'ownership', epoch: o.epoch, deployment: o.deployment }) : Promise.resolve(true),
        );
        return o;
      });
      if (g.json) return printJson(io, owner);
      println(io, `queue ${owner.queue}: epoch ${owner.epoch}, owned by ${owner.deployment}`);
    });
}
