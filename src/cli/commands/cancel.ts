import type { Command } from 'commander';
import type { CancelOutcome } from '../../ledger/types.js';
import { Producer } from '../../producer/producer.js';
import { globalOptions, withLedger, withWake, type CliContext } from '../context.js';
import { CliError, withFieldNames } from '../errors.js';
import { println, printJson } from '../io.js';
import { ID_HELP } from '../parse.js';

const MEANING: Record<CancelOutcome, string> = {
  cancelled: 'it was waiting; it is now cancelled and its lane moves on',
  cancel_requested: 'it is running; its holder was told on the control stream, and its handler is aborted now',
  not_cancellable: 'it has already finished',
  not_found: 'no such item',
};

/** cancel_requested when the holder could not be told at once (no --redis-url, or Redis refused). */
const REQUESTED_BY_RENEWAL =
  'it is running; its handler is aborted when its holder next renews the lease (within a third of the lease)';

export function cancelCommand(program: Command, { io }: CliContext): void {
  program
    .command('cancel')
    .description('cancel an item: a waiting one at once, a running one by asking its handler to stop')
    .argument('<id>', 'item id')
    .allowUnknownOption() // an id may begin with '-': take it as the id, not as an unknown option
    .option('--reason <text>', 'recorded as the item’s last error')
    .addHelpText(
      'after',
      `
Prints cancelled, cancel_requested, not_cancellable or not_found; exits 1 for not_found.
A running item's handler is aborted within milliseconds when --redis-url (LANEWAKE_REDIS_URL)
is given: its holder hears of the cancel on the queue's control stream. Without it, the holder
learns of it at its next lease renewal (within a third of the lease).
${ID_HELP}`,
    )
    .action(async (id: string, opts: { reason?: string }, cmd: Command) => {
      const g = globalOptions(cmd);
      let told = false;
      const outcome = await withLedger(g, (ledger) =>
        withWake(g, io, 'the cancel', async (wake) => {
          const o = await withFieldNames({ id: '<id>' }, 'cancel', () =>
            new Producer({ ledger, wake }).cancel(id, opts.reason),
          );
          told = wake !== undefined && wake.counters.failed === 0;
          return o;
        }),
      );
      if (g.json) printJson(io, { id, outcome });
      else
        println(io, `${outcome}: ${outcome === 'cancel_requested' && !told ? REQUESTED_BY_RENEWAL : MEANING[outcome]}`);
      if (outcome === 'not_found') throw new CliError(`no item ${id}`);
    });
}
