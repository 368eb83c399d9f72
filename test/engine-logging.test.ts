import { afterEach, expect, test } from 'vitest';
import { z } from 'zod';
import { Consumer } from '../src/consumer/consumer.js';
import { PermanentError } from '../src/consumer/errors.js';
import type { Outcome } from '../src/consumer/job-run.js';
import { defineHandler } from '../src/consumer/types.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { captureLog } from './support/captured-log.js';

// What an operator reads about items that die or are retried: one line each,
// naming the item, its type, attempt and failure class, never its payload.

let tl: TestLedger | undefined;
let tw: TestWake | undefined;
let consumer: Consumer | undefined;
afterEach(async () => {
  await consumer?.stop({ drainTimeoutMs: 1000 });
  consumer = undefined;
  await tw?.drop();
  await tl?.drop();
});

const SECRET = 'payload-secret-0815';

test('each death is logged at warn, each retry at info, with id, type, attempt and class, no payload', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('logs');
  const log = captureLog('info');
  const outcomes = new Map<string, Outcome[]>();
  consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 4,
    pollIntervalMs: 200,
    logger: log.logger,
    unknownType: 'dead',
    backoff: { baseMs: 10, maxMs: 10, jitter: 0 },
    handlers: {
      typed: defineHandler({ schema: z.object({ n: z.number() }), handle: async () => 'ok' }),
      flaky: async (job) => {
        if (job.attempt === 1) throw new Error('first attempt fails');
        return 'ok';
      },
      doomed: async () => {
        throw new Error('always fails');
      },
      permanent: async () => {
        throw new PermanentError('never', 'bad_input');
      },
    },
  });
  consumer.on('outcome', (item, o) => outcomes.set(item.id, [...(outcomes.get(item.id) ?? []), o]));
  await consumer.start();
  const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
  const enqueue = async (type: string, payload: unknown, maxAttempts = 3) =>
    (await producer.enqueue({ queue, type, payload, maxAttempts })).id;
  const invalid = await enqueue('typed', { n: 'not a number', secret: SECRET });
  const unowned = await enqueue('nobody.handles', { secret: SECRET });
  const flaky = await enqueue('flaky', { secret: SECRET });
  const doomed = await enqueue('doomed', { secret: SECRET }, 2);
  const permanent = await enqueue('permanent', { secret: SECRET });
  const ended = (id: string, o: Outcome) => outcomes.get(id)?.includes(o) ?? false;
  await waitFor(
    () =>
      (ended(invalid, 'dead') &&
        ended(unowned, 'dead') &&
        ended(flaky, 'completed') &&
        ended(doomed, 'dead') &&
        ended(permanent, 'dead')) ||
      undefined,
    15_000,
    'every item to end',
  );

  const deaths = log.lines.filter((l) => l.level === 40 && /dead/.test(l.msg));
  const byId = (id: string) => deaths.filter((l) => l.id === id);
  expect(byId(invalid)).toEqual([
    expect.objectContaining({ id: invalid, type: 'typed', attempt: 1, class: 'invalid_payload' }),
  ]);
  expect(byId(unowned)).toEqual([
    expect.objectContaining({ id: unowned, type: 'nobody.handles', attempt: 1, class: 'unowned' }),
  ]);
  expect(byId(doomed)).toEqual([expect.objectContaining({ id: doomed, type: 'doomed', attempt: 2, class: 'error' })]);
  expect(byId(permanent)).toEqual([
    expect.objectContaining({ id: permanent, type: 'permanent', attempt: 1, class: 'bad_input' }),
  ]);
  expect(deaths).toHaveLength(4);

  const retries = log.at(30, /retry/);
  expect(retries).toEqual([
    expect.objectContaining({
      id: expect.any(String),
      type: expect.stringMatching(/^(flaky|doomed)$/),
      attempt: 1,
      class: 'error',
    }),
    expect.objectContaining({
      id: expect.any(String),
      type: expect.stringMatching(/^(flaky|doomed)$/),
      attempt: 1,
      class: 'error',
    }),
  ]);
  expect(new Set(retries.map((l) => l.id))).toEqual(new Set([flaky, doomed]));

  expect(JSON.stringify(log.lines)).not.toContain(SECRET);
});
