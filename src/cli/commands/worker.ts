import type { Command } from 'commander';
import { configFromEnv, configFromFile, parseAdminAddress, parseQueueList, resolveWorkerConfig } from '../../supervisor/config.js';
import { startWorker } from '../../supervisor/run-worker.js';
import { EXIT_OWNERSHIP_LOST } from '../../supervisor/supervisor.js';
import { CliError, EXIT } from '../errors.js';
import { eprintln } from '../io.js';
import { parseInteger } from '../parse.js';
import type { CliContext } from '../program.js';

interface WorkerFlags {
  config?: string;
  handlers?: string;
  queues?: string;
  admin?: string;
  deployment?: string;
  poolSize?: number;
  drainTimeoutMs?: number;
  reconcileIntervalMs?: number;
  retentionMs?: number;
  ownershipCheckMs?: number;
}

/** Global options that feed the worker config, and where commander found them. */
const GLOBAL_FIELDS = [
  ['databaseUrl', 'databaseUrl'],
  ['tablePrefix', 'tablePrefix'],
  ['redisUrl', 'redisUrl'],
  ['redisKeyPrefix', 'keyPrefix'],
] as const;

export function workerCommand(program: Command, { io }: CliContext): void {
  program
    .command('worker')
    .description('run consumers for the configured queues, with the reconciler, ownership epochs and the admin HTTP server')
    .option('--config <file>', 'a JSON or YAML config file (flags and LANEWAKE_* variables override it)')
    .option('--handlers <module>', 'ES module exporting `handlers`: { [queue]: { [type]: handler } } (LANEWAKE_HANDLERS)')
    .option('--queues <list>', 'queues and concurrency, e.g. billing:16,mail (LANEWAKE_QUEUES)')
    .option('--admin <address>', 'admin HTTP address host:port, :port, or off (LANEWAKE_ADMIN; default 127.0.0.1:9464)')
    .option('--deployment <name>', 'this deployment, for ownership epochs (LANEWAKE_DEPLOYMENT)')
    .option('--pool-size <n>', 'ledger connections', parseInteger)
    .option('--drain-timeout-ms <ms>', 'on SIGTERM, how long in-flight handlers may finish (default 30000)', parseInteger)
    .option('--reconcile-interval-ms <ms>', 'reconciler period (default 10000)', parseInteger)
    .option('--retention-ms <ms>', 'purge terminal items older than this; 0 keeps them (default 7 days)', parseInteger)
    .option('--ownership-check-ms <ms>', 'how often ownership is re-read from the ledger (default 5000)', parseInteger)
    .addHelpText(
      'after',
      `
SIGTERM or SIGINT stops claiming, drains in-flight work within the drain timeout,
then aborts what is left (work that may still be running is never released; its
lease expires) and exits 0; a second signal exits at once. Exits 3 when a newer
\`lanewake activate\` took one of its ownership queues, 2 on a bad config value
(the message names the field), 1 when the ledger is unreachable or behind.`,
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
        deployment: flags.deployment,
        poolSize: flags.poolSize,
        drainTimeoutMs: flags.drainTimeoutMs,
        reconcileIntervalMs: flags.reconcileIntervalMs,
        retentionMs: flags.retentionMs,
        ownershipCheckMs: flags.ownershipCheckMs,
      };
      const file = flags.config === undefined ? {} : await configFromFile(flags.config);
      const config = resolveWorkerConfig([file, configFromEnv(process.env), fromFlags]);

      const worker = await startWorker(config);
      if (worker.admin) eprintln(io, `admin: ${worker.admin.url}`);
      let signals = 0;
      const onSignal = (signal: NodeJS.Signals): void => {
        signals++;
        if (signals > 1) {
          eprintln(io, `${signal} again: exiting now`);
          process.exit(130);
        }
        eprintln(io, `${signal}: draining (send it again to exit at once)`);
        void worker.stop();
      };
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
      try {
        const code = await worker.done;
        if (code === EXIT_OWNERSHIP_LOST) throw new CliError('ownership of a queue moved to a newer activation: stopped', EXIT.ownership);
      } finally {
        process.off('SIGTERM', onSignal);
        process.off('SIGINT', onSignal);
      }
    });
}
