/**
 * The checks, from what was recorded: the producer's acknowledgements, the
 * ledger (items and their attempt history) and the handlers' effects table.
 * Nothing here trusts a worker's own account of what it did.
 */
import type { RowDataPacket } from 'mysql2/promise';
import type { ChaosDatabase } from './database.js';
import type { FaultEvent, FaultLog, PhaseWindow } from './faults.js';
import { CHAOS_QUEUE, DELIBERATE_PERMANENT, DELIBERATE_TRANSIENT, EFFECTS_TABLE, type ChaosKind, type EnqueuedRecord } from './items.js';

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

export interface ItemRow {
  id: string;
  k: number;
  kind: ChaosKind;
  lane: string | null;
  laneSeq: number | null;
  state: string;
  attempt: number;
  maxAttempts: number;
  failureClass: string | null;
  lastError: string | null;
  createdUs: number;
  startedUs: number | null;
  terminalUs: number | null;
}

export interface AttemptRow {
  itemId: string;
  attempt: number;
  outcome: string;
  failureClass: string | null;
  error: string | null;
  worker: string | null;
  startedUs: number | null;
  endedUs: number;
}

export interface EffectRow {
  itemId: string;
  n: number;
  k: number;
  lane: string | null;
  laneSeq: number | null;
  worker: string;
  attempt: number;
  startedUs: number;
  upsertUs: number;
  dupWorker: string | null;
  dupAttempt: number | null;
}

export interface LaneRow {
  lane: string;
  nextSeq: number;
  active: number;
}

export interface Recorded {
  items: ItemRow[];
  attempts: AttemptRow[];
  effects: EffectRow[];
  lanes: LaneRow[];
}

const us = (col: string): string => `IF(${col} < '1001-01-01', NULL, ROUND(UNIX_TIMESTAMP(${col}) * 1000000))`;
const num = (v: unknown): number => Number(v);
const numOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

export async function readRecorded(db: ChaosDatabase): Promise<Recorded> {
  const items = await db.query<RowDataPacket>(
    `SELECT id, lane, lane_seq, state, attempt, max_attempts, failure_class, last_error, payload,
       ${us('created_at')} AS created_us, ${us('started_at')} AS started_us, ${us('terminal_at')} AS terminal_us
     FROM \`${db.name}\`.lw_items WHERE queue = ?`,
    [CHAOS_QUEUE],
  );
  const attempts = await db.query<RowDataPacket>(
    `SELECT item_id, attempt, outcome, failure_class, error, worker, ${us('started_at')} AS started_us, ${us('ended_at')} AS ended_us
     FROM \`${db.name}\`.lw_attempts`,
  );
  const effects = await db.query<RowDataPacket>(
    `SELECT item_id, n, k, lane, lane_seq, worker, attempt, started_us, ${us('upsert_at')} AS upsert_us, dup_worker, dup_attempt
     FROM \`${db.name}\`.${EFFECTS_TABLE}`,
  );
  const lanes = await db.query<RowDataPacket>(`SELECT lane, next_seq, active FROM \`${db.name}\`.lw_lanes WHERE queue = ?`, [CHAOS_QUEUE]);
  return {
    lanes: lanes.map((r) => ({ lane: String(r.lane), nextSeq: num(r.next_seq), active: num(r.active) })),
    items: items.map((r) => {
      const payload = JSON.parse(String(r.payload)) as { k: number; kind: ChaosKind };
      return {
        id: String(r.id),
        k: payload.k,
        kind: payload.kind,
        lane: r.lane === null ? null : String(r.lane),
        laneSeq: numOrNull(r.lane_seq),
        state: String(r.state).trim(),
        attempt: num(r.attempt),
        maxAttempts: num(r.max_attempts),
        failureClass: r.failure_class === null ? null : String(r.failure_class),
        lastError: r.last_error === null ? null : String(r.last_error),
        createdUs: num(r.created_us),
        startedUs: numOrNull(r.started_us),
        terminalUs: numOrNull(r.terminal_us),
      };
    }),
    attempts: attempts.map((r) => ({
      itemId: String(r.item_id),
      attempt: num(r.attempt),
      outcome: String(r.outcome),
      failureClass: r.failure_class === null ? null : String(r.failure_class),
      error: r.error === null ? null : String(r.error),
      worker: r.worker === null ? null : String(r.worker),
      startedUs: numOrNull(r.started_us),
      endedUs: num(r.ended_us),
    })),
    effects: effects.map((r) => ({
      itemId: String(r.item_id),
      n: num(r.n),
      k: num(r.k),
      lane: r.lane === null ? null : String(r.lane),
      laneSeq: numOrNull(r.lane_seq),
      worker: String(r.worker),
      attempt: num(r.attempt),
      startedUs: num(r.started_us),
      upsertUs: num(r.upsert_us),
      dupWorker: r.dup_worker === null ? null : String(r.dup_worker),
      dupAttempt: numOrNull(r.dup_attempt),
    })),
  };
}

export interface Check {
  name: string;
  ok: boolean;
  /** How many things were checked, and how many broke it. */
  checked: number;
  violations: number;
  /** The first offenders, precisely (item ids, times). */
  examples: string[];
}

class CheckBuilder {
  private readonly examples: string[] = [];
  private violations = 0;
  checked = 0;

  constructor(readonly name: string) {}

  fail(example: string): void {
    this.violations++;
    if (this.examples.length < 12) this.examples.push(example);
  }

  done(extraOk = true): Check {
    return { name: this.name, ok: this.violations === 0 && extraOk, checked: this.checked, violations: this.violations, examples: this.examples };
  }
}

export interface RescueSample {
  fault: 'sigkill' | 'sigstop';
  worker: string;
  pid: number;
  itemId: string;
  /** From the fault to the expired lease being reclaimed by a reconciler. */
  reclaimMs: number;
  /** From the fault to the item's next claim; null if it had none (died or was kept by its resumed holder). */
  rescueMs: number | null;
  /** The fault's rescue window met no network fault, so the bound applies. */
  clean: boolean;
  after: string;
}

export interface Percentiles {
  n: number;
  p50: number | null;
  p99: number | null;
  max: number | null;
}

export function percentiles(values: readonly number[]): Percentiles {
  if (values.length === 0) return { n: 0, p50: null, p99: null, max: null };
  const s = [...values].sort((a, b) => a - b);
  const at = (q: number): number => s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
  return { n: s.length, p50: round(at(0.5)), p99: round(at(0.99)), max: round(s[s.length - 1]!) };
}

const round = (x: number): number => Math.round(x * 10) / 10;

export interface CheckInput {
  recorded: Recorded;
  acknowledged: EnqueuedRecord[];
  /** Items whose enqueue was in flight when the producer stopped: may exist or not. */
  unacknowledged: Set<number>;
  faults: FaultLog;
  rescueBoundMs: number;
}

export interface CheckResult {
  checks: Check[];
  rescue: RescueSample[];
  /** Attempts the faults spent, by what ended them (history rows that are not the handlers' deliberate failures). */
  spentByFaults: Record<string, number>;
  /** Leases that expired on a worker that was neither killed nor frozen, by phase. */
  liveLeaseExpiries: Record<string, number>;
}

/** The pid in a lease owner's name (host:pid:random). */
function pidOf(worker: string | null): number | undefined {
  const m = worker ? /:(\d+):[0-9a-f]+$/.exec(worker) : null;
  return m ? Number(m[1]) : undefined;
}

const firstLine = (text: string | null): string => (text ?? '').split('\n', 1)[0] ?? '';

function isDeliberate(error: string | null): boolean {
  return error !== null && (error.includes(DELIBERATE_TRANSIENT) || error.includes(DELIBERATE_PERMANENT));
}

export function phaseAt(phases: readonly PhaseWindow[], ms: number): string {
  const p = phases.find((w) => ms >= w.startMs && ms < w.endMs);
  return p ? p.name : ms < (phases[0]?.startMs ?? 0) ? 'before the faults' : 'after the faults';
}

function overlapsNetworkFault(phases: readonly PhaseWindow[], fromMs: number, toMs: number): boolean {
  return phases.some((w) => w.network && w.startMs < toMs && w.endMs > fromMs);
}

export function checkInvariants(input: CheckInput): CheckResult {
  const { recorded, acknowledged, unacknowledged, faults, rescueBoundMs } = input;
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
      else if (!terminal.has(item.state)) c.fail(`item ${id} (k=${k}, lane ${item.lane ?? '-'} #${item.laneSeq ?? '-'}) is ${item.state}, attempt ${item.attempt}`);
    }
    for (const item of recorded.items) {
      if (!acknowledgedIds.has(item.id) && !unacknowledged.has(item.k)) c.fail(`item ${item.id} (k=${item.k}) is in the ledger but the producer never had it acknowledged`);
      if (!acknowledgedIds.has(item.id) && unacknowledged.has(item.k) && !terminal.has(item.state)) c.fail(`item ${item.id} (k=${item.k}, enqueue unacknowledged) is ${item.state}`);
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
        else if (e.n !== 1) c.fail(`item ${item.id} (k=${item.k}): effect committed ${e.n} times (first by ${e.worker} attempt ${e.attempt}, again by ${e.dupWorker} attempt ${e.dupAttempt})`);
      } else if (e) {
        c.fail(`item ${item.id} (k=${item.k}) is ${item.state} (${item.failureClass ?? '-'}) but has an effect (n=${e.n}, by ${e.worker} attempt ${e.attempt})`);
      }
    }
    for (const e of recorded.effects) if (!items.has(e.itemId)) c.fail(`effect for ${e.itemId} (k=${e.k}) has no ledger item`);
    checks.push(c.done());
  }

  // Lanes, in sequence order.
  const lanes = new Map<string, ItemRow[]>();
  for (const item of recorded.items) if (item.lane !== null) pushTo(lanes, item.lane, item);
  for (const list of lanes.values()) list.sort((a, b) => (a.laneSeq ?? 0) - (b.laneSeq ?? 0));

  // 3. Lane order: sequence follows enqueue order; effects commit in sequence order; no claim of an item before its predecessor ended
  //    (up to CLAIM_CLOCK_SKEW_US: see there).
  {
    const c = new CheckBuilder('lane order (sequence = enqueue order; effects and claims follow the sequence)');
    for (const [lane, list] of lanes) {
      for (let i = 1; i < list.length; i++) {
        const a = list[i - 1]!;
        const b = list[i]!;
        c.checked++;
        if (a.k > b.k) c.fail(`lane ${lane}: #${a.laneSeq} is k=${a.k} but #${b.laneSeq} is k=${b.k} (sequence against enqueue order)`);
        const ea = effects.get(a.id);
        const eb = effects.get(b.id);
        if (ea && eb && ea.upsertUs >= eb.upsertUs) c.fail(`lane ${lane}: effect of #${b.laneSeq} (${b.id}) written at ${iso(eb.upsertUs)}, not after #${a.laneSeq}'s (${a.id}) at ${iso(ea.upsertUs)}`);
        const firstClaimOfB = Math.min(...claimTimes(b, attemptsOf.get(b.id) ?? []));
        if (a.terminalUs !== null && Number.isFinite(firstClaimOfB) && firstClaimOfB < a.terminalUs - CLAIM_CLOCK_SKEW_US) {
          c.fail(`lane ${lane}: #${b.laneSeq} (${b.id}) claimed at ${iso(firstClaimOfB)}, before #${a.laneSeq} (${a.id}) ended at ${iso(a.terminalUs)}`);
        }
      }
    }
    checks.push(c.done());
  }

  // 3b. The lane rows agree with the items: nothing active once all is terminal, one sequence number per item.
  {
    const c = new CheckBuilder('lane bookkeeping (each lane row: active = its unfinished items, next_seq = its last sequence number)');
    for (const row of recorded.lanes) {
      c.checked++;
      const list = lanes.get(row.lane) ?? [];
      const unfinished = list.filter((i) => !terminal.has(i.state)).length;
      if (row.active !== unfinished) c.fail(`lane ${row.lane}: active = ${row.active}, but ${unfinished} of its ${list.length} items are unfinished`);
      if (row.nextSeq !== list.length) c.fail(`lane ${row.lane}: next_seq (the last sequence number given) = ${row.nextSeq}, but the lane has ${list.length} items`);
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
          c.fail(`lane ${lane}: #${b.laneSeq} (${b.id}) started its committed attempt at ${iso(eb.startedUs)} (${eb.worker}), before #${a.laneSeq} (${a.id}) committed at ${iso(a.terminalUs)}`);
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
      if (item.attempt > item.maxAttempts) c.fail(`item ${item.id}: attempt ${item.attempt} > budget ${item.maxAttempts}`);
      for (const a of attemptsOf.get(item.id) ?? []) if (a.attempt > item.maxAttempts) c.fail(`item ${item.id}: history has attempt ${a.attempt} (${a.outcome}) > budget ${item.maxAttempts}`);
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
        c.fail(`item ${item.id} (k=${item.k}, ${item.kind}) died: class ${item.failureClass}, after ${item.attempt} attempts: ${firstLine(item.lastError).slice(0, 160)}`);
      }
    }
    checks.push(c.done());
  }

  // Which kill or freeze each expired lease belongs to: the latest one of its holder's process
  // before the expiry (a frozen holder's, only if it expired by the time the freeze could explain).
  const hits = faults.events.filter((e) => e.kind === 'sigkill' || e.kind === 'sigstop');
  const hitOf = new Map<AttemptRow, FaultEvent>();
  for (const a of recorded.attempts) {
    if (a.outcome !== 'lease_expired') continue;
    const pid = pidOf(a.worker);
    let best: FaultEvent | undefined;
    for (const h of hits) if (h.pid === pid && h.startMs * 1000 <= a.endedUs && (!best || h.startMs > best.startMs)) best = h;
    if (best && (best.kind === 'sigkill' || a.endedUs <= (best.endMs + rescueBoundMs) * 1000)) hitOf.set(a, best);
  }

  // 7. Faults spend no handler attempts. An expired lease of a killed or frozen holder spends one by
  // design; so may one of a live holder while resets or timeouts cut its link to the ledger.
  const spentByFaults: Record<string, number> = {};
  const liveLeaseExpiries: Record<string, number> = {};
  {
    const c = new CheckBuilder('faults spend no handler attempts (only the expired leases of killed or frozen holders, or of live ones behind a broken link)');
    for (const a of recorded.attempts) {
      c.checked++;
      if (a.outcome === 'released' || a.outcome === 'completed' || a.outcome === 'blocked' || a.outcome === 'skipped') continue;
      if (isDeliberate(a.error)) continue;
      const key = `${a.outcome}: ${a.failureClass ?? '-'}: ${firstLine(a.error).replace(/:\d+:[0-9a-f]+ /g, ':<pid>:<id> ').slice(0, 100)}`;
      spentByFaults[key] = (spentByFaults[key] ?? 0) + 1;
      if (a.outcome === 'lease_expired') {
        if (hitOf.has(a)) continue;
        const phase = faults.phases.find((w) => a.endedUs >= w.startMs * 1000 && a.endedUs < w.endMs * 1000);
        const name = phase?.name ?? phaseAt(faults.phases, a.endedUs / 1000);
        liveLeaseExpiries[name] = (liveLeaseExpiries[name] ?? 0) + 1;
        // The link may have broken just before the phase the reclaim fell in.
        const endedMs = a.endedUs / 1000;
        if (faults.phases.some((w) => w.linkBroken && w.startMs < endedMs && w.endMs > endedMs - rescueBoundMs)) continue;
        c.fail(`item ${a.itemId} attempt ${a.attempt}: the lease of a live holder (${a.worker ?? '?'}) expired at ${iso(a.endedUs)}, during "${name}"`);
        continue;
      }
      c.fail(`item ${a.itemId} attempt ${a.attempt} ${a.outcome} (${a.failureClass ?? '-'}) at ${iso(a.endedUs)} by ${a.worker ?? '?'}: ${firstLine(a.error).slice(0, 160)}`);
    }
    checks.push(c.done());
  }

  // 8. Rescue after a kill within lease + reconcile interval + 1 s, for every item the holder had,
  // when no network fault overlapped; the rest (and freezes) are measured, not held to it.
  const rescue: RescueSample[] = [];
  {
    const c = new CheckBuilder(`rescue within ${rescueBoundMs} ms (lease + reconcile interval + 1 s) of a kill, on a healthy network`);
    const cleanAt = (ms: number): boolean => !overlapsNetworkFault(faults.phases, ms - 500, ms + rescueBoundMs);
    for (const [a, hit] of hitOf) {
      const clean = cleanAt(hit.startMs);
      const item = items.get(a.itemId);
      const next = item ? claimTimes(item, attemptsOf.get(a.itemId) ?? []).filter((t) => a.startedUs !== null && t > a.startedUs) : [];
      const nextUs = next.length > 0 ? Math.min(...next) : null;
      const sample: RescueSample = {
        fault: hit.kind === 'sigkill' ? 'sigkill' : 'sigstop',
        worker: hit.worker ?? '?',
        pid: hit.pid ?? -1,
        itemId: a.itemId,
        reclaimMs: (a.endedUs - hit.startMs * 1000) / 1000,
        rescueMs: nextUs === null ? null : (nextUs - hit.startMs * 1000) / 1000,
        clean,
        after: phaseAt(faults.phases, hit.startMs),
      };
      rescue.push(sample);
      if (!clean || hit.kind !== 'sigkill') continue;
      c.checked++;
      if (sample.rescueMs === null) {
        if (item?.state !== 'dead') c.fail(`item ${a.itemId} held by ${hit.worker} (pid ${hit.pid}) at its SIGKILL was never claimed again (now ${item?.state ?? 'missing'})`);
      } else if (sample.rescueMs > rescueBoundMs) {
        c.fail(`item ${a.itemId} held by ${hit.worker} (pid ${hit.pid}), SIGKILL at ${iso(hit.startMs * 1000)}: reclaimed after ${Math.round(sample.reclaimMs)} ms, claimed again after ${Math.round(sample.rescueMs)} ms`);
      }
    }
    const cleanKills = hits.filter((h) => h.kind === 'sigkill' && cleanAt(h.startMs)).length;
    const built = c.done(c.checked > 0);
    if (cleanKills === 0) built.examples.push('no SIGKILL fell on a healthy network: the rescue bound was not measured');
    else if (c.checked === 0) built.examples.push(`${cleanKills} SIGKILLs on a healthy network, but their workers held nothing: the rescue bound was not measured`);
    checks.push(built);
  }

  return { checks, rescue, spentByFaults, liveLeaseExpiries };
}

export function pushTo<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

/** Every time the ledger says the item was claimed: each history row's start, and the latest claim. */
function claimTimes(item: ItemRow, attempts: readonly AttemptRow[]): number[] {
  const times = attempts.map((a) => a.startedUs).filter((t): t is number => t !== null);
  if (item.startedUs !== null) times.push(item.startedUs);
  return times;
}

function iso(us: number): string {
  const d = new Date(Math.floor(us / 1000));
  return `${d.toISOString().slice(11, 23)}${String(us % 1000).padStart(3, '0')}Z`;
}
