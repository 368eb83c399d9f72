/**
 * Schedule fire lateness (docs/BENCHMARKS.md, "Schedules"): an every-250 ms schedule fired by `--replicas` firers
 * in this process, each on a Ledger of its own, for `--seconds`. Per fire: its item's created_at (the ledger's
 * clock, in the fire's transaction) minus its fire time; and the look-ups and lost CASes per fire.
 */
import { sql } from 'kysely';
import { Ledger } from '../../src/ledger/ledger.js';
import { ScheduleFirer } from '../../src/schedules/firer.js';
import { fmt, percentile, sleep } from '../support.js';
import { defineWorkload, numFlag, silent, withFreshLedger } from '../workload.js';

const REPLICAS = numFlag('--replicas', 2);
const SECONDS = numFlag('--seconds', 15);
const EVERY_MS = 250;

interface Result {
  lateMs: number[];
  passes: number;
  lost: number;
}

export default defineWorkload<'tick', Result>({
  about: 'how late an every-250 ms schedule fires, with several firers (Schedules)',
  variants: ['tick'],
  label: () => 'schedule',
  runs: 1,
  measure: () =>
    withFreshLedger('lwsched', async ({ ledger }) => {
      const queue = 'sched';
      const ledgers = Array.from({ length: REPLICAS }, () => new Ledger({ url: ledger.config.url, poolSize: 4 }));
      const firers = ledgers.map((l) => new ScheduleFirer({ ledger: l, log: silent }));
      for (const f of firers) f.start();
      await ledger.schedules.upsert({ name: 'tick', everyMs: EVERY_MS, item: { queue, type: 'tick', payload: {} } });
      await sleep(SECONDS * 1000);
      await ledger.schedules.remove('tick');
      for (const f of firers) await f.stop();
      for (const l of ledgers) await l.close();
      const r = await sql<{ late_us: number | string }>`SELECT TIMESTAMPDIFF(MICROSECOND,
        FROM_UNIXTIME(CAST(SUBSTRING(idempotency_key, 6) AS UNSIGNED) / 1000), created_at) AS late_us
        FROM ${ledger.tables.items} WHERE queue = ${queue}`.execute(ledger.db);
      return {
        lateMs: r.rows.map((x) => Number(x.late_us) / 1000),
        passes: firers.reduce((n, f) => n + f.counters.passes, 0),
        lost: firers.reduce((n, f) => n + f.counters.lost, 0),
      };
    }),
  line: (_, r) => `${r.lateMs.length} fires`,
  report: (of) =>
    of('tick').map((r) => ({
      title: `schedule every ${EVERY_MS} ms, ${REPLICAS} firers, ${SECONDS} s`,
      headers: ['fires', 'late p50 ms', 'late p99 ms', 'late max ms', 'passes per fire', 'CAS lost per fire'],
      rows: [
        [
          String(r.lateMs.length),
          fmt(percentile(r.lateMs, 50), 1),
          fmt(percentile(r.lateMs, 99), 1),
          fmt(Math.max(...r.lateMs), 1),
          fmt(r.passes / r.lateMs.length, 2),
          fmt(r.lost / r.lateMs.length, 2),
        ],
      ],
    })),
});
