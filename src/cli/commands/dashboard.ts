import type { Command } from 'commander';
import { AdminAddressError } from '../../errors.js';
import { createLogger } from '../../log.js';
import { ledgerReadiness, startAdminServer } from '../../supervisor/admin-server.js';
import { packageVersion } from '../../version.js';
import { globalOptions, withLedger, withWake, type CliContext } from '../context.js';
import { UsageError } from '../errors.js';
import { eprintln, println } from '../io.js';
import { parseInteger } from '../parse.js';

interface DashboardFlags {
  port: number;
  host: string;
  adminToken?: string;
  showPayloads?: boolean;
}

const MIN_TOKEN_CHARS = 16;

const HELP = `
Serves the operator dashboard (docs/operations.md, "The dashboard") on its own,
without a worker: the queues, their items, lanes and dead letters, read from the
ledger of --database-url. Without --admin-token (LANEWAKE_ADMIN_TOKEN) it is
read-only; with one, the browser asks for it once and may replay, cancel, pause,
resume and purge, each action logged as one JSON line on stderr. With --redis-url
a pause, resume, cancel or replay is announced to the workers at once, as the
CLI's own commands do. Binds 127.0.0.1 unless --host says otherwise: reach it
from elsewhere through a tunnel or an authenticating proxy. Prints its URL, and
stops on SIGINT or SIGTERM.`;

/** `lanewake dashboard`: the dashboard alone, until a signal. */
export function dashboardCommand(program: Command, { io }: CliContext): void {
  program
    .command('dashboard')
    .description('serve the operator dashboard (queues, items, lanes, dead letters, and actions with --admin-token)')
    .option('--port <n>', 'port to listen on (0: any free port)', parseInteger, 9465)
    .option('--host <address>', 'address to bind', '127.0.0.1')
    .option(
      '--admin-token <token>',
      `the token actions must send (at least ${MIN_TOKEN_CHARS} ` +
        `characters; LANEWAKE_ADMIN_TOKEN); without one, read-only`,
    )
    .option('--show-payloads', "show items' payloads")
    .addHelpText('after', HELP)
    .action(async (flags: DashboardFlags, cmd: Command) => {
      const g = globalOptions(cmd);
      const token = flags.adminToken ?? (process.env.LANEWAKE_ADMIN_TOKEN || undefined);
      if (token !== undefined && token.length < MIN_TOKEN_CHARS)
        throw new UsageError(`--admin-token: must be at least ${MIN_TOKEN_CHARS} characters`);
      if (flags.port < 0 || flags.port > 65_535) throw new UsageError('--port: must be 0-65535');
      await withLedger(g, (ledger) =>
        withWake(g, io, 'an announcement', async (wake) => {
          const admin = await startAdminServer({
            host: flags.host,
            port: flags.port,
            readiness: () => ledgerReadiness(ledger),
            dashboard: {
              backend: () => ({ ledger, wake }),
              adminToken: token,
              showPayloads: flags.showPayloads === true,
            },
            version: packageVersion(),
            logger: createLogger('lanewake.dashboard', process.env.LANEWAKE_LOG_LEVEL ?? 'info'),
          }).catch((error: unknown) => {
            if (error instanceof AdminAddressError)
              throw new UsageError(`${error.message}: choose another with --port or --host`);
            throw error;
          });
          println(io, admin.url);
          eprintln(io, token === undefined ? 'read-only (no --admin-token)' : 'actions enabled (--admin-token)');
          const signal = await new Promise<NodeJS.Signals>((resolve) => {
            const stop = (s: NodeJS.Signals): void => {
              process.off('SIGINT', stop);
              process.off('SIGTERM', stop);
              resolve(s);
            };
            process.on('SIGINT', stop);
            process.on('SIGTERM', stop);
          });
          eprintln(io, `${signal}: stopping`);
          await admin.close();
        }),
      );
    });
}
