/**
 * The checks of chaos/invariants.ts and chaos/rescue.ts against made-up
 * records: a clean record passes every check, and each kind of breakage
 * fails the check meant to catch it (and says which item). Run:
 * node --import tsx --test chaos/selftest.ts
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FaultLog, type HeldAtKill } from './faults.js';
import { checkInvariants } from './invariants.js';
import { DELIBERATE_TRANSIENT, type EnqueuedRecord } from './items.js';
import { emptyProbes, sortProbes, type PassRecord, type ProbeRecords, type RoundRecord } from './probe-records.js';
import type { AttemptRow, EffectRow, ItemRow, Recorded } from './recorded.js';
import { checkRescue, faultOfExpiries, reclaimWindowMs, type RescueResult } from './rescue.js';

const T0 = 1_800_000_000_000_000; // µs
const S = 1_000_000;
const M = T0 / 1000; // T0 in ms
const LEASE_MS = 2000;
const INTERVAL_MS = 500;

interface Input {
  recorded: Recorded;
  acknowledged: EnqueuedRecord[];
  unacknowledged: Set<number>;
  faults: FaultLog;
  probes: ProbeRecords;
}

/**
 * A reconciler pass of `proc`: due at `dueMs`, 2 ms of timer lag, its reclaim step done 10 ms after its start, 20 ms
 * long.
 */
function pass(proc: string, dueMs: number, reclaimed: string[] = [], intervalMs = INTERVAL_MS): PassRecord {
  const startedAtMs = dueMs + 2;
  return {
    proc,
    intervalMs,
    dueAtMs: dueMs,
    startedAtMs,
    lookedAtMs: startedAtMs + 5,
    endedAtMs: startedAtMs + 20,
    queues: [
      {
        queue: 'chaos',
        reclaimStartedAtMs: startedAtMs + 5,
        reclaimed,
        reclaimedAtMs: reclaimed.length > 0 ? startedAtMs + 10 : undefined,
        ended: [],
      },
    ],
    failed: [],
  };
}

/** Passes of `proc` back to back: each due `intervalMs` after the previous one ended. */
function passes(
  proc: string,
  firstDueMs: number,
  n: number,
  reclaimedAt: Record<number, string[]> = {},
  intervalMs = INTERVAL_MS,
): PassRecord[] {
  const out: PassRecord[] = [];
  let due = firstDueMs;
  for (let i = 0; i < n; i++) {
    const p = pass(proc, due, reclaimedAt[i] ?? [], intervalMs);
    out.push(p);
    due = p.endedAtMs + intervalMs;
  }
  return out;
}

const round = (proc: string, startedAtMs: number, endedAtMs: number, claimed: string[], targeted = 0): RoundRecord => ({
  proc,
  queue: 'chaos',
  consumer: `h:${proc}:abcdef`,
  startedAtMs,
  endedAtMs,
  targeted,
  claimed,
});

/** 100 ms windows of 1 ms event-loop delay for `proc` around T0. */
function eld(proc: string): ProbeRecords['eld'] {
  return Array.from({ length: 100 }, (_, i) => ({
    proc,
    fromMs: M - 5000 + i * 100,
    toMs: M - 4900 + i * 100,
    maxMs: 1,
    p99Ms: 1,
    meanMs: 0.5,
  }));
}

/**
 * Two lanes of three items and one laneless item, run one after another.
 * Item l1-1 was held by pid 111 (w1) at its SIGKILL at T0 - 2100 ms, its
 * lease renewed to E = T0 - 300 ms; w0.g1's pass that started at T0 - 14 ms
 * (the first after E) reclaimed it at T0 - 6 ms and announced it at T0 - 4 ms;
 * w0.g1's round claimed it again at T0.
 */
function clean(): Input {
  const items: ItemRow[] = [];
  const effects: EffectRow[] = [];
  const attempts: AttemptRow[] = [];
  const acknowledged: EnqueuedRecord[] = [];
  let k = 0;
  for (const lane of ['l1', 'l2', null]) {
    for (let seq = 1; seq <= (lane === null ? 1 : 3); seq++) {
      const id = `${lane ?? 'solo'}-${seq}`;
      const start = T0 + k * S;
      items.push({
        id,
        k,
        kind: 'ok',
        lane,
        laneSeq: lane === null ? null : seq,
        state: 'completed',
        attempt: 1,
        maxAttempts: 25,
        failureClass: null,
        lastError: null,
        createdUs: T0 - 4 * S + k * 1000,
        startedUs: start,
        terminalUs: start + S / 2,
      });
      effects.push({
        itemId: id,
        n: 1,
        k,
        lane,
        laneSeq: lane === null ? null : seq,
        worker: 'w0.g1',
        attempt: 1,
        startedUs: start + 1000,
        upsertUs: start + S / 4,
        dupWorker: null,
        dupAttempt: null,
      });
      acknowledged.push({ k, id, lane, laneSeq: lane === null ? null : seq, kind: 'ok', duplicate: false });
      k++;
    }
  }
  const held = items[0]!;
  held.attempt = 2;
  attempts.push({
    itemId: held.id,
    attempt: 1,
    outcome: 'lease_expired',
    failureClass: 'lease_expired',
    error: 'lease held by h:111:abc expired',
    worker: 'h:111:abcdef',
    startedUs: T0 - 3100 * 1000,
    endedUs: T0 - 6000,
  });
  // solo-1 failed once on purpose.
  attempts.push({
    itemId: 'solo-1',
    attempt: 1,
    outcome: 'retried',
    failureClass: 'error',
    error: `Error: ${DELIBERATE_TRANSIENT}`,
    worker: 'h:222:abcdef',
    startedUs: T0 + 5 * S,
    endedUs: T0 + 5.5 * S,
  });
  items[6]!.attempt = 2;
  const faults = new FaultLog();
  faults.phases.push({ name: 'kills only', startMs: M - 10_000, endMs: M + 20_000, network: false, linkBroken: false });
  const heldAtKill: HeldAtKill = {
    id: held.id,
    attempt: 1,
    leaseUntilUs: T0 - 300_000,
    runAfterUs: held.createdUs,
    startedUs: T0 - 3100 * 1000,
  };
  faults.add({ kind: 'sigkill', startMs: M - 2100, endMs: M - 2100, worker: 'w1', pid: 111, held: [heldAtKill] });
  const lanes = [
    { lane: 'l1', nextSeq: 3, busyFrom: 0 },
    { lane: 'l2', nextSeq: 3, busyFrom: 0 },
  ];
  const probes = emptyProbes();
  // w0.g1's passes: ..., one at T0 - 536 (before E), the next at T0 - 14 (the first after E), which reclaims l1-1.
  probes.passes.push(...passes('w0.g1', M - 538 - 3 * 522, 6, { 4: [held.id] }));
  probes.rounds.push(round('w0.g1', M - 2, M + 3, [held.id], 1));
  probes.eld.push(...eld('w0.g1'), ...eld('w2.g1'));
  sortProbes(probes);
  return { recorded: { items, attempts, effects, lanes }, acknowledged, unacknowledged: new Set(), faults, probes };
}

function run(input: Input): { checks: ReturnType<typeof checkInvariants>['checks']; rescue: RescueResult } {
  sortProbes(input.probes);
  const window = reclaimWindowMs(input.probes, LEASE_MS, INTERVAL_MS);
  const faultOf = faultOfExpiries(input.recorded, input.faults, window);
  const inv = checkInvariants({ ...input, faultOf, reclaimWindowMs: window });
  const rescue = checkRescue({
    recorded: input.recorded,
    faults: input.faults,
    probes: input.probes,
    leaseMs: LEASE_MS,
    intervalMs: INTERVAL_MS,
    faultOf,
  });
  return { checks: [...inv.checks, ...rescue.checks], rescue };
}

function failing(input: Input): { name: string; examples: string[] }[] {
  return run(input)
    .checks.filter((c) => !c.ok)
    .map((c) => ({ name: c.name, examples: c.examples }));
}

function assertFails(input: Input, nameParts: string[], examplePart: string): void {
  const f = failing(input);
  assert.equal(
    f.length,
    nameParts.length,
    `expected ${nameParts.join(' + ')} to fail, got ${JSON.stringify(f, null, 2)}`,
  );
  for (const part of nameParts) {
    const c = f.find((x) => x.name.includes(part));
    assert.ok(c, `expected "${part}" to fail, got ${f.map((x) => x.name).join(' | ')}`);
    assert.ok(
      c.examples.some((e) => e.includes(examplePart)),
      `expected an example naming ${examplePart}: ${c.examples.join(' | ')}`,
    );
  }
}

const assertOnlyFails = (input: Input, namePart: string, examplePart: string): void =>
  assertFails(input, [namePart], examplePart);

const item = (input: Input, id: string): ItemRow => input.recorded.items.find((i) => i.id === id)!;
const effect = (input: Input, id: string): EffectRow => input.recorded.effects.find((e) => e.itemId === id)!;

test('a clean record passes every check', () => {
  assert.deepEqual(failing(clean()), []);
});

test('an item left processing fails "terminal"', () => {
  const input = clean();
  item(input, 'l2-2').state = 'processing';
  input.recorded.lanes[1]!.busyFrom = 2;
  input.recorded.effects = input.recorded.effects.filter((e) => e.itemId !== 'l2-2');
  assertOnlyFails(input, 'terminal', 'l2-2');
});

test('an acknowledged item missing from the ledger fails "terminal"', () => {
  const input = clean();
  input.recorded.items = input.recorded.items.filter((i) => i.id !== 'l2-3');
  input.recorded.effects = input.recorded.effects.filter((e) => e.itemId !== 'l2-3');
  input.recorded.lanes[1]!.nextSeq = 2;
  assertOnlyFails(input, 'terminal', 'l2-3');
});

test('a second commit (n = 2) fails exactly-once', () => {
  const input = clean();
  Object.assign(effect(input, 'l1-2'), { n: 2, dupWorker: 'w2.g1', dupAttempt: 2 });
  assertOnlyFails(input, 'exactly one effect', 'l1-2');
});

test('a completed item without its effect fails exactly-once', () => {
  const input = clean();
  input.recorded.effects = input.recorded.effects.filter((e) => e.itemId !== 'solo-1');
  assertOnlyFails(input, 'exactly one effect', 'solo-1');
});

test('an effect of a dead item fails exactly-once', () => {
  const input = clean();
  Object.assign(item(input, 'solo-1'), { state: 'dead', failureClass: 'permanent', kind: 'permanent' });
  assertOnlyFails(input, 'exactly one effect', 'solo-1');
});

test('effects out of sequence order fail lane order', () => {
  const input = clean();
  effect(input, 'l1-2').upsertUs = effect(input, 'l1-1').upsertUs - 1;
  assertOnlyFails(input, 'lane order', 'l1-2');
});

test(
  'a claim before the predecessor ended fails lane order (beyond the lock-wait ' + 'skew a claim statement may show)',
  () => {
    const input = clean();
    input.recorded.attempts.push({
      itemId: 'l2-3',
      attempt: 1,
      outcome: 'lease_expired',
      failureClass: 'lease_expired',
      error: 'x',
      worker: 'h:999:abcdef',
      startedUs: item(input, 'l2-2').terminalUs! - 400_000,
      endedUs: item(input, 'l2-3').startedUs! - 1,
    });
    item(input, 'l2-3').attempt = 2;
    const f = failing(input);
    assert.ok(
      f.some((c) => c.name.includes('lane order') && c.examples.some((e) => e.includes('l2-3'))),
      JSON.stringify(f),
    );
  },
);

test('a lane row left busy with every item ended fails lane bookkeeping', () => {
  const input = clean();
  input.recorded.lanes[0]!.busyFrom = 3;
  assertOnlyFails(input, 'bookkeeping', 'l1');
});

test('overlapping committed holders fail the overlap check', () => {
  const input = clean();
  effect(input, 'l2-2').startedUs = item(input, 'l2-1').terminalUs! - 50_000;
  assertOnlyFails(input, 'overlap', 'l2-2');
});

test('attempts beyond the budget fail the budget check', () => {
  const input = clean();
  item(input, 'l1-3').attempt = 26;
  assertOnlyFails(input, 'budget', 'l1-3');
});

test('a dead item without a class, or an unplanned death, fails the dead-letter check', () => {
  const a = clean();
  Object.assign(item(a, 'solo-1'), { state: 'dead', failureClass: null });
  a.recorded.effects = a.recorded.effects.filter((e) => e.itemId !== 'solo-1');
  assertOnlyFails(a, 'failure class', 'solo-1');
  const b = clean();
  Object.assign(item(b, 'solo-1'), { state: 'dead', failureClass: 'lease_expired' });
  b.recorded.effects = b.recorded.effects.filter((e) => e.itemId !== 'solo-1');
  assertOnlyFails(b, 'failure class', 'solo-1');
});

test('an attempt spent on a connection error fails the attempts check', () => {
  const input = clean();
  input.recorded.attempts.push({
    itemId: 'l1-3',
    attempt: 1,
    outcome: 'retried',
    failureClass: 'error',
    error: "Error: Can't add new command when connection is in closed state",
    worker: 'h:5:abcdef',
    startedUs: T0 + 1.7 * S,
    endedUs: T0 + 1.8 * S,
  });
  assertOnlyFails(input, 'spend no handler attempts', 'l1-3');
});

test('a live holder losing its lease on a healthy network fails the attempts check', () => {
  const input = clean();
  input.recorded.attempts.push({
    itemId: 'l1-3',
    attempt: 1,
    outcome: 'lease_expired',
    failureClass: 'lease_expired',
    error: 'x',
    worker: 'h:5:abcdef',
    startedUs: T0 + 1.7 * S,
    endedUs: T0 + 1.8 * S,
  });
  assertOnlyFails(input, 'spend no handler attempts', 'l1-3');
});

test('the clean rescue is measured part by part', () => {
  const k = run(clean()).rescue.kills[0]!;
  assert.equal(k.outcome, 'rescued');
  assert.equal(k.clean, true);
  // (a) the first pass after E ended its reclaim step 296 ms after E, within E + interval 500 + tail 0 + timer lag 2 +
  // work 10;
  // reclaimed 294 ms after E.
  assert.equal(k.reclaimAllowanceMs, 296);
  assert.equal(k.reclaim!.doneMs - k.reclaim!.passStartedAtMs, 10);
  assert.equal(k.reclaimLatenessMs, 294);
  assert.equal(k.reclaimedBy, 'w0.g1');
  assert.equal(k.announceMs, 2);
  // (b) announced at T0 - 4, claimed at T0 by the round that ended at T0 + 3.
  assert.equal(k.reclaimClaimMs, 4);
  assert.equal(k.reclaimClaimAllowanceMs, 7);
  // (c) lease 2000 + 296 + 2 + 7.
  assert.equal(k.rescueMs, 2100);
  assert.equal(k.rescueBoundMs, 2305);
});

test('a reconciler slower than the interval the checks assume fails rescue (a), and so (c)', () => {
  const input = clean();
  // w0 reconciles every second: the pass before E ran at T0 - 1036 and the next only at T0 - 14;
  // E (10 ms into the earlier pass) + 500 + 2 + 10 is long before the reclaim at T0 - 6.
  input.probes.passes = passes('w0.g1', M - 16 - 2 * 1022, 3, { 2: ['l1-1'] }, 1000);
  input.faults.events[0]!.held![0]!.leaseUntilUs = T0 - 1026 * 1000;
  input.faults.events[0]!.startMs = M - 1026 - 1800;
  assertFails(input, ['rescue (a)', 'rescue (c)'], 'l1-1');
  assert.ok(failing(input)[0]!.examples[0]!.includes('the pass says 1000 ms'));
});

test('a pass after the lease ran out that did not reclaim it fails rescue (a)', () => {
  const input = clean();
  // w0.g1's pass at T0 - 14, the first after E, put nothing back; w2.g1's pass at T0 + 140 reclaimed it.
  input.probes.passes.find((p) => p.startedAtMs === M - 14)!.queues[0]!.reclaimed = [];
  input.probes.passes.find((p) => p.startedAtMs === M - 14)!.queues[0]!.reclaimedAtMs = undefined;
  input.probes.passes.push(pass('w2.g1', M + 138, ['l1-1']));
  input.recorded.attempts[0]!.endedUs = T0 + 148_000;
  const held = input.recorded.items[0]!;
  held.startedUs = T0 + 200_000;
  Object.assign(input.recorded.effects[0]!, { startedUs: T0 + 201_000, upsertUs: T0 + 250_000 });
  input.probes.rounds = [round('w0.g1', M + 199, M + 203, ['l1-1'], 1)];
  assertFails(input, ['rescue (a)'], 'its reclaim step ended 306 ms after it');
});

test('a lease that no pass after its end reclaims fails rescue (a) and (c)', () => {
  const input = clean();
  // Its attempt 1 has no history row at all, and it went on to attempt 2: neither reclaimed nor settled by the dead
  // worker.
  input.recorded.attempts = input.recorded.attempts.filter((a) => a.outcome !== 'lease_expired');
  const f = failing(input);
  assert.ok(
    f.some((c) => c.name.includes('rescue (a)') && c.examples.some((e) => e.includes('never reclaimed'))),
    JSON.stringify(f),
  );
  assert.ok(
    f.some((c) => c.name.includes('rescue (c)')),
    JSON.stringify(f),
  );
});

test('a claim round that passed over the reclaimed item fails rescue (b)', () => {
  const input = clean();
  // w2's round began 1 ms after the announcement plus its event-loop delay (1 ms) and ended before the item's claim,
  // claiming l2-1 (made after l1-1 was due) and nothing due as early as l1-1.
  input.probes.rounds.push(round('w2.g1', M - 3, M - 1, ['l2-1']));
  assertFails(input, ['rescue (b)'], "w2.g1's round");
});

test('a slow rescue fails rescue (b) and (c) together, naming the round that skipped it', () => {
  const input = clean();
  // Claimed again only 1.5 s after the announcement; rounds of w2 claimed other work meanwhile.
  const held = input.recorded.items[0]!;
  held.startedUs = T0 + 1.5 * S;
  held.terminalUs = T0 + 1.6 * S;
  Object.assign(input.recorded.effects[0]!, { startedUs: T0 + 1.5 * S + 1000, upsertUs: T0 + 1.55 * S });
  for (const id of ['l1-2', 'l1-3']) {
    item(input, id).startedUs! += 2 * S;
    item(input, id).terminalUs! += 2 * S;
    effect(input, id).startedUs += 2 * S;
    effect(input, id).upsertUs += 2 * S;
  }
  input.probes.rounds = [round('w2.g1', M + 100, M + 104, ['l2-1']), round('w0.g1', M + 1500, M + 1503, ['l1-1'])];
  assertFails(input, ['rescue (b)', 'rescue (c)'], 'l1-1');
});

test('rounds that could not have had to take the reclaimed item are not a skip', () => {
  // Began before the announcement plus the event-loop delay of its process; ended after the item's claim;
  // claimed only ids it was named; claimed as many items due no later than it as the earliest half.
  const cases: [string, (input: Input) => void][] = [
    ['began too early', (i) => i.probes.rounds.push(round('w2.g1', M - 4, M - 1, ['l2-1']))],
    [
      'stalled process',
      (i) => {
        i.probes.rounds.push(round('w2.g1', M - 3, M - 1, ['l2-1']));
        i.probes.eld = i.probes.eld.map((w) =>
          w.proc === 'w2.g1' && w.toMs >= M - 3 && w.fromMs <= M ? { ...w, maxMs: 5 } : w,
        );
      },
    ],
    ['racing the claim', (i) => i.probes.rounds.push(round('w2.g1', M - 3, M, ['l2-1']))],
    ['named ids only', (i) => i.probes.rounds.push(round('w2.g1', M - 3, M - 1, ['l2-1'], 1))],
    [
      'earlier items first',
      (i) => {
        // A batch reclaimed with it, due earlier: one of two general claims was due no later than l1-1.
        i.recorded.items.find((x) => x.id === 'l2-1')!.createdUs = T0 - 5 * S;
        i.recorded.items.find((x) => x.id === 'l2-1')!.attempt = 2;
        i.recorded.attempts.push({
          itemId: 'l2-1',
          attempt: 1,
          outcome: 'released',
          failureClass: null,
          error: null,
          worker: 'h:3:abcdef',
          startedUs: T0 - 2000,
          endedUs: T0 - 1500,
        });
        i.probes.rounds.push(round('w2.g1', M - 3, M - 1, ['l2-1', 'l2-2']));
      },
    ],
  ];
  for (const [what, change] of cases) {
    const input = clean();
    change(input);
    assert.deepEqual(failing(input), [], what);
  }
});

test('a kill whose worker held nothing measures nothing and fails nothing', () => {
  const input = clean();
  input.faults.events[0]!.held = [];
  const r = run(input);
  assert.deepEqual(failing(input), []);
  assert.equal(r.rescue.idleKills, 1);
  assert.ok(r.rescue.checks.every((c) => c.examples.some((e) => e.includes('not measured'))));
});

test('a finalize that landed after the kill is not a rescue', () => {
  const input = clean();
  // l1-1's attempt 1 completed by a COMMIT the dead worker had sent, which the ledger ran after the read:
  // no lease_expired row (a first attempt's completion writes no history row at all), no second claim.
  const held = input.recorded.items[0]!;
  held.attempt = 1;
  input.recorded.attempts.shift();
  held.startedUs = T0 - 3100 * 1000;
  held.terminalUs = T0 - 2099 * 1000;
  Object.assign(input.recorded.effects[0]!, { startedUs: T0 - 3099 * 1000, upsertUs: T0 - 2100 * 1000 });
  input.probes.passes.forEach((p) => (p.queues[0]!.reclaimed = []));
  input.probes.rounds = [];
  assert.deepEqual(failing(input), []);
  assert.equal(run(input).rescue.kills[0]!.outcome, 'settled in flight');
});
