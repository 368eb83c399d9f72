import { constants as osConstants } from 'node:os';
import type { Command } from 'commander';
import type { CliContext } from '../context.js';
import { setDefaultLogLevel } from '../../log.js';
import { AdminAddressError } from '../../errors.js';
import {
  configFromEnv,
  settingSources,
  configFromFile,
  parseAdminAddress,
  parseQueueList,
  resolveWorkerConfig,
} from '../../supervisor/config-sources.js';
import type { WorkerConfig } from '../../supervisor/config.js';
import { startWorker, type RunningWorker } from '../../supervisor/run-worker.js';
import { EXIT_OWNERSHIP_LOST } from '../../supervisor/supervisor.js';
import { CliError, EXIT, UsageError } from '../errors.js';
import { redactUrl } from '../format.js';
import { eprintln, println } from '../io.js';
import { parseInteger } from '../parse.js';

interface WorkerFlags {
  config?: string;
  handlers?: string;
  queues?: string;
  admin?: string;
  adminToken?: string;
  showPayloads?: boolean;
  deployment?: string;
  poolSize?: number;
  drainTimeoutMs?: number;
  reconcileIntervalMs?: number;
  retentionMs?: number;
  ownershipCheckMs?: number;
  printConfig?: boolean;
}

/** Global options that feed the worker config, and where commander found them. */
const GLOBAL_FIELDS = [
  ['databaseUrl', 'databaseUrl'],
  ['tablePrefix', 'tablePrefix'],
  ['redisUrl', 'redisUrl'],
  ['redisKeyPrefix', 'redisKeyPrefix'],
] as const;

export function workerCommand(program: Command, { io }: CliContext): void {
  program
    .command('worker')
    .description(
      'run consumers for the configured queues, with the reconciler, ownership epochs and the admin HTTP server',
    )
    .option('--config <file>', 'a JSON or YAML config file (flags and LANEWAKE_* variables override it)')
    .option(
      '--handlers <module>',
      'ES module exporting `handlers`: { [queue]: { [type]: handler } } (LANEWAKE_HANDLERS)',
    )
    .option(
      '--queues <list>',
      "queues to run, name[:concurrency[:class+class]], e.g. 'tenant-*:8,billing:16' (LANEWAKE_QUEUES); " +
        'a name with * serves every queue of the ledger it matches; refines the --config queues by name',
    )
    .option('--admin <address>', 'admin HTTP address host:port, :port, or off (LANEWAKE_ADMIN; default 127.0.0.1:9464)')
    .option(
      '--admin-token <token>',
      "the token the dashboard's actions must send; without one it is read-only (LANEWAKE_ADMIN_TOKEN)",
    )
    .option('--show-payloads', "show items' payloads in the dashboard")
    .option('--deployment <name>', 'this deployment, for ownership epochs (LANEWAKE_DEPLOYMENT)')
    .option('--pool-size <n>', 'ledger connections', parseInteger)
    .option(
      '--drain-timeout-ms <ms>',
      'on SIGTERM, how long in-flight handlers may finish (default 30000)',
      parseInteger,
    )
    .option('--reconcile-interval-ms <ms>', 'reconciler period (default 10000)', parseInteger)
    .option('--retention-ms <ms>', 'purge terminal items older than this; 0 keeps them (default 7 days)', parseInteger)
    .option('--ownership-check-ms <ms>', 'how often ownership is re-read from the ledger (default 5000)', parseInteger)
    .option(
      '--print-config',
      'print the merged, validated config as JSON (passwords in URLs masked) and exit without starting',
    )
    .addHelpText(
      'after',
      `
Settings come from the --config file, then LANEWAKE_* variables, then flags; the
later wins field by field. A queue list (--queues, LANEWAKE_QUEUES) refines the
file's queues by name: for a queue it names it sets only what it writes
(concurrency, classes) and keeps every other field the file set (ownership,
leaseMs, maxProcessing, …); a file queue it does not name still runs as the file
says; a queue only it names starts with the defaults. --print-config shows the
result.

The admin address is bound before anything starts: if it is taken, the worker
exits 2 at once; pick another with --admin HOST:PORT or turn it off with
--admin off (LANEWAKE_ADMIN).

SIGTERM or SIGINT stops claiming, drains in-flight work within the drain timeout,
then aborts what is left (work that may still be running is never released; its
lease expires) and exits 0; a second signal exits at once, 143 after SIGTERM and
130 after SIGINT (128 + the signal's number). Exits 3 when a newer
\`lanewake activate\` took one of its ownership queues, 2 on a bad config value
(the message names the field) or an admin address it cannot bind, 1 when the
ledger is unreachable or behind. Logs JSON lines to stderr at info
(LANEWAKE_LOG_LEVEL sets another level).`,
    )
    .action(async (flags: WorkerFlags, cmd: Command) => {
      const root = cmd.parent ?? cmd;
      const globals = cmd.optsWithGlobals<Record<string, unknown>>();
      const fromGlobals: Record<string, unknown> = {};
      for (const [option, field] of GLOBAL_FIELDS) {
        const source = root.getOptionValueSource(option);
        if (source === 'cli' || source === 'env') fromGlobals[field] = globals[option];
      }
      const fromFlags: Record<string, unknown> = {
        ...fromGlobals,
        handlers: flags.handlers,
        queues: flags.queues === undefined ? undefined : parseQueueList(flags.queues),
        admin: flags.admin === undefined ? undefined : parseAdminAddress(flags.admin),
        adminToken: flags.adminToken,
        showPayloads: flags.showPayloads,
        deployment: flags.deployment,
        poolSize: flags.poolSize,
        drainTimeoutMs: flags.drainTimeoutMs,
        reconcileIntervalMs: flags.reconcileIntervalMs,
        retentionMs: flags.retentionMs,
        ownershipCheckMs: flags.ownershipCheckMs,
      };
      const file = flags.config === undefined ? {} : await configFromFile(flags.config);
      const fromEnv = configFromEnv(process.env);
      const config = resolveWorkerConfig([file, fromEnv, fromFlags]);
      if (flags.printConfig === true) {
        const layers = [
          { name: 'file', values: file },
          { name: 'env', values: fromEnv },
          { name: 'flags', values: fromFlags },
        ];
        const sources = settingSources(layers, config);
        println(io, JSON.stringify({ ...printable(config), settingSources: sources }, null, 2));
        return;
      }

      // The library logs at warn; a worker process is an operator's, who wants its state changes.
      setDefaultLogLevel('info');
      // The handlers go in before start-up: "worker started" is logged inside start(), and a
      // SIGTERM sent on seeing it must drain the worker, not meet the default handler and kill it.
      let worker: Awaited<ReturnType<typeof start>> | undefined;
      let signals = 0;
      const onSignal = (signal: NodeJS.Signals): void => {
        signals++;
        if (signals > 1) {
          eprintln(io, `${signal} again: exiting now`);
          process.exit(signalExitCode(signal));
        }
        eprintln(io, `${signal}: draining (send it again to exit at once)`);
        void worker?.stop();
      };
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
      try {
        worker = await start(config);
        if (worker.admin) eprintln(io, `admin: ${worker.admin.url}`);
        // A signal during start-up: stop now that there is a worker to stop.
        if (signals > 0) void worker.stop();
        const code = await worker.done;
        if (code === EXIT_OWNERSHIP_LOST)
          throw new CliError('ownership of a queue moved to a newer activation: stopped', EXIT.ownership);
      } finally {
        process.off('SIGTERM', onSignal);
        process.off('SIGINT', onSignal);
      }
    });
}

/** The shell's convention for a process ended by a signal: 128 + its number (SIGINT 130, SIGTERM 143). */
export function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + (osConstants.signals[signal] ?? 0);
}

async function start(config: WorkerConfig): Promise<RunningWorker> {
  try {
    return await startWorker(config);
  } catch (error) {
    if (error instanceof AdminAddressError) {
      throw new UsageError(
        `${error.message}: choose another with --admin HOST:PORT, or turn it off with ` +
          `--admin off (or set LANEWAKE_ADMIN, or \`admin:\` in the --config file)`,
      );
    }
    throw error;
  }
}

/** The config as --print-config shows it: what the worker would run, without the passwords. */
function printable(config: WorkerConfig): WorkerConfig {
  return {
    ...config,
    databaseUrl: redactUrl(config.databaseUrl),
    ...(config.redisUrl !== undefined ? { redisUrl: redactUrl(config.redisUrl) } : {}),
    ...(config.adminToken !== undefined ? { adminToken: '****' } : {}),
  };
}
