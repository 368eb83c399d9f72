/**
 * The checks of chaos/invariants.ts against made-up records: a clean record
 * passes every check, and each kind of breakage fails the check meant to
 * catch it (and says which item). Run: node --import tsx --test chaos/selftest.ts
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FaultLog } from './faults.js';
import { checkInvariants, type AttemptRow, type CheckInput, type EffectRow, type ItemRow, type Recorded } from './invariants.js';
import { DELIBERATE_TRANSIENT, type EnqueuedRecord } from './items.js';

const T0 = 1_800_000_000_000_000; // µs
const S = 1_000_000;
const BOUND_MS = 3500;

/** Two lanes of three items and one laneless item, run one after another; item l1-1 was held by pid 111 at its SIGKILL. */
function clean(): CheckInput {
  const items: ItemRow[] = [];
  const effects: EffectRow[] = [];
  const attempts: AttemptRow[] = [];
  const acknowledged: EnqueuedRecord[] = [];
  let k = 0;
  for (const lane of ['l1', 'l2', null]) {
    for (let seq = 1; seq <= (lane === null ? 1 : 3); seq++) {
      const id = `${lane ?? 'solo'}-${seq}`;
      const start = T0 + k * S;
      items.push({ id, k, kind: 'ok', lane, laneSeq: lane === null ? null : seq, state: 'completed', attempt: 1, maxAttempts: 25, failureClass: null, lastError: null, createdUs: T0 - S, startedUs: start, terminalUs: start + S / 2 });
      effects.push({ itemId: id, n: 1, k, lane, laneSeq: lane === null ? null : seq, worker: 'w0.g1', attempt: 1, startedUs: start + 1000, upsertUs: start + S / 4, dupWorker: null, dupAttempt: null });
      acknowledged.push({ k, id, lane, laneSeq: lane === null ? null : seq, kind: 'ok', duplicate: false });
      k++;
    }
  }
  // l1-1: claimed by pid 111 at T0 - 1 s, killed at T0 - 0.5 s, reclaimed and claimed again at T0 (its started_at).
  const held = items[0]!;
  held.attempt = 2;
  attempts.push({ itemId: held.id, attempt: 1, outcome: 'lease_expired', failureClass: 'lease_expired', error: 'lease held by h:111:abc expired', worker: 'h:111:abcdef', startedUs: T0 - S, endedUs: T0 - S / 10 });
  // solo-1 failed once on purpose.
  attempts.push({ itemId: 'solo-1', attempt: 1, outcome: 'retried', failureClass: 'error', error: `Error: ${DELIBERATE_TRANSIENT}`, worker: 'h:222:abcdef', startedUs: T0 + 5 * S, endedUs: T0 + 5.5 * S });
  items[6]!.attempt = 2;
  const faults = new FaultLog();
  faults.phases.push({ name: 'kills only', startMs: (T0 - 10 * S) / 1000, endMs: (T0 + 20 * S) / 1000, network: false, linkBroken: false });
  faults.add({ kind: 'sigkill', startMs: (T0 - S / 2) / 1000, endMs: (T0 - S / 2) / 1000, worker: 'w1', pid: 111 });
  const lanes = [
    { lane: 'l1', nextSeq: 3, active: 0 },
    { lane: 'l2', nextSeq: 3, active: 0 },
  ];
  const recorded: Recorded = { items, attempts, effects, lanes };
  return { recorded, acknowledged, unacknowledged: new Set(), faults, rescueBoundMs: BOUND_MS };
}

function failing(input: CheckInput): { name: string; examples: string[] }[] {
  return checkInvariants(input)
    .checks.filter((c) => !c.ok)
    .map((c) => ({ name: c.name, examples: c.examples }));
}

function assertOnlyFails(input: CheckInput, namePart: string, examplePart: string): void {
  const f = failing(input);
  assert.equal(f.length, 1, `expected exactly one failing check, got ${JSON.stringify(f, null, 2)}`);
  assert.ok(f[0]!.name.includes(namePart), `expected "${namePart}" to fail, got "${f[0]!.name}"`);
  assert.ok(f[0]!.examples.some((e) => e.includes(examplePart)), `expected an example naming ${examplePart}: ${f[0]!.examples.join(' | ')}`);
}

const item = (input: CheckInput, id: string): ItemRow => input.recorded.items.find((i) => i.id === id)!;
const effect = (input: CheckInput, id: string): EffectRow => input.recorded.effects.find((e) => e.itemId === id)!;

test('a clean record passes every check', () => {
  assert.deepEqual(failing(clean()), []);
});

test('an item left processing fails "terminal"', () => {
  const input = clean();
  item(input, 'l2-2').state = 'processing';
  input.recorded.lanes[1]!.active = 1;
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

test('a claim before the predecessor ended fails lane order (beyond the lock-wait skew a claim statement may show)', () => {
  const input = clean();
  input.recorded.attempts.push({ itemId: 'l2-3', attempt: 1, outcome: 'lease_expired', failureClass: 'lease_expired', error: 'x', worker: 'h:999:abcdef', startedUs: item(input, 'l2-2').terminalUs! - 400_000, endedUs: item(input, 'l2-3').startedUs! - 1 });
  item(input, 'l2-3').attempt = 2;
  const f = failing(input);
  assert.ok(f.some((c) => c.name.includes('lane order') && c.examples.some((e) => e.includes('l2-3'))), JSON.stringify(f));
});

test('a lane row whose count went wrong fails lane bookkeeping', () => {
  const input = clean();
  input.recorded.lanes[0]!.active = -1;
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
  input.recorded.attempts.push({ itemId: 'l1-3', attempt: 1, outcome: 'retried', failureClass: 'error', error: "Error: Can't add new command when connection is in closed state", worker: 'h:5:abcdef', startedUs: T0 + 1.7 * S, endedUs: T0 + 1.8 * S });
  assertOnlyFails(input, 'spend no handler attempts', 'l1-3');
});

test('a live holder losing its lease on a healthy network fails the attempts check', () => {
  const input = clean();
  input.recorded.attempts.push({ itemId: 'l1-3', attempt: 1, outcome: 'lease_expired', failureClass: 'lease_expired', error: 'x', worker: 'h:5:abcdef', startedUs: T0 + 1.7 * S, endedUs: T0 + 1.8 * S });
  assertOnlyFails(input, 'spend no handler attempts', 'l1-3');
});

test('a rescue slower than the bound fails the rescue check', () => {
  const input = clean();
  const held = item(input, 'l1-1');
  // Next claim 4 s after the kill: over 3.5 s. Later lane items move along with it.
  held.startedUs = T0 + 3.5 * S;
  held.terminalUs = T0 + 3.6 * S;
  effect(input, 'l1-1').startedUs = T0 + 3.5 * S + 1000;
  effect(input, 'l1-1').upsertUs = T0 + 3.55 * S;
  for (const id of ['l1-2', 'l1-3']) {
    item(input, id).startedUs! += 4 * S;
    item(input, id).terminalUs! += 4 * S;
    effect(input, id).startedUs += 4 * S;
    effect(input, id).upsertUs += 4 * S;
  }
  assertOnlyFails(input, 'rescue', 'l1-1');
});

test('a run whose kills hit no held item fails the rescue check (nothing measured)', () => {
  const input = clean();
  input.recorded.attempts = input.recorded.attempts.filter((a) => a.outcome !== 'lease_expired');
  assertOnlyFails(input, 'rescue', 'held nothing');
});
