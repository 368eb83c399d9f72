import type { Command } from 'commander';
import {
  globalOptions,
  NEW_QUEUE_FLAG,
  NEW_QUEUE_HELP,
  requireSeenQueue,
  withLedger,
  withWake,
  type CliContext,
} from '../context.js';
import { withFieldNames } from '../errors.js';
import { println, printJson } from '../io.js';
import { parseInteger } from '../parse.js';
import { activateSchema } from '../../ledger/inputs.js';
import { validate } from '../../ledger/validation.js';

export function activateCommand(program: Command, { io }: CliContext): void {
  program
    .command('activate')
    .description(
      'hand a queue to a deployment under a new ownership epoch; workers ' +
        'of older epochs stop claiming, and their writes are refused',
    )
    .requiredOption('--queue <queue>', 'the queue')
    .requiredOption('--deployment <name>', 'the deployment that owns it from now on')
    .option(
      '--expect-epoch <n>',
      'only if the queue is at this epoch now (0: never activated); else exit 3',
      parseInteger,
    )
    .option(NEW_QUEUE_FLAG, NEW_QUEUE_HELP)
    .addHelpText(
      'after',
      "\nPrints the new epoch. With --redis-url the change is also broadcast on the queue's control stream,\n" +
        'so running workers learn it at once. Exit 3: --expect-epoch did not match (another activation won).\n' +
        (`Exit 2: the ledger has never seen the queue (no item, ` +
          `setting, owner or consumer of it); add ${NEW_QUEUE_FLAG}\n`) +
        'to hand over a queue before its first item or worker.',
    )
    .action(
      async (opts: { queue: string; deployment: string; expectEpoch?: number; newQueue?: boolean }, cmd: Command) => {
        const g = globalOptions(cmd);
        const owner = await withLedger(g, async (ledger) => {
          const o = await withFieldNames(
            { queue: '--queue', deployment: '--deployment', expectEpoch: '--expect-epoch' },
            'activate',
            async () => {
              const input = {
                queue: opts.queue,
                deployment: opts.deployment,
                ...(opts.expectEpoch !== undefined ? { expectEpoch: opts.expectEpoch } : {}),
              };
              // Bad input is named before the queue is looked up: a bad --deployment on a new queue names --deployment.
              validate(activateSchema, input, 'activate');
              await requireSeenQueue(ledger, opts.queue, '--queue', opts.newQueue);
              return ledger.activate(input);
            },
          );
          await withWake(g, io, 'the ownership broadcast', (wake) =>
            wake
              ? wake.publishControl(o.queue, { type: 'ownership', epoch: o.epoch, deployment: o.deployment })
              : Promise.resolve(true),
          );
          return o;
        });
        if (g.json) return printJson(io, owner);
        println(io, `queue ${owner.queue}: epoch ${owner.epoch}, owned by ${owner.deployment}`);
      },
    );
}
