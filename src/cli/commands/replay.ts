import type { Command } from 'commander';
import { ReplayRejectedError } from '../../errors.js';
import { errorDigest } from '../../ledger/ids.js';
import { Producer } from '../../producer/producer.js';
import { globalOptions, withLedger, withWake, type CliContext } from '../context.js';
import { CliError, withFieldNames } from '../errors.js';
import { eprintln, println, printJson } from '../io.js';
import { ID_HELP, parseDigest, parseInteger } from '../parse.js';

const FIELDS = { id: '<id>', expectAttempt: '--expect-attempt', expectErrorDigest: '--expect-digest' };

export function replayCommand(program: Command, { io }: CliContext): void {
  program
    .command('replay')
    .description(
      're-drive a dead or cancelled item as a new pending item at the tail of its lane, guarded by what you saw of it',
    )
    .argument('<id>', 'the dead or cancelled item')
    .allowUnknownOption() // an id may begin with '-': take it as the id, not as an unknown option
    .requiredOption('--expect-attempt <n>', 'the attempt count you saw (`dead list`, `inspect`)', parseInteger)
    .option(
      '--expect-digest <hex>',
      "the error digest you saw; default: the digest of the item's current last error",
      parseDigest,
    )
    .addHelpText(
      'after',
      '\nThe replay is refused (exit 1, nothing created) when the item moved on since you looked: another\n' +
        `attempt count or error, already replayed, or not dead/cancelled. Prints the new item id.\n${ID_HELP}`,
    )
    .action(async (id: string, opts: { expectAttempt: number; expectDigest?: string }, cmd: Command) => {
      const g = globalOptions(cmd);
      const created = await withLedger(g, async (ledger) => {
        let digest = opts.expectDigest;
        if (digest === undefined) {
          const item = await withFieldNames(FIELDS, 'replay', () => ledger.get(id));
          if (!item) throw new CliError(`replay of ${id} refused: no such item`);
          digest = errorDigest(item.lastError);
          eprintln(io, `no --expect-digest given: using the digest of the item's current last error (${digest})`);
        }
        const guard = { expectAttempt: opts.expectAttempt, expectErrorDigest: digest };
        try {
          return await withWake(g, io, 'the wake-up', (wake) =>
            withFieldNames(FIELDS, 'replay', () => new Producer({ ledger, wake }).replay(id, guard)),
          );
        } catch (error) {
          if (error instanceof ReplayRejectedError)
            throw new CliError(`${error.message}${await hint(error, () => ledger.get(id))}`);
          throw error;
        }
      });
      if (g.json) return printJson(io, { id: created.id, replayOf: id });
      println(io, `replayed ${id} as ${created.id}`);
    });
}

/** What the item looks like now, so the operator can decide again. */
async function hint(
  error: ReplayRejectedError,
  read: () => Promise<{ state: string; attempt: number } | undefined>,
): Promise<string> {
  if (
    error.reason !== 'attempt_mismatch' &&
    error.reason !== 'error_mismatch' &&
    error.reason !== 'not_replayable_state'
  )
    return '';
  const now = await read().catch(() => undefined);
  if (!now) return '';
  return ` (it is now ${now.state} at attempt ${now.attempt}; look again with \`lanewake inspect ${error.itemId}\`)`;
}
