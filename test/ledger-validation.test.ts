import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { sql } from 'kysely';
import { Consumer } from '../src/consumer/consumer.js';
import { ValidationError } from '../src/errors.js';
import { Ledger, type EnqueueInput } from '../src/ledger/ledger.js';
import type { LedgerConfigInput } from '../src/ledger/config.js';
import { resolveWorkerConfig } from '../src/supervisor/config-sources.js';
import { claimOne, freshQueue, historyCount, itemCount, mustGet } from './support/items.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';

const PAYLOAD_MAX = 1024;
let tl: TestLedger;
let ledger: Ledger;

beforeAll(async () => {
  tl = await createTestLedger({ payloadMaxBytes: PAYLOAD_MAX });
  ledger = tl.ledger;
});
afterAll(async () => {
  await tl?.drop();
});

/** Awaits `run`, which must reject with a ValidationError; returns it. */
async function rejection(run: () => Promise<unknown> | unknown): Promise<ValidationError> {
  let caught: unknown;
  try {
    await run();
  } catch (error) {
    caught = error;
  }
  expect(caught, 'expected a ValidationError').toBeInstanceOf(ValidationError);
  return caught as ValidationError;
}

/** Input that TypeScript would refuse: what a JavaScript caller or a decoded message may hand over. */
const loose = (input: Record<string, unknown>): EnqueueInput => input as unknown as EnqueueInput;
const good = (extra: Record<string, unknown> = {}): EnqueueInput =>
  loose({ queue: 'valid-q', type: 'send', payload: { a: 1 }, ...extra });

/** Half an emoji, as `.slice()` leaves it: a lone high surrogate. */
const HALF_EMOJI = 'customer-\u{1F600}'.slice(0, -1);
const LONE_LOW = '\ude00-customer';

class Point {
  constructor(
    readonly x: number,
    readonly y: number,
  ) {}
}

describe('enqueue input', () => {
  // The table must be untouched by every rejection.
  let rowsBefore = 0;
  beforeEach(async () => {
    rowsBefore = await itemCount(ledger);
  });
  afterEach(async () => {
    expect(await itemCount(ledger)).toBe(rowsBefore);
  });

  const cycle: Record<string, unknown> = { a: 1 };
  cycle.self = cycle;

  const cases: [string, Record<string, unknown>, string][] = [
    ['queue with upper case', { queue: 'Orders' }, 'queue'],
    ['queue with a space', { queue: 'my queue' }, 'queue'],
    ['queue with a slash', { queue: 'a/b' }, 'queue'],
    ['queue empty', { queue: '' }, 'queue'],
    ['queue of 65 chars', { queue: 'q'.repeat(65) }, 'queue'],
    ['queue not a string', { queue: 7 }, 'queue'],
    ['queue missing', { queue: undefined }, 'queue'],
    ['type empty', { type: '' }, 'type'],
    ['type with a space', { type: 'send mail' }, 'type'],
    ['type of 129 chars', { type: 't'.repeat(129) }, 'type'],
    ['lane empty', { lane: '' }, 'lane'],
    ['lane of 256 chars', { lane: 'l'.repeat(256) }, 'lane'],
    ['lane with a trailing space', { lane: 'customer-1 ' }, 'lane'],
    ['lane with a trailing tab', { lane: 'customer-1\t' }, 'lane'],
    ['idempotencyKey with a trailing space', { idempotencyKey: 'k ' }, 'idempotencyKey'],
    ['idempotencyKey empty', { idempotencyKey: '' }, 'idempotencyKey'],
    ['lane with a lone high surrogate (half an emoji)', { lane: HALF_EMOJI }, 'lane'],
    ['lane with a lone low surrogate', { lane: LONE_LOW }, 'lane'],
    ['idempotencyKey with a lone high surrogate', { idempotencyKey: HALF_EMOJI }, 'idempotencyKey'],
    ['idempotencyKey with a lone low surrogate', { idempotencyKey: LONE_LOW }, 'idempotencyKey'],
    ['payload with a BigInt', { payload: { n: 10n } }, 'payload.n'],
    ['payload with a function', { payload: { f: () => 1 } }, 'payload.f'],
    ['payload a function', { payload: () => 1 }, 'payload'],
    ['payload with a cycle', { payload: cycle }, 'payload.self'],
    ['payload undefined', { payload: undefined }, 'payload'],
    ['payload with NaN', { payload: { n: Number.NaN } }, 'payload.n'],
    ['payload with Infinity', { payload: [Number.POSITIVE_INFINITY] }, 'payload[0]'],
    ['payload with a symbol', { payload: { s: Symbol('x') } }, 'payload.s'],
    ['payload a Map', { payload: new Map([['a', 1]]) }, 'payload'],
    ['payload a Set', { payload: new Set([1]) }, 'payload'],
    ['payload with a Set', { payload: { tags: new Set(['a']) } }, 'payload.tags'],
    [
      'payload with a lone surrogate in a nested string',
      { payload: { user: { name: HALF_EMOJI } } },
      'payload.user.name',
    ],
    [
      'payload with a lone surrogate in a key',
      { payload: { user: { [LONE_LOW]: 1 } } },
      'payload.user["\\ude00-customer"]',
    ],
    ['payload with a Uint8Array', { payload: { bytes: new Uint8Array([1]) } }, 'payload.bytes'],
    ['payload with an ArrayBuffer', { payload: { bytes: new ArrayBuffer(1) } }, 'payload.bytes'],
    ['payload with a DataView', { payload: { bytes: new DataView(new ArrayBuffer(1)) } }, 'payload.bytes'],
    ['payload with a class instance', { payload: { at: new Point(1, 2) } }, 'payload.at'],
    ['payload with an Error', { payload: { err: new Error('x') } }, 'payload.err'],
    ['payload with a sparse array', { payload: { list: [1, , 3] } }, 'payload.list[1]'],
    ['payload with undefined in an array', { payload: { list: [undefined] } }, 'payload.list[0]'],
    ['payload with a symbol key', { payload: { o: { [Symbol('k')]: 1 } } }, 'payload.o'],
    ['payload with an invalid Date', { payload: { at: new Date('nope') } }, 'payload.at'],
    ['payload over payloadMaxBytes', { payload: 'x'.repeat(PAYLOAD_MAX) }, 'payload'],
    ['runAt an invalid Date', { runAt: new Date('not a date') }, 'runAt'],
    ['runAt a string', { runAt: '2030-01-01T00:00:00Z' }, 'runAt'],
    ['runAt with delayMs', { runAt: new Date(), delayMs: 10 }, 'runAt'],
    ['delayMs negative', { delayMs: -1 }, 'delayMs'],
    ['delayMs fractional', { delayMs: 1.5 }, 'delayMs'],
    ['maxAttempts 0', { maxAttempts: 0 }, 'maxAttempts'],
    ['maxAttempts 1001', { maxAttempts: 1001 }, 'maxAttempts'],
    ['maxAttempts 1.5', { maxAttempts: 1.5 }, 'maxAttempts'],
    ['priority 0.5', { priority: 0.5 }, 'priority'],
    ['priority a string', { priority: '1' }, 'priority'],
    ['queueClass unknown', { queueClass: 'urgent' }, 'queueClass'],
  ];

  test.each(cases)('%s → ValidationError naming %s', async (_name, patch, field) => {
    const err = await rejection(() => ledger.enqueue(good(patch)));
    expect(err.fields).toEqual([field]);
    expect(err.message).toContain(field);
    // The same input inside a batch is named by its index.
    const batchErr = await rejection(() => ledger.enqueueMany([good(), good(patch)]));
    expect(batchErr.fields).toEqual([`items[1].${field}`]);
  });

  test(
    'two different malformed idempotency keys are both refused, and ' +
      'a repeat is refused at once (no merge, no conflict loop)',
    async () => {
      const queue = freshQueue('idem-surrogate');
      const first = await rejection(() => ledger.enqueue(good({ queue, idempotencyKey: 'order-\ud83d' })));
      expect(first.fields).toEqual(['idempotencyKey']);
      expect(first.message).toMatch(/well-formed/);
      const second = await rejection(() => ledger.enqueue(good({ queue, idempotencyKey: 'order-\ud83e' })));
      expect(second.fields).toEqual(['idempotencyKey']);
      const again = await rejection(() => ledger.enqueue(good({ queue, idempotencyKey: 'order-\ud83d' })));
      expect(again.fields).toEqual(['idempotencyKey']);
      expect(await itemCount(ledger, queue)).toBe(0);
      // Control: well-formed keys that differ stay two items.
      const a = await ledger.enqueue(good({ queue, idempotencyKey: 'order-\u{1F600}' }));
      const b = await ledger.enqueue(good({ queue, idempotencyKey: 'order-\u{1F601}' }));
      expect(a.id).not.toBe(b.id);
      expect((await ledger.enqueue(good({ queue, idempotencyKey: 'order-\u{1F600}' }))).duplicate).toBe(true);
      rowsBefore += 2;
    },
  );

  test('a lane with a lone surrogate is refused in a batch and on its own, and writes no lane row', async () => {
    const queue = freshQueue('lane-surrogate');
    const err = await rejection(() =>
      ledger.enqueueMany([good({ queue, lane: 'fine' }), good({ queue, lane: HALF_EMOJI })]),
    );
    expect(err.fields).toEqual(['items[1].lane']);
    const lanes = await sql<{
      n: number | string;
    }>`SELECT COUNT(*) AS n FROM ${ledger.tables.lanes} WHERE queue = ${queue}`.execute(ledger.db);
    expect(Number(lanes.rows[0]?.n)).toBe(0);
  });

  test('a payload error says what is wrong and where', async () => {
    const err = await rejection(() =>
      ledger.enqueueMany([good(), good(), good(), good({ payload: { user: { name: HALF_EMOJI, roles: new Map() } } })]),
    );
    expect(err.fields).toEqual(['items[3].payload.user.name']);
    expect(err.message).toMatch(/items\[3\]\.payload\.user\.name: .*well-formed/);
    const map = await rejection(() => ledger.enqueue(good({ payload: { roles: new Map() } })));
    expect(map.message).toMatch(/payload\.roles: .*Map/);
  });

  test('a payload just under the cap is accepted (control for the size rule)', async () => {
    // JSON of a string is the string plus two quotes.
    const r = await ledger.enqueue(good({ queue: 'valid-size', payload: 'x'.repeat(PAYLOAD_MAX - 2) }));
    expect(r.duplicate).toBe(false);
    rowsBefore += 1;
  });

  test('an unknown extra field is rejected and named', async () => {
    const err = await rejection(() => ledger.enqueue(good({ extra: true })));
    expect(err.issues).toHaveLength(1);
    expect(err.fields).toEqual(['extra']);
    const batchErr = await rejection(() => ledger.enqueueMany([good(), good({ extra: true })]));
    expect(batchErr.fields).toEqual(['items[1].extra']);
  });

  test('an unknown config key is rejected and named', () => {
    expect(() => new Ledger({ url: 'mysql://root@127.0.0.1:3306/x', poolsize: 3 } as never)).toThrow(ValidationError);
    try {
      new Ledger({ url: 'mysql://root@127.0.0.1:3306/x', poolsize: 3 } as never);
    } catch (e) {
      expect((e as ValidationError).fields).toEqual(['poolsize']);
    }
  });

  test('empty claim filters are rejected rather than read as "all"', async () => {
    const classes = await rejection(() =>
      ledger.claim({ queue: 'valid', owner: 'w', limit: 1, leaseMs: 1000, classes: [] }),
    );
    expect(classes.fields).toEqual(['classes']);
    const types = await rejection(() =>
      ledger.claim({ queue: 'valid', owner: 'w', limit: 1, leaseMs: 1000, types: [] }),
    );
    expect(types.fields).toEqual(['types']);
  });

  test('several bad fields are all named', async () => {
    const err = await rejection(() => ledger.enqueue(good({ queue: 'BAD', maxAttempts: 0, payload: 1n })));
    expect([...err.fields].sort()).toEqual(['maxAttempts', 'payload', 'queue']);
  });

  test('enqueueMany with one bad item among good ones writes nothing and names the item', async () => {
    const batch = [
      good({ lane: 'v-lane' }),
      good({ payload: { big: 2n }, lane: 'v-lane' }),
      good({ lane: 'v-lane', idempotencyKey: 'v-key' }),
    ];
    const err = await rejection(() => ledger.enqueueMany(batch));
    expect(err.fields).toEqual(['items[1].payload.big']);
    const two = await rejection(() =>
      ledger.enqueueMany([good(), good({ type: '' }), good(), good({ maxAttempts: 1001 })]),
    );
    expect(two.fields).toEqual(['items[1].type', 'items[3].maxAttempts']);
    const notArray = await rejection(() => ledger.enqueueMany(good() as unknown as EnqueueInput[]));
    expect(notArray.fields).toEqual(['items']);
    // The good items were not written: the key is still free and the lane untouched.
    const r = await ledger.enqueue(good({ queue: 'valid-after', lane: 'v-lane', idempotencyKey: 'v-key' }));
    expect(r).toMatchObject({ duplicate: false, laneSeq: 1 });
    rowsBefore += 1;
  });
});

describe('other inputs', () => {
  test('claim, finalize and operator inputs name the bad field and change nothing', async () => {
    await ledger.enqueue(good({ queue: 'other-in' }));
    const c = await claimOne(ledger, 'other-in');
    const snapshot = await ledger.get(c.id);
    const histBefore = await historyCount(ledger, c.id);

    expect((await rejection(() => ledger.claim({ queue: 'Q!', owner: 'w', limit: 1, leaseMs: 1000 }))).fields).toEqual([
      'queue',
    ]);
    expect((await rejection(() => ledger.claim({ queue: 'q', owner: 'w', limit: 0, leaseMs: 1000 }))).fields).toEqual([
      'limit',
    ]);
    expect((await rejection(() => ledger.claim({ queue: 'q', owner: 'w', limit: 1, leaseMs: 0 }))).fields).toEqual([
      'leaseMs',
    ]);
    expect((await rejection(() => ledger.claim({ queue: 'q', owner: '', limit: 1, leaseMs: 10 }))).fields).toEqual([
      'owner',
    ]);
    expect(
      (await rejection(() => ledger.claimByIds({ queue: 'q', owner: 'w', leaseMs: 10, ids: ['bad id!'] }))).fields,
    ).toEqual(['ids[0]']);
    expect((await rejection(() => ledger.renew(c, 1.5))).fields).toEqual(['leaseMs']);
    expect((await rejection(() => ledger.checkpoint(c, { n: 1n }))).fields).toEqual(['checkpoint.n']);
    expect((await rejection(() => ledger.retry(c, { error: 'e', delayMs: -5 }))).fields).toEqual(['delayMs']);
    expect((await rejection(() => ledger.retry(c, { error: 'e', failureClass: 'Has Spaces' }))).fields).toEqual([
      'failureClass',
    ]);
    expect((await rejection(() => ledger.release(c, { delayMs: 0.5 }))).fields).toEqual(['delayMs']);
    expect((await rejection(() => ledger.release(c, { delayMs: 5, backoff: {} }))).fields).toEqual(['backoff']);
    expect((await rejection(() => ledger.release(c, { backoff: { factor: 0 } }))).fields).toEqual(['backoff.factor']);
    expect((await rejection(() => ledger.block(c, { dependencyKey: 'dep ', maxWaitMs: 10 }))).fields).toEqual([
      'dependencyKey',
    ]);
    expect((await rejection(() => ledger.block(c, { dependencyKey: 'dep', maxWaitMs: 0 }))).fields).toEqual([
      'maxWaitMs',
    ]);
    expect((await rejection(() => ledger.skip(c, () => 1))).fields).toEqual(['reason']);
    expect((await rejection(() => ledger.cancel('bad id!'))).fields).toEqual(['id']);
    expect((await rejection(() => ledger.replay(c.id, { expectAttempt: 1, expectErrorDigest: 'abc' }))).fields).toEqual(
      ['expectErrorDigest'],
    );
    expect((await rejection(() => ledger.purge({ olderThanMs: -1 }))).fields).toEqual(['olderThanMs']);
    expect((await rejection(() => ledger.wakeDependency(''))).fields).toEqual(['key']);
    expect((await rejection(() => ledger.activate({ queue: 'q', deployment: 'd', expectEpoch: -1 }))).fields).toEqual([
      'expectEpoch',
    ]);
    expect((await rejection(() => ledger.stats('Bad Queue'))).fields).toEqual(['queue']);

    // Strings that are not well-formed UTF-16, and values JSON would change.
    expect(
      (await rejection(() => ledger.claim({ queue: 'q', owner: `w-${HALF_EMOJI}`, limit: 1, leaseMs: 10 }))).fields,
    ).toEqual(['owner']);
    expect(
      (await rejection(() => ledger.claimByIds({ queue: 'q', owner: LONE_LOW, leaseMs: 10, ids: [c.id] }))).fields,
    ).toEqual(['owner']);
    expect((await rejection(() => ledger.checkpoint(c, { note: HALF_EMOJI }))).fields).toEqual(['checkpoint.note']);
    expect((await rejection(() => ledger.checkpoint(c, { [LONE_LOW]: 1 }))).fields).toEqual([
      'checkpoint["\\ude00-customer"]',
    ]);
    expect((await rejection(() => ledger.checkpoint(c, new Map([['page', 2]])))).fields).toEqual(['checkpoint']);
    expect((await rejection(() => ledger.checkpoint(c, { seen: new Set([1]) }))).fields).toEqual(['checkpoint.seen']);
    expect((await rejection(() => ledger.checkpoint(c, { pages: [1, , 3] }))).fields).toEqual(['checkpoint.pages[1]']);
    expect((await rejection(() => ledger.release(c, { reason: HALF_EMOJI }))).fields).toEqual(['reason']);
    expect((await rejection(() => ledger.block(c, { dependencyKey: HALF_EMOJI, maxWaitMs: 10 }))).fields).toEqual([
      'dependencyKey',
    ]);
    expect(
      (await rejection(() => ledger.block(c, { dependencyKey: 'dep', maxWaitMs: 10, reason: LONE_LOW }))).fields,
    ).toEqual(['reason']);
    expect((await rejection(() => ledger.skip(c, { why: HALF_EMOJI }))).fields).toEqual(['reason.why']);
    expect((await rejection(() => ledger.skip(c, new Set()))).fields).toEqual(['reason']);
    expect((await rejection(() => ledger.cancel(c.id, HALF_EMOJI))).fields).toEqual(['reason']);
    expect((await rejection(() => ledger.wakeDependency(HALF_EMOJI))).fields).toEqual(['key']);
    expect((await rejection(() => ledger.activate({ queue: 'q', deployment: `blue-${LONE_LOW}` }))).fields).toEqual([
      'deployment',
    ]);
    expect(await ledger.ownership('q')).toBeUndefined();

    expect(await ledger.get(c.id)).toEqual(snapshot);
    expect(await historyCount(ledger, c.id)).toBe(histBefore);
    // The holder's lease is intact: it can still finish.
    expect((await ledger.complete(c)).won).toBe(true);
  });
});

describe('handler results JSON cannot carry', () => {
  test.each([
    ['a Map', { byId: new Map([['a', 1]]) }, 'result.byId', /Map/],
    ['a Set', new Set([1]), 'result', /Set/],
    ['a lone surrogate', { summary: HALF_EMOJI }, 'result.summary', /well-formed/],
    ['a class instance', { at: new Point(1, 2) }, 'result.at', /Point/],
    ['a sparse array', [1, , 3], 'result[1]', /sparse|hole/],
  ])('%s: complete ends the item dead `invalid_result`, saying where', async (_name, result, where, what) => {
    const queue = freshQueue('bad-result');
    await ledger.enqueue(good({ queue }));
    const c = await claimOne(ledger, queue);
    const r = await ledger.complete(c, result);
    expect(r).toMatchObject({ won: true, state: 'dead' });
    const item = await mustGet(ledger, c.id);
    expect(item).toMatchObject({ state: 'dead', failureClass: 'invalid_result', result: null });
    expect(item.lastError).toContain(where);
    expect(item.lastError).toMatch(what);
  });

  test('completeMany ends only the unstorable result dead; completeInTransaction refuses, writes nothing', async () => {
    const queue = freshQueue('bad-result-many');
    await ledger.enqueueMany([good({ queue }), good({ queue }), good({ queue })]);
    const [a, b, t] = (await ledger.claim({ queue, owner: 'w', limit: 3, leaseMs: 60_000 })).items;
    if (!a || !b || !t) throw new Error('expected three claims');
    const rs = await ledger.completeMany([
      { handle: a, result: { s: new Set([1]) } },
      { handle: b, result: { ok: true } },
    ]);
    expect(rs.map((r) => r.state)).toEqual(['dead', 'completed']);
    expect(await mustGet(ledger, a.id)).toMatchObject({ state: 'dead', failureClass: 'invalid_result' });
    expect(await mustGet(ledger, b.id)).toMatchObject({ state: 'completed', result: { ok: true } });

    const before = await mustGet(ledger, t.id);
    const err = await rejection(() =>
      ledger.db.transaction().execute((trx) => ledger.completeInTransaction(trx, t, { note: HALF_EMOJI })),
    );
    expect(err.fields).toEqual(['result.note']);
    expect(await mustGet(ledger, t.id)).toEqual(before);
    expect((await ledger.complete(t)).won).toBe(true);
  });
});

describe('names outside the ledger', () => {
  test('a consumer name that is not well-formed is refused before anything starts', () => {
    let caught: unknown;
    try {
      new Consumer({ ledger, queue: 'q', name: `worker-${HALF_EMOJI}`, handlers: { t: async () => undefined } });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ValidationError);
    expect((caught as ValidationError).fields).toEqual(['name']);
  });

  test('a worker deployment that is not well-formed is refused', () => {
    const base = { databaseUrl: 'mysql://root@127.0.0.1:3306/x', handlers: './h.js', queues: [{ name: 'q' }] };
    expect(() => resolveWorkerConfig([{ ...base, deployment: `blue-${LONE_LOW}` }])).toThrow(ValidationError);
    try {
      resolveWorkerConfig([{ ...base, deployment: `blue-${LONE_LOW}` }]);
    } catch (e) {
      expect((e as ValidationError).fields).toEqual(['deployment']);
    }
    expect(resolveWorkerConfig([{ ...base, deployment: 'blue-\u{1F535}' }]).deployment).toBe('blue-\u{1F535}');
  });
});

describe('ledger config', () => {
  const url = 'mysql://root@127.0.0.1:3306/lw_config_only';
  const cases: [string, Record<string, unknown>, string][] = [
    ['an http URL', { url: 'http://x' }, 'url'],
    ['a URL without a database', { url: 'mysql://root@127.0.0.1:3306' }, 'url'],
    ['no URL', {}, 'url'],
    ['tablePrefix with upper case', { url, tablePrefix: 'LW_' }, 'tablePrefix'],
    ['tablePrefix starting with a digit', { url, tablePrefix: '1lw_' }, 'tablePrefix'],
    ['tablePrefix with a dash', { url, tablePrefix: 'lw-' }, 'tablePrefix'],
    ['tablePrefix of 25 chars', { url, tablePrefix: 'a'.repeat(25) }, 'tablePrefix'],
    ['poolSize 0', { url, poolSize: 0 }, 'poolSize'],
    ['poolSize 1.5', { url, poolSize: 1.5 }, 'poolSize'],
    ['payloadMaxBytes 0', { url, payloadMaxBytes: 0 }, 'payloadMaxBytes'],
    ['errorMaxChars 10', { url, errorMaxChars: 10 }, 'errorMaxChars'],
  ];

  test.each(cases)('%s → ValidationError naming %s', async (_name, config, field) => {
    const err = await rejection(() => new Ledger(config as unknown as LedgerConfigInput));
    expect(err.fields).toEqual([field]);
    expect(err.message).toContain('ledger config');
  });

  test('a valid config constructs without connecting', async () => {
    const l = new Ledger({ url, tablePrefix: 'svc_a_', poolSize: 3 });
    expect(l.config).toMatchObject({ url, tablePrefix: 'svc_a_', poolSize: 3, payloadMaxBytes: 1024 * 1024 });
    await l.close();
  });
});
