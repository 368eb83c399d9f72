// No data can break a statement: every write path, with text full of quotes, backslashes,
// NULs, lone surrogates and SQL, on the ledger's own pool and on a caller's connection whose
// sql_mode has NO_BACKSLASH_ESCAPES (where a backslash-escaped quote ends a literal).
import fc from 'fast-check';
import { Kysely, MysqlDialect, sql } from 'kysely';
import { createPool, type Pool } from 'mysql2';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ValidationError } from '../src/errors.js';
import { mysqlPoolOptions, type LedgerDb } from '../src/ledger/connection.js';
import { errorDigest } from '../src/ledger/ids.js';
import { Ledger } from '../src/ledger/ledger.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { freshQueue } from './support/items.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';

const RUNS = Number(process.env.LANEWAKE_HOSTILE_TEXT_RUNS || 12);
/** A bound on each property, generous for the standalone TiDB: reaching it is a failure. */
const TIME_LIMIT_MS = Math.max(180_000, RUNS * 10_000);

/**
 * Pieces the text is made of: what ends or escapes a literal in one sql_mode or another, SQL, and
 * characters that are not ASCII.
 */
const PIECES = [
  "'",
  "''",
  '\\',
  "\\'",
  '\\\\',
  '"',
  '\\"',
  '\0',
  '\x1a',
  '\n',
  '\r',
  '\t',
  '?',
  '??',
  '%',
  '_',
  '`',
  ';',
  '--',
  '-- ',
  '#',
  '/*',
  '*/',
  "x\\', 0, 0); DELETE FROM canary; -- ",
  "' OR 1=1 -- ",
  'DROP TABLE canary',
  '$1',
  ':name',
  '\\N',
  'NULL',
  '\\0',
  '\\Z',
  '\\u0000',
  '\uD800',
  '\uDC00',
  '\uDBFF\uDFFF',
  '😀',
  'ü',
  '中',
  '\u001f',
  '\u2028',
  ' ',
];
const text = fc
  .array(
    fc.oneof(
      { arbitrary: fc.constantFrom(...PIECES), weight: 4 },
      { arbitrary: fc.string({ maxLength: 3, unit: 'grapheme-ascii' }), weight: 1 },
    ),
    { minLength: 1, maxLength: 8 },
  )
  .map((a) => a.join(''));

const wellFormed = (s: string): boolean => (s as unknown as { isWellFormed(): boolean }).isWellFormed();
const mended = (s: string): string => (s as unknown as { toWellFormed(): string }).toWellFormed();

/**
 * Whether the ledger takes `s` as a key (a lane, an idempotency, concurrency or dependency key, a step name):
 * validation.ts's keyString.
 */
const keyRefused = (s: string, concurrency = false): boolean =>
  s.length === 0 || s.length > 255 || !wellFormed(s) || /\s$/.test(s) || (concurrency && s.includes('\u001f'));
/** `s` made a key the ledger takes, keeping its quotes, backslashes and NULs. */
const asKey = (s: string): string => {
  const k = Array.from(mended(s).replace(/\u001f/g, ''))
    .slice(0, 100)
    .join('')
    .replace(/\s+$/, '');
  return k === '' ? 'k' : k;
};

let tl: TestLedger;
let canaryRows: () => Promise<number>;

/** A caller's pool: the ledger's connection options less its own value formatting, each session with `mode` added. */
function callerPool(url: string, mode: string | undefined): Pool {
  const { queryFormat: _ours, multipleStatements: _many, ...options } = mysqlPoolOptions({ url, poolSize: 4 });
  const pool = createPool({ ...options, multipleStatements: false });
  if (mode !== undefined)
    pool.on('connection', (c) => c.query(`SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',${mode}')`));
  return pool;
}

beforeAll(async () => {
  tl = await createTestLedger();
  await sql`CREATE TABLE canary (id INT PRIMARY KEY)`.execute(tl.ledger.db);
  await sql`INSERT INTO canary (id) VALUES (1), (2), (3)`.execute(tl.ledger.db);
  canaryRows = async () =>
    Number((await sql<{ n: number }>`SELECT COUNT(*) AS n FROM canary`.execute(tl.ledger.db)).rows[0]?.n);
});
afterAll(async () => {
  await tl?.drop();
});

interface Texts {
  payload: string;
  lane: string;
  idempotencyKey: string;
  concurrencyKey: string;
  owner: string;
  step: string;
  result: string;
  error: string;
  reason: string;
  dependencyKey: string;
}

/** A refusal naming `field` (a ValidationError whose issues name it), or the call's value. */
async function refusedNaming<T>(field: RegExp, call: () => Promise<T>): Promise<void> {
  const e = await call().then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(e, `refused, naming ${field}`).toBeInstanceOf(ValidationError);
  expect(
    (e as ValidationError).issues.some((i) => field.test(i.field)),
    JSON.stringify((e as ValidationError).issues),
  ).toBe(true);
}

/**
 * Every write path on `ledger` (with an enqueue and a completion also in a transaction of `caller`), with
 * `t`'s texts; reads everything back through the ledger's own pool.
 */
async function writeAndReadBack(ledger: Ledger, caller: Kysely<Record<string, never>>, t: Texts): Promise<void> {
  const queue = freshQueue('hostile');
  const payload = { s: t.payload, [t.payload]: [t.payload, { k: t.payload }] };
  const keys = {
    lane: asKey(t.lane),
    idempotencyKey: asKey(t.idempotencyKey),
    concurrencyKey: asKey(t.concurrencyKey),
    dependencyKey: asKey(t.dependencyKey),
    step: asKey(t.step),
  };

  // Bad text is refused with the field named, and writes nothing.
  if (!wellFormed(t.payload)) await refusedNaming(/^payload/, () => ledger.enqueue({ queue, type: 't', payload }));
  if (keyRefused(t.lane))
    await refusedNaming(/^lane$/, () => ledger.enqueue({ queue, type: 't', payload: 1, lane: t.lane }));
  if (keyRefused(t.idempotencyKey))
    await refusedNaming(/^idempotencyKey$/, () =>
      ledger.enqueue({ queue, type: 't', payload: 1, idempotencyKey: t.idempotencyKey }),
    );
  if (keyRefused(t.concurrencyKey, true))
    await refusedNaming(/^concurrencyKey$/, () =>
      ledger.enqueue({ queue, type: 't', payload: 1, concurrencyKey: t.concurrencyKey }),
    );
  if (!/^[A-Za-z0-9._:-]{1,128}$/.test(t.payload))
    await refusedNaming(/^type$/, () => ledger.enqueue({ queue, type: t.payload, payload: 1 }));
  if (!/^[a-z0-9._-]{1,64}$/.test(t.payload))
    await refusedNaming(/^queue$/, () => ledger.enqueue({ queue: t.payload, type: 't', payload: 1 }));
  expect(await itemsOf(queue)).toBe(0);
  const good = wellFormed(t.payload) ? payload : { s: mended(t.payload) };

  // Enqueues: single (laned, keyed, idempotent), its duplicate, a batch, and in the caller's transaction.
  const a = await ledger.enqueue({
    queue,
    type: 't',
    payload: good,
    lane: keys.lane,
    idempotencyKey: keys.idempotencyKey,
    concurrencyKey: keys.concurrencyKey,
  });
  expect(
    await ledger.enqueue({ queue, type: 't', payload: good, lane: keys.lane, idempotencyKey: keys.idempotencyKey }),
  ).toEqual({ ...a, duplicate: true });
  const [b, c, d, f] = await ledger.enqueueMany([
    { queue, type: 't', payload: good, lane: `${keys.lane}-b` },
    { queue, type: 't', payload: good, concurrencyKey: keys.concurrencyKey },
    { queue, type: 't', payload: good, idempotencyKey: `${keys.idempotencyKey}-d` },
    { queue, type: 't', payload: good },
  ]);
  const e = await caller
    .transaction()
    .execute((trx) =>
      ledger.enqueue(
        { queue, type: 't', payload: good, lane: `${keys.lane}-e`, idempotencyKey: `${keys.idempotencyKey}-e` },
        { transaction: trx },
      ),
    );
  const ids = [a.id, b!.id, c!.id, d!.id, e.id, f!.id];

  // Claimed under a lease whose owner is the text; then every way an attempt records something.
  const owner = mended(t.owner).slice(0, 100) || 'o';
  const claimed = (await ledger.claim({ queue, owner, limit: 10, leaseMs: 60_000 })).items;
  expect(claimed.map((i) => i.id).sort()).toEqual([...ids].sort());
  const held = (id: string): ClaimedItem => claimed.find((i) => i.id === id)!;
  expect(await ledger.checkpoint(held(a.id), { at: mended(t.result) })).toBe(true);
  await ledger.saveProgress([{ handle: held(a.id), progress: { note: mended(t.result) } }]);
  await ledger.recordStep(held(a.id), keys.step, { step: mended(t.result) });
  const result = { r: mended(t.result), [mended(t.result)]: null };
  expect((await ledger.complete(held(a.id), result)).won).toBe(true);
  expect((await ledger.fail(held(b!.id), { error: t.error })).won).toBe(true);
  await caller.transaction().execute((trx) => ledger.completeInTransaction(trx, held(f!.id), result));
  expect((await ledger.release(held(c!.id), { reason: mended(t.reason).slice(0, 500) })).won).toBe(true);
  expect(
    (
      await ledger.block(held(d!.id), {
        dependencyKey: keys.dependencyKey,
        maxWaitMs: 600_000,
        reason: mended(t.reason).slice(0, 500),
      })
    ).won,
  ).toBe(true);
  expect((await ledger.wakeDependency(keys.dependencyKey, { queue })).map((w) => w.id)).toEqual([d!.id]);
  expect(await ledger.cancel(e.id, mended(t.reason).slice(0, 500))).toBe('cancel_requested');
  const dead = (await tl.ledger.get(b!.id))!;
  const replayed = await ledger.replay(b!.id, {
    expectAttempt: dead.attempt,
    expectErrorDigest: errorDigest(dead.lastError),
  });

  // Everything reads back as written (a lone surrogate in an error is kept as U+FFFD: errors are mended, not refused).
  const own = tl.ledger;
  const got = (await own.inspect(a.id))!;
  expect(got.item).toMatchObject({
    payload: good,
    lane: keys.lane,
    idempotencyKey: keys.idempotencyKey,
    concurrencyKey: keys.concurrencyKey,
    result,
    checkpoint: { at: mended(t.result) },
    progress: { note: mended(t.result) },
  });
  expect(got.steps.map((s) => [s.name, s.result])).toEqual([[keys.step, { step: mended(t.result) }]]);
  expect(dead.lastError).toBe(mended(t.error));
  expect((await own.get(replayed.id))?.payload).toEqual(good);
  expect((await own.get(c!.id))?.concurrencyKey).toBe(keys.concurrencyKey);
  expect(await own.get(f!.id)).toMatchObject({ state: 'completed', result });
  expect(await own.get(e.id)).toMatchObject({
    lane: `${keys.lane}-e`,
    idempotencyKey: `${keys.idempotencyKey}-e`,
    payload: good,
    cancelRequested: true,
    lastError: mended(t.reason).slice(0, 500),
  });
  const attempts = await own.inspect(c!.id);
  expect(attempts?.attempts.map((r) => r.error)).toEqual([mended(t.reason).slice(0, 500)]);
  expect(attempts?.attempts.map((r) => r.worker)).toEqual([owner.replace(/[^\x20-\x7e]/g, '?').slice(0, 64)]);
}

async function itemsOf(queue: string): Promise<number> {
  return Number(
    (
      await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${tl.ledger.tables.items} WHERE queue = ${queue}`.execute(
        tl.ledger.db,
      )
    ).rows[0]?.n,
  );
}

const texts: fc.Arbitrary<Texts> = fc.record({
  payload: text,
  lane: text,
  idempotencyKey: text,
  concurrencyKey: text,
  owner: text,
  step: text,
  result: text,
  error: text,
  reason: text,
  dependencyKey: text,
});

describe.each([
  ['a caller connection with NO_BACKSLASH_ESCAPES', 'NO_BACKSLASH_ESCAPES'],
  ['the default sql_mode', undefined],
] as const)('%s', (_label, mode) => {
  let pools: Pool[] = [];
  let handedIn: Ledger;
  let caller: Kysely<Record<string, never>>;

  beforeAll(() => {
    pools = [callerPool(tl.url, mode), callerPool(tl.url, mode)];
    caller = new Kysely<Record<string, never>>({ dialect: new MysqlDialect({ pool: pools[0]! }) });
    handedIn = new Ledger(
      { url: tl.url },
      new Kysely<Record<string, never>>({ dialect: new MysqlDialect({ pool: pools[1]! }) }) as LedgerDb,
    );
  });
  afterAll(async () => {
    await caller?.destroy();
    await handedIn?.close();
  });

  test("the caller's sessions do have the mode", async () => {
    const modes = String((await sql<{ m: string }>`SELECT @@SESSION.sql_mode AS m`.execute(caller)).rows[0]?.m).split(
      ',',
    );
    expect(modes.includes('NO_BACKSLASH_ESCAPES')).toBe(mode !== undefined);
  });

  test.each([
    ['on a Kysely handed to new Ledger', () => handedIn],
    ["on the ledger's own pool", () => tl.ledger],
  ] as const)(
    'every write path %s, caller transactions on that connection: the canary lives, every value reads back',
    async (_where, ledgerOf) => {
      const out = await fc.check(
        fc.asyncProperty(texts, async (t) => {
          await writeAndReadBack(ledgerOf(), caller, t);
          expect(await canaryRows()).toBe(3);
        }),
        { numRuns: RUNS, interruptAfterTimeLimit: TIME_LIMIT_MS },
      );
      if (out.failed && !out.interrupted)
        throw new Error(await fc.asyncDefaultReportMessage(out), { cause: out.errorInstance });
      expect(out.interrupted, `interrupted after ${out.numRuns} of ${RUNS} runs (seed ${out.seed})`).toBe(false);
      expect(out.numRuns).toBe(RUNS);
    },
    TIME_LIMIT_MS + 60_000,
  );

  test('the reported attack: a payload and a lane that end a backslash-escaped literal', async () => {
    for (const ledger of [handedIn, tl.ledger]) {
      const queue = freshQueue('attack');
      const payload = { s: "x\\', 0, 0); DELETE FROM canary; -- " };
      const r = await caller
        .transaction()
        .execute((trx) => ledger.enqueue({ queue, type: 't', payload, lane: "l\\'" }, { transaction: trx }));
      const [many] = await ledger.enqueueMany([{ queue, type: 't', payload, lane: "l\\'" }]);
      expect(await tl.ledger.get(r.id)).toMatchObject({ payload, lane: "l\\'", laneSeq: 1 });
      expect(await tl.ledger.get(many!.id)).toMatchObject({ payload, lane: "l\\'", laneSeq: 2 });
      expect(await canaryRows()).toBe(3);
    }
  });
});
