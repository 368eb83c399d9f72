import type { Command } from 'commander';
import { Producer } from '../../producer/producer.js';
import { globalOptions, withLedger, withWake, type CliContext } from '../context.js';
import { withFieldNames } from '../errors.js';
import { println, printJson } from '../io.js';

const HELP = `
The flag is held by the ledger: every worker of the queue stops claiming (no claim round, no
offer, no claim at insert, no lane successor), and a restarted worker stays paused. Enqueues
still commit, and items already running finish. With --redis-url (LANEWAKE_REDIS_URL) the
workers hear it at once on the queue's control stream; without it, or with Redis down, at
their next sweep.`;

/** `lanewake pause <queue>` and `lanewake resume <queue>`. */
export function pauseCommands(program: Command, { io }: CliContext): void {
  for (const paused of [true, false]) {
    const name = paused ? 'pause' : 'resume';
    program
      .command(name)
      .description(paused ? 'pause a queue: its workers claim nothing until resumed' : 'resume a paused queue')
      .argument('<queue>', 'queue name')
      .addHelpText('after', HELP)
      .action(async (queue: string, _opts: unknown, cmd: Command) => {
        const g = globalOptions(cmd);
        await withLedger(g, (ledger) =>
          withWake(g, io, `the ${name}`, (wake) =>
            withFieldNames({ queue: '<queue>' }, name, () => (paused ? new Producer({ ledger, wake }).pause(queue) : new Producer({ ledger, wake }).resume(queue))),
          ),
        );
        if (g.json) return printJson(io, { queue, paused });
        println(io, `queue ${queue}: ${paused ? 'paused' : 'resumed'}`);
      });
  }
}
