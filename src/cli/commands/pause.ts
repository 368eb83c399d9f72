import type { Command } from 'commander';
import { Producer } from '../../producer/producer.js';
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

const NOTICE = `With --redis-url (LANEWAKE_REDIS_URL) the workers hear it at once on the queue's
control stream; without it, or with Redis down, at their next sweep.`;

const UNSEEN = `A queue the ledger has never seen (no item, setting, owner or consumer of it) is refused,
exit 2, so that a typo changes nothing; add ${NEW_QUEUE_FLAG} to set it for a queue yet to come.`;

const PAUSE_HELP = `
The flag is held by the ledger: every worker of the queue stops claiming (no claim round, no
offer, no claim at insert, no lane successor), and a restarted worker stays paused. Enqueues
still commit, and items already running finish. ${NOTICE}
${UNSEEN}`;

const RESUME_HELP = `
Clears the flag \`lanewake pause\` set: the queue's workers claim again, from the items that
waited while it was paused, in their usual order. Resuming a queue that is not paused
changes nothing. ${NOTICE}
${UNSEEN}`;

/** `lanewake pause <queue>` and `lanewake resume <queue>`. */
export function pauseCommands(program: Command, { io }: CliContext): void {
  for (const paused of [true, false]) {
    const name = paused ? 'pause' : 'resume';
    program
      .command(name)
      .description(
        paused
          ? 'pause a queue: its workers claim nothing until resumed'
          : 'resume a paused queue: its workers claim again',
      )
      .argument('<queue>', 'queue name')
      .option(NEW_QUEUE_FLAG, NEW_QUEUE_HELP)
      .addHelpText('after', paused ? PAUSE_HELP : RESUME_HELP)
      .action(async (queue: string, opts: { newQueue?: boolean }, cmd: Command) => {
        const g = globalOptions(cmd);
        await withLedger(g, (ledger) =>
          withFieldNames({ queue: '<queue>' }, name, async () => {
            await requireSeenQueue(ledger, queue, '<queue>', opts.newQueue);
            await withWake(g, io, `the ${name}`, (wake) => {
              const producer = new Producer({ ledger, wake });
              return paused ? producer.pause(queue) : producer.resume(queue);
            });
          }),
        );
        if (g.json) return printJson(io, { queue, paused });
        println(io, `queue ${queue}: ${paused ? 'paused' : 'resumed'}`);
      });
  }
}
