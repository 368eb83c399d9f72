import { sql, type RawBuilder } from 'kysely';
import type { LedgerTables } from '../../tables.js';
import type { ClaimedRow } from '../../rows.js';
import type { ClaimedItem, SuccessorClaim } from '../../types.js';
import { claimedItems, grantLease, readBackClaimed, roomLeft, type Lease } from '../claim/claimed.js';
import { inline, queueScoped } from '../common/fragments.js';
import { refuseUnless } from '../common/guard.js';
import type { KeyCount } from './key-counts.js';
import { keyLimits, limitScope, limitsRead, UNLIMITED } from './scope.js';
import type { Send, StatementResult } from '../common/pipeline.js';
import {
  type WaitRow,
  byLine,
  byPlace,
  claimAdmitted,
  admittedOf,
  readWaiting,
  waitRows,
  admitWaiting,
  leaveLine,
} from './waiting-line.js';
import { type KeyDelta, countPerKey, lockKeys, addHeld, mergeCounts } from './held-counts.js';

// The hand-on of concurrency keys (docs/design/keys.md, Concurrency keys): when
// admitted items of a key end, its earliest-due waiting items take the slots
// they free, under the key row's lock, so hand-ons and admissions of one key
// take turns and a waiting item is admitted once. Admission at enqueue is
// sql/keys/admission.ts.

/** The most waiting items one hand-on admits per key (a raised limit admits the rest at the next). */
const MAX_ADMIT = 500;

/**
 * Admitted laneless items of these keys ended (`admit` of each; 0 when a
 * limit was raised): under each key's row lock, its earliest-due waiting
 * items take the slots that are free now, and the key counts what it holds.
 * Call it in the transaction that ended them. The row lock comes first, so
 * hand-ons and admissions of one key take turns, and a waiting item is
 * admitted once.
 *
 * Two round trips on a pipelined transaction (docs/design/keys.md, Concurrency keys): the first goes with
 * `alongside` (the ending, whose results `check` sees before anything is written), locks the keys and reads
 * ahead; the second admits and writes each key's count once.
 *
 * The admitted items are claimed for the rooms of `claimFor` in turn (key
 * affinity: the completing consumers'), each up to its `max`; the rest are
 * heads for any claim.
 *
 * With `commitWhenSure` (a transaction that writes nothing after the
 * hand-on), the second round trip also commits, unless a key reads again:
 * the keys' locks are then held across one turn of the client instead of
 * two. A guard (sql/common/guard.ts) refuses the transaction if a waiting item read was not admitted
 * (cancelled meanwhile); the caller then runs it again without.
 */
export async function handOnKeys(
  send: Send,
  t: LedgerTables,
  ended: readonly KeyCount[],
  alongside: readonly RawBuilder<unknown>[] = [],
  check?: (results: readonly StatementResult[]) => void,
  claimFor: readonly SuccessorClaim[] = [],
  commitWhenSure = false,
): Promise<HandedOn> {
  const claimed: ClaimedItem[] = [];
  /** Keys (queue-scoped) with an item admitted here and left pending for any claim. */
  const left = new Set<string>();
  const lined = new Set<string>();
  const done: HandedOn = { claimed, left, lined };
  const keys = mergeCounts(ended);
  const freed = keys.filter((k) => k.admit > 0);
  const guess = freed.map((k) => ({ k, take: Math.min(MAX_ADMIT, k.admit) }));
  const first = await send([
    ...alongside,
    ...(keys.length > 0 ? [lockKeys(t, keys), limitsRead(t, keys)] : []),
    ...(freed.length > 0 ? readWaiting(t, guess) : []),
  ]);
  check?.(first.slice(0, alongside.length));
  if (keys.length === 0) return done;
  const [locked, limitRows] = first.slice(alongside.length) as [StatementResult, StatementResult];
  const limits = keyLimits(limitRows.rows);
  /** What each key holds now, in this transaction. */
  const held = new Map<string, number>();
  /** What each key's row counts, as this transaction last wrote it (or read it, locked). */
  const written = new Map<string, number>();
  const byKey = new Map(keys.map((x) => [queueScoped(x.queue, x.key), x]));
  for (const r of locked.rows) {
    const k = queueScoped(String(r.queue), String(r.ckey));
    const gone = byKey.get(k)?.admit ?? 0;
    written.set(k, Number(r.admitted));
    held.set(k, Math.max(0, Number(r.admitted) - gone));
  }
  const addTo = (deltas: readonly KeyDelta[], sign: 1 | -1): void => {
    for (const d of deltas)
      held.set(queueScoped(d.queue, d.key), (held.get(queueScoped(d.queue, d.key)) ?? 0) + sign * d.n);
  };
  /** The key rows' counts brought to what the keys hold: only rows whose count moved. */
  const writeHeld = (): RawBuilder<unknown>[] => {
    const moved: KeyDelta[] = [];
    for (const k of keys) {
      const id = queueScoped(k.queue, k.key);
      const now = held.get(id);
      const was = written.get(id);
      if (now === undefined || was === undefined || now === was) continue;
      moved.push({ queue: k.queue, key: k.key, n: now - was });
      written.set(id, now);
    }
    return moved.length > 0 ? [addHeld(t, moved)] : [];
  };
  let readAhead = waitRows(first.slice(alongside.length + 2));
  for (const w of readAhead) lined.add(queueScoped(w.queue, w.ckey));
  for (let round = 0; round < 4; round++) {
    const wants = keys
      .map((k) => {
        const now = held.get(queueScoped(k.queue, k.key));
        const free = now === undefined ? 0 : (limits.get(limitScope(k)) ?? UNLIMITED) - now;
        return { k, take: Math.min(MAX_ADMIT, Math.max(0, free)) };
      })
      .filter((w) => w.take > 0);
    const ahead = round === 0 ? fromReadAhead(wants, guess, readAhead) : undefined;
    readAhead = [];
    const waiting = ahead ?? (wants.length === 0 ? [] : waitRows(await send(readWaiting(t, wants))));
    for (const w of waiting) lined.add(queueScoped(w.queue, w.ckey));
    if (waiting.length === 0) {
      // Nothing (more) to admit: the ended slots are given up, and in a transaction that writes nothing after,
      // committed.
      const last = writeHeld();
      if (last.length > 0 || commitWhenSure) await send(last, { commit: commitWhenSure });
      return done;
    }
    const ids = waiting.map((w) => w.id);
    // Key affinity: the completing consumers' rooms take them claimed, in turn, as a lane's successor is.
    const shares = sharesOf(claimFor, ids, claimed);
    // Counted as if all were admitted: a waiting item cancelled meanwhile is uncounted below.
    addTo(countPerKey(waiting), 1);
    // Decided on what the first round trip read: commit with the writes, refused if one read was not admitted.
    const commit = commitWhenSure && ahead !== undefined;
    const results = await send(
      [
        ...shares.flatMap((s) => [claimAdmitted(t, s.ids, s.lease, s.next), readBackClaimed(t, s.ids, s.lease.token)]),
        admitWaiting(t, ids),
        leaveLine(t, waiting),
        ...writeHeld(),
        ...(commit
          ? [refuseUnless(t, sql`(SELECT COUNT(*) FROM (${admittedOf(t, ids)}) a) = ${inline(ids.length)}`)]
          : []),
      ],
      { commit },
    );
    const taken = new Set<string>();
    shares.forEach((s, i) => {
      const items = claimedItems((results[2 * i + 1]?.rows ?? []) as unknown as ClaimedRow[], s.lease);
      for (const item of items) taken.add(item.id);
      claimed.push(...items);
    });
    const leftOf = (admitted: (id: string) => boolean): void => {
      for (const w of waiting) if (admitted(w.id) && !taken.has(w.id)) left.add(queueScoped(w.queue, w.ckey));
    };
    if (commit) {
      leftOf(() => true);
      return done;
    }
    const set =
      shares.reduce((n, _, i) => n + (results[2 * i]?.affected ?? 0), 0) + (results[2 * shares.length]?.affected ?? 0);
    if (set === ids.length) {
      leftOf(() => true);
      break;
    }
    const [heads] = await send([admittedOf(t, ids)]);
    const admitted = new Set((heads?.rows ?? []).map((x) => String(x.id)));
    leftOf((id) => admitted.has(id));
    const passedOver = countPerKey(waiting.filter((w) => !admitted.has(w.id)));
    addTo(passedOver, -1);
    const uncounted = writeHeld();
    if (uncounted.length > 0) await send(uncounted);
    // A waiting item cancelled meanwhile was passed over: its key looks again, once its slots are not all taken.
    const lines = byLine(waiting);
    const short = wants.some((w) => {
      const read = lines.get(queueScoped(w.k.queue, w.k.key)) ?? [];
      return read.length === w.take && read.some((x) => !admitted.has(x.id));
    });
    if (!short) break;
  }
  return done;
}

/**
 * What a hand-on claimed for the completing consumers, and the keys (queue-scoped) whose admitted items it left as
 * heads for any claim, and those it found items waiting for.
 */
export interface HandedOn {
  claimed: ClaimedItem[];
  left: Set<string>;
  lined: Set<string>;
}

/**
 * The waiting items the first round trip read ahead, when they are all the
 * keys want: per key, either as many as it has free, or its whole line.
 * Undefined when some key has room beyond what was read (it reads again).
 */
function fromReadAhead(
  wants: readonly { k: KeyCount; take: number }[],
  guess: readonly { k: KeyCount; take: number }[],
  rows: readonly WaitRow[],
): WaitRow[] | undefined {
  const out: WaitRow[] = [];
  const guessed = new Map(guess.map((g) => [queueScoped(g.k.queue, g.k.key), g]));
  const lines = byLine(rows);
  for (const w of wants) {
    const g = guessed.get(queueScoped(w.k.queue, w.k.key));
    const line = (lines.get(queueScoped(w.k.queue, w.k.key)) ?? []).sort(byPlace);
    if (g === undefined || (w.take > g.take && line.length === g.take)) return undefined;
    out.push(...line.slice(0, w.take));
  }
  return out;
}

interface Share {
  next: SuccessorClaim;
  lease: Lease;
  ids: string[];
}

/**
 * The admitted `ids` each completing consumer's room takes, in the rooms'
 * order, each up to what it has left after `claimed`; the rest are left as
 * heads for any claim.
 */
function sharesOf(rooms: readonly SuccessorClaim[], ids: readonly string[], claimed: readonly ClaimedItem[]): Share[] {
  const shares: Share[] = [];
  let from = 0;
  for (const next of rooms) {
    if (from >= ids.length) break;
    const room = roomLeft(next, claimed);
    if (room <= 0) continue;
    shares.push({ next, lease: grantLease(next), ids: ids.slice(from, from + room) });
    from += room;
  }
  return shares;
}
