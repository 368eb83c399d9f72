import { parseArgs } from 'node:util';

/** What one chaos run does. The short form is the default; `--long` changes the defaults, flags still override. */
export interface ChaosOptions {
  long: boolean;
  workers: number;
  concurrency: number;
  items: number;
  lanes: number;
  /** Length of the fault schedule; the producer enqueues during its first 85%. */
  faultSeconds: number;
  /** How long, after the faults stop, every item has to become terminal. */
  drainSeconds: number;
  leaseMs: number;
  reconcileIntervalMs: number;
  pollIntervalMs: number;
  /** Handler work time, drawn uniformly from [min, max] ms per item (by the producer, from the seed). */
  workMinMs: number;
  workMaxMs: number;
  poolSize: number;
  seed: number;
  /** Keep the database and the run directory (logs, records) even when every invariant holds. */
  keep: boolean;
  /** Where the figures go as JSON; the long form defaults to bench/results/chaos-latest.json. */
  out: string | undefined;
  /** Break something on purpose, to see the checks fire (SABOTAGES). */
  sabotage: Sabotage | undefined;
}

/**
 * - effect-outside-tx: the handlers write their effect outside ctx.transaction (exactly-once must fail);
 * - slow-reconcile: the workers reconcile every 2 x the interval the checks assume (rescue (a) must fail);
 * - skip-reclaimed: what a killed worker held becomes due only a second after its lease ends, so the
 *   consumers pass it over once it is reclaimed (rescue (b) must fail).
 */
export const SABOTAGES = ['effect-outside-tx', 'slow-reconcile', 'skip-reclaimed'] as const;
export type Sabotage = (typeof SABOTAGES)[number];

const SHORT = { workers: 3, concurrency: 16, items: 3000, lanes: 40, faultSeconds: 80, drainSeconds: 60, poolSize: 10 };
const LONG = {
  workers: 4,
  concurrency: 32,
  items: 100_000,
  lanes: 400,
  faultSeconds: 600,
  drainSeconds: 300,
  poolSize: 16,
};

export const HELP = `npm run chaos [-- options]

Drives lanewake worker processes (the real CLI) and a producer process through a
fault schedule — SIGKILL and SIGSTOP of workers, a private Redis stopped for 10 s
and restarted empty, KILL CONNECTION on the workers' MariaDB sessions, latency,
resets and timeouts from a Toxiproxy between the workers and MariaDB/Redis — then
checks every invariant from the ledger and the handlers' recorded effects.
Exits 0 when every invariant held, 1 when one failed (the summary names it),
2 on a bad option. Needs MariaDB on 127.0.0.1:3306 (root), redis-server and Go
(Toxiproxy is built once into ~/.cache/lanewake/toxiproxy by scripts/toxiproxy.sh).

  --long                    the long form: ${LONG.items} items, ${LONG.workers} workers x
                            concurrency ${LONG.concurrency}, ${LONG.faultSeconds / 60} minutes of faults;
                            writes bench/results/chaos-latest.json
  --workers <n>             worker processes (default ${SHORT.workers}; long ${LONG.workers}); w0 is never
                            killed or frozen, so its RSS shows growth over the whole run
  --concurrency <n>         handler slots per worker (default ${SHORT.concurrency}; long ${LONG.concurrency})
  --items <n>               items the producer enqueues (default ${SHORT.items}; long ${LONG.items})
  --lanes <n>               lanes they are spread over; a fifth of the items have none (default ${SHORT.lanes})
  --fault-seconds <s>       length of the fault schedule (default ${SHORT.faultSeconds}; long ${LONG.faultSeconds})
  --drain-seconds <s>       time for every item to become terminal afterwards (default ${SHORT.drainSeconds})
  --lease-ms <ms>           queue lease (default 2000)
  --reconcile-ms <ms>       the workers' reconcile interval (default 500)
  --poll-ms <ms>            the queue's ledger sweep interval (default 250)
  --work-ms <min-max>       handler work time per item (default 50-400)
  --pool-size <n>           ledger connections per worker (default ${SHORT.poolSize}; long ${LONG.poolSize})
  --seed <n>                seed of the schedule and the items (default: random, printed)
  --keep                    keep the database and the run directory after a passing run
  --out <file>              write the figures as JSON here
  --sabotage <what>          check the checks; the run must FAIL on the check named:
                            effect-outside-tx: handlers write their effect outside
                              ctx.transaction (exactly-once)
                            slow-reconcile: workers reconcile every 2 x --reconcile-ms,
                              the checks assume --reconcile-ms (rescue (a))
                            skip-reclaimed: a killed worker's items become due a second
                              after their lease ends, so claim rounds pass them over (rescue (b))
  --help                    this text
`;

export class OptionsError extends Error {
  override readonly name = 'OptionsError';
}

export function parseChaosOptions(argv: readonly string[]): ChaosOptions | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: false,
      strict: true,
      options: {
        long: { type: 'boolean' },
        workers: { type: 'string' },
        concurrency: { type: 'string' },
        items: { type: 'string' },
        lanes: { type: 'string' },
        'fault-seconds': { type: 'string' },
        'drain-seconds': { type: 'string' },
        'lease-ms': { type: 'string' },
        'reconcile-ms': { type: 'string' },
        'poll-ms': { type: 'string' },
        'work-ms': { type: 'string' },
        'pool-size': { type: 'string' },
        seed: { type: 'string' },
        keep: { type: 'boolean' },
        out: { type: 'string' },
        sabotage: { type: 'string' },
        help: { type: 'boolean' },
      },
    });
  } catch (error) {
    throw new OptionsError((error as Error).message);
  }
  const v = parsed.values;
  if (v.help) return 'help';
  const long = v.long === true;
  const base = long ? LONG : SHORT;
  const [workMinMs, workMaxMs] = parseRange(v['work-ms'] ?? '50-400', '--work-ms');
  const options: ChaosOptions = {
    long,
    workers: int(v.workers, base.workers, '--workers', 2, 32),
    concurrency: int(v.concurrency, base.concurrency, '--concurrency', 1, 1000),
    items: int(v.items, base.items, '--items', 10, 10_000_000),
    lanes: int(v.lanes, base.lanes, '--lanes', 1, 100_000),
    faultSeconds: int(v['fault-seconds'], base.faultSeconds, '--fault-seconds', 10, 86_400),
    drainSeconds: int(v['drain-seconds'], base.drainSeconds, '--drain-seconds', 5, 86_400),
    leaseMs: int(v['lease-ms'], 2000, '--lease-ms', 500, 600_000),
    reconcileIntervalMs: int(v['reconcile-ms'], 500, '--reconcile-ms', 100, 600_000),
    pollIntervalMs: int(v['poll-ms'], 250, '--poll-ms', 10, 600_000),
    workMinMs,
    workMaxMs,
    poolSize: int(v['pool-size'], base.poolSize, '--pool-size', 1, 512),
    seed: int(v.seed, Math.floor(Math.random() * 2 ** 31), '--seed', 0, 2 ** 31 - 1),
    keep: v.keep === true,
    out: v.out ?? (long ? 'bench/results/chaos-latest.json' : undefined),
    sabotage: sabotageOf(v.sabotage),
  };
  return options;
}

function sabotageOf(text: string | undefined): ChaosOptions['sabotage'] {
  if (text === undefined) return undefined;
  const known = SABOTAGES.find((s) => s === text);
  if (!known) throw new OptionsError(`--sabotage knows ${SABOTAGES.join(', ')}; got ${JSON.stringify(text)}`);
  return known;
}

function int(text: string | undefined, fallback: number, flag: string, min: number, max: number): number {
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text)) throw new OptionsError(`${flag} must be a whole number, got ${JSON.stringify(text)}`);
  const n = Number(text);
  if (n < min || n > max) throw new OptionsError(`${flag} must be between ${min} and ${max}, got ${n}`);
  return n;
}

function parseRange(text: string, flag: string): [number, number] {
  const m = /^(\d+)-(\d+)$/.exec(text);
  if (!m) throw new OptionsError(`${flag} must look like 20-200, got ${JSON.stringify(text)}`);
  const lo = Number(m[1]);
  const hi = Number(m[2]);
  if (lo > hi || hi > 60_000) throw new OptionsError(`${flag}: need min <= max <= 60000, got ${text}`);
  return [lo, hi];
}
