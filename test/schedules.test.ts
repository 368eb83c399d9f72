import { sql } from 'kysely';
import { Queue } from 'bullmq';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { Producer } from '../src/producer/producer.js';
import { scheduleFirerOf } from '../src/schedules/firing.js';
import { ScheduleFirer } from '../src/schedules/firer.js';
import { nextFireAfter, planDueFires } from '../src/ledger/schedule-times.js';
import { createLogger } from '../src/log.js';
import { ValidationError } from '../src/errors.js';
import { resolveWorkerConfig } from '../src/supervisor/config-sources.js';
import { Supervisor } from '../src/supervisor/supervisor.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { createTestWake, uniqueQueue } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { PrivateRedis } from './support/processes.js';
import { expectEveryFireOnce, firedItems, FirerReplica } from './support/schedule-replicas.js';
import { redisUrl } from './support/services.js';

/** The replica tests start processes, and a loaded machine starts them slowly. */
const SLOW_MS = 240_000;

const cleanups: (() => Promise<unknown>)[] = [];
/**
 * One database for the file (made once: TiDB makes a database's tables one
 * DDL job at a time, shared by every test run on the server). Each test has
 * its own queues and schedule names, and leaves no schedule behind, so a
 * firer's pass in one test finds none of another's due.
 */
let shared: TestLedger | undefined;
beforeAll(async () => {
  shared = await createTestLedger();
}, 600_000);
afterAll(async () => {
  await shared?.drop();
}, 600_000);
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  if (shared) await sql`DELETE FROM ${shared.ledger.tables.schedules}`.execute(shared.ledger.db);
});

async function ledger(): Promise<TestLedger> {
  if (!shared) throw new Error('no test ledger');
  return shared;
}

function replica(tl: TestLedger, extra: { clockOffsetMs?: number } = {}): FirerReplica {
  const r = new FirerReplica({ dbUrl: tl.url, ...extra });
  cleanups.push(() => r.kill());
  return r;
}

/** Waits until the schedule has made `n` items whose fire time is after `afterMs` (ledger time). */
async function firesAfter(
  tl: TestLedger,
  queue: string,
  name: string,
  afterMs: number,
  n: number,
  what: string,
): Promise<void> {
  await waitFor(
    async () => (await firedItems(tl.ledger, queue, name)).filter((f) => f.fireMs > afterMs).length >= n || undefined,
    30_000,
    what,
  );
}

describe('fire times', () => {
  test(
    'a cron pattern in a time zone keeps its local time across ' +
      'both DST changes, and fires once on the repeated hour',
    () => {
      const paris = { pattern: '30 2 * * *', tz: 'Europe/Paris', everyMs: null };
      // Spring forward (2026-03-29: 02:00 CET → 03:00 CEST, no 02:30 that night): cron-parser runs it at 03:30 CEST.
      expect(new Date(nextFireAfter(paris, Date.UTC(2026, 2, 28, 12))).toISOString()).toBe('2026-03-29T01:30:00.000Z');
      expect(new Date(nextFireAfter(paris, Date.UTC(2026, 2, 29, 12))).toISOString()).toBe('2026-03-30T00:30:00.000Z');
      // Fall back (2026-10-25: 03:00 CEST → 02:00 CET, 02:30 twice): once, then 02:30 CET the next day.
      const fall = nextFireAfter(paris, Date.UTC(2026, 9, 24, 12));
      expect(new Date(fall).toISOString()).toBe('2026-10-25T00:30:00.000Z');
      expect(new Date(nextFireAfter(paris, fall)).toISOString()).toBe('2026-10-26T01:30:00.000Z');
      const newYork = { pattern: '0 9 * * *', tz: 'America/New_York', everyMs: null };
      expect(new Date(nextFireAfter(newYork, Date.UTC(2026, 2, 7, 15))).toISOString()).toBe('2026-03-08T13:00:00.000Z');
      expect(new Date(nextFireAfter(newYork, Date.UTC(2026, 2, 6, 15))).toISOString()).toBe('2026-03-07T14:00:00.000Z');
    },
  );

  test('missed fires: skipped past a minute late by default, every one of the window with a backfill', () => {
    const hourly = { pattern: '0 * * * *', tz: null, everyMs: null };
    const next = Date.UTC(2026, 0, 1, 0);
    const now = Date.UTC(2026, 0, 1, 5, 0, 30);
    // 00:00 … 05:00 are due; 05:00 is 30 s late (run), the others missed (skipped).
    // Fires less than a minute late all run (a slow pass).
    const every = { pattern: null, tz: null, everyMs: 1000 };
    expect(planDueFires(every, 10_000, 12_500, 0)).toEqual({ fires: [10_000, 11_000, 12_000], nextFireAtMs: 13_000 });
    expect(planDueFires(hourly, next, now, 0)).toEqual({
      fires: [Date.UTC(2026, 0, 1, 5)],
      nextFireAtMs: Date.UTC(2026, 0, 1, 6),
    });
    expect(planDueFires(hourly, next, Date.UTC(2026, 0, 1, 5, 2), 0)).toEqual({
      fires: [],
      nextFireAtMs: Date.UTC(2026, 0, 1, 6),
    });
    const backfilled = planDueFires(hourly, next, now, 3 * 3_600_000);
    expect(backfilled.fires).toEqual([3, 4, 5].map((h) => Date.UTC(2026, 0, 1, h)));
    // A long backfill goes a batch at a time: the next fire stored is the first not enqueued, still due.
    const long = planDueFires(every, 0, 500_000, 1_000_000);
    expect(long.fires).toHaveLength(100);
    expect(long.nextFireAtMs).toBe(100_000);
  });
});

describe('recurring schedules in the ledger', () => {
  test(
    'fires go on from the ledger when Redis restarts empty',
    async () => {
      const tl = await ledger();
      const redis = await PrivateRedis.start();
      cleanups.push(() => redis.destroy());
      const wake = new WakeChannel({ redis: redis.url, keyPrefix: 'lws:' });
      cleanups.push(() => wake.close());
      const queue = uniqueQueue('sched-redis');
      const ran = new Set<string>();
      const consumer = new Consumer({
        ledger: tl.ledger,
        wake,
        queue,
        concurrency: 4,
        handlers: { tick: async (job: { id: string }) => void ran.add(job.id) },
      });
      await consumer.start();
      cleanups.push(() => consumer.stop());
      const producer = new Producer({ ledger: tl.ledger, wake });
      const name = `${queue}-every`;
      await producer.schedule({ name, everyMs: 250, item: { queue, type: 'tick', payload: {} } });
      await firesAfter(tl, queue, name, 0, 3, 'three fires before the restart');

      await redis.kill();
      await redis.start();
      const restartedAt = (await tl.ledger.now()).getTime();
      await firesAfter(tl, queue, name, restartedAt, 4, 'four fires after Redis came back empty');
      await producer.unschedule(name);
      const fires = await firedItems(tl.ledger, queue, name);
      expectEveryFireOnce(fires, 250);
      // And their items ran (the consumer finds them by its sweep, or by wake-ups on the new Redis).
      await waitFor(async () => ran.size >= fires.length || undefined, 20_000, 'every fired item to run');
    },
    SLOW_MS,
  );

  test(
    'the firing replica is SIGKILLed: another fires, and no fire is lost or doubled',
    async () => {
      const tl = await ledger();
      const queue = uniqueQueue('sched-kill');
      const name = `${queue}-every`;
      const first = replica(tl);
      await first.ready;
      await new Producer({ ledger: tl.ledger }).schedule({
        name,
        everyMs: 200,
        item: { queue, type: 'tick', payload: {} },
      });
      await firesAfter(tl, queue, name, 0, 3, 'three fires from the first replica');
      const second = replica(tl);
      await second.ready;
      await first.kill();
      const killedAt = (await tl.ledger.now()).getTime();
      await firesAfter(tl, queue, name, killedAt, 5, 'five fires after the kill');
      await tl.ledger.schedules.remove(name);
      const counters = await second.stop();
      expect(counters.enqueued).toBeGreaterThanOrEqual(5);
      expect(counters.duplicates).toBe(0);
      expectEveryFireOnce(await firedItems(tl.ledger, queue, name), 200);
    },
    SLOW_MS,
  );

  test(
    'four replicas: exactly one item per fire, each fire enqueued by one of them only',
    async () => {
      const tl = await ledger();
      const queue = uniqueQueue('sched-four');
      const name = `${queue}-every`;
      const replicas = [0, 1, 2, 3].map(() => replica(tl));
      await Promise.all(replicas.map((r) => r.ready));
      await new Producer({ ledger: tl.ledger }).schedule({
        name,
        everyMs: 150,
        item: { queue, type: 'tick', payload: {} },
      });
      await firesAfter(tl, queue, name, 0, 20, 'twenty fires');
      await tl.ledger.schedules.remove(name);
      const counters = await Promise.all(replicas.map((r) => r.stop()));
      const fires = await firedItems(tl.ledger, queue, name);
      expectEveryFireOnce(fires, 150);
      // The CAS let one replica enqueue each fire: no replica's enqueue came back a duplicate.
      expect(counters.reduce((n, c) => n + c.duplicates, 0)).toBe(0);
      expect(counters.reduce((n, c) => n + c.enqueued, 0)).toBe(fires.length);
    },
    SLOW_MS,
  );

  test(
    'two replicas whose clocks are 2 s ahead and 2 s behind: one ' +
      'item per fire, none before its time on the ledger clock',
    async () => {
      const tl = await ledger();
      const queue = uniqueQueue('sched-skew');
      const name = `${queue}-every`;
      const replicas = [replica(tl, { clockOffsetMs: 2_000 }), replica(tl, { clockOffsetMs: -2_000 })];
      await Promise.all(replicas.map((r) => r.ready));
      await new Producer({ ledger: tl.ledger }).schedule({
        name,
        everyMs: 200,
        item: { queue, type: 'tick', payload: {} },
      });
      await firesAfter(tl, queue, name, 0, 15, 'fifteen fires');
      await tl.ledger.schedules.remove(name);
      const counters = await Promise.all(replicas.map((r) => r.stop()));
      expectEveryFireOnce(await firedItems(tl.ledger, queue, name), 200);
      expect(counters.reduce((n, c) => n + c.duplicates, 0)).toBe(0);
    },
    SLOW_MS,
  );

  test(
    'a weekly cron pattern in a time zone, backfilled through the ledger across DST changes',
    async () => {
      const tl = await ledger();
      const queue = uniqueQueue('sched-dst');
      const name = `${queue}-sundays`;
      await tl.ledger.schedules.upsert({
        name,
        pattern: '30 2 * * 0',
        tz: 'Europe/Paris',
        backfillMs: 360 * 86_400_000,
        item: { queue, type: 'tick', payload: {} },
      });
      // As if no worker had run for 360 days: the next fire stored then was 360 days ago.
      const now = (await tl.ledger.now()).getTime();
      const from = nextFireAfter({ pattern: '30 2 * * 0', tz: 'Europe/Paris', everyMs: null }, now - 360 * 86_400_000);
      await sql`UPDATE ${tl.ledger.tables.schedules} SET next_fire_at = ${new Date(from)} WHERE name = ${name}`.execute(
        tl.ledger.db,
      );
      const firer = new ScheduleFirer({ ledger: tl.ledger, log: createLogger('test') });
      // A pass fires what is due, batch after batch, until nothing is.
      await firer.pass();
      const fires = await firedItems(tl.ledger, queue, name);
      expect(firer.counters.enqueued).toBe(fires.length);
      const localDay = new Intl.DateTimeFormat('en-CA', {
        timeZone: 'Europe/Paris',
        year: 'numeric',
        month: '2-digit',
        day: '2-digit',
        weekday: 'short',
      });
      const localTime = new Intl.DateTimeFormat('en-GB', {
        timeZone: 'Europe/Paris',
        hour: '2-digit',
        minute: '2-digit',
        hourCycle: 'h23',
      });
      const days = fires.map((f) => localDay.format(f.fireMs));
      // One fire per Sunday of the 360 days, none twice (the fall's repeated 02:30 included)…
      expect(new Set(days).size).toBe(days.length);
      expect(days.every((d) => d.startsWith('Sun'))).toBe(true);
      expect(fires.length).toBeGreaterThanOrEqual(51);
      // …each at 02:30 local, but on the spring's Sunday, which has no 02:30 (03:30 then).
      const times = fires.map((f) => localTime.format(f.fireMs));
      expect(times.filter((t) => t === '03:30').length).toBeLessThanOrEqual(1);
      expect(times.filter((t) => t !== '02:30' && t !== '03:30')).toEqual([]);
      // Both offsets (CET and CEST) were crossed.
      expect(new Set(fires.map((f) => new Date(f.fireMs).getUTCHours())).size).toBeGreaterThanOrEqual(2);
      const after = await tl.ledger.schedules.get(name);
      expect(after?.nextFireAt.getTime()).toBeGreaterThan(now);
      expect(after?.fires).toBe(fires.length);
    },
    SLOW_MS,
  );

  test(
    'missed fires after downtime: skipped by default, backfilled within the window',
    async () => {
      const tl = await ledger();
      const queue = uniqueQueue('sched-missed');
      const item = { queue, type: 'tick', payload: {} };
      await tl.ledger.schedules.upsert({ name: `${queue}-skip`, pattern: '0 0 * * *', item });
      await tl.ledger.schedules.upsert({
        name: `${queue}-fill`,
        pattern: '0 0 * * *',
        backfillMs: 5 * 86_400_000,
        item,
      });
      const now = (await tl.ledger.now()).getTime();
      const midnight = Math.floor(now / 86_400_000) * 86_400_000;
      await sql`UPDATE ${tl.ledger.tables.schedules} SET next_fire_at = ${new Date(midnight - 3 * 86_400_000)}
        WHERE queue = ${queue}`.execute(tl.ledger.db);
      await new ScheduleFirer({ ledger: tl.ledger, log: createLogger('test') }).pass();
      expect(await firedItems(tl.ledger, queue, `${queue}-skip`)).toEqual([]);
      const filled = await firedItems(tl.ledger, queue, `${queue}-fill`);
      expect(filled.map((f) => f.fireMs)).toEqual([3, 2, 1, 0].map((d) => midnight - d * 86_400_000));
      for (const s of [`${queue}-skip`, `${queue}-fill`])
        expect((await tl.ledger.schedules.get(s))?.nextFireAt.getTime()).toBe(midnight + 86_400_000);
    },
    SLOW_MS,
  );

  test(
    'a paused schedule fires nothing; resumed, it goes on',
    async () => {
      const tl = await ledger();
      const queue = uniqueQueue('sched-pause');
      const name = `${queue}-every`;
      await tl.ledger.schedules.upsert({
        name,
        everyMs: 3_600_000,
        backfillMs: 10 * 3_600_000,
        item: { queue, type: 'tick', payload: {} },
      });
      expect(await tl.ledger.schedules.pause(name)).toBe(true);
      const hour = Math.floor((await tl.ledger.now()).getTime() / 3_600_000) * 3_600_000;
      await sql`UPDATE ${tl.ledger.tables.schedules} SET next_fire_at = ${new Date(hour - 2 * 3_600_000)}
        WHERE name = ${name}`.execute(tl.ledger.db);
      const firer = new ScheduleFirer({ ledger: tl.ledger, log: createLogger('test') });
      await firer.pass();
      expect(await firedItems(tl.ledger, queue, name)).toEqual([]);
      expect(await tl.ledger.schedules.resume(name)).toBe(true);
      await firer.pass();
      expect((await firedItems(tl.ledger, queue, name)).map((f) => f.fireMs)).toEqual([
        hour - 2 * 3_600_000,
        hour - 3_600_000,
        hour,
      ]);
      expect(await tl.ledger.schedules.pause('no-such-schedule')).toBe(false);
    },
    SLOW_MS,
  );
});

describe('schedules declared in the worker config, and schedules kept in Redis before', () => {
  test(
    'the file is the source for its schedules, API ones stay, and an ' +
      'old BullMQ schedule is imported and fires from the ledger',
    async () => {
      const tl = await ledger();
      const tw = createTestWake();
      cleanups.push(() => tw.drop());
      const queue = uniqueQueue('sched-config');
      const item = { queue, type: 'tick', payload: { from: 'x' } };
      // The old shape: a BullMQ job scheduler, as producer.schedule made it before schema 12.
      const old = new Queue('lanewake-timers', {
        connection: { url: redisUrl() } as never,
        prefix: tw.keyPrefix.replace(/:$/, ''),
      });
      cleanups.push(() => old.close());
      const legacy = `${queue}-legacy`;
      await old.upsertJobScheduler(
        legacy,
        { every: 300 },
        { name: 'schedule', data: { ...item, schedule: legacy }, opts: { removeOnComplete: true, removeOnFail: 1000 } },
      );
      expect((await old.getJobSchedulers()).map((j) => j.key)).toEqual([legacy]);
      await new Producer({ ledger: tl.ledger }).schedule({ name: `${queue}-api`, pattern: '0 0 1 1 *', item });

      const ran: string[] = [];
      const config = (schedules: unknown[]) =>
        resolveWorkerConfig([
          {
            databaseUrl: tl.url,
            redisUrl: redisUrl(),
            redisKeyPrefix: tw.keyPrefix,
            handlers: 'inline',
            admin: false,
            drainTimeoutMs: 5_000,
            queues: [{ name: queue }],
            schedules,
          },
        ]);
      const start = async (schedules: unknown[]) => {
        const sup = new Supervisor({
          config: config(schedules),
          handlers: { [queue]: { tick: async (job: { id: string }) => void ran.push(job.id) } },
        });
        cleanups.push(() => sup.stop());
        await sup.start();
        return sup;
      };
      const first = await start([{ name: `${queue}-file`, everyMs: 250, item }]);
      await firesAfter(tl, queue, `${queue}-file`, 0, 2, 'the file schedule to fire');
      await firesAfter(tl, queue, legacy, 0, 2, 'the imported schedule to fire from the ledger');
      expect(await old.getJobSchedulers()).toEqual([]);
      const listed = await tl.ledger.schedules.list();
      expect(listed.map((s) => [s.name, s.source])).toEqual([
        [`${queue}-api`, 'api'],
        [`${queue}-file`, 'config'],
        [legacy, 'api'],
      ]);
      expect(listed.find((s) => s.name === legacy)).toMatchObject({ everyMs: 300, item });
      await waitFor(() => ran.length >= 4 || undefined, 20_000, 'fired items to run');
      await first.stop();

      // A file without that schedule removes it; the API's and the imported one stay.
      await (await start([])).stop();
      expect((await tl.ledger.schedules.list()).map((s) => s.name)).toEqual([`${queue}-api`, legacy]);
      // A worker whose file has no schedules section leaves them all alone.
      await (await start(undefined as unknown as unknown[])).stop();
      expect((await tl.ledger.schedules.list()).map((s) => s.name)).toEqual([`${queue}-api`, legacy]);
      expect(scheduleFirerOf(first.ledger)).toBeUndefined();
    },
    SLOW_MS,
  );

  test('a schedules section with a bad pattern is refused, naming the field', () => {
    expect(() =>
      resolveWorkerConfig([
        {
          databaseUrl: 'mysql://x',
          handlers: 'h',
          queues: [{ name: 'q' }],
          schedules: [{ name: 'n', pattern: 'nope', item: { queue: 'q', type: 't', payload: {} } }],
        },
      ]),
    ).toThrow(/schedules\[0\]\.pattern/);
  });
});

test(
  'a config schedule whose item could not be enqueued is refused ' +
    'at the reconcile, naming the field, and nothing is written',
  async () => {
    const tl = await ledger();
    const item = { queue: 'q', type: 't', payload: {} };
    const err = await tl.ledger.schedules
      .reconcileConfig([
        { name: 'fine', everyMs: 1000, item },
        { name: 'huge', everyMs: 1000, item: { ...item, payload: { big: 'x'.repeat(2_000_000) } } },
      ])
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).fields).toEqual(['schedules[1].item.payload']);
    expect(await tl.ledger.schedules.list()).toEqual([]);
  },
  SLOW_MS,
);
