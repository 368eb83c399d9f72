import { Command, CommanderError } from 'commander';
import { packageVersion } from '../version.js';
import { activateCommand } from './commands/activate.js';
import { cancelCommand } from './commands/cancel.js';
import { dashboardCommand } from './commands/dashboard.js';
import { deadCommand } from './commands/dead.js';
import { enqueueCommand } from './commands/enqueue.js';
import { inspectCommand } from './commands/inspect.js';
import { migrateCommand } from './commands/migrate.js';
import { pauseCommands } from './commands/pause.js';
import { concurrencyLimitCommand } from './commands/concurrency-limit.js';
import { replayCommand } from './commands/replay.js';
import { schedulesCommand } from './commands/schedules.js';
import { repairCommand } from './commands/repair.js';
import { staleOnlyCommand } from './commands/stale-only.js';
import { queueCommands } from './commands/queue.js';
import { statsCommand } from './commands/stats.js';
import { workerCommand } from './commands/worker.js';
import { workflowCommand } from './commands/workflow.js';
import { demoCommand } from './commands/demo.js';
import { benchCommand } from './commands/bench.js';
import { addGlobalOptions, type CliContext } from './context.js';
import { describeError, exitCodeOf } from './errors.js';
import { eprintln, type CliIo } from './io.js';

/**
 * Registers one command (with its options and action) on `program`. Create it
 * with `program.command(name)` so it inherits the output, exit and help settings.
 */
export type CommandFactory = (program: Command, ctx: CliContext) => void;

/** Every `lanewake` command; tests and embedders may pass another list to buildProgram. */
export const CORE_COMMANDS: readonly CommandFactory[] = [
  migrateCommand,
  enqueueCommand,
  statsCommand,
  inspectCommand,
  deadCommand,
  replayCommand,
  repairCommand,
  cancelCommand,
  workflowCommand,
  pauseCommands,
  staleOnlyCommand,
  queueCommands,
  concurrencyLimitCommand,
  schedulesCommand,
  dashboardCommand,
  activateCommand,
  workerCommand,
  demoCommand,
  benchCommand,
];

const EXIT_CODES_HELP = `
Exit codes:
  0  ok
  1  runtime failure: ledger unreachable, item not found, replay or repair refused
  2  bad usage or bad input (the message names the option or field)
  3  ownership lost: the queue's epoch is not the one expected (activate --expect-epoch)
  130  the demo interrupted (SIGINT or SIGTERM); a worker's second SIGINT while draining
  143  a worker's second SIGTERM while draining

Global options may come before or after the command; each has an environment
variable (LANEWAKE_DATABASE_URL, LANEWAKE_TABLE_PREFIX, LANEWAKE_REDIS_URL,
LANEWAKE_REDIS_KEY_PREFIX). Payloads are never printed, except by \`inspect --payload\`.`;

/** The `lanewake` command, writing to `io` and throwing (never exiting) on errors: run it with runCli. */
export function buildProgram(io: CliIo, commands: readonly CommandFactory[] = CORE_COMMANDS): Command {
  const program = new Command('lanewake')
    .description(
      'Operate a lanewake ledger: migrate it, enqueue, inspect, replay dead letters, cancel, hand queues over.',
    )
    // No short -V: item ids are base64url and may begin with '-V', which commander would take for it.
    .version(packageVersion(), '--version', 'print the lanewake version')
    .exitOverride()
    .configureOutput({
      writeOut: (s) => io.out(s),
      writeErr: (s) => io.err(s),
      getOutHelpWidth: () => io.columns ?? 100,
      getErrHelpWidth: () => io.columns ?? 100,
      getOutHasColors: () => false,
      getErrHasColors: () => false,
    })
    .showHelpAfterError('(add --help for usage)');
  addGlobalOptions(program);
  program.addHelpText('after', EXIT_CODES_HELP);
  const ctx: CliContext = { io };
  for (const register of commands) register(program, ctx);
  return program;
}

export interface RunOptions {
  /** 'node': argv is process.argv (node, script, …args); 'user' (default): argv is just the arguments. */
  from?: 'node' | 'user';
  commands?: readonly CommandFactory[];
}

/** Runs one command line; resolves to the exit code (never calls process.exit). */
export async function runCli(argv: readonly string[], io: CliIo, opts: RunOptions = {}): Promise<number> {
  const program = buildProgram(io, opts.commands);
  try {
    await program.parseAsync([...argv], { from: opts.from ?? 'user' });
    return 0;
  } catch (error) {
    // Commander has already written its own message (usage errors, help, version).
    if (!(error instanceof CommanderError)) eprintln(io, `error: ${describeError(error)}`);
    return exitCodeOf(error);
  }
}
