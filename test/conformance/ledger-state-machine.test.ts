import fc from 'fast-check';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { LedgerModel } from '../support/ledger-model.js';
import { freshQueue } from '../support/items.js';
import { createTestLedger, type TestLedger } from '../support/ledger.js';
import { cancelArb, claimArb, enqueueArb, finishArb, reclaimArb, replayArb, tickArb, wakeArb } from './commands.js';
import { completeManyArb } from './complete-many.js';
import {
  cancelWhileClaimingArb,
  cancelWhileFinishingArb,
  enqueueRaceArb,
  enqueueWhileFinishingArb,
} from './enqueue-cancel-races.js';
import { blockWhileWakingArb, claimRaceArb, claimWhileFinishingArb, finishRaceArb } from './races.js';
import type { Real } from './real.js';

/*
 * The ledger's state machine (docs/design/states.md) against an in-memory model
 * (test/support/ledger-model.ts): random sequences of enqueues (lanes,
 * idempotency keys, delays), claims by several owners, finalizes and batched
 * completions on current and stale claims, blocks and wakes, lease expiry
 * and reclaim, operator cancels and replays, and pairs of these issued at
 * once (races.ts, enqueue-cancel-races.ts).
 * After every step each item's state, lane head, attempt, lease holder and
 * last error are compared, and every CAS must have the winner the model
 * says. It uses the Ledger API only, so it runs on whatever server the suite
 * targets (LANEWAKE_TEST_MYSQL_URL). A failure prints the seed, the path and
 * the shrunk command sequence; LANEWAKE_CONFORMANCE_SEED,
 * LANEWAKE_CONFORMANCE_PATH and LANEWAKE_CONFORMANCE_REPLAY_PATH (the
 * counterexample's replayPath) run that case again. LANEWAKE_CONFORMANCE_RUNS
 * runs more sequences.
 *
 * Every run checks exactly RUNS sequences: one that runs out of time before
 * then fails (it names how many ran), so a slow machine cannot pass on fewer.
 */

function envNumber(name: string, fallback?: number): number | undefined {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isInteger(n)) throw new Error(`${name} must be an integer, not ${v}`);
  return n;
}

const RUNS = envNumber('LANEWAKE_CONFORMANCE_RUNS', 60)!;
const SEED = envNumber('LANEWAKE_CONFORMANCE_SEED');
const PATH = process.env.LANEWAKE_CONFORMANCE_PATH || undefined;
const REPLAY_PATH = process.env.LANEWAKE_CONFORMANCE_REPLAY_PATH || undefined;
/** A bound on the whole property, generous (TiDB is the slower server): reaching it is a failure. */
const TIME_LIMIT_MS = Math.max(240_000, RUNS * 4_000);

let tl: TestLedger;

beforeAll(async () => {
  tl = await createTestLedger();
});
afterAll(async () => {
  await tl?.drop();
});

/** Every command, weighted: finalizes need claims, claims need enqueued items. */
const ledgerCommands = [
  fc.oneof(
    { arbitrary: enqueueArb, weight: 4 },
    { arbitrary: claimArb, weight: 5 },
    { arbitrary: finishArb, weight: 8 },
    { arbitrary: wakeArb, weight: 1 },
    { arbitrary: cancelArb, weight: 3 },
    { arbitrary: replayArb, weight: 2 },
    { arbitrary: reclaimArb, weight: 3 },
    { arbitrary: tickArb, weight: 1 },
    { arbitrary: claimRaceArb, weight: 2 },
    { arbitrary: finishRaceArb, weight: 2 },
    { arbitrary: claimWhileFinishingArb, weight: 2 },
    { arbitrary: blockWhileWakingArb, weight: 1 },
    { arbitrary: completeManyArb, weight: 3 },
    { arbitrary: enqueueRaceArb, weight: 2 },
    { arbitrary: enqueueWhileFinishingArb, weight: 2 },
    { arbitrary: cancelWhileClaimingArb, weight: 1 },
    { arbitrary: cancelWhileFinishingArb, weight: 1 },
  ),
];

test(
  'every sequence of ledger calls moves items as the model says',
  async () => {
    const property = fc.asyncProperty(
      fc.commands(ledgerCommands, {
        maxCommands: 50,
        size: 'max',
        ...(REPLAY_PATH !== undefined ? { replayPath: REPLAY_PATH } : {}),
      }),
      async (cmds) => {
        // One queue per run (and per shrink attempt): runs share the database, never items, lanes or keys.
        const real: Real = { ledger: tl.ledger, queue: freshQueue('conformance') };
        await fc.asyncModelRun(() => ({ model: new LedgerModel(), real }), cmds);
      },
    );
    const out = await fc.check(property, {
      numRuns: RUNS,
      interruptAfterTimeLimit: TIME_LIMIT_MS,
      ...(SEED !== undefined ? { seed: SEED } : {}),
      ...(PATH !== undefined ? { path: PATH } : {}),
    });
    // A counterexample: fast-check's own report (seed, path, the shrunk sequence, the error).
    if (out.failed && !out.interrupted)
      throw new Error(await fc.asyncDefaultReportMessage(out), { cause: out.errorInstance });
    // Running out of time is no pass: fast-check would count it as one with fewer sequences checked.
    expect(
      out.interrupted,
      `interrupted after ${TIME_LIMIT_MS} ms with ${out.numRuns} of ${RUNS} sequences run (seed ${out.seed})`,
    ).toBe(false);
    expect(out.failed, `seed ${out.seed}`).toBe(false);
    // Replaying one path (LANEWAKE_CONFORMANCE_PATH) runs that case alone.
    if (PATH === undefined) expect(out.numRuns, `sequences run (seed ${out.seed})`).toBe(RUNS);
  },
  TIME_LIMIT_MS + 60_000,
);
