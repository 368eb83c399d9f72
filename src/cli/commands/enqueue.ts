import { Option, type Command } from 'commander';
import type { EnqueueInput } from '../../ledger/ledger.js';
import { QUEUE_CLASSES, type QueueClass } from '../../ledger/types.js';
import { Producer } from '../../producer/producer.js';
import { enqueueItemSchema } from '../../ledger/inputs.js';
import { validate } from '../../ledger/validation.js';
import { globalOptions, ledgerConfig, withLedger, withWake, type CliContext } from '../context.js';
import { withFieldNames } from '../errors.js';
import { println, printJson } from '../io.js';
import { parseInstant, parseInteger, parseJsonOption } from '../parse.js';

interface EnqueueOpts {
  payload: string;
  lane?: string;
  concurrencyKey?: string;
  idempotencyKey?: string;
  runAt?: Date;
  delayMs?: number;
  maxAttempts?: number;
  priority?: number;
  class?: QueueClass;
}

/** Ledger field → what the operator typed. */
const FIELDS = {
  queue: '<queue>',
  type: '<type>',
  payload: '--payload',
  lane: '--lane',
  concurrencyKey: '--concurrency-key',
  idempotencyKey: '--idempotency-key',
  runAt: '--run-at',
  delayMs: '--delay-ms',
  maxAttempts: '--max-attempts',
  priority: '--priority',
  queueClass: '--class',
};

export function enqueueCommand(program: Command, { io }: CliContext): void {
  program
    .command('enqueue')
    .description('add one work item to a queue (with --redis-url, also wake the consumers)')
    .argument('<queue>', 'queue name: 1-64 chars of [a-z0-9._-]')
    .argument('<type>', 'item type, which picks the handler: 1-128 chars of [A-Za-z0-9._:-]')
    .option('--payload <json>', 'the item payload as JSON (never echoed back)', '{}')
    .option('--lane <key>', 'ordering key: items of one lane run one at a time, in enqueue order')
    .option(
      '--concurrency-key <key>',
      "at most the queue's concurrency limit of one key's items run at once (with " +
        '--lane as well, the lane admits the item and the key only groups it)',
    )
    .option(
      '--idempotency-key <key>',
      'unique per queue: enqueueing the same key again returns the first item (duplicate: true)',
    )
    .addOption(
      new Option('--run-at <date>', 'not claimable before this ISO 8601 instant, e.g. 2026-12-01T09:00:00Z')
        .argParser(parseInstant)
        .conflicts('delayMs'),
    )
    .option('--delay-ms <ms>', 'not claimable before the ledger clock + this many ms', parseInteger)
    .option('--max-attempts <n>', 'attempt budget, 1-1000 (default 25)', parseInteger)
    .option('--priority <n>', 'smaller runs first among claimable heads (default 0)', parseInteger)
    .addOption(new Option('--class <class>', 'queue class (default: default)').choices(QUEUE_CLASSES))
    .addHelpText('after', '\nPrints the item id and whether it was a duplicate. Bad input exits 2 naming the option.')
    .action(async (queue: string, type: string, opts: EnqueueOpts, cmd: Command) => {
      const g = globalOptions(cmd);
      const input: EnqueueInput = {
        queue,
        type,
        payload: parseJsonOption('--payload', opts.payload),
        ...(opts.lane !== undefined ? { lane: opts.lane } : {}),
        ...(opts.concurrencyKey !== undefined ? { concurrencyKey: opts.concurrencyKey } : {}),
        ...(opts.idempotencyKey !== undefined ? { idempotencyKey: opts.idempotencyKey } : {}),
        ...(opts.runAt !== undefined ? { runAt: opts.runAt } : {}),
        ...(opts.delayMs !== undefined ? { delayMs: opts.delayMs } : {}),
        ...(opts.maxAttempts !== undefined ? { maxAttempts: opts.maxAttempts } : {}),
        ...(opts.priority !== undefined ? { priority: opts.priority } : {}),
        ...(opts.class !== undefined ? { queueClass: opts.class } : {}),
      };
      // Checked before connecting, so bad input exits 2 whatever the state of the ledger.
      await withFieldNames(FIELDS, 'enqueue', async () =>
        validate(enqueueItemSchema(ledgerConfig(g).payloadMaxBytes), input, 'enqueue'),
      );
      const r = await withLedger(g, (ledger) =>
        withWake(g, io, 'the wake-up', (wake) =>
          withFieldNames(FIELDS, 'enqueue', () => new Producer({ ledger, wake }).enqueue(input)),
        ),
      );
      if (g.json) return printJson(io, { id: r.id, duplicate: r.duplicate, laneSeq: r.laneSeq });
      println(io, `enqueued ${r.id} (duplicate: ${r.duplicate})`);
      if (r.duplicate)
        println(io, 'an item with this idempotency key already existed: that is its id, and nothing new was enqueued');
    });
}
