import { Option, type Command } from 'commander';
import { ValidationError } from '../errors.js';
import { parseLedgerConfig, type LedgerConfig } from '../ledger/config.js';
import { Ledger } from '../ledger/ledger.js';
import { createLogger } from '../log.js';
import { redisKeyPrefixSchema } from '../supervisor/config.js';
import { renamedEnvError } from '../supervisor/config-sources.js';
import { DEFAULT_KEY_PREFIX } from '../wake/keys.js';
import { WakeChannel } from '../wake/wake-channel.js';
import { CliError, renameFields, UsageError } from './errors.js';
import { redactUrl } from './format.js';
import { eprintln, type CliIo } from './io.js';
import { isClusterUrl, parseClusterUrl } from '../wake/redis.js';

/** What a command factory gets besides its parent command. */
export interface CliContext {
  io: CliIo;
}

export const DEFAULT_DATABASE_URL = 'mysql://root@127.0.0.1:3306/lanewake';

/** The options every command takes (before or after the command name). */
export interface GlobalOptions {
  databaseUrl: string;
  tablePrefix: string;
  redisUrl?: string | undefined;
  redisKeyPrefix: string;
  json: boolean;
}

export function addGlobalOptions(program: Command): void {
  program
    .addOption(
      new Option('--database-url <url>', 'ledger database (MariaDB 10.11, MySQL 8 or TiDB)')
        .env('LANEWAKE_DATABASE_URL')
        .default(DEFAULT_DATABASE_URL),
    )
    .addOption(
      new Option('--table-prefix <prefix>', 'prefix of the ledger tables').env('LANEWAKE_TABLE_PREFIX').default('lw_'),
    )
    .addOption(
      new Option(
        '--redis-url <url>',
        'Redis for wake-ups: enqueue, replay and activate then also ' +
          'notify consumers (a Redis failure is only a warning)',
      ).env('LANEWAKE_REDIS_URL'),
    )
    .addOption(
      new Option(
        '--redis-key-prefix <prefix>',
        'prefix of the Redis keys, as the workers use it (`redisKeyPrefix` in a worker --config file)',
      )
        .env('LANEWAKE_REDIS_KEY_PREFIX')
        .default(DEFAULT_KEY_PREFIX),
    )
    .option('--json', 'machine-readable output (JSON) where a command prints results', false);
}

/** The global options as seen from a (sub)command's action, checked. */
export function globalOptions(cmd: Command): GlobalOptions {
  const renamed = renamedEnvError(process.env);
  if (renamed) throw new UsageError(renamed.issues.map((i) => `${i.field} ${i.message}`).join('; '));
  const o = cmd.optsWithGlobals<Partial<GlobalOptions>>();
  const redisUrl = o.redisUrl === undefined || o.redisUrl === '' ? undefined : o.redisUrl;
  if (redisUrl !== undefined && !isRedisUrl(redisUrl))
    throw new UsageError(
      `option '--redis-url' must be a redis://, rediss:// or redis+cluster://host:port,host:port URL`,
    );
  const redisKeyPrefix = o.redisKeyPrefix ?? DEFAULT_KEY_PREFIX;
  const prefixCheck = redisKeyPrefixSchema.safeParse(redisKeyPrefix);
  if (!prefixCheck.success)
    throw new UsageError(`option '--redis-key-prefix' ${prefixCheck.error.issues[0]?.message ?? 'is invalid'}`);
  return {
    databaseUrl: o.databaseUrl ?? DEFAULT_DATABASE_URL,
    tablePrefix: o.tablePrefix ?? 'lw_',
    redisUrl,
    redisKeyPrefix,
    json: o.json === true,
  };
}

function isRedisUrl(url: string): boolean {
  if (isClusterUrl(url)) {
    try {
      parseClusterUrl(url);
      return true;
    } catch {
      return false;
    }
  }
  try {
    const u = new URL(url);
    return u.protocol === 'redis:' || u.protocol === 'rediss:';
  } catch {
    return false;
  }
}

/** The ledger configuration of the global options; a bad value is a usage error naming the option. */
export function ledgerConfig(g: GlobalOptions): LedgerConfig {
  try {
    return parseLedgerConfig({ url: g.databaseUrl, tablePrefix: g.tablePrefix, poolSize: 2 });
  } catch (error) {
    if (error instanceof ValidationError)
      throw renameFields(error, { url: '--database-url', tablePrefix: '--table-prefix' }, 'ledger config');
    throw error;
  }
}

const UNREACHABLE = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ECONNRESET',
  'PROTOCOL_CONNECTION_LOST',
  'ER_ACCESS_DENIED_ERROR',
]);

/** Turns a connection failure into a message that names the (redacted) database URL. */
export function explainLedgerError(error: unknown, g: GlobalOptions): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return error;
  const where = redactUrl(g.databaseUrl);
  if (code === 'ER_BAD_DB_ERROR')
    return new CliError(`the database of ${where} does not exist: create it with \`lanewake migrate\``);
  if (UNREACHABLE.has(code)) {
    const detail = error instanceof Error && error.message !== '' ? error.message : code;
    return new CliError(`cannot reach the ledger at ${where}: ${detail}`);
  }
  return error;
}

export interface LedgerUse {
  /** Refuse to run against a schema older than this build (every command but `migrate`). Default true. */
  requireCurrentSchema?: boolean;
}

/** Opens the ledger of the global options for `fn`, and closes it after. */
export async function withLedger<T>(
  g: GlobalOptions,
  fn: (ledger: Ledger) => Promise<T>,
  use: LedgerUse = {},
): Promise<T> {
  const ledger = new Ledger(ledgerConfig(g));
  try {
    if (use.requireCurrentSchema ?? true) {
      const status = await ledger.schemaStatus();
      if (status.behind) {
        throw new CliError(
          `the ledger schema is at version ${status.current}, this build ` +
            `needs ${status.required}: run \`lanewake migrate\` first`,
        );
      }
    }
    return await fn(ledger);
  } catch (error) {
    throw explainLedgerError(error, g);
  } finally {
    await ledger.close().catch(() => undefined);
  }
}

const CLOSE_TIMEOUT_MS = 2000;

/**
 * A wake channel for `fn` when --redis-url is given (else `undefined`).
 * Publishing is best effort: a failure becomes one warning on stderr after
 * `fn`, never a failed command — the ledger already holds the work.
 */
export async function withWake<T>(
  g: GlobalOptions,
  io: CliIo,
  what: string,
  fn: (wake: WakeChannel | undefined) => Promise<T>,
): Promise<T> {
  if (g.redisUrl === undefined) return fn(undefined);
  const wake = new WakeChannel({
    redis: g.redisUrl,
    keyPrefix: g.redisKeyPrefix,
    logger: createLogger('lanewake.cli', 'silent'),
  });
  try {
    const result = await fn(wake);
    if (wake.counters.failed > 0) {
      const why = wake.connected() ? 'Redis refused it' : 'Redis is unreachable';
      eprintln(
        io,
        `warning: ${what} not published to ${redactUrl(g.redisUrl)} (${why}); ` +
          `the ledger has the change, and workers find it at their next sweep`,
      );
    }
    return result;
  } finally {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      wake.close().catch(() => undefined),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, CLOSE_TIMEOUT_MS);
      }),
    ]);
    if (timer) clearTimeout(timer);
    wake.redis.disconnect();
  }
}

/** The flag that lets a settings command name a queue the ledger has not seen yet. */
export const NEW_QUEUE_FLAG = '--new-queue';
export const NEW_QUEUE_HELP =
  'the queue is new: set it even though the ledger has no item, setting, owner or consumer of it yet';

/**
 * Refuses (exit 2, naming `field`) a queue the ledger has never seen, unless
 * the operator said it is new: a typo in a queue's name would otherwise store
 * a setting for a queue nobody serves, change nothing, and answer success.
 */
export async function requireSeenQueue(
  ledger: Ledger,
  queue: string,
  field: string,
  isNew: boolean | undefined,
): Promise<void> {
  if (isNew === true) return;
  if (await ledger.operator.hasSeenQueue(queue)) return;
  throw new UsageError(
    `${field}: the ledger has never seen queue '${queue}' (no item, setting, owner or ` +
      `consumer of it): check the name, or add ${NEW_QUEUE_FLAG} if the queue is new`,
  );
}
