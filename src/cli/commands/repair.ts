import { userInfo } from 'node:os';
import type { Command } from 'commander';
import { RepairRejectedError } from '../../errors.js';
import { Producer } from '../../producer/producer.js';
import { globalOptions, withLedger, withWake, type CliContext } from '../context.js';
import { CliError, withFieldNames } from '../errors.js';
import { println, printJson } from '../io.js';
import { ID_HELP, parseDigest, parseInteger } from '../parse.js';

const FIELDS = {
  id: '<id>',
  expectAttempt: '--expect-attempt',
  expectErrorDigest: '--expect-error-digest',
  reason: '--reason',
  actor: '--actor',
  repairId: '--repair-id',
};

export function repairCommand(program: Command, { io }: CliContext): void {
  program
    .command('repair')
    .description(
      'put a dead or cancelled item back to pending in place (same id, ' +
        'lane place and idempotency key), guarded by what you saw of it',
    )
    .argument('<id>', 'the dead or cancelled item')
    .allowUnknownOption() // an id may begin with '-': take it as the id, not as an unknown option
    .requiredOption('--expect-attempt <n>', 'the attempt count you saw (`dead list`, `inspect`)', parseInteger)
    .requiredOption('--expect-error-digest <hex>', 'the error digest you saw (`dead list`, `inspect`)', parseDigest)
    .requiredOption('--reason <text>', 'why: kept in the item history with the repair')
    .option('--actor <name>', 'who repairs it, kept in the item history; default: your user name')
    .option('--repair-id <id>', 'the repair id (a repeat with the same id does nothing more); default: a new one')
    .addHelpText(
      'after',
      '\nThe item keeps its place in its lane: if nothing before it is unfinished it is the head again, and\n' +
        "the lane's pending items wait behind it. Refused (exit 1, nothing written) when the item moved on\n" +
        "since you looked (another attempt count or error, replayed, not dead/cancelled), or when its lane's\n" +
        `head is running or blocked (try again when it ends; pause the queue to hold the lane).\n${ID_HELP}`,
    )
    .action(
      async (
        id: string,
        opts: { expectAttempt: number; expectErrorDigest: string; reason: string; actor?: string; repairId?: string },
        cmd: Command,
      ) => {
        const g = globalOptions(cmd);
        const guard = {
          expectAttempt: opts.expectAttempt,
          expectErrorDigest: opts.expectErrorDigest,
          reason: opts.reason,
          actor: opts.actor ?? defaultActor(),
          ...(opts.repairId !== undefined ? { repairId: opts.repairId } : {}),
        };
        const repaired = await withLedger(g, async (ledger) => {
          try {
            return await withWake(g, io, 'the wake-up', (wake) =>
              withFieldNames(FIELDS, 'repair', () => new Producer({ ledger, wake }).repair(id, guard)),
            );
          } catch (error) {
            if (!(error instanceof RepairRejectedError)) throw error;
            const now =
              error.reason === 'attempt_mismatch' ||
              error.reason === 'error_mismatch' ||
              error.reason === 'not_replayable_state'
                ? await ledger.get(id).catch(() => undefined)
                : undefined;
            const hint = now
              ? ` (it is now ${now.state} at attempt ${now.attempt}; look again with \`lanewake inspect ${id}\`)`
              : '';
            throw new CliError(`${error.message}${hint}`);
          }
        });
        if (g.json) return printJson(io, repaired);
        const standing = repaired.isHead ? 'claimable now' : 'waiting behind an earlier item of its lane or key';
        println(
          io,
          `${repaired.duplicate ? 'already repaired' : 'repaired'} ` +
            `${id} (repair ${repaired.repairId}): pending, ${standing}`,
        );
      },
    );
}

function defaultActor(): string {
  try {
    return `cli:${userInfo().username}`;
  } catch {
    return 'cli';
  }
}
