import { sql } from 'kysely';
import { afterEach, expect, test } from 'vitest';
import mysql, { type RowDataPacket } from 'mysql2/promise';
import { sessionSetup } from '../src/ledger/connection.js';
import type { Ledger } from '../src/ledger/ledger.js';
import { jsonLiteral, pipelined } from '../src/ledger/internal.js';
import { literal } from '../src/ledger/sql/common/fragments.js';
import { processingCount } from '../src/ledger/sql/operator/stats.js';
import { createTestLedger, ledgerOnPlainPool, waitFor, type TestLedger } from './support/ledger.js';
import { mysqlServerUrl } from './support/services.js';

// The ledger's own pool takes several statements per query (multipleStatements);
// a Kysely instance a caller hands in may not. A claim then sends its CAS and
// read-back as one query or as two; a pipelined transaction sends BEGIN with
// its first round trip and COMMIT with its last, or one statement per round
// trip inside a Kysely transaction. Both paths must behave the same: all or
// nothing, and nothing left open.

let tl: TestLedger | undefined;
let external: Ledger | undefined;
afterEach(async () => {
  await external?.close();
  external = undefined;
  await tl?.drop();
});

const paths = [
  ['its own pool (several statements per round trip)', false],
  ['a handed-in Kysely without multipleStatements (one statement per round trip)', true],
] as const;

test.each(paths)('claim and claimByIds through %s', async (_label, plain) => {
  tl = await createTestLedger();
  const ledger = plain ? (external = ledgerOnPlainPool(tl.url)) : tl.ledger;
  const queue = 'paths';
  const made = await tl.ledger.enqueueMany(Array.from({ length: 6 }, (_, n) => ({ queue, type: 't', payload: { n } })));
  const ids = made.map((m) => m.id);

  const targeted = await ledger.claimByIds({ queue, owner: 'a', leaseMs: 10_000, ids: [ids[0]!, ids[1]!] });
  expect(targeted.map((i) => i.id).sort()).toEqual([ids[0], ids[1]].sort());
  expect(targeted.every((i) => i.state === 'processing' && i.attempt === 1 && i.leaseOwner === 'a')).toBe(true);
  expect(targeted[0]!.payload).toEqual({ n: ids.indexOf(targeted[0]!.id) });
  // Already claimed: nothing, and no error from an empty read-back.
  expect(await ledger.claimByIds({ queue, owner: 'b', leaseMs: 10_000, ids: [ids[0]!] })).toEqual([]);

  const rest = await ledger.claim({ queue, owner: 'c', leaseMs: 10_000, limit: 10 });
  expect(rest.items.map((i) => i.id).sort()).toEqual(ids.slice(2).sort());
  expect(new Set(rest.items.map((i) => i.leaseToken)).size).toBe(1);
  expect((await ledger.claim({ queue, owner: 'c', leaseMs: 10_000, limit: 10 })).items).toEqual([]);
  expect(await tl.ledger.countProcessing(queue)).toBe(6);
});

test(
  'enqueueClaiming inserts only due, key-less items and idle ' +
    "lanes' heads claimed (up to max), fenced like a claim",
  async () => {
    tl = await createTestLedger();
    const { ledger } = tl;
    const queue = 'claim-at-insert';
    const lease = { owner: 'local-consumer', token: 'tok-at-insert-0000000000', leaseMs: 60_000 };
    const busyHead = await ledger.enqueue({ queue, type: 't', payload: { n: 0 }, lane: 'busy' });
    const offered: number[] = [];
    const { results, claimed } = await ledger.enqueueClaiming(
      [
        { queue, type: 't', payload: { n: 1 } },
        { queue, type: 't', payload: { n: 2 }, lane: 'L' },
        { queue, type: 't', payload: { n: 3 }, lane: 'L' },
        { queue, type: 't', payload: { n: 4 }, lane: 'busy' },
        { queue, type: 't', payload: { n: 5 }, delayMs: 60_000 },
        { queue, type: 't', payload: { n: 6 }, idempotencyKey: 'k' },
        { queue, type: 't', payload: { n: 7 } },
        { queue, type: 't', payload: { n: 8 } },
      ],
      (eligible) => {
        offered.push(eligible.length);
        return { ...lease, max: 4 };
      },
    );
    expect(results).toHaveLength(8);
    // Offered: n 1, 2 (its lane's first in the batch), 4, 7, 8. Up to max: 1, 2, 4 and 7, but
    // lane 'busy' already had an unfinished item, so n 4 is not its head and waits unclaimed.
    expect(offered).toEqual([5]);
    expect(claimed.map((c) => c.payload)).toEqual([{ n: 1 }, { n: 2 }, { n: 7 }]);
    expect(claimed.map((c) => c.id)).toEqual([results[0]!.id, results[1]!.id, results[6]!.id]);
    expect(claimed[1]).toMatchObject({ lane: 'L', laneSeq: 1, isHead: true });
    for (const c of claimed) {
      expect(await ledger.get(c.id)).toMatchObject({
        state: 'processing',
        attempt: 1,
        leaseOwner: lease.owner,
        leaseToken: lease.token,
        isHead: true,
      });
      expect((await ledger.get(c.id))!.leaseUntil!.getTime()).toBeGreaterThan(Date.now() + 50_000);
    }
    for (const i of [2, 3, 4, 5, 7])
      expect(await ledger.get(results[i]!.id)).toMatchObject({ state: 'pending', attempt: 0, leaseToken: null });
    expect(await ledger.get(results[2]!.id)).toMatchObject({ lane: 'L', laneSeq: 2, isHead: false });
    expect(await ledger.get(results[3]!.id)).toMatchObject({ lane: 'busy', laneSeq: 2, isHead: false });
    expect(await ledger.get(busyHead.id)).toMatchObject({ state: 'pending', isHead: true });

    // Lane order holds: n 3 becomes claimable only once n 2 (claimed at insert) completes.
    const laneL = claimed[1]!;
    let open = await ledger.claim({ queue, owner: 'other', limit: 10, leaseMs: 60_000 });
    expect(open.items.map((i) => i.id)).not.toContain(results[2]!.id);
    expect((await ledger.complete(laneL)).won).toBe(true);
    open = await ledger.claim({ queue, owner: 'other', limit: 10, leaseMs: 60_000 });
    expect(open.items.map((i) => i.id)).toContain(results[2]!.id);
    claimed.splice(1, 1); // the lane-less ones remain: n 1 and n 7

    // Fenced like any claim: a foreign token loses, the holder's token completes.
    const mine = claimed[0]!;
    expect((await ledger.complete({ ...mine, leaseToken: 'someone-else-0000000000' })).won).toBe(false);
    expect((await ledger.complete(mine)).won).toBe(true);
    // A normal claim does not take what is already claimed at insert.
    const c = await ledger.claim({ queue, owner: 'other', limit: 10, leaseMs: 60_000 });
    expect(c.items.map((i) => i.id)).not.toContain(claimed[1]!.id);

    // Invalid input: nothing is written.
    const before = (await ledger.stats(queue))[0]?.counts;
    await expect(
      ledger.enqueueClaiming(
        [
          { queue, type: 't', payload: {} },
          { queue, type: 'no spaces', payload: {} },
        ],
        () => ({ ...lease, max: 5 }),
      ),
    ).rejects.toThrow(/type/);
    expect((await ledger.stats(queue))[0]?.counts).toEqual(before);
  },
);

test(
  'enqueueClaiming of keyed items keeps the claims of those ' +
    'their key admits; the rest wait in its line, unclaimed',
  async () => {
    tl = await createTestLedger();
    const { ledger } = tl;
    const queue = 'claim-at-insert-keyed';
    await ledger.setConcurrencyLimit(queue, 2);
    const lease = { owner: 'local-consumer', token: 'tok-at-insert-keyed-000000', leaseMs: 60_000 };
    const { results, claimed } = await ledger.enqueueClaiming(
      [0, 1, 2]
        .map((n) => ({ queue, type: 't', payload: { n }, concurrencyKey: 'k' }))
        .concat([{ queue, type: 't', payload: { n: 3 }, concurrencyKey: 'other' }]),
      () => ({ ...lease, max: 10 }),
    );
    expect(claimed.map((c) => c.payload)).toEqual([{ n: 0 }, { n: 1 }, { n: 3 }]);
    for (const i of [0, 1, 3])
      expect(await ledger.get(results[i]!.id)).toMatchObject({
        state: 'processing',
        leaseToken: lease.token,
        isHead: true,
      });
    expect(await ledger.get(results[2]!.id)).toMatchObject({
      state: 'pending',
      attempt: 0,
      leaseToken: null,
      isHead: false,
    });
    const keyRows = await sql<{
      ckey: string;
      admitted: number;
    }>`SELECT ckey, admitted FROM lw_keys WHERE queue = ${queue} ORDER BY ckey`.execute(ledger.db);
    expect(keyRows.rows.map((r) => [r.ckey, Number(r.admitted)])).toEqual([
      ['k', 2],
      ['other', 1],
    ]);
    // The one that waits is admitted when a slot of its key is given up.
    expect((await ledger.complete(claimed[0]!)).won).toBe(true);
    const next = await ledger.claim({ queue, owner: 'other', limit: 10, leaseMs: 60_000 });
    expect(next.items.map((i) => i.id)).toEqual([results[2]!.id]);
  },
);

test('an item claimed at insert whose holder died is reclaimed when its lease expires', async () => {
  tl = await createTestLedger();
  const { ledger } = tl;
  const queue = 'claim-at-insert-expiry';
  const { claimed } = await ledger.enqueueClaiming([{ queue, type: 't', payload: {} }], () => ({
    owner: 'gone',
    token: 'tok-expiring-00000000000',
    leaseMs: 200,
    max: 1,
  }));
  expect(claimed).toHaveLength(1);
  const reclaimed = await waitFor(
    async () => {
      const r = (await ledger.reclaimExpired({ queue })).reclaimed;
      return r.length > 0 ? r : undefined;
    },
    10_000,
    'the expired lease reclaimed',
  );
  expect(reclaimed).toEqual([claimed[0]!.id]);
  const again = await ledger.claim({ queue, owner: 'survivor', limit: 1, leaseMs: 60_000 });
  expect(again.items.map((i) => [i.id, i.attempt])).toEqual([[claimed[0]!.id, 2]]);
});

test.each(paths)(
  'completeManyClaimingNext claims the new heads it may take with the completion, through %s',
  async (_label, plain) => {
    tl = await createTestLedger();
    const ledger = plain ? (external = ledgerOnPlainPool(tl.url)) : tl.ledger;
    const queue = 'affinity';
    const r = await ledger.enqueueMany([
      { queue, type: 't', payload: 'a1', lane: 'A' },
      { queue, type: 't', payload: 'a2', lane: 'A' },
      { queue, type: 't', payload: 'b1', lane: 'B' },
      { queue, type: 't', payload: 'b2', lane: 'B', delayMs: 60_000 },
      { queue, type: 't', payload: 'c1', lane: 'C' },
      { queue, type: 'other', payload: 'c2', lane: 'C' },
      { queue, type: 't', payload: 'd1', lane: 'D' },
      { queue, type: 't', payload: 'd2', lane: 'D' },
      { queue, type: 't', payload: 'e1', lane: 'E' },
    ]);
    const id = (p: string) => r[['a1', 'a2', 'b1', 'b2', 'c1', 'c2', 'd1', 'd2', 'e1'].indexOf(p)]!.id;
    const heads = (await ledger.claim({ queue, owner: 'w1', limit: 10, leaseMs: 60_000 })).items;
    expect(heads.map((h) => h.payload).sort()).toEqual(['a1', 'b1', 'c1', 'd1', 'e1']);
    const next = { owner: 'w2', token: 'tok-successors-000000000', leaseMs: 60_000, max: 1, types: ['t'] };

    // A bad lease is refused, naming the field, and nothing is written.
    await expect(
      ledger.completeManyClaimingNext(
        heads.map((h) => ({ handle: h })),
        { ...next, token: 'no spaces allowed here!' },
      ),
    ).rejects.toThrow(/token/);
    expect(await ledger.countProcessing(queue)).toBe(5);

    const { results, claimed } = await ledger.completeManyClaimingNext(
      heads.map((h) => ({ handle: h })),
      next,
    );
    expect(results.every((x) => x.won)).toBe(true);
    // Of the new heads, b2 is not due and c2 is not of the given types; a2 and d2 qualify, max is 1.
    expect(claimed).toHaveLength(1);
    const took = claimed[0]!;
    expect(['a2', 'd2']).toContain(took.payload);
    expect(took).toMatchObject({
      state: 'processing',
      attempt: 1,
      leaseOwner: 'w2',
      leaseToken: next.token,
      isHead: true,
    });
    expect(await ledger.get(took.id)).toMatchObject({
      state: 'processing',
      attempt: 1,
      leaseOwner: 'w2',
      leaseToken: next.token,
    });
    const left = took.payload === 'a2' ? 'd2' : 'a2';
    for (const p of [left, 'b2', 'c2'])
      expect(await ledger.get(id(p)), p).toMatchObject({ state: 'pending', isHead: true, attempt: 0 });
    // Each lane says whether a new head is left waiting for a claim.
    const advanced = new Map(heads.map((h, i) => [h.payload as string, results[i]!.laneAdvanced]));
    expect(Object.fromEntries(advanced)).toEqual({
      a1: took.payload !== 'a2',
      b1: true,
      c1: true,
      d1: took.payload !== 'd2',
      e1: false,
    });
    // The claimed successor is fenced like any claim: its token completes it, a stale one does not.
    expect((await ledger.complete({ ...took, leaseToken: 'someone-else-0000000000' })).won).toBe(false);
    expect((await ledger.complete(took)).won).toBe(true);
    const rest = await ledger.claim({ queue, owner: 'w3', limit: 10, leaseMs: 60_000, types: ['t'] });
    expect(rest.items.map((i) => i.payload)).toEqual([left]);
  },
);

test.each(paths)(
  'a pipelined transaction whose last round trip fails writes nothing and leaves no transaction open, through %s',
  async (_label, plain) => {
    tl = await createTestLedger({ poolSize: 1 });
    const ledger = plain ? (external = ledgerOnPlainPool(tl.url, 1)) : tl.ledger;
    const t = ledger.tables;
    const lane = (name: string) =>
      sql`INSERT INTO ${t.lanes} (queue, lane, next_seq, busy_from) VALUES ('q', ${name}, 1, 1)`;
    const caps = await ledger.capabilities();
    expect(caps.multiStatement).toBe(!plain);
    await expect(
      pipelined(ledger.db, caps, async (send) => {
        const [first] = await send([lane('a')]);
        expect(first?.affected).toBe(1);
        await send([lane('b'), sql`INSERT INTO lanewake_no_such_table VALUES (1)`], { commit: true });
      }),
    ).rejects.toThrow(/lanewake_no_such_table/);
    const rows = await sql<{ lane: string }>`SELECT lane FROM ${t.lanes}`.execute(ledger.db);
    expect(rows.rows).toEqual([]);
    // One connection in the pool: the statement above ran on the one the failed transaction used.
    // Were a transaction still open on it, a ROLLBACK would take this write back with it.
    await lane('probe').execute(ledger.db);
    await sql`ROLLBACK`.execute(ledger.db);
    const probe = await sql<{ lane: string }>`SELECT lane FROM ${t.lanes}`.execute(ledger.db);
    expect(probe.rows.map((r) => r.lane)).toEqual(['probe']);
    await sql`DELETE FROM ${t.lanes}`.execute(ledger.db);

    // And a transaction that succeeds commits every round trip's writes, reads included in order.
    const read = await pipelined(ledger.db, caps, async (send) => {
      await send([lane('c')]);
      const [, r] = await send([lane('d'), sql`SELECT lane FROM ${t.lanes} ORDER BY lane`], { commit: true });
      return r?.rows;
    });
    expect(read).toEqual([{ lane: 'c' }, { lane: 'd' }]);
    expect((await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${t.lanes}`.execute(ledger.db)).rows[0]?.n).toBe(2);
  },
);

test.each(paths)('laned enqueues get gap-free sequences and one head per lane through %s', async (_label, plain) => {
  tl = await createTestLedger();
  const ledger = plain ? (external = ledgerOnPlainPool(tl.url, 1)) : tl.ledger;
  const queue = 'seq';
  const first = await ledger.enqueueMany([
    { queue, type: 't', payload: 1, lane: 'A' },
    { queue, type: 't', payload: 2, lane: 'B' },
    { queue, type: 't', payload: 3, lane: 'A' },
  ]);
  const second = await ledger.enqueue({ queue, type: 't', payload: 4, lane: 'A' });
  expect([...first, second].map((r) => r.laneSeq)).toEqual([1, 1, 2, 3]);
  const heads = await Promise.all([...first, second].map(async (r) => (await ledger.get(r.id))?.isHead));
  expect(heads).toEqual([true, true, false, false]);
});

test.each(paths)(
  'payloads and keys with quotes, backslashes and question marks ' +
    'round-trip in one INSERT beside a bound date, through %s',
  async (_label, plain) => {
    tl = await createTestLedger();
    const ledger = plain ? (external = ledgerOnPlainPool(tl.url, 1)) : tl.ledger;
    const queue = 'escape';
    const tricky = [
      "it's ?",
      "back\\slash \\' ?",
      '"double" ? `tick`',
      'naïve ☃ \u0000 nul',
      '?, ?); DROP TABLE x; --',
    ];
    const runAt = new Date(Date.UTC(2030, 0, 2, 3, 4, 5, 678));
    const inputs = tricky.map((text, i) => ({
      queue,
      type: 't',
      payload: { text, n: i },
      lane: `lane ${text}`,
      idempotencyKey: i === 1 ? `key ${text}` : undefined,
      ...(i === 2 ? { runAt } : {}),
    }));
    const made = await ledger.enqueueMany(
      inputs.map(({ idempotencyKey, ...rest }) => (idempotencyKey === undefined ? rest : { ...rest, idempotencyKey })),
    );
    for (const [i, r] of made.entries()) {
      const item = await ledger.get(r.id);
      expect(item?.payload, tricky[i]).toEqual({ text: tricky[i], n: i });
      expect(item?.lane).toBe(`lane ${tricky[i]}`);
    }
    expect((await ledger.get(made[1]!.id))?.idempotencyKey).toBe(`key ${tricky[1]}`);
    expect((await ledger.get(made[2]!.id))?.runAfter.getTime()).toBe(runAt.getTime());
    // Lane-less too (the single-INSERT path), with a date in the same statement.
    const plainItems = await ledger.enqueueMany(
      tricky.map((text, i) => ({ queue, type: 't', payload: { text }, ...(i === 0 ? { runAt } : {}) })),
    );
    for (const [i, r] of plainItems.entries()) expect((await ledger.get(r.id))?.payload).toEqual({ text: tricky[i] });
    expect((await ledger.get(plainItems[0]!.id))?.runAfter.getTime()).toBe(runAt.getTime());
  },
);

test(
  "a session whose sql_mode has NO_BACKSLASH_ESCAPES reads the ledger's literals as " +
    'its own sessions do; ledger sessions turn the mode off and keep the rest',
  async () => {
    const conn = await mysql.createConnection({ uri: mysqlServerUrl() });
    try {
      // The session as such a server (or a caller's pool) would hand it out.
      await conn.query("SET SESSION sql_mode = 'STRICT_TRANS_TABLES,NO_BACKSLASH_ESCAPES,ANSI_QUOTES'");
      const text = JSON.stringify({ s: `it's "quoted" \\ and \n` });
      const plain = `it's ''twice'' and ?`;
      const readBack = async (): Promise<string[]> => {
        const [rows] = await conn.query<RowDataPacket[]>(
          `SELECT ${jsonLiteral(text)} AS t, ${literal(text)} AS u, ${literal(plain)} AS p`,
        );
        return [String(rows[0]?.t), String(rows[0]?.u), String(rows[0]?.p)];
      };
      expect(await readBack()).toEqual([text, text, plain]);
      for (const statement of sessionSetup({ tidbTxnMode: 'pessimistic' })) await conn.query(statement);
      const [modes] = await conn.query<RowDataPacket[]>('SELECT @@SESSION.sql_mode AS m');
      expect(String(modes[0]?.m).split(',').sort()).toEqual(['ANSI_QUOTES', 'STRICT_TRANS_TABLES']);
      expect(await readBack()).toEqual([text, text, plain]);
    } finally {
      await conn.end();
    }
  },
);

test("the fleet cap's count reads the queue's processing items, not every item of the queue", async () => {
  // A capped claim counts in its turn, while every other capped claim of the queue waits. With
  // eq_range_index_dive_limit = 1, MariaDB planned this count (three classes, one state) as a scan of
  // every item of the queue: 10 ms at 10,000 items, in the turn (docs/BENCHMARKS.md, "Capacity").
  const tl = await createTestLedger();
  try {
    const queue = `count-${Date.now()}`;
    await tl.ledger.enqueueMany(Array.from({ length: 2000 }, (_, i) => ({ queue, type: 't', payload: { i } })));
    const claimed = await tl.ledger.claim({ queue, owner: 'w', limit: 3, leaseMs: 60_000 });
    expect(claimed.items).toHaveLength(3);
    const family = (await tl.ledger.capabilities()).family;
    const rowsRead = await tl.ledger.db.connection().execute(async (conn) => {
      const count = processingCount(tl.ledger.tables, queue);
      if (family === 'tidb') {
        // TiDB has no handler counters: the rows its scans of the plan returned.
        const plan = await sql<{ id: string; actRows: string }>`EXPLAIN ANALYZE ${count}`.execute(conn);
        return plan.rows.filter((r) => /Scan/.test(r.id)).reduce((n, r) => n + Number(r.actRows), 0);
      }
      const reads = async (): Promise<number> => {
        const r = await sql<{
          Value: string;
        }>`SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_key', 'Handler_read_next',
          'Handler_read_rnd_next')`.execute(conn);
        return r.rows.reduce((n, x) => n + Number(x.Value), 0);
      };
      const before = await reads();
      expect(Number((await count.execute(conn)).rows[0]?.n)).toBe(3);
      return (await reads()) - before;
    });
    expect(rowsRead).toBeLessThan(100);
  } finally {
    await tl.drop();
  }
});
