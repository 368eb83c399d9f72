import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { serverFamily } from '../src/ledger/capabilities.js';
import type { Ledger } from '../src/ledger/ledger.js';
import { claimAll, claimOne, freshQueue, mustGet } from './support/items.js';
import { createTestLedger, serverVersion, waitFor, type TestLedger } from './support/ledger.js';

// What only TiDB does, checked on the real server, in both of TiDB's transaction modes. It runs when the
// suite's server is TiDB (`npm run test:tidb`); on MariaDB and MySQL it is skipped.
const tidb = serverFamily(await serverVersion()) === 'tidb';

describe.runIf(tidb)('on TiDB', () => {
  let pess: TestLedger;
  let opt: TestLedger;

  beforeAll(async () => {
    pess = await createTestLedger({ tidbTxnMode: 'pessimistic' });
    opt = await createTestLedger({ tidbTxnMode: 'optimistic' });
  });
  afterAll(async () => {
    await pess?.drop();
    await opt?.drop();
  });

  test(
    'the ledger knows it is on TiDB, and its sessions run the ' +
      'transaction mode asked for, waiting for no statistics',
    async () => {
      expect((await pess.ledger.capabilities()).family).toBe('tidb');
      const mode = async (l: Ledger) =>
        (await sql<{ m: string }>`SELECT @@tidb_txn_mode AS m`.execute(l.db)).rows[0]?.m;
      expect(await mode(pess.ledger)).toBe('pessimistic');
      expect(await mode(opt.ledger)).toBe('optimistic');
      const iso = await sql<{ i: string }>`SELECT @@transaction_isolation AS i`.execute(pess.ledger.db);
      expect(iso.rows[0]?.i).toBe('READ-COMMITTED');
      // No statement waits for statistics to load while it is planned (src/ledger/connection.ts).
      const statsWait = await sql<{ w: number | string }>`SELECT @@tidb_stats_load_sync_wait AS w`.execute(
        opt.ledger.db,
      );
      expect(Number(statsWait.rows[0]?.w)).toBe(0);
    },
  );

  test(
    "the schema's executable comments are applied: items clustered " +
      'by id, the other tables nonclustered with row ids sharded',
    async () => {
      const t = pess.ledger.tables;
      const ddlOf = async (table: typeof t.items) =>
        (await sql<{ 'Create Table': string }>`SHOW CREATE TABLE ${table}`.execute(pess.ledger.db)).rows[0]?.[
          'Create Table'
        ] ?? '';
      const items = await ddlOf(t.items);
      expect(items, items).toMatch(/PRIMARY KEY \(`id`\) \/\*T!\[clustered_index\] CLUSTERED \*\//);
      expect(items, items).not.toMatch(/SHARD_ROW_ID_BITS/);
      for (const table of [t.lanes, t.attempts, t.waits]) {
        const ddl = await ddlOf(table);
        expect(ddl, ddl).toMatch(/NONCLUSTERED/);
        expect(ddl, ddl).toMatch(/SHARD_ROW_ID_BITS=4/);
      }
    },
  );

  test(
    "a job's own statements go prepared, and TiDB's plan cache serves them: the " +
      "claim, the laneless completion and an end in the caller's transaction",
    async () => {
      const own = await createTestLedger({ tidbTxnMode: 'pessimistic', poolSize: 2 });
      try {
        const { ledger } = own;
        expect((await ledger.capabilities()).prepared).toBe(true);
        const queue = freshQueue('prepared');
        const ids = (await ledger.enqueueMany([1, 2].map((n) => ({ queue, type: 't', payload: { n } })))).map(
          (r) => r.id,
        );
        const [laneHead] = (
          await ledger.enqueueMany([3, 4].map((n) => ({ queue, type: 't', payload: { n }, lane: 'L' })))
        ).map((r) => r.id);
        const claimed = await ledger.claimByIds({ queue, owner: 'w', leaseMs: 60_000, ids: [...ids, laneHead!] });
        const [batch, single, head] = [...ids, laneHead!].map((id) => claimed.find((c) => c.id === id));
        // One laneless batch UPDATE (sql/completion-cas.ts), and items ended in a transaction, as ctx.transaction does
        // (sql/transition.ts): a laneless one, and a lane's head, whose lane is handed on to its
        // successor (sql/lane-advance.ts).
        expect((await ledger.completeMany([{ handle: batch!, result: { n: 1 } }]))[0]?.won).toBe(true);
        await ledger.completeWithin(single!, async () => 2);
        await ledger.completeWithin(head!, async () => 3);
        // What the ledger sent prepared, as TiDB recorded it: the text with its markers, then ` [arguments: (…)]` (a
        // text sent as a query has neither).
        const r = await sql<{
          text: string;
        }>`SELECT DISTINCT query_sample_text AS text FROM information_schema.statements_summary
        WHERE schema_name = DATABASE() AND query_sample_text LIKE '/* lw:prepared */%'`.execute(ledger.db);
        const sent = new Map(
          r.rows.flatMap((row) => {
            const m = / \[arguments: \((.*)\)\]$/s.exec(row.text);
            return m ? [[row.text.slice(0, m.index), m[1]!] as const] : [];
          }),
        );
        const texts = [...sent.keys()];
        expect(
          texts.filter((text) => /SET state = 'completed'/.test(text)),
          JSON.stringify(texts),
        ).toHaveLength(2);
        // The claim's CAS and its read-back (sql/claim.ts), on the connections that return a write conflict.
        expect(
          texts.filter((text) => /SET state = 'processing'/.test(text)),
          JSON.stringify(texts),
        ).toHaveLength(1);
        expect(
          texts.filter((text) =>
            /^\/\* lw:prepared \*\/ SELECT .* AND lease_token = \? AND state = 'processing'$/s.test(text),
          ),
          JSON.stringify(texts),
        ).toHaveLength(1);
        // The lane hand-on: the lane row's read, and its successor made the head.
        expect(
          texts.filter((text) => /SELECT next_seq FROM/.test(text)),
          JSON.stringify(texts),
        ).toHaveLength(1);
        expect(
          texts.filter((text) => /SET is_head = 1/.test(text)),
          JSON.stringify(texts),
        ).toHaveLength(1);
        // Each is served from the plan cache when it runs again on a connection of the ledger's pool, which binds
        // values as it does its own (connection.ts). Under READ COMMITTED any DDL on the server (another test's
        // migration, in parallel) empties the cache: a text gets a few runs in a row to be seen served from it.
        await ledger.db.connection().execute(async (conn) => {
          for (const text of texts) {
            const values = parametersLike(sent.get(text)!);
            const statement = sql.join(
              text
                .split('?')
                .map((part, i) => (i === 0 ? sql.raw(part) : sql`${values[i - 1] ?? null}${sql.raw(part)}`)),
              sql.raw(''),
            );
            let served = false;
            for (let run = 0; run < 20 && !served; run++) {
              await statement.execute(conn);
              served =
                Number(
                  (await sql<{ served: number }>`SELECT @@last_plan_from_cache AS served`.execute(conn)).rows[0]
                    ?.served,
                ) === 1;
            }
            expect(served, text).toBe(true);
          }
        });
      } finally {
        await own.drop();
      }
    },
  );

  /**
   * Values of the types TiDB recorded in a prepared statement's arguments
   * (`"text", 60000000, NULL`), each its own: a plan cached for one
   * parameter type does not serve another.
   */
  function parametersLike(args: string): (string | number | null)[] {
    const out: (string | number | null)[] = [];
    for (let at = 0; at < args.length; ) {
      const int = /^-?\d+/.exec(args.slice(at));
      if (args.startsWith('NULL', at)) {
        out.push(null);
        at += 4;
      } else if (int) {
        out.push(out.length);
        at += int[0].length;
      } else {
        // A quoted text, written unescaped: it ends at the quote before the next argument or the end.
        const next = args.indexOf('", ', at + 1);
        out.push(`.${out.length}`);
        at = (next > at ? next : args.length - 1) + 1;
      }
      if (args.startsWith(', ', at)) at += 2;
    }
    return out;
  }

  /** Rewrites a key's row from four sessions as fast as they can while `work` runs, as completions of a busy key do. */
  async function whileKeyRowRewritten(
    ledger: Ledger,
    queue: string,
    key: string,
    work: () => Promise<void>,
  ): Promise<void> {
    let hammering = true;
    const writes = { n: 0 };
    const hammer = async (): Promise<void> => {
      while (hammering) {
        await sql`UPDATE ${ledger.tables.keys} SET next_round = next_round + 1 WHERE queue = ${queue} AND ckey = ${key}`
          .execute(ledger.db)
          .then(
            () => writes.n++,
            () => undefined,
          );
      }
    };
    const hammers = Array.from({ length: 4 }, hammer);
    try {
      await waitFor(() => writes.n > 50 || undefined, 10_000, 'the key row being rewritten');
      await work();
    } finally {
      hammering = false;
      await Promise.all(hammers);
    }
  }

  const admittedOf = async (ledger: Ledger, queue: string, key: string): Promise<number> =>
    Number(
      (
        await sql<{
          admitted: number;
        }>`SELECT admitted FROM ${ledger.tables.keys} WHERE queue = ${queue} AND ckey = ${key}`.execute(ledger.db)
      ).rows[0]?.admitted,
    );

  /** A fresh queue whose key 'hot' (limit 1,000) has one item, so its row exists. */
  async function hotKeyQueue(ledger: Ledger, label: string): Promise<string> {
    const queue = freshQueue(label);
    await ledger.setConcurrencyLimit(queue, 1_000);
    await ledger.enqueue({ queue, type: 't', payload: 0, concurrencyKey: 'hot' });
    return queue;
  }

  /**
   * Five batches of ten items of key 'hot', each all new; with idempotency keys they take the
   * enqueue's transaction path.
   */
  async function enqueueHotBatches(ledger: Ledger, queue: string, opts: { idempotent: boolean }): Promise<void> {
    for (let k = 1; k <= 5; k++) {
      const r = await ledger.enqueueMany(
        Array.from({ length: 10 }, (_, j) => ({
          queue,
          type: 't',
          payload: { k, j },
          concurrencyKey: 'hot',
          ...(opts.idempotent ? { idempotencyKey: `k${k}-${j}` } : {}),
        })),
      );
      expect(r.filter((x) => !x.duplicate)).toHaveLength(10);
    }
  }

  // In optimistic mode every transaction that wrote the key's row loses at COMMIT to any that wrote it meanwhile.
  test(
    'optimistic mode: a keyed enqueue whose key row others write ' +
      'all the time still commits, its retries taking their locks',
    async () => {
      const { ledger } = opt;
      const queue = await hotKeyQueue(ledger, 'tidb-hot-key');
      await whileKeyRowRewritten(ledger, queue, 'hot', async () => {
        await enqueueHotBatches(ledger, queue, { idempotent: false });
      });
      expect(await admittedOf(ledger, queue, 'hot')).toBe(51);
    },
  );

  test(
    'optimistic mode: idempotent keyed enqueues and keyed completions ' +
      '(transactions of their own) commit while the key row is rewritten',
    async () => {
      const { ledger } = opt;
      const queue = await hotKeyQueue(ledger, 'tidb-hot-key-tx');
      await whileKeyRowRewritten(ledger, queue, 'hot', async () => {
        await enqueueHotBatches(ledger, queue, { idempotent: true });
        const claimed = await claimAll(ledger, queue);
        expect(claimed).toHaveLength(51);
        for (const c of claimed.slice(0, 10)) expect((await ledger.complete(c, 'done')).won).toBe(true);
      });
      expect(await admittedOf(ledger, queue, 'hot')).toBe(41);
    },
  );

  describe.each([
    ['pessimistic', () => pess],
    ['optimistic', () => opt],
  ] as const)('%s mode', (_mode, get) => {
    test('eight claimers racing for one item: one wins it, none sees an error', async () => {
      const { ledger } = get();
      for (let round = 0; round < 5; round++) {
        const queue = freshQueue('tidb-race');
        const { id } = await ledger.enqueue({ queue, type: 't', payload: round });
        const results = await Promise.all(
          Array.from({ length: 8 }, (_, k) => ledger.claim({ queue, owner: `w${k}`, limit: 1, leaseMs: 60_000 })),
        );
        const winners = results.flatMap((r) => r.items);
        expect(winners.map((w) => w.id)).toEqual([id]);
        expect(await mustGet(ledger, id)).toMatchObject({
          state: 'processing',
          attempt: 1,
          leaseOwner: winners[0]?.leaseOwner,
        });
      }
    });

    test('a completion racing the reclaim of its expired lease: exactly one of them takes effect', async () => {
      const { ledger } = get();
      for (let round = 0; round < 5; round++) {
        const queue = freshQueue('tidb-reclaim');
        await ledger.enqueue({ queue, type: 't', payload: round });
        const c = await claimOne(ledger, queue, 'holder', 50);
        await waitFor(
          async () => (await ledger.now()).getTime() > c.leaseUntil.getTime() || undefined,
          5_000,
          'the lease to run out',
        );
        const [done, reclaim] = await Promise.all([ledger.complete(c, 'late'), ledger.reclaimExpired({ queue })]);
        const item = await mustGet(ledger, c.id);
        if (done.won) {
          expect(reclaim.reclaimed).toEqual([]);
          expect(item.state).toBe('completed');
        } else {
          expect(reclaim.reclaimed).toEqual([c.id]);
          expect(item).toMatchObject({ state: 'pending', attempt: 1 });
        }
      }
    });

    test('concurrent laned enqueues and completions keep one head per lane and gap-free sequences', async () => {
      const { ledger } = get();
      const queue = freshQueue('tidb-lanes');
      await Promise.all(
        Array.from({ length: 12 }, (_, k) =>
          ledger.enqueueMany(
            Array.from({ length: 5 }, (_, j) => ({ queue, type: 't', lane: `L${k % 3}`, payload: { k, j } })),
          ),
        ),
      );
      const seen = new Map<string, number[]>();
      for (;;) {
        const claims = await Promise.all(
          [0, 1, 2].map((k) => ledger.claim({ queue, owner: `w${k}`, limit: 10, leaseMs: 60_000 })),
        );
        const items = claims.flatMap((c) => c.items);
        if (items.length === 0) break;
        const lanes = items.map((i) => i.lane);
        expect(new Set(lanes).size, 'one head per lane at a time').toBe(lanes.length);
        for (const i of items) seen.set(i.lane!, [...(seen.get(i.lane!) ?? []), i.laneSeq!]);
        const done = await Promise.all(items.map((i) => ledger.complete(i, null)));
        expect(done.every((d) => d.won)).toBe(true);
      }
      expect([...seen.keys()].sort()).toEqual(['L0', 'L1', 'L2']);
      for (const seqs of seen.values()) expect(seqs).toEqual(Array.from({ length: 20 }, (_, n) => n + 1));
    });
  });
});
