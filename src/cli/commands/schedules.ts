import type { Command } from 'commander';
import type { ScheduleView } from '../../ledger/schedule-types.js';
import { globalOptions, withLedger, type CliContext } from '../context.js';
import { CliError, EXIT, withFieldNames } from '../errors.js';
import { formatAge, formatTime, renderTable } from '../format.js';
import { println, printJson } from '../io.js';

const HELP = `
Schedules live in the ledger (docs/design.md, Recurring schedules): declared in a worker's
config file (source "config", made the ledger's at the worker's start) or through the API
(producer.schedule, source "api"). Each fire enqueues the schedule's item with idempotency key
<name>:<fire time ms>; any running worker fires it, Redis or not.
  lanewake schedules                  list them, with their next fire time (the ledger's clock)
  lanewake schedules pause <name>     it fires nothing until resumed (held by the ledger)
  lanewake schedules resume <name>    fires missed meanwhile follow its backfill policy
  lanewake schedules remove <name>    a file-declared one comes back at its worker's next start`;

const ACTIONS = ['list', 'pause', 'resume', 'remove'] as const;
type Action = (typeof ACTIONS)[number];

/** How a schedule fires, in a few words. */
export function timingText(s: Pick<ScheduleView, 'pattern' | 'tz' | 'everyMs'>): string {
  if (s.everyMs !== null) return `every ${formatAge(s.everyMs)}`;
  return `cron ${s.pattern ?? '?'}${s.tz !== null ? ` (${s.tz})` : ''}`;
}

/** `lanewake schedules [list|pause|resume|remove] [<name>]`. */
export function schedulesCommand(program: Command, { io }: CliContext): void {
  program
    .command('schedules')
    .description('list the recurring schedules with their next fire time, or pause, resume or remove one')
    .argument('[action]', `${ACTIONS.join(', ')} (default list)`, 'list')
    .argument('[name]', 'the schedule (for pause, resume, remove)')
    .addHelpText('after', HELP)
    .action(async (action: string, name: string | undefined, _opts: unknown, cmd: Command) => {
      const g = globalOptions(cmd);
      if (!(ACTIONS as readonly string[]).includes(action))
        throw new CliError(`<action>: must be one of ${ACTIONS.join(', ')}, got '${action}'`, EXIT.usage);
      if (action === 'list') {
        if (name !== undefined) throw new CliError('<name>: list takes none', EXIT.usage);
        const [list, now] = await withLedger(g, (ledger) => Promise.all([ledger.schedules.list(), ledger.now()]));
        if (g.json) return printJson(io, list);
        if (list.length === 0) return println(io, 'no schedules');
        const rows = list.map((s) => [
          s.name,
          s.source,
          timingText(s),
          `${s.item.queue}/${s.item.type}`,
          s.paused ? 'paused' : formatTime(s.nextFireAt),
          s.paused ? '-' : `in ${formatAge(Math.max(1, s.nextFireAt.getTime() - now.getTime()))}`,
          formatTime(s.lastFireAt),
          String(s.fires),
          s.backfillMs > 0 ? `backfill ${formatAge(s.backfillMs)}` : 'skip',
        ]);
        return println(
          io,
          renderTable(
            ['NAME', 'SOURCE', 'TIMING', 'QUEUE/TYPE', 'NEXT FIRE', 'DUE', 'LAST FIRE', 'FIRES', 'MISSED'],
            rows,
            ['left', 'left', 'left', 'left', 'left', 'left', 'left', 'right'],
          ),
        );
      }
      if (name === undefined) throw new CliError(`<name>: ${action} needs the schedule's name`, EXIT.usage);
      const done = await withLedger(g, (ledger) =>
        withFieldNames({ name: '<name>' }, `schedules ${action}`, () =>
          act(ledger.schedules, action as Exclude<Action, 'list'>, name),
        ),
      );
      if (!done) throw new CliError(`schedule ${name} not found`, EXIT.failure);
      if (g.json) return printJson(io, { name, action });
      println(io, `schedule ${name}: ${action === 'remove' ? 'removed' : action === 'pause' ? 'paused' : 'resumed'}`);
    });
}

function act(
  schedules: {
    pause(n: string): Promise<boolean>;
    resume(n: string): Promise<boolean>;
    remove(n: string): Promise<boolean>;
  },
  action: Exclude<Action, 'list'>,
  name: string,
): Promise<boolean> {
  return action === 'pause'
    ? schedules.pause(name)
    : action === 'resume'
      ? schedules.resume(name)
      : schedules.remove(name);
}
