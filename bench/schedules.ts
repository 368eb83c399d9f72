/**
 * Schedule fire lateness (docs/BENCHMARKS.md, "Schedules"): an every-250 ms
 * schedule fired by `--replicas` firers in this process, each on a Ledger
 * of its own, for `--seconds`. Per fire: its item's created_at (the ledger's
 * clock, in the fire's transaction) minus its fire time; and the look-ups
 * the firers made per fire.
 *
 *   npm run bench:schedules
 *   npm run bench:schedules -- --replicas 4 --seconds 20
 */
import { sql } from 'kysely';
import { Ledger } from '../src/ledger/ledger.js';
import { createLogger } from '../src/log.js';
import { ScheduleFirer } from '../src/schedules/firer.js';
import { withFreshLedger } from './fresh-ledger.js';
import { cliFlag, fmt, percentile, printTable, runBenchmark, sleep } from './support.js';

const REPLICAS = Number(cliFlag('--replicas') ?? 2);
const SECONDS = Number(cliFlag('--seconds') ?? 15);
const EVERY_MS = 250;

runBenchmark(async () => {
  await withFreshLedger('lwsched', async (ledger) => {
    const queue = 'sched';
    const url = ledger.config.url;
    const ledgers = Array.from({ length: REPLICAS }, () => new Ledger({ url, poolSize: 4 }));
    const firers = ledgers.map((l) => new ScheduleFirer({ ledger: l, log: createLogger('bench', 'silent') }));
    for (const f of firers) f.start();
    await ledger.schedules.upsert({ name: 'tick', everyMs: EVERY_MS, item: { queue, type: 'tick', payload: {} } });
    await sleep(SECONDS * 1000);
    await ledger.schedules.remove('tick');
    for (const f of firers) await f.stop();
    const r = await sql<{
      late_us: number | string;
    }>`SELECT TIMESTAMPDIFF(MICROSECOND, FROM_UNIXTIME(CAST(SUBSTRING(idempotency_key, 6) AS UNSIGNED) / 1000),
      created_at) AS late_us
      FROM ${ledger.tables.items} WHERE queue = ${queue}`.execute(ledger.db);
    const lateMs = r.rows.map((x) => Number(x.late_us) / 1000);
    const passes = firers.reduce((n, f) => n + f.counters.passes, 0);
    const lost = firers.reduce((n, f) => n + f.counters.lost, 0);
    printTable(
      `schedule every ${EVERY_MS} ms, ${REPLICAS} firers, ${SECONDS} s`,
      ['fires', 'late p50 ms', 'late p99 ms', 'late max ms', 'passes per fire', 'CAS lost per fire'],
      [
        [
          String(lateMs.length),
          fmt(percentile(lateMs, 50), 1),
          fmt(percentile(lateMs, 99), 1),
          fmt(Math.max(...lateMs), 1),
          fmt(passes / lateMs.length, 2),
          fmt(lost / lateMs.length, 2),
        ],
      ],
    );
    for (const l of ledgers) await l.close();
  });
});
