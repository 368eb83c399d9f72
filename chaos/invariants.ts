/**
 * The checks, from what was recorded: the producer's acknowledgements, the
 * ledger (items and their attempt history) and the handlers' effects table.
 * Nothing here trusts a worker's own account of what it did.
 */
import { CheckBuilder, claimTimes, iso, phaseAt, pushTo, type Check } from './check-kit.js';
import type { FaultEvent, FaultLog } from './faults.js';
import { DELIBERATE_PERMANENT, DELIBERATE_TRANSIENT, type EnqueuedRecord } from './items.js';
import type { AttemptRow, ItemRow, Recorded } from './recorded.js';

/**
 * How much earlier than its predecessor's end a claim's recorded time may
 * be. NOW(6) is fixed when a statement starts: a claim by id (a wake-up names
 * the item) that waits on the row lock of the transaction ending the
 * predecessor, which makes the item the head, takes effect after that
 * commit but records the time it started waiting (seen: 3.7 ms and 34 ms).
 * The handler's start against the predecessor's commit is checked exactly
 * by "no two holders of a lane overlap".
 */
const CLAIM_CLOCK_SKEW_US = 250_000;

export interface CheckInput {
  recorded: Recorded;
  acknowledged: EnqueuedRecord[];
  /** Items whose enqueue was in flight when the producer stopped: may exist or not. */
  unacknowledged: Set<number>;
  faults: FaultLog;
  /** Which kill or freeze each expired lease belongs to (faultOfExpiries in chaos/rescue.ts). */
  faultOf: ReadonlyMap<AttemptRow, FaultEvent>;
  /**
   * How long after a link to the ledger came back a live holder's expired
   * lease may still be reclaimed: lease + reconcile interval + the passes'
   * measured lateness (reclaimWindowMs in chaos/rescue.ts).
   */
  reclaimWindowMs: number;
}

export interface CheckResult {
  checks: Check[];
  /** Attempts the faults spent, by what ended them (history rows that are not the handlers' deliberate failures). */
  spentByFaults: Record<string, number>;
  /** Leases that expired on a worker that was neither killed nor frozen, by phase. */
  liveLeaseExpiries: Record<string, number>;
}

const firstLine = (text: string | null): string => (text ?? '').split('\n', 1)[0] ?? '';

function isDeliberate(error: string | null): boolean {
  return error !== null && (error.includes(DELIBERATE_TRANSIENT) || error.includes(DELIBERATE_PERMANENT));
}

export function checkInvariants(input: CheckInput): CheckResult {
  const { recorded, acknowledged, unacknowledged, faults, faultOf, reclaimWindowMs } = input;
  const items = new Map(recorded.items.map((i) => [i.id, i]));
  const effects = new Map(recorded.effects.map((e) => [e.itemId, e]));
  const attemptsOf = new Map<string, AttemptRow[]>();
  for (const a of recorded.attempts) pushTo(attemptsOf, a.itemId, a);
  const checks: Check[] = [];
  const terminal = new Set(['completed', 'dead', 'cancelled', 'skipped']);

  // 1. Every acknowledged item exists and is terminal; one id per idempotency key.
  {
    const c = new CheckBuilder('every enqueued item is terminal (and none was lost or doubled)');
    const idOfK = new Map<number, string>();
    for (const r of acknowledged) {
      const seen = idOfK.get(r.k);
      if (seen !== undefined && seen !== r.id) c.fail(`key ${r.k}: two ids for one idempotency key (${seen}, ${r.id})`);
      idOfK.set(r.k, r.id);
    }
    const acknowledgedIds = new Set(idOfK.values());
    for (const [k, id] of idOfK) {
      c.checked++;
      const item = items.get(id);
      if (!item) c.fail(`item ${id} (k=${k}) was acknowledged to the producer but is not in the ledger`);
      else if (!terminal.has(item.state))
        c.fail(
          `item ${id} (k=${k}, lane ${item.lane ?? '-'} #${item.laneSeq ?? '-'}) is ` +
            `${item.state}, attempt ${item.attempt}`,
        );
    }
    for (const item of recorded.items) {
      if (!acknowledgedIds.has(item.id) && !unacknowledged.has(item.k))
        c.fail(`item ${item.id} (k=${item.k}) is in the ledger but the producer never had it acknowledged`);
      if (!acknowledgedIds.has(item.id) && unacknowledged.has(item.k) && !terminal.has(item.state))
        c.fail(`item ${item.id} (k=${item.k}, enqueue unacknowledged) is ${item.state}`);
    }
    checks.push(c.done());
  }

  // 2. Exactly one effect per completed item, none for the others.
  {
    const c = new CheckBuilder('exactly one effect per completed item (n = 1), none for others');
    for (const item of recorded.items) {
      c.checked++;
      const e = effects.get(item.id);
      if (item.state === 'completed') {
        if (!e) c.fail(`item ${item.id} (k=${item.k}) completed without its effect`);
        else if (e.n !== 1)
          c.fail(
            `item ${item.id} (k=${item.k}): effect committed ${e.n} times (first by ` +
              `${e.worker} attempt ${e.attempt}, again by ${e.dupWorker} attempt ` +
              `${e.dupAttempt})`,
          );
      } else if (e) {
        c.fail(
          `item ${item.id} (k=${item.k}) is ${item.state} (${item.failureClass ?? '-'}) ` +
            `but has an effect (n=${e.n}, by ${e.worker} attempt ${e.attempt})`,
        );
      }
    }
    for (const e of recorded.effects)
      if (!items.has(e.itemId)) c.fail(`effect for ${e.itemId} (k=${e.k}) has no ledger item`);
    checks.push(c.done());
  }

  // Lanes, in sequence order.
  const lanes = new Map<string, ItemRow[]>();
  for (const item of recorded.items) if (item.lane !== null) pushTo(lanes, item.lane, item);
  for (const list of lanes.values()) list.sort((a, b) => (a.laneSeq ?? 0) - (b.laneSeq ?? 0));

  // 3. Lane order: sequence follows enqueue order; effects commit in sequence order; no claim of an item before its
  // predecessor ended
  //    (up to CLAIM_CLOCK_SKEW_US: see there).
  {
    const c = new CheckBuilder('lane order (sequence = enqueue order; effects and claims follow the sequence)');
    for (const [lane, list] of lanes) {
      for (let i = 1; i < list.length; i++) {
        const a = list[i - 1]!;
        const b = list[i]!;
        c.checked++;
        if (a.k > b.k)
          c.fail(
            `lane ${lane}: #${a.laneSeq} is k=${a.k} but #${b.laneSeq} is k=${b.k} (sequence against enqueue order)`,
          );
        const ea = effects.get(a.id);
        const eb = effects.get(b.id);
        if (ea && eb && ea.upsertUs >= eb.upsertUs)
          c.fail(
            `lane ${lane}: effect of #${b.laneSeq} (${b.id}) written at ${iso(eb.upsertUs)}, ` +
              `not after #${a.laneSeq}'s (${a.id}) at ${iso(ea.upsertUs)}`,
          );
        const firstClaimOfB = Math.min(...claimTimes(b, attemptsOf.get(b.id) ?? []));
        if (
          a.terminalUs !== null &&
          Number.isFinite(firstClaimOfB) &&
          firstClaimOfB < a.terminalUs - CLAIM_CLOCK_SKEW_US
        ) {
          c.fail(
            `lane ${lane}: #${b.laneSeq} (${b.id}) claimed at ${iso(firstClaimOfB)}, before ` +
              `#${a.laneSeq} (${a.id}) ended at ${iso(a.terminalUs)}`,
          );
        }
      }
    }
    checks.push(c.done());
  }

  // 3b. The lane rows agree with the items: busy exactly while an item is unfinished, one sequence number per item.
  {
    const c = new CheckBuilder(
      'lane bookkeeping (each lane row: busy exactly while an item is unfinished, next_seq = its last sequence number)',
    );
    for (const row of recorded.lanes) {
      c.checked++;
      const list = lanes.get(row.lane) ?? [];
      const unfinished = list.filter((i) => !terminal.has(i.state)).length;
      if ((row.busyFrom !== 0) !== unfinished > 0)
        c.fail(
          `lane ${row.lane}: busy_from = ${row.busyFrom}, but ${unfinished} of its ${list.length} items are unfinished`,
        );
      if (row.busyFrom < 0 || row.busyFrom > row.nextSeq)
        c.fail(`lane ${row.lane}: busy_from = ${row.busyFrom} is no sequence of the lane (next_seq ${row.nextSeq})`);
      if (row.nextSeq !== list.length)
        c.fail(
          `lane ${row.lane}: next_seq (the last sequence number given) = ${row.nextSeq}, ` +
            `but the lane has ${list.length} items`,
        );
    }
    checks.push(c.done());
  }

  // 4. No two holders of a lane overlap: a committed attempt starts only after its predecessor's commit.
  {
    const c = new CheckBuilder("no two holders of a lane overlap (committed attempts' [start, commit] intervals)");
    const toleranceUs = 1000; // handler start is read at millisecond resolution
    for (const [lane, list] of lanes) {
      for (let i = 1; i < list.length; i++) {
        const a = list[i - 1]!;
        const b = list[i]!;
        const eb = effects.get(b.id);
        if (!eb || b.state !== 'completed' || a.terminalUs === null) continue;
        c.checked++;
        if (eb.startedUs + toleranceUs < a.terminalUs) {
          c.fail(
            `lane ${lane}: #${b.laneSeq} (${b.id}) started its committed attempt at ` +
              `${iso(eb.startedUs)} (${eb.worker}), before #${a.laneSeq} (${a.id}) committed ` +
              `at ${iso(a.terminalUs)}`,
          );
        }
      }
    }
    checks.push(c.done());
  }

  // 5. Attempts within budget.
  {
    const c = new CheckBuilder('attempts within budget');
    for (const item of recorded.items) {
      c.checked++;
      if (item.attempt > item.maxAttempts)
        c.fail(`item ${item.id}: attempt ${item.attempt} > budget ${item.maxAttempts}`);
      for (const a of attemptsOf.get(item.id) ?? [])
        if (a.attempt > item.maxAttempts)
          c.fail(`item ${item.id}: history has attempt ${a.attempt} (${a.outcome}) > budget ${item.maxAttempts}`);
    }
    checks.push(c.done());
  }

  // 6. Every dead item has a class; only the deliberately permanent ones die.
  {
    const c = new CheckBuilder('every dead item has a failure class, and only the deliberate ones died');
    for (const item of recorded.items) {
      if (item.state !== 'dead' && item.kind !== 'permanent') continue;
      c.checked++;
      if (item.state === 'dead' && !item.failureClass) c.fail(`item ${item.id} is dead without a failure class`);
      else if (item.kind === 'permanent' && (item.state !== 'dead' || item.failureClass !== 'permanent')) {
        c.fail(`item ${item.id} (deliberately permanent) ended ${item.state} / ${item.failureClass ?? '-'}`);
      } else if (item.kind !== 'permanent') {
        c.fail(
          `item ${item.id} (k=${item.k}, ${item.kind}) died: class ${item.failureClass}, ` +
            `after ${item.attempt} attempts: ${firstLine(item.lastError).slice(0, 160)}`,
        );
      }
    }
    checks.push(c.done());
  }

  // 7. Faults spend no handler attempts. An expired lease of a killed or frozen holder spends one by
  // design; so may one of a live holder while resets or timeouts cut its link to the ledger.
  const spentByFaults: Record<string, number> = {};
  const liveLeaseExpiries: Record<string, number> = {};
  {
    const c = new CheckBuilder(
      'faults spend no handler attempts (only the expired leases of killed or frozen ' +
        'holders, or of live ones behind a broken link)',
    );
    for (const a of recorded.attempts) {
      c.checked++;
      if (a.outcome === 'released' || a.outcome === 'completed' || a.outcome === 'blocked' || a.outcome === 'skipped')
        continue;
      if (isDeliberate(a.error)) continue;
      const key = `${a.outcome}: ${a.failureClass ?? '-'}: ${firstLine(a.error)
        .replace(/:\d+:[0-9a-f]+ /g, ':<pid>:<id> ')
        .slice(0, 100)}`;
      spentByFaults[key] = (spentByFaults[key] ?? 0) + 1;
      if (a.outcome === 'lease_expired') {
        if (faultOf.has(a)) continue;
        const phase = faults.phases.find((w) => a.endedUs >= w.startMs * 1000 && a.endedUs < w.endMs * 1000);
        const name = phase?.name ?? phaseAt(faults.phases, a.endedUs / 1000);
        liveLeaseExpiries[name] = (liveLeaseExpiries[name] ?? 0) + 1;
        // The link may have broken just before the phase the reclaim fell in.
        const endedMs = a.endedUs / 1000;
        if (faults.phases.some((w) => w.linkBroken && w.startMs < endedMs && w.endMs > endedMs - reclaimWindowMs))
          continue;
        c.fail(
          `item ${a.itemId} attempt ${a.attempt}: the lease of a live holder ` +
            `(${a.worker ?? '?'}) expired at ${iso(a.endedUs)}, during "${name}"`,
        );
        continue;
      }
      c.fail(
        `item ${a.itemId} attempt ${a.attempt} ${a.outcome} (${a.failureClass ?? '-'}) ` +
          `at ${iso(a.endedUs)} by ${a.worker ?? '?'}: ${firstLine(a.error).slice(0, 160)}`,
      );
    }
    checks.push(c.done());
  }

  return { checks, spentByFaults, liveLeaseExpiries };
}
