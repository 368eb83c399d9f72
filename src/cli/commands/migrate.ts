import type { Command } from 'commander';
import { ensureDatabase } from '../../ledger/connection.js';
import { globalOptions, ledgerConfig, withLedger, type CliContext } from '../context.js';
import { withFieldNames } from '../errors.js';
import { println, printJson } from '../io.js';
import { parseInteger } from '../parse.js';

export function migrateCommand(program: Command, { io }: CliContext): void {
  program
    .command('migrate')
    .description(
      'create the ledger database if it is missing and bring its ' +
        'schema up to date (idempotent, safe from many processes)',
    )
    .option('--wait-ms <ms>', 'keep retrying this long while the database server is still starting', parseInteger, 0)
    .addHelpText(
      'after',
      '\nPrints the schema version before and after, and the migrations applied (none when already current).',
    )
    .action(async (opts: { waitMs: number }, cmd: Command) => {
      const g = globalOptions(cmd);
      const config = ledgerConfig(g);
      const r = await withLedger(
        g,
        async (ledger) => {
          await withFieldNames({ url: '--database-url' }, 'migrate', () =>
            ensureDatabase(config.url, Math.max(0, opts.waitMs)),
          );
          return ledger.migrate();
        },
        { requireCurrentSchema: false },
      );
      if (g.json) return printJson(io, r);
      if (r.applied.length === 0) println(io, `schema v${r.to} is current: nothing applied`);
      else println(io, `schema v${r.from} -> v${r.to}: applied ${r.applied.join(', ')}`);
    });
}
