import type { Command } from 'commander';
import type { AttemptRecord, StepRecord, WorkItem } from '../../ledger/types.js';
import { errorDigest } from '../../ledger/ids.js';
import { globalOptions, withLedger, type CliContext } from '../context.js';
import { CliError, withFieldNames } from '../errors.js';
import { firstLine, formatTime, jsonSize, renderTable } from '../format.js';
import { println, printJson, type CliIo } from '../io.js';
import { ID_HELP } from '../parse.js';

/** Handler data: the payload, and what the handler derived from it. Shown only with --payload. */
const DATA_FIELDS = ['payload', 'checkpoint', 'result'] as const;

export function inspectCommand(program: Command, { io }: CliContext): void {
  program
    .command('inspect')
    .description('show one item (without its payload), its progress, its attempt history and its durable steps')
    .argument('<id>', 'item id')
    .allowUnknownOption() // an id may begin with '-': take it as the id, not as an unknown option
    .option(
      '--payload',
      'also show the payload, checkpoint, result and step results (handler data, hidden by default)',
      false,
    )
    .option(
      '--why',
      'only say why the item is where it is: a reason code and its facts (not ' +
        "due, behind its lane's head, blocked, no live consumer, capped, …)",
      false,
    )
    .addHelpText(
      'after',
      `\nExits 1 when there is no such item. The error digest is what \`lanewake replay ` +
        `--expect-digest\` and \`lanewake repair --expect-error-digest\` expect.\n${ID_HELP}`,
    )
    .action(async (id: string, opts: { payload: boolean; why: boolean }, cmd: Command) => {
      const g = globalOptions(cmd);
      if (opts.why) {
        const why = await withLedger(g, (ledger) =>
          withFieldNames({ id: '<id>' }, 'inspect', () => ledger.explain(id)),
        );
        if (!why) throw new CliError(`no item ${id}`);
        if (g.json) return printJson(io, why);
        println(io, `${why.code}: ${why.message}`);
        for (const [k, v] of Object.entries(why.details)) println(io, `  ${k}: ${v ?? '-'}`);
        return;
      }
      const found = await withLedger(g, (ledger) =>
        withFieldNames({ id: '<id>' }, 'inspect', () => ledger.inspect(id)),
      );
      if (!found) throw new CliError(`no item ${id}`);
      const { item, attempts, steps } = found;
      // A digest only of an error there is: a completed item has none, and the SHA-256 of '' means nothing to a reader.
      const digest = item.lastError === null ? null : errorDigest(item.lastError);
      if (g.json) {
        const shown: Partial<WorkItem> = { ...item };
        if (!opts.payload) for (const f of DATA_FIELDS) delete shown[f];
        const shownSteps = opts.payload ? steps : steps.map(({ result: _result, ...step }) => step);
        return printJson(io, { item: shown, errorDigest: digest, attempts, steps: shownSteps });
      }
      printItem(io, item, digest, opts.payload);
      printAttempts(io, attempts);
      printSteps(io, steps, opts.payload);
    });
}

function printItem(io: CliIo, item: WorkItem, digest: string | null, withData: boolean): void {
  const rows: [string, string][] = [
    ['id', item.id],
    ['queue', item.queue],
    ['type', item.type],
    ['state', item.state + (item.cancelRequested ? ' (cancel requested)' : '')],
    ['lane', item.lane === null ? '(own lane)' : `${item.lane} #${item.laneSeq ?? '-'}${item.isHead ? ' (head)' : ''}`],
    ['concurrency key', concurrencyKeyOf(item)],
    ['class', item.queueClass],
    ['priority', String(item.priority)],
    ['attempt', `${item.attempt} of ${item.maxAttempts}`],
    [
      'group',
      item.groupHead === null ? '-' : item.groupHead === item.id ? '(its head)' : `coalesced into ${item.groupHead}`,
    ],
    [
      'progress',
      item.progress === null
        ? '-'
        : typeof item.progress === 'number'
          ? `${item.progress}%`
          : JSON.stringify(item.progress),
    ],
    ['run after', formatTime(item.runAfter)],
    [
      'lease',
      item.leaseUntil !== null
        ? `${item.leaseOwner ?? '?'} until ${formatTime(item.leaseUntil)}`
        : item.leaseOwner !== null
          ? `- (last held by ${item.leaseOwner})`
          : '-',
    ],
    ['epoch', item.epoch === null ? '-' : String(item.epoch)],
    ['idempotency key', item.idempotencyKey ?? '-'],
    [
      'dependency',
      item.dependencyKey === null
        ? '-'
        : `${item.dependencyKey} (blocked ${formatTime(item.blockedAt)}, expires ${formatTime(item.blockExpiresAt)})`,
    ],
    ['failure class', item.failureClass ?? '-'],
    ['error digest', digest ?? '-'],
    ['replay of', item.replayOf ?? '-'],
    ['replayed at', formatTime(item.replayedAt)],
    ['created', formatTime(item.createdAt)],
    ['started', formatTime(item.startedAt)],
    ['terminal', formatTime(item.terminalAt)],
    ['updated', formatTime(item.updatedAt)],
  ];
  for (const f of DATA_FIELDS)
    rows.push([
      f,
      withData ? (item[f] === null || item[f] === undefined ? '-' : JSON.stringify(item[f])) : jsonSize(item[f]),
    ]);
  const width = Math.max(...rows.map(([k]) => k.length));
  for (const [k, v] of rows) println(io, `${`${k}:`.padEnd(width + 1)} ${v}`);
  if (item.lastError !== null) {
    // A skipped item's last word is why it was skipped (SkipError's reason), not an error.
    println(io, item.state === 'skipped' ? 'skipped because:' : 'last error:');
    for (const line of item.lastError.split(/\r?\n/)) println(io, `  ${line}`);
  } else {
    println(io, `${'last error:'.padEnd(width + 1)} -`);
  }
}

function printAttempts(io: CliIo, attempts: readonly AttemptRecord[]): void {
  println(io);
  if (attempts.length === 0) {
    println(io, 'attempt history: none recorded (a first-try success is recorded on the item itself)');
    return;
  }
  println(io, 'attempt history:');
  const rows = attempts.map((a) => [
    String(a.attempt),
    a.outcome,
    a.failureClass ?? '-',
    a.worker ?? '-',
    formatTime(a.startedAt),
    formatTime(a.endedAt),
    firstLine(a.repairId === null ? a.error : `repair ${a.repairId}: ${a.error ?? ''}`, 80),
  ]);
  println(io, renderTable(['ATTEMPT', 'OUTCOME', 'CLASS', 'WORKER', 'STARTED', 'ENDED', 'ERROR'], rows, ['right']));
  printStages(io, attempts);
}

/** The stages each attempt timed (ctx.stage), one line per attempt that timed any. */
function printStages(io: CliIo, attempts: readonly AttemptRecord[]): void {
  const timed = attempts.filter((a) => a.stages !== undefined && a.stages.length > 0);
  if (timed.length === 0) return;
  println(io);
  println(io, 'stage timings:');
  for (const a of timed) {
    const stages = (a.stages ?? []).map((s) => `${s.name} ${formatMs(s.ms)}`).join(', ');
    println(io, `  attempt ${a.attempt} (${a.outcome}): ${stages}`);
  }
}

function formatMs(ms: number): string {
  return ms >= 100 ? `${Math.round(ms)} ms` : `${Number(ms.toPrecision(3))} ms`;
}

function printSteps(io: CliIo, steps: readonly StepRecord[], withData: boolean): void {
  if (steps.length === 0) return;
  println(io);
  println(io, 'steps done:');
  const result = (st: StepRecord): string =>
    withData ? (st.result === undefined ? '-' : JSON.stringify(st.result)) : jsonSize(st.result);
  const rows = steps.map((st) => [st.name, String(st.attempt), formatTime(st.doneAt), result(st)]);
  println(io, renderTable(['STEP', 'ATTEMPT', 'DONE', 'RESULT'], rows, ['left', 'right']));
}

/**
 * The item's concurrency key, whose limit admits it, and whether it was admitted (a laneless keyed item that is not a
 * head waits in its key's line).
 */
function concurrencyKeyOf(item: WorkItem): string {
  if (item.concurrencyKey === null) return '-';
  const scope = item.keyScope === 'type' ? ` (its type's own limit)` : '';
  const standing =
    item.lane !== null || item.state !== 'pending' ? '' : item.isHead ? ', admitted' : ', waiting for a slot';
  return `${item.concurrencyKey}${scope}${standing}`;
}
