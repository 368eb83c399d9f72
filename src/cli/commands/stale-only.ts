import type { Command } from 'commander';
import { globalOptions, withLedger, type CliContext } from '../context.js';
import { UsageError, withFieldNames } from '../errors.js';
import { println, printJson } from '../io.js';

const HELP = `
While on, every worker of the queue claims only rescued work: items whose lease expired (taken
back by a sweep), never new pending work, by any path. For a struggling database: what was held
is finished, nothing new is taken on. The flag is held by the ledger; workers learn it at their
next sweep. \`lanewake inspect <id> --why\` says stale_only for an item it holds back. Without
on|off, prints the queue's setting.`;

/** `lanewake stale-only <queue> [on|off]`. */
export function staleOnlyCommand(program: Command, { io }: CliContext): void {
  program
    .command('stale-only')
    .description('claim only rescued work (expired leases) in a queue, no new pending work; or say whether it does')
    .argument('<queue>', 'queue name')
    .argument('[state]', 'on or off')
    .addHelpText('after', HELP)
    .action(async (queue: string, state: string | undefined, _opts: unknown, cmd: Command) => {
      const g = globalOptions(cmd);
      if (state !== undefined && state !== 'on' && state !== 'off')
        throw new UsageError(`stale-only: <state> must be on or off, got ${state}`);
      const on = await withLedger(g, (ledger) =>
        withFieldNames({ queue: '<queue>' }, 'stale-only', async () => {
          if (state !== undefined) await ledger.setStaleOnly(queue, state === 'on');
          return (await ledger.staleOnlyQueues([queue])).has(queue);
        }),
      );
      if (g.json) return printJson(io, { queue, staleOnly: on });
      println(io, `queue ${queue}: ${on ? 'stale-only (claims only rescued work)' : 'claims pending work as usual'}`);
    });
}
