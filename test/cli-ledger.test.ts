// The lanewake CLI against a ledger: migrate, enqueue, stats, inspect, dead list and replay, cancel, activate,
// wake-ups, bad input, pause, concurrency limits.
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { SCHEMA_VERSION } from '../src/ledger/migrations.js';
import { MIGRATIONS } from '../src/ledger/migration-steps.js';
import { errorDigest } from '../src/ledger/ids.js';
import { controlStreamKey, wakeStreamKey } from '../src/wake/keys.js';
import { createTestWake, type TestWake } from './support/engine.js';
import { claimOne, freshQueue, itemCount, mustGet } from './support/items.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';
import { freePort } from './support/processes.js';
import { redisUrl } from './support/services.js';
import { lanewake, type Run } from './support/cli.js';

const SECRET = 'payload-secret-4711';

function json<T>(run: Run): T {
  expect(run.code, run.err).toBe(0);
  return JSON.parse(run.out) as T;
}

let t: TestLedger;
/** The CLI against this test's own database (global options may come first or last; first leaves room for `--`). */
const cli = (...args: string[]): Promise<Run> => lanewake(['--database-url', t.url, ...args]);

/** Enqueues one item, claims it and fails it permanently: dead at attempt 1 with `error` as its last error. */
async function makeDead(queue: string, error: string, lane?: string): Promise<string> {
  const { id } = await t.ledger.enqueue({
    queue,
    type: 'report.build',
    payload: { secret: SECRET },
    maxAttempts: 3,
    ...(lane ? { lane } : {}),
  });
  const claimed = await claimOne(t.ledger, queue);
  expect(claimed.id).toBe(id);
  expect((await t.ledger.fail(claimed, { error })).won).toBe(true);
  return id;
}

describe('lanewake CLI against a ledger', () => {
  beforeEach(async () => {
    t = await createTestLedger();
  });
  afterEach(async () => {
    await t.drop();
  });

  it('migrate creates a missing database and migrates it, then finds nothing to do', async () => {
    const database = `${t.database}_m`;
    const url = `${t.url}_m`;
    try {
      const before = await lanewake(['stats', '--database-url', url]);
      expect(before.code).toBe(1);
      expect(before.err).toMatch(/does not exist.*lanewake migrate/);

      const first = json<{ from: number; to: number; applied: number[] }>(
        await lanewake(['migrate', '--json', '--database-url', url]),
      );
      expect(first).toEqual({ from: 0, to: SCHEMA_VERSION, applied: MIGRATIONS.map((m) => m.version) });

      const again = await lanewake(['migrate', '--database-url', url]);
      expect(again.code, again.err).toBe(0);
      expect(again.out).toBe(`schema v${SCHEMA_VERSION} is current: nothing applied\n`);
      expect(json<{ applied: number[] }>(await lanewake(['--json', 'migrate', '--database-url', url])).applied).toEqual(
        [],
      );

      const stats = await lanewake(['stats', '--database-url', url]);
      expect(stats).toMatchObject({ code: 0, out: 'no items in the ledger\n' });
    } finally {
      await sql`DROP DATABASE IF EXISTS ${sql.id(database)}`.execute(t.ledger.db);
    }
  });

  it('refuses to work on a database whose schema is behind, naming migrate', async () => {
    const bare = await createTestLedger({}, false);
    try {
      const r = await lanewake(['stats', '--database-url', bare.url]);
      expect(r.code).toBe(1);
      expect(r.err).toContain('schema is at version 0');
      expect(r.err).toContain('lanewake migrate');
    } finally {
      await bare.drop();
    }
  });

  it('inspect shows why a skipped item was skipped, on the item and in its history', async () => {
    const queue = freshQueue('cli-skip');
    const { id } = await t.ledger.enqueue({ queue, type: 'sync', payload: {} });
    const held = await claimOne(t.ledger, queue);
    expect((await t.ledger.skip(held, 'source inactive')).won).toBe(true);
    const shown = await cli('inspect', id);
    expect(shown.code, shown.err).toBe(0);
    expect(shown.out).toMatch(/^state: +skipped$/m);
    expect(shown.out).toMatch(/^skipped because:\n {2}source inactive$/m);
    expect(shown.out).toMatch(/^ *1 +skipped .*source inactive/m);
  });

  it('inspect shows the progress and the steps done, step results only with --payload', async () => {
    const queue = freshQueue('cli-steps');
    const { id } = await t.ledger.enqueue({ queue, type: 'sync', payload: {} });
    const held = await claimOne(t.ledger, queue);
    await t.ledger.saveProgress([{ handle: held, progress: 40 }]);
    await t.ledger.recordStep(held, 'fetch', { secret: SECRET });
    await t.ledger.recordStep(held, 'store', undefined);
    expect((await t.ledger.complete(held)).won).toBe(true);

    const shown = await cli('inspect', id);
    expect(shown.code, shown.err).toBe(0);
    expect(shown.out).toMatch(/^progress: +40%$/m);
    expect(shown.out).toMatch(/^steps done:$/m);
    expect(shown.out).toMatch(/^fetch +1 +\S+.*\(\d+ bytes; shown with --payload\)$/m);
    expect(shown.out).toMatch(/^store +1 /m);
    expect(shown.out).not.toContain(SECRET);
    expect((await cli('inspect', id, '--payload')).out).toContain(SECRET);
    const asJson = json<{ item: { progress: unknown }; steps: Record<string, unknown>[] }>(
      await cli('inspect', id, '--json'),
    );
    expect(asJson.item.progress).toBe(40);
    expect(asJson.steps.map((st) => [st.name, st.attempt, 'result' in st])).toEqual([
      ['fetch', 1, false],
      ['store', 1, false],
    ]);
  });

  it('enqueue, then stats shows it and inspect shows it without its payload', async () => {
    const queue = freshQueue('cli-enq');
    const payload = JSON.stringify({ secret: SECRET, n: 1 });
    const first = await cli(
      'enqueue',
      queue,
      'invoice.send',
      '--payload',
      payload,
      '--lane',
      'customer:1',
      '--idempotency-key',
      'inv-1',
    );
    expect(first.code, first.err).toBe(0);
    const id = /^enqueued (\S+) \(duplicate: false\)$/m.exec(first.out)?.[1];
    expect(id).toBeDefined();
    const stored = await mustGet(t.ledger, id ?? '');
    expect(stored).toMatchObject({
      queue,
      type: 'invoice.send',
      lane: 'customer:1',
      idempotencyKey: 'inv-1',
      state: 'pending',
      payload: { secret: SECRET, n: 1 },
    });

    const dup = json<{ id: string; duplicate: boolean }>(
      await cli(
        'enqueue',
        queue,
        'invoice.send',
        '--payload',
        payload,
        '--lane',
        'customer:1',
        '--idempotency-key',
        'inv-1',
        '--json',
      ),
    );
    expect(dup).toMatchObject({ id, duplicate: true });
    expect(await itemCount(t.ledger, queue)).toBe(1);

    const table = await cli('stats');
    expect(table.code, table.err).toBe(0);
    expect(table.out.split('\n')[0]?.split(/\s+/)).toEqual([
      'QUEUE',
      'PENDING',
      'PROCESSING',
      'BLOCKED',
      'COMPLETED',
      'SKIPPED',
      'DEAD',
      'CANCELLED',
      'SCHEDULED',
      'OLDEST_DUE',
      'CONSUMERS',
    ]);
    const row = table.out
      .split('\n')
      .find((l) => l.startsWith(`${queue} `))
      ?.split(/\s+/);
    expect(row?.slice(0, 9)).toEqual([queue, '1', '0', '0', '0', '0', '0', '0', '0']);
    expect(row?.at(-1)).toBe('-');

    // A queue that a live consumer serves and that holds no item still has its row: someone serves it.
    const served = freshQueue('cli-served');
    const consumer = new Consumer({
      ledger: t.ledger,
      queue: served,
      concurrency: 3,
      handlers: { t: async () => undefined },
    });
    await consumer.start();
    try {
      const servedRow = (await cli('stats')).out
        .split('\n')
        .find((l) => l.startsWith(`${served} `))
        ?.split(/\s+/);
      expect(servedRow?.slice(0, 9)).toEqual([served, '0', '0', '0', '0', '0', '0', '0', '0']);
      expect(servedRow?.slice(-3)).toEqual(['1', '(3', 'slots)']);
      expect(json<{ queue: string; consumers: unknown[] }[]>(await cli('stats', served, '--json'))).toMatchObject([
        { queue: served, counts: { pending: { count: 0, atLeast: false } }, consumers: [{ queue: served }] },
      ]);
    } finally {
      await consumer.stop();
    }

    const stats = json<
      { queue: string; counts: Record<string, { count: number; atLeast: boolean }>; oldestDueAgeMs: number }[]
    >(await cli('stats', queue, '--json'));
    expect(stats).toHaveLength(1);
    expect(stats[0]).toMatchObject({
      queue,
      counts: {
        pending: { count: 1, atLeast: false },
        processing: { count: 0, atLeast: false },
        dead: { count: 0, atLeast: false },
      },
    });
    expect(stats[0]?.oldestDueAgeMs).toBeGreaterThanOrEqual(0);

    // Nothing serves the queue: --why says so, and names the queue.
    const whyText = await cli('inspect', id ?? '', '--why');
    expect(whyText.code, whyText.err).toBe(0);
    expect(whyText.out).toMatch(new RegExp(`^no_live_consumer: no live consumer serves queue ${queue}$`, 'm'));
    expect(json<{ code: string }>(await cli('inspect', id ?? '', '--why', '--json'))).toMatchObject({
      id,
      code: 'no_live_consumer',
    });

    const shown = await cli('inspect', id ?? '');
    expect(shown.code, shown.err).toBe(0);
    expect(shown.out).toMatch(new RegExp(`^id: +${id}$`, 'm'));
    expect(shown.out).toMatch(/^state: +pending$/m);
    expect(shown.out).toMatch(/^lane: +customer:1 #1 \(head\)$/m);
    expect(shown.out).toMatch(/^payload: +\(\d+ bytes; shown with --payload\)$/m);
    expect(shown.out).toContain('attempt history: none recorded');
    const asJson = json<{ item: Record<string, unknown>; attempts: unknown[] }>(
      await cli('inspect', id ?? '', '--json'),
    );
    expect(asJson.item).toMatchObject({ id, queue, state: 'pending' });
    expect(asJson.item).not.toHaveProperty('payload');

    for (const r of [first, table, shown]) expect(r.out + r.err).not.toContain(SECRET);
    const withPayload = await cli('inspect', id ?? '', '--payload');
    expect(withPayload.out).toContain(`payload:         ${payload}`);
    expect(
      json<{ item: { payload: unknown } }>(await cli('inspect', id ?? '', '--payload', '--json')).item.payload,
    ).toEqual({ secret: SECRET, n: 1 });

    const missing = await cli('inspect', 'no-such-item');
    expect(missing).toMatchObject({ code: 1, out: '' });
    expect(missing.err).toContain('no item no-such-item');
    // Ids are base64url, so some begin with '-': they are read as ids, not as options.
    for (const args of [
      ['inspect', '-Xb3_no-such-item'],
      ['inspect', '--payload', '-Vb3_no-such-item'],
      ['inspect', '--', '-hb3_no-such-item'],
    ]) {
      const dashed = await cli(...args);
      expect(dashed.code, args.join(' ')).toBe(1);
      expect(dashed.err).toContain(`no item ${args[args.length - 1] ?? ''}`);
    }
  });

  it('enqueue passes every option to the ledger', async () => {
    const queue = freshQueue('cli-opts');
    const runAt = new Date(Date.now() + 3_600_000);
    const a = json<{ id: string }>(
      await cli(
        'enqueue',
        queue,
        'later',
        '--run-at',
        runAt.toISOString(),
        '--priority',
        '-5',
        '--class',
        'bulk',
        '--max-attempts',
        '3',
        '--json',
      ),
    );
    expect(await mustGet(t.ledger, a.id)).toMatchObject({
      runAfter: runAt,
      priority: -5,
      queueClass: 'bulk',
      maxAttempts: 3,
      payload: {},
    });
    const b = json<{ id: string }>(await cli('enqueue', queue, 'delayed', '--delay-ms', '600000', '--json'));
    const now = await t.ledger.now();
    const delayed = await mustGet(t.ledger, b.id);
    expect(delayed.runAfter.getTime() - now.getTime()).toBeGreaterThan(500_000);
    expect(delayed).toMatchObject({ queueClass: 'default', maxAttempts: 25, priority: 0 });
  });

  it('dead list shows what replay needs; replay guards on attempt and digest', async () => {
    const queue = freshQueue('cli-dead');
    const a = await makeDead(queue, 'disk full\n    at write (store.ts:10)', 'acct:7');
    const b = await makeDead(queue, 'upstream said 503');
    const digestA = errorDigest('disk full\n    at write (store.ts:10)');

    const listed = json<{ id: string; attempt: number; failureClass: string; error: string; errorDigest: string }[]>(
      await cli('dead', 'list', '--queue', queue, '--json'),
    );
    expect(listed.map((d) => d.id).sort()).toEqual([a, b].sort());
    expect(listed.find((d) => d.id === a)).toMatchObject({
      attempt: 1,
      failureClass: 'permanent',
      error: 'disk full',
      errorDigest: digestA,
    });
    const table = await cli('dead', 'list', '--queue', queue);
    expect(table.code, table.err).toBe(0);
    const rowA = table.out.split('\n').find((l) => l.startsWith(a));
    expect(rowA).toContain(digestA);
    expect(rowA).toMatch(/ 1 +permanent /);
    expect(rowA).toMatch(/disk full$/);
    expect(table.out).not.toContain('store.ts');
    expect(table.out + table.err).not.toContain(SECRET);
    expect(json<unknown[]>(await cli('dead', 'list', '--queue', freshQueue('other'), '--json'))).toEqual([]);

    const before = await itemCount(t.ledger);
    const wrongAttempt = await cli('replay', a, '--expect-attempt', '2', '--expect-digest', digestA);
    expect(wrongAttempt.code).toBe(1);
    expect(wrongAttempt.err).toContain('attempt mismatch');
    expect(wrongAttempt.err).toContain('now dead at attempt 1');
    const wrongDigest = await cli('replay', a, '--expect-attempt', '1', '--expect-digest', '0'.repeat(64));
    expect(wrongDigest.code).toBe(1);
    expect(wrongDigest.err).toContain('error mismatch');
    expect(await itemCount(t.ledger)).toBe(before);
    expect((await mustGet(t.ledger, a)).replayedAt).toBeNull();

    const replayed = json<{ id: string; replayOf: string }>(
      await cli('replay', a, '--expect-attempt', '1', '--expect-digest', digestA.toUpperCase(), '--json'),
    );
    expect(replayed.replayOf).toBe(a);
    expect(await mustGet(t.ledger, replayed.id)).toMatchObject({
      state: 'pending',
      replayOf: a,
      lane: 'acct:7',
      attempt: 0,
      payload: { secret: SECRET },
    });
    expect(await itemCount(t.ledger)).toBe(before + 1);
    const twice = await cli('replay', a, '--expect-attempt', '1', '--expect-digest', digestA);
    expect(twice.code).toBe(1);
    expect(twice.err).toContain('already replayed');

    // Without --expect-digest: the item's current last error is used, and the operator is told.
    const implicit = await cli('replay', b, '--expect-attempt', '1');
    expect(implicit.code, implicit.err).toBe(0);
    expect(implicit.err).toContain(
      `using the digest of the item's current last error (${errorDigest('upstream said 503')})`,
    );
    const newB = /^replayed (\S+) as (\S+)$/m.exec(implicit.out);
    expect(newB?.[1]).toBe(b);
    expect((await mustGet(t.ledger, newB?.[2] ?? '')).replayOf).toBe(b);
    expect(await itemCount(t.ledger)).toBe(before + 2);

    const unknown = await cli('replay', 'no-such-item', '--expect-attempt', '1');
    expect(unknown.code).toBe(1);
    expect(unknown.err).toContain('no such item');
  });

  it('cancel reports each outcome; not_found exits 1', async () => {
    const queue = freshQueue('cli-cancel');
    const { id: waiting } = await t.ledger.enqueue({ queue, type: 't', payload: {}, lane: 'l1' });
    const { id: next } = await t.ledger.enqueue({ queue, type: 't', payload: {}, lane: 'l1' });

    const c1 = await cli('cancel', waiting, '--reason', 'operator: wrong customer');
    expect(c1.code, c1.err).toBe(0);
    expect(c1.out).toMatch(/^cancelled: /);
    expect(await mustGet(t.ledger, waiting)).toMatchObject({
      state: 'cancelled',
      lastError: 'operator: wrong customer',
    });
    expect((await mustGet(t.ledger, next)).isHead).toBe(true);

    expect(json<{ id: string; outcome: string }>(await cli('cancel', waiting, '--json'))).toEqual({
      id: waiting,
      outcome: 'not_cancellable',
    });

    const running = await claimOne(t.ledger, queue);
    expect(running.id).toBe(next);
    const c3 = await cli('cancel', next);
    expect(c3.code, c3.err).toBe(0);
    expect(c3.out).toMatch(/^cancel_requested: /);
    expect((await mustGet(t.ledger, next)).cancelRequested).toBe(true);

    const c4 = await cli('cancel', 'no-such-item');
    expect(c4.code).toBe(1);
    expect(c4.out).toMatch(/^not_found: /);
    expect(c4.err).toContain('no item no-such-item');
  });

  it('activate takes the next epoch, broadcasts it, and exits 3 on a stale --expect-epoch', async () => {
    const queue = freshQueue('cli-own');
    const tw: TestWake = createTestWake();
    try {
      const redis = ['--redis-url', redisUrl(), '--redis-key-prefix', tw.keyPrefix];
      const unseen = await cli('activate', '--queue', queue, '--deployment', 'blue', ...redis);
      expect(unseen.code, unseen.err).toBe(2);
      expect(unseen.err).toContain(`--queue: the ledger has never seen queue '${queue}'`);
      expect(unseen.err).toContain('--new-queue');
      expect(await t.ledger.ownership(queue)).toBeUndefined();
      const first = json<{ epoch: number; deployment: string }>(
        await cli('activate', '--queue', queue, '--deployment', 'blue', '--new-queue', '--json', ...redis),
      );
      expect(first).toMatchObject({ queue, epoch: 1, deployment: 'blue' });
      const second = await cli('activate', '--queue', queue, '--deployment', 'green', '--expect-epoch', '1', ...redis);
      expect(second.code, second.err).toBe(0);
      expect(second.out).toBe(`queue ${queue}: epoch 2, owned by green\n`);
      expect(second.err).toBe('');

      const stale = await cli('activate', '--queue', queue, '--deployment', 'blue', '--expect-epoch', '1', ...redis);
      expect(stale.code).toBe(3);
      expect(stale.err).toContain(`queue ${queue} is at epoch 2, not the expected 1`);
      const never = await cli('activate', '--queue', queue, '--deployment', 'blue', '--expect-epoch', '0');
      expect(never.code).toBe(3);
      expect(await t.ledger.ownership(queue)).toMatchObject({ epoch: 2, deployment: 'green' });

      const entries = (await tw.wake.redis.xrange(controlStreamKey(tw.keyPrefix, queue), '-', '+')) as [
        string,
        string[],
      ][];
      expect(entries.map(([, fields]) => JSON.parse(fields[1] ?? 'null') as unknown)).toEqual([
        { type: 'ownership', epoch: 1, deployment: 'blue' },
        { type: 'ownership', epoch: 2, deployment: 'green' },
      ]);
    } finally {
      await tw.drop();
    }
  });

  it('with --redis-url, enqueue and replay publish wake-ups; an unreachable Redis is only a warning', async () => {
    const queue = freshQueue('cli-wake');
    const tw = createTestWake();
    try {
      const redis = ['--redis-url', redisUrl(), '--redis-key-prefix', tw.keyPrefix];
      const { id } = json<{ id: string }>(
        await cli('enqueue', queue, 't', '--class', 'interactive', '--json', ...redis),
      );
      const deadQueue = freshQueue('cli-wake-dead');
      const deadId = await makeDead(deadQueue, 'boom');
      const replay = await cli('replay', deadId, '--expect-attempt', '1', '--json', ...redis);
      const replayed = json<{ id: string }>(replay);
      expect(replay.err).not.toContain('warning');

      const wakes = async (q: string, cls: 'interactive' | 'default') =>
        ((await tw.wake.redis.xrange(wakeStreamKey(tw.keyPrefix, q, cls), '-', '+')) as [string, string[]][]).map(
          ([, f]) => ({
            kind: f[f.indexOf('k') + 1],
            ids: f[f.indexOf('i') + 1],
          }),
        );
      expect(await wakes(queue, 'interactive')).toEqual([{ kind: 'enqueue', ids: id }]);
      expect(await wakes(deadQueue, 'default')).toEqual([{ kind: 'replay', ids: replayed.id }]);

      const down = await cli('enqueue', queue, 't', '--json', '--redis-url', `redis://127.0.0.1:${await freePort()}`);
      const created = json<{ id: string }>(down);
      expect(down.err).toMatch(
        /^warning: the wake-up not published to redis:\/\/127\.0\.0\.1:\d+ \(Redis is unreachable\)/,
      );
      expect((await mustGet(t.ledger, created.id)).state).toBe('pending');
    } finally {
      await tw.drop();
    }
  });

  it('bad input exits 2 naming the option or field, and writes nothing', async () => {
    const queue = freshQueue('cli-bad');
    const cases: { args: string[]; names: string }[] = [
      { args: ['enqueue', 'Bad Queue!', 't'], names: '<queue>' },
      { args: ['enqueue', queue, 'no spaces'], names: '<type>' },
      { args: ['enqueue', queue, 't', '--payload', `{"secret": "${SECRET}", nope`], names: '--payload' },
      { args: ['enqueue', queue, 't', '--run-at', 'tomorrow'], names: '--run-at' },
      { args: ['enqueue', queue, 't', '--run-at', '2026-12-01T09:00:00'], names: '--run-at' },
      { args: ['enqueue', queue, 't', '--max-attempts', '0'], names: '--max-attempts' },
      { args: ['enqueue', queue, 't', '--max-attempts', 'many'], names: '--max-attempts' },
      { args: ['enqueue', queue, 't', '--class', 'urgent'], names: '--class' },
      { args: ['enqueue', queue, 't', '--run-at', '2030-01-01T00:00:00Z', '--delay-ms', '5'], names: '--delay-ms' },
      { args: ['enqueue', queue, 't', '--idempotency-key', 'trailing '], names: '--idempotency-key' },
      { args: ['frobnicate'], names: "unknown command 'frobnicate'" },
      { args: ['dead', 'list', '--limit', '0'], names: '--limit' },
      { args: ['inspect', 'not an id!'], names: '<id>' },
      { args: ['replay', 'abc', '--expect-attempt', '1', '--expect-digest', 'xyz'], names: '--expect-digest' },
      { args: ['replay', 'abc'], names: '--expect-attempt' },
      { args: ['activate', '--queue', queue], names: '--deployment' },
      { args: ['activate', '--queue', queue, '--deployment', 'd', '--expect-epoch', '-1'], names: '--expect-epoch' },
      { args: ['activate', '--queue', queue, '--deployment', 'x'.repeat(129)], names: '--deployment' },
      { args: ['concurrency-limit', queue, '0'], names: '<n>' },
      { args: ['concurrency-limit', queue, '2', '--type', 'no spaces'], names: '--type' },
      { args: ['migrate', '--database-url', `${t.url}.x`], names: '--database-url' },
      { args: ['stats', '--redis-url', 'http://x'], names: '--redis-url' },
    ];
    for (const c of cases) {
      const r = await cli(...c.args);
      expect(r.code, `${c.args.join(' ')}: ${r.err}`).toBe(2);
      expect(r.err, c.args.join(' ')).toContain(c.names);
      expect(r.err).not.toContain(SECRET);
      expect(r.out).toBe('');
    }
    const badUrl = await lanewake(['stats', '--database-url', 'postgres://db/x']);
    expect(badUrl.code).toBe(2);
    expect(badUrl.err).toContain('--database-url');
    const noCommand = await lanewake([]);
    expect(noCommand.code).toBe(2);
    expect(noCommand.err).toContain('Usage: lanewake');
    expect(await itemCount(t.ledger)).toBe(0);
    expect(await t.ledger.ownership(queue)).toBeUndefined();
  });

  it('pause and resume a queue: the ledger holds the flag, --why names it, a bad queue name exits 2', async () => {
    const queue = 'cli-pause';
    const { id } = await t.ledger.enqueue({ queue, type: 't', payload: {} });
    expect((await cli('pause', queue)).out).toContain(`queue ${queue}: paused`);
    expect(await t.ledger.pausedQueues([queue])).toEqual(new Set([queue]));
    expect((await cli('inspect', id, '--why')).out).toContain('queue_paused');
    expect(json<{ queue: string; paused: boolean }>(await cli('resume', queue, '--json'))).toEqual({
      queue,
      paused: false,
    });
    expect(await t.ledger.pausedQueues([queue])).toEqual(new Set());
    const bad = await cli('pause', 'Bad Queue');
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('<queue>');
  });

  it(
    'pause, resume, concurrency-limit and activate refuse a queue the ' +
      'ledger has never seen, exit 2 naming it, unless --new-queue',
    async () => {
      const typo = freshQueue('cli-typo');
      const refusals: [string[], string][] = [
        [['pause', typo], '<queue>'],
        [['resume', typo], '<queue>'],
        [['concurrency-limit', typo, '5'], '<queue>'],
        [['concurrency-limit', typo, 'none', '--type', 'mail'], '<queue>'],
        [['activate', '--queue', typo, '--deployment', 'blue'], '--queue'],
      ];
      for (const [args, field] of refusals) {
        const r = await cli(...args);
        expect(r.code, `${args.join(' ')}: ${r.err}`).toBe(2);
        expect(r.err).toBe(
          `error: ${field}: the ledger has never seen queue '${typo}' (no item, setting, owner ` +
            `or consumer of it): check the name, or add --new-queue if the queue is new\n`,
        );
        expect(r.out).toBe('');
      }
      // Nothing written: no settings row, no type limit, no owner.
      expect(await t.ledger.operator.hasSeenQueue(typo)).toBe(false);
      expect(await t.ledger.ownership(typo)).toBeUndefined();

      // Each thing the ledger holds of a queue makes it seen.
      const seenBy: [string, (queue: string) => Promise<unknown>][] = [
        ['an item', (q) => t.ledger.enqueue({ queue: q, type: 't', payload: {} })],
        ['a setting', (q) => t.ledger.pause(q)],
        ["a type's own limit", (q) => t.ledger.setConcurrencyLimit(q, 2, { type: 'mail' })],
        ['an owner', (q) => t.ledger.activate({ queue: q, deployment: 'blue' })],
        [
          "a consumer's registration",
          (q) =>
            t.ledger.consumerBeat(
              [
                {
                  name: `${q}-c`,
                  queue: q,
                  classes: ['default'],
                  types: null,
                  concurrency: 1,
                  maxProcessing: null,
                  epoch: null,
                  version: 'test',
                },
              ],
              true,
            ),
        ],
      ];
      for (const [what, make] of seenBy) {
        const queue = freshQueue('cli-seen');
        expect((await cli('resume', queue)).code, what).toBe(2);
        await make(queue);
        const r = await cli('resume', queue);
        expect(r.code, `${what}: ${r.err}`).toBe(0);
        expect(r.out).toBe(`queue ${queue}: resumed\n`);
      }

      // Told the queue is new, each command sets it.
      expect((await cli('pause', typo, '--new-queue')).out).toBe(`queue ${typo}: paused\n`);
      expect(await t.ledger.pausedQueues([typo])).toEqual(new Set([typo]));
      const fresh = freshQueue('cli-new');
      expect((await cli('concurrency-limit', fresh, '5', '--new-queue')).code).toBe(0);
      expect(await t.ledger.concurrencyLimits(fresh)).toEqual({ queue: fresh, limit: 5, types: {} });
      const owned = freshQueue('cli-new-owner');
      expect((await cli('activate', '--queue', owned, '--deployment', 'blue', '--new-queue')).out).toBe(
        `queue ${owned}: epoch 1, owned by blue\n`,
      );
    },
  );

  it("concurrency-limit sets, raises and lifts a queue's or a type's key limit; bad input exits 2, named", async () => {
    const queue = 'cli-keys';
    const unseen = await cli('concurrency-limit', queue, '1', '--type', 'mail');
    expect(unseen.code, unseen.err).toBe(2);
    expect(unseen.err).toContain(`<queue>: the ledger has never seen queue '${queue}'`);
    expect(json(await cli('concurrency-limit', queue, '--json'))).toEqual({ queue, limit: null, types: {} });
    expect((await cli('concurrency-limit', queue, '1', '--type', 'mail', '--new-queue')).out).toContain(
      `queue ${queue}, type mail: at most 1 per concurrency key`,
    );
    const [first, second] = await t.ledger.enqueueMany(
      [0, 1].map((i) => ({ queue, type: 'mail', concurrencyKey: 'K', payload: { i } })),
    );
    expect((await t.ledger.get(second!.id))?.isHead).toBe(false);
    expect((await cli('inspect', second!.id, '--why')).out).toContain('key_at_limit');
    expect((await cli('inspect', second!.id)).out).toMatch(
      /^concurrency key: +K \(its type's own limit\), waiting for a slot$/m,
    );
    expect((await cli('inspect', first!.id)).out).toMatch(/^concurrency key: +K \(its type's own limit\), admitted$/m);
    // Raised, the waiting item is admitted at once.
    expect(
      json<{ queue: string; type: string; limit: number; keysWithWaitingItems: number }>(
        await cli('concurrency-limit', queue, '2', '--type', 'mail', '--json'),
      ),
    ).toEqual({
      queue,
      type: 'mail',
      limit: 2,
      keysWithWaitingItems: 1,
    });
    expect((await t.ledger.get(second!.id))?.isHead).toBe(true);
    expect((await t.ledger.get(first!.id))?.keyScope).toBe('type');
    expect((await cli('concurrency-limit', queue, 'none', '--type', 'mail')).out).toContain('no limit');
    expect((await cli('concurrency-limit', queue, '3')).out).toContain(`queue ${queue}: at most 3 per concurrency key`);
    await cli('concurrency-limit', queue, '4', '--type', 'report');
    expect(json(await cli('concurrency-limit', queue, '--json'))).toEqual({ queue, limit: 3, types: { report: 4 } });
    expect((await cli('concurrency-limit', queue)).out).toContain(
      'type report: at most 4 per concurrency key, its own',
    );
    for (const [args, names] of [
      [[queue, 'lots'], '<n>'],
      [[queue, '0'], '<n>'],
      [['Bad Queue', '2'], '<queue>'],
      [[queue, '2', '--type', 'no spaces'], '--type'],
    ] as const) {
      const bad = await cli('concurrency-limit', ...args);
      expect(bad.code, bad.err).toBe(2);
      expect(bad.err).toContain(names);
    }
  });
});
