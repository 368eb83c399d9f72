import type { Command } from 'commander';
import { countLess, exactly, formatCount } from '../../ledger/bounded-count.js';
import { ITEM_STATES, type ItemState, type QueueStats } from '../../ledger/types.js';
import { globalOptions, withLedger, type CliContext } from '../context.js';
import { withFieldNames } from '../errors.js';
import { formatAge, renderTable } from '../format.js';
import { println, printJson } from '../io.js';

export function statsCommand(program: Command, { io }: CliContext): void {
  program
    .command('stats')
    .description(
      'count items by state for each queue (or one queue), scheduled apart from due, with ' +
        'the age of the oldest due item waiting to be claimed and the live consumers',
    )
    .argument('[queue]', 'only this queue')
    .addHelpText(
      'after',
      '\nPENDING counts due items; SCHEDULED, pending items not due yet. OLDEST_DUE is how long ' +
        'the oldest claimable lane head has been due ("-" when none waits). Counts stop at 100,000 ' +
        '(pending, processing, blocked) or 10,000 (the others), shown with a "+"; with --json each ' +
        'count is {"count": n, "atLeast": true|false}, atLeast meaning n or more. CONSUMERS: live ' +
        'consumers of the queue (a heartbeat in the last 15 s) and their slots.',
    )
    .action(async (queue: string | undefined, _opts: unknown, cmd: Command) => {
      const g = globalOptions(cmd);
      const [counted, consumers] = await withLedger(g, (ledger) =>
        withFieldNames({ queue: '[queue]' }, 'stats', () =>
          Promise.all([ledger.stats(queue), ledger.liveConsumers(queue)]),
        ),
      );
      const stats = withServedQueues(
        counted,
        consumers.map((c) => c.queue),
      );
      if (g.json)
        return printJson(
          io,
          stats.map((s) => ({ ...s, consumers: consumers.filter((c) => c.queue === s.queue) })),
        );
      if (stats.length === 0)
        return println(io, queue === undefined ? 'no items in the ledger' : `no items in queue ${queue}`);
      const shown = (s: QueueStats, st: ItemState): string =>
        formatCount(st === 'pending' ? countLess(s.counts.pending, s.scheduled) : s.counts[st]);
      const served = (q: string): string => {
        const of = consumers.filter((c) => c.queue === q);
        return of.length === 0 ? '-' : `${of.length} (${of.reduce((n, c) => n + c.concurrency, 0)} slots)`;
      };
      const rows = stats.map((s) => [
        s.queue,
        ...ITEM_STATES.map((st) => shown(s, st)),
        formatCount(s.scheduled),
        formatAge(s.oldestDueAgeMs),
        served(s.queue),
      ]);
      const headers = ['QUEUE', ...ITEM_STATES.map((st) => st.toUpperCase()), 'SCHEDULED', 'OLDEST_DUE', 'CONSUMERS'];
      println(
        io,
        renderTable(headers, rows, ['left', ...ITEM_STATES.map(() => 'right' as const), 'right', 'right', 'right']),
      );
    });
}

/**
 * The queues' counts, and a row of zeros for each queue that live consumers
 * serve and that holds no item: "is anything serving it?" has its answer
 * before work comes. In queue order.
 */
function withServedQueues(stats: readonly QueueStats[], served: readonly string[]): QueueStats[] {
  const counted = new Set(stats.map((s) => s.queue));
  const idle = [...new Set(served)].filter((q) => !counted.has(q));
  const none = (queue: string): QueueStats => ({
    queue,
    counts: Object.fromEntries(ITEM_STATES.map((st) => [st, exactly(0)])) as QueueStats['counts'],
    oldestDueAgeMs: 0,
    scheduled: exactly(0),
  });
  return [...stats, ...idle.map(none)].sort((a, b) => (a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : 0));
}
