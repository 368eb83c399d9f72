import type { Command } from 'commander';
import { ITEM_STATES } from '../../ledger/types.js';
import { globalOptions, withLedger, type CliContext } from '../context.js';
import { withFieldNames } from '../errors.js';
import { formatAge, renderTable } from '../format.js';
import { println, printJson } from '../io.js';

export function statsCommand(program: Command, { io }: CliContext): void {
  program
    .command('stats')
    .description('count items by state for each queue (or one queue), with the age of the oldest due item waiting to be claimed')
    .argument('[queue]', 'only this queue')
    .addHelpText('after', '\nOLDEST_DUE is how long the oldest claimable lane head has been due ("-" when none waits). Counts stop at 100,000 (pending, processing, blocked) or 10,000 (the others), shown with a "+".')
    .action(async (queue: string | undefined, _opts: unknown, cmd: Command) => {
      const g = globalOptions(cmd);
      const stats = await withLedger(g, (ledger) => withFieldNames({ queue: '[queue]' }, 'stats', () => ledger.stats(queue)));
      if (g.json) return printJson(io, stats);
      if (stats.length === 0) return println(io, queue === undefined ? 'no items in the ledger' : `no items in queue ${queue}`);
      const rows = stats.map((s) => [s.queue, ...ITEM_STATES.map((st) => `${s.counts[st]}${s.capped.includes(st) ? '+' : ''}`), formatAge(s.oldestDueAgeMs)]);
      const headers = ['QUEUE', ...ITEM_STATES.map((st) => st.toUpperCase()), 'OLDEST_DUE'];
      println(io, renderTable(headers, rows, ['left', ...ITEM_STATES.map(() => 'right' as const), 'right']));
    });
}
