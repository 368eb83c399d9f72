import fc from 'fast-check';
import { afterAll, beforeAll, test } from 'vitest';
import { LedgerModel } from '../support/ledger-model.js';
import { freshQueue } from '../support/items.js';
import { createTestLedger, type TestLedger } from '../support/ledger.js';
import { cancelArb, claimArb, enqueueArb, finishArb, reclaimArb, replayArb, tickArb, wakeArb } from './commands.js';
import { completeManyArb } from './complete-many.js';
import { cancelWhileClaimingArb, cancelWhileFinishingArb, enqueueRaceArb, enqueueWhileFinishingArb } from './enqueue-cancel-races.js';
import { blockWhileWakingArb, claimRaceArb, claimWhileFinishingArb, finishRaceArb } from './races.js';
import type { Real } from './real.js';

/*
 * The ledger's state machine (docs/design.md §3) against an in-memory model
 * (test/support/ledger-model.ts): random sequences of enqueues (lanes,
 * idempotency keys, delays), claims by several owners, finalizes and batched
 * completions on current and stale claims, blocks and wakes, lease expiry
 * and reclaim, operator cancels and replays, and pairs of these issued at
 * once (races.ts, enqueue-cancel-races.ts).
 * After every step each item's state, lane head, attempt, lease holder and
 * last error are compared, and every CAS must have the winner the model
 * says. It uses the Ledger API only, so it runs on whatever server the suite
 * targets (LANEWAKE_TEST_MYSQL_URL). A failure prints the seed and the
 * shrunk command sequence; LANEWAKE_CONFORMANCE_RUNS runs more sequences.
 */

const RUNS = Number(process.env.LANEWAKE_CONFORMANCE_RUNS ?? 60);

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

test('every sequence of ledger calls moves items as the model says', async () => {
  await fc.assert(
    fc.asyncProperty(fc.commands(ledgerCommands, { maxCommands: 50, size: 'max' }), async (cmds) => {
      // One queue per run (and per shrink attempt): runs share the database, never items, lanes or keys.
      const real: Real = { ledger: tl.ledger, queue: freshQueue('conformance') };
      await fc.asyncModelRun(() => ({ model: new LedgerModel(), real }), cmds);
    }),
    { numRuns: RUNS, interruptAfterTimeLimit: 240_000 },
  );
}, 300_000);
