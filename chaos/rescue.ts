/**
 * The rescue after a SIGKILL, from the ledger and the workers' probes
 * (chaos/probe.ts). Every item the dead worker held, as the ledger showed
 * the moment it died (chaos/kills.ts: its attempt, lease end E and due
 * time), is followed to its next claim, in three checks whose allowances
 * are each made of what this run measured:
 *
 * (a) reclaim. The first reconciler pass, of any live worker, that started
 *     after E must find the expired lease: the item is reclaimed by the end
 *     of that pass's reclaim step (its reclaimedAtMs, or its end if another
 *     pass got there first), and that pass came in time: it was due
 *     `interval` after its worker's pass running at E ended, and started
 *     late by its timer lag; so the bound is
 *       min(its reclaim step's end, E + interval + tail + timer lag + work)
 *     where tail = how long that worker's pass running at E went on after
 *     E, and work = from the pass's start to the end of its reclaim step.
 *     The interval is the one the harness configured, so a worker that
 *     reconciles less often than that fails here.
 * (b) re-claim. Once reclaimed and announced (R, the reclaiming pass's
 *     reclaimedAtMs), any claim round that had to take it must have: a
 *     round that began after R (by its recorded start, less the event-loop
 *     delay its process showed then: the start is its end less its
 *     duration, two clock reads a stall can separate), ended with the item
 *     still pending, and claimed g items beyond the ids it was named, took
 *     the earliest due ceil(L/2) >= ceil(g/2) of its candidates
 *     (src/ledger/sql/claim.ts); the item, due at its old time, is among
 *     them unless as many items due no later than it were claimed then (by
 *     that round or one racing it). Such a round that did not take it
 *     skipped it. The allowance is the end of the first round that took it
 *     or had to.
 * (c) rescue overall, from the kill K to the next claim:
 *       lease + (a)'s allowance + announce + (b)'s allowance
 *     where (a)'s allowance is the wait for the first pass after E (within
 *     interval + tail + timer lag) plus its work, announce is from the
 *     reclaim's commit to R; a lease that ran past K + lease (a claim or
 *     renewal the ledger ran after the kill was sent) adds that much.
 *     Given (a) and (b) it holds; it is the figure the rescue is known by.
 *
 * Only kills whose rescue met no network fault (from the last renewal of the
 * lease, E - lease, to the next claim) are held to these; the others, and
 * freezes, are measured and reported.
 */
import { CheckBuilder, claimTimes, iso, overlapsNetworkFault, pidOf, pushTo, type Check } from './check-kit.js';
import type { FaultEvent, FaultLog, HeldAtKill } from './faults.js';
import { CHAOS_QUEUE } from './items.js';
import {
  byProc,
  eldAround,
  firstAtOrAfter,
  type PassRecord,
  type ProbeRecords,
  type RoundRecord,
} from './probe-records.js';
import type { AttemptRow, ItemRow, Recorded } from './recorded.js';

/**
 * Date.now() is whole milliseconds, rounded down, while the ledger's NOW(6)
 * is in µs: an event stamped in ms may precede, by under 1 ms, a ledger time
 * that came before it. One per ms-stamped bound a ledger time is held to.
 */
export const CLOCK_MS = 1;

export interface RescueInput {
  recorded: Recorded;
  faults: FaultLog;
  probes: ProbeRecords;
  leaseMs: number;
  /** The reconcile interval the harness configured for the workers, and assumes. */
  intervalMs: number;
  /**
   * Which kill or freeze each expired lease belongs to (faultOfExpiries): the freezes' rescues are measured from it.
   */
  faultOf: ReadonlyMap<AttemptRow, FaultEvent>;
}

/** How a reconciler pass bounded a reclaim: (a) above. */
export interface ReclaimAllowance {
  proc: string;
  passStartedAtMs: number;
  /** The configured interval; for a process's first pass (due at its start), how long after E that was. */
  intervalMs: number;
  firstPass: boolean;
  tailMs: number;
  timerLagMs: number;
  workMs: number;
  /** The pass's own account of its interval, to compare with the configured one. */
  passIntervalMs: number;
  /** The end of its reclaim step (its reclaimedAtMs, or its end if it put nothing back). */
  doneMs: number;
  /** min(doneMs, E + interval + tail + timer lag + work). */
  boundMs: number;
}

/**
 * One item a SIGKILLed worker held, followed to its next claim. Times are ms; durations relative to the kill unless
 * said.
 */
export interface KillRescue {
  worker: string;
  pid: number;
  killAtMs: number;
  itemId: string;
  /** No network fault from the lease's last renewal to the next claim: the bounds apply. */
  clean: boolean;
  outcome: 'rescued' | 'settled in flight' | 'dead' | 'never reclaimed' | 'never claimed again';
  /** E - K. */
  leaseEndMs: number;
  reclaimMs?: number;
  /** Reclaim (the ledger's time of it) - E. */
  reclaimLatenessMs?: number;
  reclaim?: ReclaimAllowance;
  reclaimAllowanceMs?: number;
  /** The pass that reclaimed it, and how long after the reclaim's commit it was announced. */
  reclaimedBy?: string;
  announceMs?: number;
  /** Next claim - R, and its allowance (the end of the first round that took it or had to, - R). */
  reclaimClaimMs?: number;
  reclaimClaimAllowanceMs?: number;
  claimedBy?: string;
  skippedBy?: string;
  rescueMs?: number;
  rescueBoundMs?: number;
  /** A lease that ran past K + lease: by how much. */
  lateLeaseMs?: number;
}

/** A rescue measured but not held to a bound: a freeze's. */
export interface MeasuredRescue {
  worker: string;
  itemId: string;
  reclaimMs: number;
  rescueMs: number | null;
}

export interface RescueResult {
  checks: Check[];
  kills: KillRescue[];
  freezes: MeasuredRescue[];
  /** SIGKILLs on a healthy network whose worker held nothing when it died. */
  idleKills: number;
}

/**
 * Which kill or freeze each expired lease belongs to: the latest one of its
 * holder's process before the expiry; a frozen holder's only if reclaimed
 * within `reclaimWindowMs` of the thaw.
 */
export function faultOfExpiries(
  recorded: Recorded,
  faults: FaultLog,
  reclaimWindowMs: number,
): Map<AttemptRow, FaultEvent> {
  const hits = faults.events.filter((e) => e.kind === 'sigkill' || e.kind === 'sigstop');
  const out = new Map<AttemptRow, FaultEvent>();
  for (const a of recorded.attempts) {
    if (a.outcome !== 'lease_expired') continue;
    const pid = pidOf(a.worker);
    let best: FaultEvent | undefined;
    for (const h of hits)
      if (h.pid === pid && h.startMs * 1000 <= a.endedUs && (!best || h.startMs > best.startMs)) best = h;
    if (best && (best.kind === 'sigkill' || a.endedUs <= (best.endMs + reclaimWindowMs) * 1000)) out.set(a, best);
  }
  return out;
}

/**
 * How long after its holder could last renew it an expired lease is
 * reclaimed at the latest, as this run measured it: lease + interval + the
 * longest timer lag and twice the longest pass (the tail of one, the work of
 * the next) of w0, the worker that is never killed or frozen.
 */
export function reclaimWindowMs(probes: ProbeRecords, leaseMs: number, intervalMs: number): number {
  let lag = 0;
  let pass = 0;
  for (const p of probes.passes) {
    if (!p.proc.startsWith('w0.')) continue;
    lag = Math.max(lag, p.startedAtMs - p.dueAtMs);
    pass = Math.max(pass, p.endedAtMs - p.startedAtMs);
  }
  return leaseMs + intervalMs + lag + 2 * pass;
}

interface Index {
  items: Map<string, ItemRow>;
  attemptsOf: Map<string, AttemptRow[]>;
  /** Every claim the ledger recorded (each once), sorted by time: µs and item. */
  claims: { us: number; id: string }[];
  passesByProc: Map<string, PassRecord[]>;
  reclaimedIn: Map<string, PassRecord[]>;
  rounds: RoundRecord[];
  /** The longest claim round of the run: how far back a round still running at a given moment may have begun. */
  longestRoundMs: number;
  eldByProc: ReturnType<typeof byProc<ProbeRecords['eld'][number]>>;
}

function index(recorded: Recorded, probes: ProbeRecords): Index {
  const items = new Map(recorded.items.map((i) => [i.id, i]));
  const attemptsOf = new Map<string, AttemptRow[]>();
  for (const a of recorded.attempts) pushTo(attemptsOf, a.itemId, a);
  const claims: Index['claims'] = [];
  for (const item of recorded.items)
    for (const us of new Set(claimTimes(item, attemptsOf.get(item.id) ?? []))) claims.push({ us, id: item.id });
  claims.sort((a, b) => a.us - b.us);
  const reclaimedIn = new Map<string, PassRecord[]>();
  for (const p of probes.passes)
    for (const q of p.queues) if (q.queue === CHAOS_QUEUE) for (const id of q.reclaimed) pushTo(reclaimedIn, id, p);
  const longestRoundMs = probes.rounds.reduce((m, r) => Math.max(m, r.endedAtMs - r.startedAtMs), 0);
  return {
    items,
    attemptsOf,
    claims,
    passesByProc: byProc(probes.passes),
    reclaimedIn,
    rounds: probes.rounds,
    longestRoundMs,
    eldByProc: byProc(probes.eld),
  };
}

/**
 * (a): the first pass of any live worker that started after E (see the top
 * of this file), and its bound: the end of its reclaim step, and no later
 * than E + interval + tail + timer lag + work, which it meets if its worker
 * reconciles as often as configured. Undefined if no worker had a pass after E.
 */
function reclaimAllowance(ix: Index, E: number, intervalMs: number): ReclaimAllowance | undefined {
  let first: { proc: string; P: PassRecord; P0: PassRecord | undefined } | undefined;
  for (const [proc, passes] of ix.passesByProc) {
    const i = firstAtOrAfter(passes, (p) => p.startedAtMs, E);
    const P = passes[i];
    if (P && (!first || P.startedAtMs < first.P.startedAtMs)) first = { proc, P, P0: passes[i - 1] };
  }
  if (!first) return undefined;
  const { proc, P, P0 } = first;
  const q = P.queues.find((x) => x.queue === CHAOS_QUEUE);
  const doneMs = q?.reclaimedAtMs ?? P.endedAtMs;
  const timerLagMs = P.startedAtMs - P.dueAtMs;
  const workMs = doneMs - P.startedAtMs;
  // A process's first pass is due when its reconciler starts: no interval before it, and no tail.
  const firstPass = P0 === undefined;
  const interval = firstPass ? Math.max(0, P.dueAtMs - E) : intervalMs;
  const tailMs = firstPass ? 0 : Math.max(0, P0.endedAtMs - E);
  const boundMs = Math.min(doneMs, E + interval + tailMs + timerLagMs + workMs);
  return {
    proc,
    passStartedAtMs: P.startedAtMs,
    intervalMs: interval,
    firstPass,
    tailMs,
    timerLagMs,
    workMs,
    passIntervalMs: P.intervalMs,
    doneMs,
    boundMs,
  };
}

interface ReclaimClaim {
  boundMs: number;
  claimedBy: RoundRecord | undefined;
  skipped?: { round: RoundRecord; eldMs: number; general: number; earlier: number };
}

/** (b): the first round after R that took the item or had to (see the top of this file). */
function reclaimClaimAllowance(ix: Index, h: HeldAtKill, R: number, claimUs: number): ReclaimClaim {
  let claimedBy: RoundRecord | undefined;
  let skipped: ReclaimClaim['skipped'];
  for (let i = firstAtOrAfter(ix.rounds, (r) => r.startedAtMs, R); i < ix.rounds.length; i++) {
    const C = ix.rounds[i]!;
    if (C.startedAtMs * 1000 > claimUs) break;
    if (C.claimed.includes(h.id)) {
      claimedBy ??= C;
      continue;
    }
    if (skipped) continue;
    const eldMs = eldAround(ix.eldByProc.get(C.proc) ?? [], C.startedAtMs, C.endedAtMs);
    // A stall the probe could not bound (the process died right after), or a round that may have begun before R.
    if (eldMs === undefined || C.startedAtMs < R + eldMs) continue;
    // Claimed by someone else while this round ran: it may have been gone when this round's CAS came.
    if ((C.endedAtMs + CLOCK_MS) * 1000 > claimUs) continue;
    const general = C.claimed.length - C.targeted;
    if (general <= 0) continue;
    const earlier = claimsDueBy(ix, h, racingSince(ix, i, eldMs) * 1000, (C.endedAtMs + CLOCK_MS) * 1000);
    if (earlier >= Math.ceil(general / 2)) continue;
    skipped = { round: C, eldMs, general, earlier };
  }
  claimedBy ??= ix.rounds.find(
    (r) =>
      r.claimed.includes(h.id) && r.endedAtMs * 1000 + CLOCK_MS * 1000 >= claimUs && r.startedAtMs * 1000 <= claimUs,
  );
  const boundMs = skipped ? skipped.round.endedAtMs : claimedBy ? claimedBy.endedAtMs : claimUs / 1000;
  return { boundMs, claimedBy, ...(skipped ? { skipped } : {}) };
}

/**
 * When the earliest round still running as round i read its candidates
 * began. A candidate of round i that another claim took first was pending
 * at that read, so the claim that took it committed after it, in a round
 * still running then; its time (NOW(6): when its statement began) is no
 * earlier than that round's start, less its process's event-loop delay.
 * (A lane's next item claimed with its predecessor's completion never was
 * a pending head, so no round's candidate.)
 */
function racingSince(ix: Index, i: number, eldMs: number): number {
  const C = ix.rounds[i]!;
  const readFrom = C.startedAtMs - eldMs;
  let since = readFrom;
  for (let j = i - 1; j >= 0 && ix.rounds[j]!.startedAtMs >= readFrom - ix.longestRoundMs; j--) {
    const r = ix.rounds[j]!;
    if (r.endedAtMs >= readFrom)
      since = Math.min(
        since,
        r.startedAtMs - (eldAround(ix.eldByProc.get(r.proc) ?? [], r.startedAtMs, r.endedAtMs) ?? 0),
      );
  }
  return since;
}

/**
 * Claims in [fromUs, toUs] of items other than h that may be due no later
 * than it: created no later than its due time (an item is never due before
 * it was made, so the others cannot be).
 */
function claimsDueBy(ix: Index, h: HeldAtKill, fromUs: number, toUs: number): number {
  let n = 0;
  for (let i = firstAtOrAfter(ix.claims, (c) => c.us, fromUs); i < ix.claims.length && ix.claims[i]!.us <= toUs; i++) {
    const c = ix.claims[i]!;
    if (c.id !== h.id && (ix.items.get(c.id)?.createdUs ?? Infinity) <= h.runAfterUs) n++;
  }
  return n;
}

const ms = (x: number): string => `${Math.round(x)} ms`;

function followItem(ix: Index, input: RescueInput, kill: FaultEvent, h: HeldAtKill): KillRescue {
  const K = kill.startMs;
  const E = h.leaseUntilUs / 1000;
  const base: KillRescue = {
    worker: kill.worker ?? '?',
    pid: kill.pid ?? -1,
    killAtMs: K,
    itemId: h.id,
    clean: false,
    outcome: 'never reclaimed',
    leaseEndMs: E - K,
  };
  const attempts = ix.attemptsOf.get(h.id) ?? [];
  const item = ix.items.get(h.id);
  const row = attempts.find((a) => a.attempt === h.attempt && a.outcome === 'lease_expired');
  const cleanUntil = (toMs: number): boolean => !overlapsNetworkFault(input.faults.phases, E - input.leaseMs, toMs);
  if (!row) {
    // A finalize the dead worker had sent before it died, committed by the ledger after the read: not a rescue.
    // (A completion writes no history row: the item itself ended on that attempt.)
    const settled =
      attempts.some((a) => a.attempt === h.attempt) ||
      (item?.attempt === h.attempt && item.state !== 'processing' && item.state !== 'pending');
    return { ...base, clean: cleanUntil(E), outcome: settled ? 'settled in flight' : 'never reclaimed' };
  }
  const reclaimUs = row.endedUs;
  const out: KillRescue = {
    ...base,
    outcome: 'rescued',
    reclaimMs: reclaimUs / 1000 - K,
    reclaimLatenessMs: reclaimUs / 1000 - E,
  };
  if (E - K > input.leaseMs) out.lateLeaseMs = E - K - input.leaseMs;
  const a = reclaimAllowance(ix, E, input.intervalMs);
  if (a) Object.assign(out, { reclaim: a, reclaimAllowanceMs: a.boundMs - E });
  const pass = (ix.reclaimedIn.get(h.id) ?? []).find(
    (p) => (p.queues.find((q) => q.queue === CHAOS_QUEUE)?.reclaimedAtMs ?? -Infinity) >= reclaimUs / 1000 - CLOCK_MS,
  );
  const R = pass?.queues.find((q) => q.queue === CHAOS_QUEUE)?.reclaimedAtMs ?? reclaimUs / 1000;
  if (pass) out.reclaimedBy = pass.proc;
  out.announceMs = R - reclaimUs / 1000;
  const next = (ix.claims.find((c) => c.id === h.id && c.us > reclaimUs) ?? null)?.us ?? null;
  out.clean = cleanUntil((next ?? reclaimUs) / 1000);
  if (next === null) return { ...out, outcome: item?.state === 'dead' ? 'dead' : 'never claimed again' };
  const b = reclaimClaimAllowance(ix, h, R, next);
  out.reclaimClaimMs = next / 1000 - R;
  out.reclaimClaimAllowanceMs = b.boundMs - R;
  if (b.claimedBy)
    out.claimedBy =
      `${b.claimedBy.proc} (round ${iso(b.claimedBy.startedAtMs * 1000)}, ` +
      `${b.claimedBy.targeted > 0 ? `${b.claimedBy.targeted} named` : 'general'})`;
  if (b.skipped) {
    const s = b.skipped;
    out.skippedBy =
      `${s.round.proc}'s round ` +
      `${iso(s.round.startedAtMs * 1000)}-${iso(s.round.endedAtMs * 1000)} (event-loop ` +
      `delay ${s.eldMs} ms) claimed ${s.general} items beyond the ${s.round.targeted} ` +
      `it was named, ${s.earlier} claimed then due no later than it`;
  }
  out.rescueMs = next / 1000 - K;
  if (a)
    out.rescueBoundMs =
      input.leaseMs +
      (out.lateLeaseMs ?? 0) +
      (out.reclaimAllowanceMs ?? 0) +
      out.announceMs +
      out.reclaimClaimAllowanceMs;
  return out;
}

function describeReclaim(r: KillRescue, E: number): string {
  const a = r.reclaim;
  if (!a) return 'no pass of any worker started after its lease ran out';
  const interval = a.firstPass
    ? `${ms(a.intervalMs)} until ${a.proc}'s first pass was due`
    : `interval ${ms(a.intervalMs)} (the pass says ${ms(a.passIntervalMs)})`;
  const late =
    a.passStartedAtMs - E > a.intervalMs + a.tailMs + a.timerLagMs
      ? `, which started ${ms(a.passStartedAtMs - E)} after the lease ran out`
      : '';
  return (
    `allowance ${ms(r.reclaimAllowanceMs ?? 0)} = ${interval} + tail ${ms(a.tailMs)} ` +
    `+ timer lag ${ms(a.timerLagMs)} + work ${ms(a.workMs)}, from ${a.proc}'s pass ` +
    `started ${iso(a.passStartedAtMs * 1000)}, the first after it${late}; its ` +
    `reclaim step ended ${ms(a.doneMs - E)} after it`
  );
}

export function checkRescue(input: RescueInput): RescueResult {
  const ix = index(input.recorded, input.probes);
  const kills: KillRescue[] = [];
  let idleKills = 0;
  for (const e of input.faults.events) {
    if (e.kind !== 'sigkill' || !e.held) continue;
    if (
      e.held.length === 0 &&
      !overlapsNetworkFault(input.faults.phases, e.startMs - input.leaseMs, e.startMs + input.leaseMs)
    )
      idleKills++;
    for (const h of e.held) kills.push(followItem(ix, input, e, h));
  }
  const clean = kills.filter((k) => k.clean && k.outcome !== 'settled in flight' && k.outcome !== 'dead');
  const who = (k: KillRescue): string =>
    `item ${k.itemId} held by ${k.worker} (pid ${k.pid}), SIGKILL at ` +
    `${iso(k.killAtMs * 1000)}, lease to +${ms(k.leaseEndMs)}`;

  const a = new CheckBuilder(
    'rescue (a): reclaimed by the first reconciler pass, of any live worker, after the lease ran out (healthy network)',
  );
  for (const k of clean) {
    a.checked++;
    if (k.reclaimMs === undefined) a.fail(`${who(k)}: never reclaimed`);
    else if (!k.reclaim || k.reclaimLatenessMs! > k.reclaimAllowanceMs! + CLOCK_MS)
      a.fail(
        `${who(k)}: reclaimed ${ms(k.reclaimLatenessMs!)} after it by ` +
          `${k.reclaimedBy ?? 'an unrecorded pass'}; ` +
          `${describeReclaim(k, k.killAtMs + k.leaseEndMs)}`,
      );
  }
  const b = new CheckBuilder(
    'rescue (b): claimed again by the next claim round that had to take it, once reclaimed (healthy network)',
  );
  for (const k of clean) {
    if (k.reclaimMs === undefined) continue;
    b.checked++;
    if (k.reclaimClaimMs === undefined) b.fail(`${who(k)}: reclaimed, never claimed again`);
    else if (k.skippedBy)
      b.fail(
        `${who(k)}: claimed ${ms(k.reclaimClaimMs)} after its reclaim was announced, by ` +
          `${k.claimedBy ?? 'an unrecorded round'}; skipped by ${k.skippedBy}`,
      );
  }
  const c = new CheckBuilder(
    'rescue (c): claimed again within lease + the wait for the pass (<= interval + ' +
      'tail + timer lag) + its work + announce + re-claim, as measured (healthy ' +
      'network)',
  );
  for (const k of clean) {
    c.checked++;
    if (k.rescueMs === undefined || k.rescueBoundMs === undefined) c.fail(`${who(k)}: ${k.outcome}`);
    // One CLOCK_MS for each ms-stamped end it is made of: (a)'s and (b)'s.
    else if (k.rescueMs > k.rescueBoundMs + 2 * CLOCK_MS) {
      c.fail(
        `${who(k)}: claimed again after ${ms(k.rescueMs)}, bound ${ms(k.rescueBoundMs)} ` +
          `= lease ` +
          `${input.leaseMs}${k.lateLeaseMs ? ` + ${ms(k.lateLeaseMs)} past it` : ''} + ` +
          `reclaim ${ms(k.reclaimAllowanceMs!)} + announce ${ms(k.announceMs!)} + re-claim ` +
          `${ms(k.reclaimClaimAllowanceMs!)}`,
      );
    }
  }
  const checks = [a.done(), b.done(), c.done()];
  const cleanKills = input.faults.events.filter(
    (e) =>
      e.kind === 'sigkill' &&
      !overlapsNetworkFault(input.faults.phases, e.startMs - input.leaseMs, e.startMs + input.leaseMs),
  ).length;
  if (clean.length === 0) {
    const why =
      cleanKills === 0
        ? 'no SIGKILL fell on a healthy network'
        : `${cleanKills} SIGKILLs on a healthy network, none holding work when it died ` +
          `(${idleKills} found nothing held)`;
    for (const x of checks) x.examples.push(`${why}: not measured`);
  }
  return { checks, kills, freezes: freezeRescues(ix, input.faultOf), idleKills };
}

/** What a freeze's holder had: its expired leases, measured, not held to a bound. */
function freezeRescues(ix: Index, faultOf: ReadonlyMap<AttemptRow, FaultEvent>): MeasuredRescue[] {
  const out: MeasuredRescue[] = [];
  for (const [row, hit] of faultOf) {
    if (hit.kind !== 'sigstop') continue;
    const next = ix.claims.find((c) => c.id === row.itemId && c.us > row.endedUs)?.us ?? null;
    out.push({
      worker: hit.worker ?? '?',
      itemId: row.itemId,
      reclaimMs: row.endedUs / 1000 - hit.startMs,
      rescueMs: next === null ? null : next / 1000 - hit.startMs,
    });
  }
  return out;
}
