import type { Command } from 'commander';
import { errorDigest } from '../../ledger/ids.js';
import { globalOptions, withLedger, type CliContext } from '../context.js';
import { withFieldNames } from '../errors.js';
import { firstLine, formatTime, renderTable } from '../format.js';
import { println, printJson } from '../io.js';
import { parseInteger } from '../parse.js';

export function deadCommand(program: Command, { io }: CliContext): void {
  const dead = program.command('dead').description('dead letters: items that ended dead, for inspection and replay');
  dead
    .command('list')
    .description('list dead items, newest first, with what `lanewake replay` needs: attempt and error digest')
    .option('--queue <queue>', 'only this queue')
    .option('--limit <n>', 'at most this many, 1-100000', parseInteger, 100)
    .addHelpText(
      'after',
      '\nReplay one with: lanewake replay <id> --expect-attempt <ATTEMPT> --expect-digest <DIGEST>\n' +
        ('or repair it in place: lanewake repair <id> --expect-attempt ' +
          '<ATTEMPT> --expect-error-digest <DIGEST> --reason <why>'),
    )
    .action(async (opts: { queue?: string; limit: number }, cmd: Command) => {
      const g = globalOptions(cmd);
      const items = await withLedger(g, (ledger) =>
        withFieldNames({ queue: '--queue', limit: '--limit' }, 'dead list', () =>
          ledger.listDead({ limit: opts.limit, ...(opts.queue !== undefined ? { queue: opts.queue } : {}) }),
        ),
      );
      const rows = items.map((i) => ({
        id: i.id,
        queue: i.queue,
        type: i.type,
        lane: i.lane,
        attempt: i.attempt,
        maxAttempts: i.maxAttempts,
        failureClass: i.failureClass,
        error: firstLine(i.lastError, 1000),
        errorDigest: errorDigest(i.lastError),
        terminalAt: i.terminalAt,
      }));
      if (g.json) return printJson(io, rows);
      if (rows.length === 0) return println(io, 'no dead items');
      println(
        io,
        renderTable(
          ['ID', 'QUEUE', 'TYPE', 'ATTEMPT', 'CLASS', 'DIED', 'DIGEST', 'ERROR'],
          rows.map((r) => [
            r.id,
            r.queue,
            r.type,
            String(r.attempt),
            r.failureClass ?? '-',
            formatTime(r.terminalAt),
            r.errorDigest,
            firstLine(r.error, 80),
          ]),
          ['left', 'left', 'left', 'right'],
        ),
      );
    });
}
