import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import { BatchCompleter } from '../src/consumer/completer.js';
import { runJob, type Outcome } from '../src/consumer/job-run.js';
import { LeaseKeeper } from '../src/consumer/lease-keeper.js';
import { consumerSettingsSchema } from '../src/consumer/options.js';
import type { Job, JobContext, RegisteredHandler } from '../src/consumer/types.js';
import { Ledger } from '../src/ledger/ledger.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import {
  createEffectsTable,
  effectCount,
  insertEffect,
  nowUs,
  type EffectsDB,
  type StepPayload,
} from './support/effects.js';
import { claimAll, freshQueue, history, mustGet } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { BusyKiller, FaultProxy, serverUrl, type Cut } from './support/connection-faults.js';

// A connection the server killed, or lost on the way, must cost no handler
// attempt, and a write whose answer was lost must be reported as what the
// ledger holds. Two real faults, each at the point that matters:
//
// - KILL CONNECTION on an idle pooled connection while this process is busy
//   (it has not yet read the server's close), so the pool lends out a dead
//   connection: `killWhileBusy` blocks this thread until the kill is done.
// - a TCP proxy between a ledger and MariaDB that loses one statement's
//   answer: it forwards the statement, holds the reply until the write is
//   visible to others (it committed), then cuts the connection; or it cuts
//   the connection instead of forwarding it (the server rolls back).

let tl: TestLedger;
let killer: BusyKiller;
let proxy: FaultProxy;
const extra: Ledger[] = [];

beforeAll(async () => {
  tl = await createTestLedger();
  await createEffectsTable(tl.ledger);
  killer = new BusyKiller();
  killer.ready();
  proxy = await FaultProxy.start({ host: serverUrl.hostname, port: Number(serverUrl.port || 3306) });
});
afterEach(async () => {
  proxy.cut();
  await Promise.allSettled(extra.splice(0).map((l) => l.close()));
});
afterAll(async () => {
  await killer?.close();
  await proxy?.close();
  await tl?.drop();
});

/**
 * A second ledger on the test database with a pool of one connection, so the test knows which connection it lends out.
 */
function singleConnectionLedger(): Ledger {
  const l = new Ledger({ url: tl.url, poolSize: 1 });
  extra.push(l);
  return l;
}

/** A ledger on the test database whose connections pass through the fault proxy. */
function proxiedLedger(): Ledger {
  const u = new URL(tl.url);
  u.hostname = '127.0.0.1';
  u.port = String(proxy.port);
  const l = new Ledger({ url: u.toString(), poolSize: 2 });
  extra.push(l);
  return l;
}

/** The server's id of the pool's only connection (left idle in the pool). */
async function idleConnectionId(ledger: Ledger): Promise<number> {
  const r = await sql<{ id: number | string }>`SELECT CONNECTION_ID() AS id`.execute(ledger.db);
  return Number(r.rows[0]?.id);
}

async function enqueueAndClaim(
  ledger: Ledger,
  queue: string,
  opts: { lane?: string; n?: number } = {},
): Promise<ClaimedItem[]> {
  const n = opts.n ?? 1;
  await tl.ledger.enqueueMany(
    Array.from({ length: n }, (_, i) => ({
      queue,
      type: 'step',
      payload: { n: i },
      ...(opts.lane ? { lane: `${opts.lane}${i}` } : {}),
    })),
  );
  const items = await claimAll(ledger, queue);
  expect(items).toHaveLength(n);
  return items;
}

interface RunResult {
  outcome: Outcome;
  fnRuns: number;
  returned: unknown[];
  logs: string[];
}

/**
 * One item's run through the executor (as a consumer runs it), its handler writing an effect row with ctx.transaction.
 */
async function runEffectHandler(
  ledger: Ledger,
  item: ClaimedItem,
  beforeTransaction: () => void | Promise<void>,
): Promise<RunResult> {
  const logs: string[] = [];
  const result: RunResult = { outcome: 'abandoned', fnRuns: 0, returned: [], logs };
  const handler: RegisteredHandler<EffectsDB> = {
    handle: async (job: Job<unknown>, ctx: JobContext<EffectsDB>) => {
      await beforeTransaction();
      const value = await ctx.transaction(async (trx) => {
        result.fnRuns += 1;
        await insertEffect(trx, job as Job<StepPayload>, 'w', nowUs());
        return `effect of ${job.id}`;
      });
      result.returned.push(value);
    },
  };
  const run = runJob<EffectsDB>(
    {
      ledger,
      completer: new BatchCompleter(ledger),
      settings: consumerSettingsSchema.parse({ queue: item.queue }),
      handlers: new Map([['step', handler]]),
      log: pino({ level: 'debug' }, { write: (line: string) => void logs.push(line) }),
    },
    item,
  );
  run.start();
  result.outcome = await run.done;
  return result;
}

test('ctx.transaction on a dead pooled connection reruns on a fresh one: no attempt spent, one effect', async () => {
  const ledger = singleConnectionLedger();
  const [item] = await enqueueAndClaim(ledger, freshQueue('dead-conn-tx'));
  const before = await effectCount(tl.ledger);
  const r = await runEffectHandler(ledger, item!, async () => {
    const id = await idleConnectionId(ledger);
    killer.killWhileBusy(id); // returns with the pool still holding the killed connection as idle
  });
  expect(r.logs).toEqual([]);
  expect(r.outcome).toBe('completed');
  expect(r.returned).toEqual([`effect of ${item!.id}`]);
  const after = await mustGet(tl.ledger, item!.id);
  expect(after).toMatchObject({ state: 'completed', attempt: 1, result: `effect of ${item!.id}` });
  expect(await history(tl.ledger, item!.id)).toEqual([]);
  expect(await effectCount(tl.ledger)).toBe(before + 1);
});

test('single-item finalizes on a dead pooled connection take effect once and say so', async () => {
  const ledger = singleConnectionLedger();
  const queue = freshQueue('dead-conn-finalize');
  const [a, b, c] = await enqueueAndClaim(ledger, queue, { n: 3, lane: 'L' });

  killer.killWhileBusy(await idleConnectionId(ledger));
  // Laned: a transaction (lane bookkeeping); a first-try success has no history row.
  expect(await ledger.complete(a!, { ok: 1 })).toMatchObject({ won: true, state: 'completed' });
  killer.killWhileBusy(await idleConnectionId(ledger));
  expect(await ledger.retry(b!, { error: new Error('try again'), delayMs: 60_000 })).toMatchObject({
    won: true,
    state: 'pending',
  });
  killer.killWhileBusy(await idleConnectionId(ledger));
  expect(await ledger.release(c!, { reason: 'handing back' })).toMatchObject({ won: true, state: 'pending' });

  expect(await mustGet(tl.ledger, a!.id)).toMatchObject({ state: 'completed', attempt: 1, result: { ok: 1 } });
  expect(await mustGet(tl.ledger, b!.id)).toMatchObject({ state: 'pending', attempt: 1 });
  expect((await history(tl.ledger, b!.id)).map((h) => h.outcome)).toEqual(['retried']);
  expect(await mustGet(tl.ledger, c!.id)).toMatchObject({ state: 'pending', attempt: 0 });
  expect((await history(tl.ledger, c!.id)).map((h) => h.outcome)).toEqual(['released']);
});

test('a laneless single completion on a dead pooled connection (one autocommit UPDATE) wins once', async () => {
  const ledger = singleConnectionLedger();
  const [item] = await enqueueAndClaim(ledger, freshQueue('dead-conn-complete'));
  killer.killWhileBusy(await idleConnectionId(ledger));
  expect(await ledger.complete(item!, 'done')).toMatchObject({ won: true, state: 'completed' });
  expect(await mustGet(tl.ledger, item!.id)).toMatchObject({ state: 'completed', attempt: 1, result: 'done' });
});

test.each([
  ['laneless', undefined],
  ['laned', 'L'],
] as const)('completeMany (%s) on a dead pooled connection completes every item once', async (_label, lane) => {
  const ledger = singleConnectionLedger();
  const items = await enqueueAndClaim(ledger, freshQueue(`dead-conn-many-${lane ?? 'none'}`), {
    n: 5,
    ...(lane ? { lane } : {}),
  });
  killer.killWhileBusy(await idleConnectionId(ledger));
  const results = await ledger.completeMany(items.map((handle, n) => ({ handle, result: { n } })));
  expect(results.map((r) => r.won)).toEqual([true, true, true, true, true]);
  for (const [n, item] of items.entries())
    expect(await mustGet(tl.ledger, item.id)).toMatchObject({ state: 'completed', attempt: 1, result: { n } });
});

test('a lease renewal on a dead pooled connection renews', async () => {
  const ledger = singleConnectionLedger();
  const [item] = await enqueueAndClaim(ledger, freshQueue('dead-conn-renew'));
  const before = (await mustGet(tl.ledger, item!.id)).leaseUntil!;
  const events: string[] = [];
  const keeper = new LeaseKeeper(ledger, item!, 600_000, (e) => events.push(e));
  killer.killWhileBusy(await idleConnectionId(ledger));
  expect(await keeper.renewNow()).toBe(true);
  expect(events).toEqual([]);
  expect((await mustGet(tl.ledger, item!.id)).leaseUntil!.getTime()).toBeGreaterThan(before.getTime());
});

/**
 * Arms the proxy for `match` (a statement sent prepared starts with a comment, sql/bound.ts): with 'hold-reply', cuts
 * the connection once `committed` sees the write from outside.
 */
function loseNext(match: RegExp, cut: Cut, committed?: () => Promise<boolean>): Promise<void> {
  return proxy.arm(match, cut).then(async () => {
    if (cut === 'drop-request') return;
    await waitFor(() => committed?.() ?? true, 10_000, 'the write to commit');
    proxy.cut();
  });
}

const COMMIT = /(^|;)\s*commit\s*$/i;
const isState = (id: string, state: string) => async () => (await mustGet(tl.ledger, id)).state === state;

test('ctx.transaction whose COMMIT committed with its answer lost returns its value: one run, one effect', async () => {
  const ledger = proxiedLedger();
  const [item] = await enqueueAndClaim(ledger, freshQueue('commit-lost-reply'));
  const before = await effectCount(tl.ledger);
  const lost = loseNext(COMMIT, 'hold-reply', isState(item!.id, 'completed'));
  const r = await runEffectHandler(ledger, item!, () => undefined);
  await lost;
  expect(r.logs).toEqual([]);
  expect(r.outcome).toBe('completed');
  expect(r.fnRuns).toBe(1);
  expect(r.returned).toEqual([`effect of ${item!.id}`]);
  expect(await mustGet(tl.ledger, item!.id)).toMatchObject({ state: 'completed', attempt: 1 });
  expect(await effectCount(tl.ledger)).toBe(before + 1);
});

test('ctx.transaction whose COMMIT never reached the server runs again: one effect, no attempt spent', async () => {
  const ledger = proxiedLedger();
  const [item] = await enqueueAndClaim(ledger, freshQueue('commit-lost-request'));
  const before = await effectCount(tl.ledger);
  const lost = loseNext(COMMIT, 'drop-request');
  const r = await runEffectHandler(ledger, item!, () => undefined);
  await lost;
  expect(r.logs).toEqual([]);
  expect(r.outcome).toBe('completed');
  expect(r.fnRuns).toBe(2); // the first run rolled back with its connection
  expect(r.returned).toEqual([`effect of ${item!.id}`]);
  expect(await mustGet(tl.ledger, item!.id)).toMatchObject({ state: 'completed', attempt: 1 });
  expect(await history(tl.ledger, item!.id)).toEqual([]);
  expect(await effectCount(tl.ledger)).toBe(before + 1);
});

test('a finalize whose COMMIT committed unanswered reports that it won', async () => {
  const ledger = proxiedLedger();
  const [a, b] = await enqueueAndClaim(ledger, freshQueue('finalize-commit-lost'), { n: 2, lane: 'L' });
  const lostA = loseNext(COMMIT, 'hold-reply', isState(a!.id, 'pending'));
  expect(await ledger.retry(a!, { error: 'again', delayMs: 60_000 })).toMatchObject({ won: true, state: 'pending' });
  await lostA;
  expect((await history(tl.ledger, a!.id)).map((h) => h.outcome)).toEqual(['retried']);
  const lostB = loseNext(COMMIT, 'hold-reply', isState(b!.id, 'completed'));
  expect(await ledger.complete(b!, 'b')).toMatchObject({ won: true, state: 'completed' });
  await lostB;
  expect(await mustGet(tl.ledger, b!.id)).toMatchObject({ state: 'completed', attempt: 1, result: 'b' });
});

test(
  'completeMany whose answer was lost after it committed reports ' +
    'every item won, and hands over the successors it claimed',
  async () => {
    const ledger = proxiedLedger();
    const queue = freshQueue('batch-commit-lost');
    await tl.ledger.enqueueMany(
      [0, 1, 2].flatMap((lane) => [0, 1].map((n) => ({ queue, type: 'step', lane: `L${lane}`, payload: { n } }))),
    );
    const heads = await claimAll(ledger, queue);
    expect(heads).toHaveLength(3);
    const lost = loseNext(COMMIT, 'hold-reply', async () => {
      for (const h of heads) if ((await mustGet(tl.ledger, h.id)).state !== 'completed') return false;
      return true;
    });
    const next = { owner: 'w', token: 'successor-token-000001', leaseMs: 60_000, max: 10 };
    const done = await ledger.completeManyClaimingNext(
      heads.map((handle) => ({ handle })),
      next,
    );
    await lost;
    expect(done.results.map((r) => r.won)).toEqual([true, true, true]);
    const successors = done.claimed.map((c) => c.id).sort();
    expect(successors).toHaveLength(3);
    for (const id of successors)
      expect(await mustGet(tl.ledger, id)).toMatchObject({ state: 'processing', leaseToken: next.token, attempt: 1 });

    // The laneless batch is one autocommit UPDATE: its answer lost after it took effect.
    const laneless = await enqueueAndClaim(ledger, freshQueue('batch-update-lost'), { n: 3 });
    const lostUpdate = loseNext(
      /^\s*(\/\*.*?\*\/\s*)?UPDATE/i,
      'hold-reply',
      async () => (await mustGet(tl.ledger, laneless[2]!.id)).state === 'completed',
    );
    const r = await ledger.completeMany(laneless.map((handle) => ({ handle })));
    await lostUpdate;
    expect(r.map((x) => x.won)).toEqual([true, true, true]);
  },
);

/**
 * A capped claim's last round trip, its CAS with the COMMIT: one on MariaDB (the CAS prepared with the room as its
 * LIMIT), the second on TiDB.
 */
const CAPPED_TURN_COMMIT = /ORDER BY priority, run_after, id LIMIT (\?|\d+).*;\s*commit\s*$/is;

test.each([
  {
    name: 'a claim whose CAS committed but whose answer was lost still hands over what it won: no lease left to expire',
    cas: /^\s*(\/\*.*?\*\/\s*)?UPDATE .*SET state = 'processing'/is,
    maxProcessing: undefined,
  },
  {
    name: 'a capped claim whose CAS and COMMIT committed but whose answer was lost still hands over what it won',
    cas: CAPPED_TURN_COMMIT,
    maxProcessing: 5,
  },
])('$name', async ({ cas, maxProcessing }) => {
  const ledger = proxiedLedger();
  const queue = freshQueue(maxProcessing === undefined ? 'claim-reply-lost' : 'capped-claim-reply-lost');
  const [a, b] = await tl.ledger.enqueueMany([
    { queue, type: 'step', payload: 1 },
    { queue, type: 'step', payload: 2 },
  ]);
  const ids = [a!.id, b!.id];
  const bothProcessing = async (): Promise<boolean> =>
    (await Promise.all(ids.map((id) => isState(id, 'processing')()))).every(Boolean);
  const lost = loseNext(cas, 'hold-reply', bothProcessing);
  const claimed = await ledger.claim({
    queue,
    owner: 'w',
    limit: 10,
    leaseMs: 60_000,
    ...(maxProcessing === undefined ? {} : { maxProcessing }),
  });
  await lost;
  expect(claimed.items.map((i) => i.id).sort()).toEqual([...ids].sort());
  for (const item of claimed.items) expect((await ledger.complete(item)).won).toBe(true);
  expect((await tl.ledger.stats(queue))[0]?.counts.completed.count).toBe(2);
});

test('a capped claim whose CAS and COMMIT never reached the server takes its turn again and claims', async () => {
  const ledger = proxiedLedger();
  const queue = freshQueue('capped-claim-dropped');
  const [a, b] = await tl.ledger.enqueueMany([
    { queue, type: 'step', payload: 1 },
    { queue, type: 'step', payload: 2 },
  ]);
  const lost = loseNext(CAPPED_TURN_COMMIT, 'drop-request');
  const claimed = await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000, maxProcessing: 5 });
  await lost;
  expect(claimed.items.map((i) => i.id).sort()).toEqual([a!.id, b!.id].sort());
  for (const item of claimed.items) expect((await ledger.complete(item)).won).toBe(true);
});

test(
  'a reclaim of expired leases whose COMMIT committed unanswered ' +
    'reports what it reclaimed, with one history row each',
  async () => {
    const ledger = proxiedLedger();
    const queue = freshQueue('reclaim-commit-lost');
    const items = await enqueueAndClaim(tl.ledger, queue, { n: 3 });
    // The holder is gone: its leases ran out.
    await sql`UPDATE ${tl.ledger.tables.items} SET lease_until = NOW(6) - INTERVAL 1 SECOND
      WHERE queue = ${queue}`.execute(tl.ledger.db);
    const allPending = async (): Promise<boolean> =>
      (await Promise.all(items.map((i) => isState(i.id, 'pending')()))).every(Boolean);
    const lost = loseNext(COMMIT, 'hold-reply', allPending);
    const r = await ledger.reclaimExpired({ queue });
    await lost;
    expect([...r.reclaimed].sort()).toEqual(items.map((i) => i.id).sort());
    for (const i of items) {
      expect(await mustGet(tl.ledger, i.id)).toMatchObject({
        state: 'pending',
        attempt: 1,
        leaseToken: i.leaseToken,
        failureClass: 'lease_expired',
      });
      expect((await history(tl.ledger, i.id)).map((h) => h.outcome)).toEqual(['lease_expired']);
    }
  },
);

test('a reclaim whose COMMIT never reached the server runs again and reclaims once', async () => {
  const ledger = proxiedLedger();
  const queue = freshQueue('reclaim-commit-dropped');
  const items = await enqueueAndClaim(tl.ledger, queue, { n: 2 });
  await sql`UPDATE ${tl.ledger.tables.items} SET lease_until = NOW(6) - INTERVAL 1 SECOND
    WHERE queue = ${queue}`.execute(tl.ledger.db);
  const lost = loseNext(COMMIT, 'drop-request');
  const r = await ledger.reclaimExpired({ queue });
  await lost;
  expect([...r.reclaimed].sort()).toEqual(items.map((i) => i.id).sort());
  for (const i of items) expect((await history(tl.ledger, i.id)).map((h) => h.outcome)).toEqual(['lease_expired']);
});
