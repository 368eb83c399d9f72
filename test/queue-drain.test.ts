// Drain-only queues and their delete (docs/design.md §7, "Draining and deleting a queue"): enqueues refused with a
// typed error, what the queue holds finishes, and an empty queue goes with its rows and Redis keys.
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { type QueueDeleteRefusedError, QueueDrainingError } from '../src/errors.js';
import { Ledger } from '../src/ledger/ledger.js';
import { createLogger } from '../src/log.js';
import { ScheduleFirer } from '../src/schedules/firer.js';
import { lanewake } from './support/cli.js';
import { consumerHarness } from './support/consumer-harness.js';
import { itemCount } from './support/items.js';
import { testTxnMode, waitFor, waitForCount } from './support/ledger.js';
import { redisUrl } from './support/services.js';

const harness = consumerHarness('drain');

/** Moves the queue's drain start back, as if it had been drain-only for `ms`, so its delete need not wait. */
async function drainingFor(ledger: Ledger, queue: string, ms: number): Promise<void> {
  await sql`UPDATE ${sql.table(`${ledger.tables.prefix}queues`)}
    SET drain_since = NOW(6) - INTERVAL ${sql.raw(String(ms * 1000))} MICROSECOND WHERE queue = ${queue}`.execute(
    ledger.db,
  );
}

describe('drain-only queues', () => {
  test('enqueues are refused naming the queue, in a batch by index; other queues and --undo take items', async () => {
    const { tl, queue } = await harness.setUp();
    const ledger = tl.ledger;
    await ledger.enqueue({ queue, type: 't', payload: {} });
    const drain = await lanewake(['--database-url', tl.url, 'queue', 'drain', queue, '--json']);
    expect(drain.code, drain.err).toBe(0);
    expect(JSON.parse(drain.out)).toEqual({ queue, drainOnly: true });
    expect(await ledger.drainOnlyQueues([queue, 'other'])).toEqual(new Set([queue]));
    // Another process's ledger reads the flag at its first enqueue.
    const other = new Ledger({ url: tl.url, poolSize: 2, ...testTxnMode() });
    try {
      const refused = await other.enqueue({ queue, type: 't', payload: {} }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(QueueDrainingError);
      expect(refused).toMatchObject({ queue, state: 'drain_only', index: undefined });
      expect((refused as Error).message).toContain(`queue ${queue} is drain-only`);
      const batch = await other
        .enqueueMany([
          { queue: `${queue}-b`, type: 't', payload: {} },
          { queue, type: 't', payload: {} },
        ])
        .catch((e: unknown) => e);
      expect(batch).toMatchObject({ name: 'QueueDrainingError', queue, index: 1 });
      expect(await itemCount(ledger, `${queue}-b`)).toBe(0);
      await other.enqueue({ queue: `${queue}-b`, type: 't', payload: {} });
      expect(await itemCount(ledger, queue)).toBe(1);

      const list = await lanewake(['--database-url', tl.url, 'queue', 'list']);
      expect(list.out).toContain(`${queue}  drain-only`);
      expect(list.out).toContain(`${queue}-b\n`);

      expect((await lanewake(['--database-url', tl.url, 'queue', 'drain', queue, '--undo'])).code).toBe(0);
      // Taken again once the other process's reading of the flag is older than its cache interval.
      await waitFor(
        () =>
          other.enqueue({ queue, type: 't', payload: {} }).then(
            () => true,
            () => false,
          ),
        5_000,
        'an enqueue taken again after --undo',
      );
      expect(await itemCount(ledger, queue)).toBe(2);
    } finally {
      await other.close();
    }
  });

  test('delete is refused until drain-only, settled and empty; then its rows and Redis keys go', async () => {
    const { tl, tw, queue, producer } = await harness.setUp();
    const ledger = tl.ledger;
    const done: string[] = [];
    const consumer = await harness.consumer({ t: async (job) => void done.push(job.id) }, { name: 'c' });
    const first = await producer.enqueue({ queue, type: 't', payload: {}, lane: 'l' });
    // Its completion written, not only its handler run: the delete counts what the ledger holds unfinished.
    await waitFor(
      async () =>
        ((await ledger.inspect(first.id))?.item.state === 'completed' && done.includes(first.id)) || undefined,
      10_000,
      'the first item completed',
    );
    const waiting = await producer.enqueue({ queue, type: 't', payload: {}, delayMs: 60_000 });
    const refusal = (q: string) => ledger.deleteQueue(q).catch((e: unknown) => e as QueueDeleteRefusedError);
    expect(await refusal(queue)).toMatchObject({ name: 'QueueDeleteRefusedError', reason: 'not_drain_only' });

    await ledger.setDrainOnly(queue, true);
    expect(await refusal(queue)).toMatchObject({ reason: 'settling' });
    await drainingFor(ledger, queue, 60_000);
    expect(await refusal(queue)).toMatchObject({ reason: 'not_empty', unfinished: 1 });
    const cli = await lanewake(['--database-url', tl.url, 'queue', 'delete', queue]);
    expect(cli.code).toBe(1);
    expect(cli.err).toContain('still holds 1 unfinished item(s)');
    expect(await itemCount(ledger, queue)).toBe(2);

    await ledger.cancel(waiting.id);
    await consumer.stop();
    const keys = await tw.wake.redis.keys(`${tw.keyPrefix}{${queue}}*`);
    expect(keys.length).toBeGreaterThan(0);
    const deleted = await lanewake([
      '--database-url',
      tl.url,
      '--redis-url',
      redisUrl(),
      '--redis-key-prefix',
      tw.keyPrefix.replace(/:$/, ':'),
      'queue',
      'delete',
      queue,
      '--json',
    ]);
    expect(deleted.code, deleted.err).toBe(0);
    expect(JSON.parse(deleted.out)).toMatchObject({ queue, deleted: true, items: 2 });
    expect(await itemCount(ledger, queue)).toBe(0);
    expect(await tw.wake.redis.keys(`${tw.keyPrefix}{${queue}}*`)).toEqual([]);
    const rows = await sql<{ n: number }>`SELECT
        (SELECT COUNT(*) FROM ${sql.table(`${ledger.tables.prefix}queues`)} WHERE queue = ${queue})
      + (SELECT COUNT(*) FROM ${sql.table(`${ledger.tables.prefix}lanes`)} WHERE queue = ${queue})
      + (SELECT COUNT(*) FROM ${sql.table(`${ledger.tables.prefix}attempts`)} WHERE item_id = ${first.id})
      + (SELECT COUNT(*) FROM ${sql.table(`${ledger.tables.prefix}consumers`)} WHERE queue = ${queue}) AS n`.execute(
      ledger.db,
    );
    expect(Number(rows.rows[0]?.n)).toBe(0);
    // The name can be used again: a new queue of that name.
    await ledger.enqueue({ queue, type: 't', payload: {} });
    expect(await itemCount(ledger, queue)).toBe(1);
    expect(await ledger.drainOnlyQueues([queue])).toEqual(new Set());
  });

  test('processes meeting a new queue at once all enqueue, and write its row once', async () => {
    const { tl, queue } = await harness.setUp();
    const ledgers = Array.from({ length: 4 }, () => new Ledger({ url: tl.url, poolSize: 2, ...testTxnMode() }));
    try {
      await Promise.all(
        ledgers.map((l, i) =>
          l.enqueueMany(Array.from({ length: 5 }, (_, j) => ({ queue, type: 't', payload: { i, j } }))),
        ),
      );
    } finally {
      await Promise.all(ledgers.map((l) => l.close()));
    }
    expect(await itemCount(tl.ledger, queue)).toBe(20);
    expect((await tl.ledger.queueRows()).filter((r) => r.queue === queue)).toEqual([
      {
        queue,
        paused: false,
        staleOnly: false,
        drainOnly: false,
        slots: null,
        maxProcessing: null,
        concurrencyLimit: null,
        incarnation: expect.any(Number),
      },
    ]);
  });

  test("a drain-only queue's schedule passes its fires; the schedules after it still fire", async () => {
    const { tl, queue } = await harness.setUp();
    const ledger = tl.ledger;
    const open = `${queue}-open`;
    // Named so the drain-only queue's schedule is read first.
    await ledger.schedules.upsert({ name: `a-${queue}`, everyMs: 1_000, item: { queue, type: 't', payload: {} } });
    await ledger.schedules.upsert({
      name: `b-${queue}`,
      everyMs: 1_000,
      item: { queue: open, type: 't', payload: {} },
    });
    await ledger.setDrainOnly(queue, true);
    const firer = new ScheduleFirer({ ledger, log: createLogger('test', 'silent') });
    await waitFor(
      async () => {
        await firer.pass();
        return (await itemCount(ledger, open)) > 0 || undefined;
      },
      10_000,
      'the open queue fired',
    );
    expect(await itemCount(ledger, queue)).toBe(0);
    const drained = await ledger.schedules.get(`a-${queue}`);
    expect(drained?.lastFireAt).not.toBeNull();
  });

  test('under load: once refused, nothing more is taken; all taken before finishes; nothing lost', async () => {
    const { tl, queue, producer } = await harness.setUp();
    const ledger = tl.ledger;
    const started = new Set<string>();
    await harness.consumer(
      {
        t: async (job) => {
          started.add(job.id);
          await new Promise((r) => setTimeout(r, 2));
        },
      },
      { name: 'c', concurrency: 4 },
    );
    const accepted: string[] = [];
    let refused = 0;
    let acceptedAfterRefusal = 0;
    let stop = false;
    const producing = (async () => {
      while (!stop) {
        try {
          const r = await producer.enqueue({ queue, type: 't', payload: {} });
          accepted.push(r.id);
          if (refused > 0) acceptedAfterRefusal++;
        } catch (error) {
          if (!(error instanceof QueueDrainingError)) throw error;
          refused++;
        }
      }
    })();
    await waitFor(() => started.size >= 50 || undefined, 30_000, '50 items started under load');
    await ledger.setDrainOnly(queue, true);
    await waitFor(() => refused >= 20 || undefined, 10_000, 'enqueues refused');
    stop = true;
    await producing;
    expect(acceptedAfterRefusal).toBe(0);
    await waitForCount(async () => started.size, accepted.length, 20_000, 'every accepted item started');
    await waitForCount(() => itemCount(ledger, queue, 'completed'), accepted.length, 20_000, 'every item completed');
    expect([...started].sort()).toEqual([...accepted].sort());
    expect(await itemCount(ledger, queue)).toBe(accepted.length);
    await drainingFor(ledger, queue, 60_000);
    expect(await ledger.deleteQueue(queue)).toEqual({ items: accepted.length });
  });
});
