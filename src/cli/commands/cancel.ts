import type { Command } from 'commander';
import type { CancelOutcome } from '../../ledger/sql/cancel.js';
import { globalOptions, withLedger } from '../context.js';
import { CliError, withFieldNames } from '../errors.js';
import { println, printJson } from '../io.js';
import { ID_HELP } from '../parse.js';
import type { CliContext } from '../program.js';

const MEANING: Record<CancelOutcome, string> = {
  cancelled: 'it was waiting; it is now cancelled and its lane moves on',
  cancel_requested: 'it is running; its handler is aborted when its lease is next renewed',
  not_cancellable: 'it has already finished',
  not_found: 'no such item',
};

export function cancelCommand(program: Command, { io }: CliContext): void {
  program
    .command('cancel')
    .description('cancel an item: a waiting one at once, a running one by asking its handler to stop')
    .argument('<id>', 'item id')
    .allowUnknownOption() // an id may begin with '-': take it as the id, not as an unknown option
    .option('--reason <text>', 'recorded as the item’s last error')
    .addHelpText('after', `\nPrints cancelled, cancel_requested, not_cancellable or not_found; exits 1 for not_found.\n${ID_HELP}`)
    .action(async (id: string, opts: { reason?: string }, cmd: Command) => {
      const g = globalOptions(cmd);
      const outcome = await withLedger(g, (ledger) => withFieldNames({ id: '<id>' }, 'cancel', () => ledger.cancel(id, opts.reason)));
      if (g.json) printJson(io, { id, outcome });
      else println(io, `${outcome}: ${MEANING[outcome]}`);
      if (outcome === 'not_found') throw new CliError(`no item ${id}`);
    });
}
