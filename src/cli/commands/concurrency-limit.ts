import type { Command } from 'commander';
import {
  globalOptions,
  NEW_QUEUE_FLAG,
  NEW_QUEUE_HELP,
  requireSeenQueue,
  withLedger,
  type CliContext,
} from '../context.js';
import { CliError, EXIT, withFieldNames } from '../errors.js';
import { println, printJson } from '../io.js';
import { concurrencyLimitSchema, typeName, validate } from '../../ledger/validation.js';

const HELP = `
The limit is held by the ledger: every producer's enqueue and every worker's hand-on of the
queue holds to it, fleet-wide, from this moment. <n> is a whole number from 1 to 100,000, or
"none" to lift it. A raised or lifted limit admits the items waiting for their key at once;
a lowered one admits nothing until a key is under it. With --type, the limit is that type's
own: its items enqueued from now on are counted per key and type, apart from the queue's
limit (docs/operations.md, Capacity). Setting a limit on a queue the ledger has never seen
(no item, setting, owner or consumer of it) is refused, exit 2, so that a typo changes
nothing; add ${NEW_QUEUE_FLAG} to set it for a queue yet to come.`;

/** `lanewake concurrency-limit <queue> [<n>|none] [--type <type>]`. */
export function concurrencyLimitCommand(program: Command, { io }: CliContext): void {
  program
    .command('concurrency-limit')
    .description('show, set or lift how many items of one concurrency key a queue (or one of its types) admits at once')
    .argument('<queue>', 'queue name')
    .argument('[n]', 'the limit per key, or "none"; left out, the limits as set now are printed')
    .option('--type <type>', "the type whose own limit this is (default: the queue's)")
    .option(NEW_QUEUE_FLAG, NEW_QUEUE_HELP)
    .addHelpText('after', HELP)
    .action(async (queue: string, n: string | undefined, opts: { type?: string; newQueue?: boolean }, cmd: Command) => {
      const g = globalOptions(cmd);
      if (n === undefined) {
        if (opts.type !== undefined)
          throw new CliError('--type: give <n> with it (without <n>, every limit of the queue is printed)', EXIT.usage);
        const limits = await withLedger(g, (ledger) =>
          withFieldNames({ queue: '<queue>' }, 'concurrency-limit', () => ledger.concurrencyLimits(queue)),
        );
        if (g.json) return printJson(io, limits);
        println(
          io,
          `queue ${queue}: ${limits.limit === null ? 'no limit' : `at most ${limits.limit}`} per concurrency key`,
        );
        for (const [type, limit] of Object.entries(limits.types))
          println(io, `  type ${type}: at most ${limit} per concurrency key, its own`);
        return;
      }
      if (n !== 'none' && !/^\d+$/.test(n))
        throw new CliError(`<n>: must be a whole number or "none", got '${n}'`, EXIT.usage);
      const limit = n === 'none' ? null : Number(n);
      const waiting = await withLedger(g, (ledger) =>
        withFieldNames({ queue: '<queue>', limit: '<n>', type: '--type' }, 'concurrency-limit', async () => {
          // Bad input is named before the queue is looked up: a bad <n> on a new queue names <n>.
          validate(concurrencyLimitSchema, limit, 'concurrency-limit', 'limit');
          if (opts.type !== undefined) validate(typeName, opts.type, 'concurrency-limit', 'type');
          await requireSeenQueue(ledger, queue, '<queue>', opts.newQueue);
          return ledger.setConcurrencyLimit(queue, limit, opts.type !== undefined ? { type: opts.type } : {});
        }),
      );
      const scope = opts.type !== undefined ? { queue, type: opts.type } : { queue };
      if (g.json) return printJson(io, { ...scope, limit, keysWithWaitingItems: waiting });
      const whose = opts.type !== undefined ? `queue ${queue}, type ${opts.type}` : `queue ${queue}`;
      println(
        io,
        `${whose}: ${limit === null ? 'no limit' : `at most ${limit}`} per concurrency ` +
          `key (${waiting} key${waiting === 1 ? '' : 's'} with items waiting handed on)`,
      );
    });
}
