import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { ValidationError } from '../src/errors.js';
import { Ledger, type EnqueueInput } from '../src/ledger/ledger.js';
import type { LedgerConfigInput } from '../src/ledger/config.js';
import { claimOne, historyCount, itemCount } from './support/items.js';
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
const good = (extra: Record<string, unknown> = {}): EnqueueInput => loose({ queue: 'valid-q', type: 'send', payload: { a: 1 }, ...extra });

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
    ['payload with a BigInt', { payload: { n: 10n } }, 'payload'],
    ['payload with a function', { payload: { f: () => 1 } }, 'payload'],
    ['payload a function', { payload: () => 1 }, 'payload'],
    ['payload with a cycle', { payload: cycle }, 'payload'],
    ['payload undefined', { payload: undefined }, 'payload'],
    ['payload with NaN', { payload: { n: Number.NaN } }, 'payload'],
    ['payload with Infinity', { payload: [Number.POSITIVE_INFINITY] }, 'payload'],
    ['payload with a symbol', { payload: { s: Symbol('x') } }, 'payload'],
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
    const classes = await rejection(() => ledger.claim({ queue: 'valid', owner: 'w', limit: 1, leaseMs: 1000, classes: [] }));
    expect(classes.fields).toEqual(['classes']);
    const types = await rejection(() => ledger.claim({ queue: 'valid', owner: 'w', limit: 1, leaseMs: 1000, types: [] }));
    expect(types.fields).toEqual(['types']);
  });

  test('several bad fields are all named', async () => {
    const err = await rejection(() => ledger.enqueue(good({ queue: 'BAD', maxAttempts: 0, payload: 1n })));
    expect([...err.fields].sort()).toEqual(['maxAttempts', 'payload', 'queue']);
  });

  test('enqueueMany with one bad item among good ones writes nothing and names the item', async () => {
    const batch = [good({ lane: 'v-lane' }), good({ payload: { big: 2n }, lane: 'v-lane' }), good({ lane: 'v-lane', idempotencyKey: 'v-key' })];
    const err = await rejection(() => ledger.enqueueMany(batch));
    expect(err.fields).toEqual(['items[1].payload']);
    const two = await rejection(() => ledger.enqueueMany([good(), good({ type: '' }), good(), good({ maxAttempts: 1001 })]));
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

    expect((await rejection(() => ledger.claim({ queue: 'Q!', owner: 'w', limit: 1, leaseMs: 1000 }))).fields).toEqual(['queue']);
    expect((await rejection(() => ledger.claim({ queue: 'q', owner: 'w', limit: 0, leaseMs: 1000 }))).fields).toEqual(['limit']);
    expect((await rejection(() => ledger.claim({ queue: 'q', owner: 'w', limit: 1, leaseMs: 0 }))).fields).toEqual(['leaseMs']);
    expect((await rejection(() => ledger.claim({ queue: 'q', owner: '', limit: 1, leaseMs: 10 }))).fields).toEqual(['owner']);
    expect((await rejection(() => ledger.claimByIds({ queue: 'q', owner: 'w', leaseMs: 10, ids: ['bad id!'] }))).fields).toEqual(['ids[0]']);
    expect((await rejection(() => ledger.renew(c, 1.5))).fields).toEqual(['leaseMs']);
    expect((await rejection(() => ledger.checkpoint(c, { n: 1n }))).fields).toEqual(['checkpoint']);
    expect((await rejection(() => ledger.retry(c, { error: 'e', delayMs: -5 }))).fields).toEqual(['delayMs']);
    expect((await rejection(() => ledger.retry(c, { error: 'e', failureClass: 'Has Spaces' }))).fields).toEqual(['failureClass']);
    expect((await rejection(() => ledger.release(c, { delayMs: 0.5 }))).fields).toEqual(['delayMs']);
    expect((await rejection(() => ledger.block(c, { dependencyKey: 'dep ', maxWaitMs: 10 }))).fields).toEqual(['dependencyKey']);
    expect((await rejection(() => ledger.block(c, { dependencyKey: 'dep', maxWaitMs: 0 }))).fields).toEqual(['maxWaitMs']);
    expect((await rejection(() => ledger.skip(c, () => 1))).fields).toEqual(['reason']);
    expect((await rejection(() => ledger.cancel('bad id!'))).fields).toEqual(['id']);
    expect((await rejection(() => ledger.replay(c.id, { expectAttempt: 1, expectErrorDigest: 'abc' }))).fields).toEqual(['expectErrorDigest']);
    expect((await rejection(() => ledger.purge({ olderThanMs: -1 }))).fields).toEqual(['olderThanMs']);
    expect((await rejection(() => ledger.wakeDependency(''))).fields).toEqual(['key']);
    expect((await rejection(() => ledger.activate({ queue: 'q', deployment: 'd', expectEpoch: -1 }))).fields).toEqual(['expectEpoch']);
    expect((await rejection(() => ledger.stats('Bad Queue'))).fields).toEqual(['queue']);

    expect(await ledger.get(c.id)).toEqual(snapshot);
    expect(await historyCount(ledger, c.id)).toBe(histBefore);
    // The holder's lease is intact: it can still finish.
    expect((await ledger.complete(c)).won).toBe(true);
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
