import { completionNeedsHistory } from './stage-history.js';
import { sql } from 'kysely';
import type { LedgerCapabilities } from '../../capabilities.js';
import type { Executor, LedgerDb } from '../../connection.js';
import { OwnershipLostError, PartialBatch } from '../../../errors.js';
import {
  CONNECTION_RETRY,
  isConnectionError,
  readAfterLostConnection,
  retryDelay,
  retryOnConflict,
} from '../../retry.js';
import type { LedgerTables } from '../../tables.js';
import type { ClaimedRow } from '../../rows.js';
import type { ClaimedItem, LeaseHandle, SuccessorClaim } from '../../types.js';
import { QUEUE_CLASSES } from '../../types.js';
import { claimedItems, grantLease, readBackClaimed, roomLeft } from '../claim/claimed.js';
import { affected, inline, list, queueScoped } from '../common/fragments.js';
import { completeInOneTrip, completeInTwoTrips, type BatchDone } from './laned.js';
import { isGuardRefusal, refuseUnlessChanged } from '../common/guard.js';
import { bindable } from '../common/bound.js';
import { completionStatement, type CompletionEntry } from './cas.js';
import { finishItem } from './finish.js';
import { keyCounts, type KeyCount } from '../keys/key-counts.js';
import type { KeyLines } from '../../key-lines.js';
import { handOnKeys } from '../keys/hand-on.js';
import { releaseUnwaited } from '../keys/held-counts.js';
import { storedKey } from '../keys/scope.js';
import { retryPipelined, type Send, type StatementResult } from '../common/pipeline.js';
import { completionRows, completionsSettled } from './settled.js';

export type { CompletionEntry } from './cas.js';

/**
 * Per entry: whether it won, and for a laned winner whether its lane got a
 * new head that is left pending for a claim (false when the lane had nothing
 * waiting, or when its successor was claimed in the same transaction); for
 * a keyed laneless winner, the same of the items its key admitted.
 */
export interface CompletionOutcome {
  won: boolean;
  laneAdvanced: boolean;
  keyAdmitted: boolean;
}

export interface BatchCompletion {
  outcomes: CompletionOutcome[];
  /** Successors claimed under the SuccessorClaim's lease. */
  claimed: ClaimedItem[];
}

/**
 * Completes many claimed items in one transaction with a fixed number of
 * round trips, whatever the batch size: each item is still a CAS on its own
 * (id, lease token, processing), and each laned winner still hands its lane
 * to the next item in the same transaction. Returns, per entry, whether it
 * won and whether its lane advanced.
 *
 * Items that need an attempt-history row (not a first-try success, or one
 * that timed stages), or whose lane appears twice in the batch, go through
 * the single-item path.
 */
export async function completeMany(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  entries: readonly CompletionEntry[],
  rooms: readonly SuccessorClaim[],
  lines: KeyLines,
): Promise<BatchCompletion> {
  const out: CompletionOutcome[] = entries.map(() => ({ won: false, laneAdvanced: false, keyAdmitted: false }));
  const claimed: ClaimedItem[] = [];
  let todo = entries.map((_, i) => i);
  for (let attempt = 1; todo.length > 0; attempt++) {
    const batch = todo.map((i) => entries[i]!);
    try {
      const done = await completeOnce(db, caps, t, batch, rooms, lines);
      done.outcomes.forEach((o, k) => (out[todo[k]!] = o));
      claimed.push(...done.claimed);
      return { outcomes: out, claimed };
    } catch (error) {
      if (!isConnectionError(error) || attempt >= CONNECTION_RETRY.maxAttempts) throw error;
      // Some of it may have committed: the ledger says which items this holder completed.
      const settled = await readAfterLostConnection(
        () =>
          completionsSettled(
            db,
            t,
            batch.map((e) => e.handle),
          ),
        error,
      );
      const mine = batch.filter((_, k) => settled[k] === 'completed').map((e) => e.handle);
      batch.forEach((e, k) => {
        // Whether a completed item's lane or key got a pending head is not known here: assume one, as the single path
        // does.
        const won = settled[k] === 'completed';
        if (settled[k] !== 'open')
          out[todo[k]!] = {
            won,
            laneAdvanced: won && e.handle.lane !== null,
            keyAdmitted: won && e.handle.concurrencyKey !== null,
          };
      });
      if (mine.some((h) => h.lane !== null || h.concurrencyKey !== null)) {
        for (const next of rooms)
          claimed.push(...(await readAfterLostConnection(() => successorsClaimed(db, t, mine, next), error)));
      }
      todo = todo.filter((_, k) => settled[k] === 'open');
      if (todo.length > 0) await retryDelay(CONNECTION_RETRY, attempt);
    }
  }
  return { outcomes: out, claimed };
}

/**
 * The successors a batch whose answer was lost claimed with its completions
 * under `next`'s token: a lane's at the next lane position of each completed
 * laned item; a key's among its queue's processing items (what a keyed end
 * admitted and claimed: key affinity); each fenced by the token.
 */
async function successorsClaimed(
  db: LedgerDb,
  t: LedgerTables,
  completed: readonly LeaseHandle[],
  next: SuccessorClaim,
): Promise<ClaimedItem[]> {
  const laned = completed.filter((h) => h.lane !== null);
  const keyedQueues = [
    ...new Set(completed.filter((h) => h.lane === null && h.concurrencyKey !== null).map((h) => h.queue)),
  ];
  const ids: string[] = [];
  if (laned.length > 0) {
    const found = await sql<{ id: string }>`SELECT id FROM ${t.items} FORCE INDEX (ix_lane)
      WHERE (queue, lane, lane_seq) IN (${sql.join(
        laned.map((h) => sql`(${inline(h.queue)}, ${inline(h.lane)}, ${inline((h.laneSeq ?? 0) + 1)})`),
      )})
        AND lease_token = ${inline(next.token)} AND state = 'processing'`.execute(db);
    ids.push(...found.rows.map((r) => r.id));
  }
  for (const queue of keyedQueues) {
    const found = await sql<{ id: string }>`SELECT id FROM ${t.items}
      WHERE queue = ${queue} AND queue_class IN (${list(
        next.classes && next.classes.length > 0 ? next.classes : QUEUE_CLASSES,
      )})
        AND state = 'processing' AND lease_token = ${inline(next.token)}`.execute(db);
    ids.push(...found.rows.map((r) => r.id));
  }
  if (ids.length === 0) return [];
  const rows = await readBackClaimed(t, [...new Set(ids)], next.token)
    .$castTo<ClaimedRow>()
    .execute(db);
  return claimedItems(rows.rows, grantLease(next));
}

async function completeOnce(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  entries: readonly CompletionEntry[],
  rooms: readonly SuccessorClaim[],
  lines: KeyLines,
): Promise<BatchCompletion> {
  const out: CompletionOutcome[] = entries.map(() => ({ won: false, laneAdvanced: false, keyAdmitted: false }));
  const claimed: ClaimedItem[] = [];
  const batch: number[] = [];
  const single: number[] = [];
  const laneSeen = new Set<string>();
  entries.forEach((e, i) => {
    const lk = e.handle.lane === null ? null : queueScoped(e.handle.queue, e.handle.lane);
    // A workflow's job settles its dependents in its own transaction (finish.ts).
    const own = completionNeedsHistory(e.handle) || e.handle.workflowId !== undefined;
    if (own || (lk !== null && laneSeen.has(lk))) single.push(i);
    else {
      if (lk !== null) laneSeen.add(lk);
      batch.push(i);
    }
  });

  // Keyed laneless items hand their keys' slots on in their own transaction; the rest as before.
  const admitted = (i: number): boolean =>
    entries[i]!.handle.concurrencyKey !== null && entries[i]!.handle.lane === null;
  const keyed = batch.filter(admitted);
  const rest = keyed.length === 0 ? batch : batch.filter((i) => !admitted(i));
  for (const part of [rest, keyed]) {
    if (part.length === 0) continue;
    const items = part.map((i) => entries[i]!);
    try {
      const done =
        part === keyed
          ? await completeKeyedBatch(db, caps, t, items, roomsLeft(rooms, claimed), lines)
          : items.some((e) => e.handle.lane !== null)
            ? await completeLaned(db, caps, t, items, rooms[0])
            : // Without lanes or keys the batch is one UPDATE: atomic on its own, no transaction.
              await retryOnConflict(() => completeLanelessBatch(db, caps, t, items));
      claimed.push(...done.claimed);
      part.forEach((i, k) => {
        const h = entries[i]!.handle;
        const won = done.won[k] === true;
        const key = storedKey(h);
        out[i] = {
          won,
          laneAdvanced: h.lane !== null && done.advanced.has(queueScoped(h.queue, h.lane)),
          keyAdmitted: part === keyed && key !== null && done.advanced.has(queueScoped(h.queue, key)),
        };
      });
    } catch (error) {
      if (!(error instanceof PartialBatch)) throw error;
      single.push(...part);
    }
  }
  for (const i of single) {
    const e = entries[i]!;
    // An epoch that moved on loses like any CAS here; completeEntries says which lost to it.
    const won = await finishItem(db, t, e.handle, { kind: 'complete', resultJson: e.resultJson }, caps.prepared).catch(
      (error: unknown) => {
        if (error instanceof OwnershipLostError) return false;
        throw error;
      },
    );
    // The single path does not say whether a successor was there: assume one.
    out[i] = { won, laneAdvanced: won && e.handle.lane !== null, keyAdmitted: won && e.handle.concurrencyKey !== null };
  }
  return { outcomes: out, claimed };
}

/** One round trip when the batch is the common case; two, or the single path, when it is not (laned.ts). */
async function completeLaned(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  items: readonly CompletionEntry[],
  next: SuccessorClaim | undefined,
): Promise<BatchDone> {
  try {
    return await retryPipelined(db, caps, (send) => completeInOneTrip(send, t, items, next));
  } catch (error) {
    if (!isGuardRefusal(error)) throw error;
  }
  return retryPipelined(db, caps, (send, exec) => completeInTwoTrips(send, exec, t, items, next));
}

/**
 * What is left of the consumers' rooms for successors once the laned part of the batch took its lanes' next heads (for
 * the first room).
 */
function roomsLeft(rooms: readonly SuccessorClaim[], claimed: readonly ClaimedItem[]): SuccessorClaim[] {
  return rooms.map((r) => ({ ...r, max: roomLeft(r, claimed) })).filter((r) => r.max > 0);
}

/**
 * Keyed items completed together, and their keys' slots handed on, in one
 * transaction. When none of their keys was last seen with items waiting
 * (`lines`), the slots are given up with the completion and the COMMIT, one
 * round trip (releaseUnwaited); a guard refuses it if a line was there after
 * all, or if a CAS lost. Otherwise, or then, the completion rides with the
 * keys' locks and the hand-on's writes with the COMMIT, two round trips.
 * When a waiting item read was cancelled meanwhile, a guard refuses that and
 * the batch runs again with a hand-on that decides step by step and commits
 * on its own. Any lost CAS sends them all to the single path. Items their
 * ends admit are claimed for the completing consumers' rooms, in turn (key
 * affinity, as lane affinity does for a lane's next head).
 */
async function completeKeyedBatch(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  items: readonly CompletionEntry[],
  rooms: readonly SuccessorClaim[],
  lines: KeyLines,
): Promise<BatchDone> {
  const ended = keyCounts(items.map((e) => e.handle));
  const keys = ended.map((k) => queueScoped(k.queue, k.key));
  if (!lines.anyLined(keys)) {
    try {
      await retryPipelined(db, caps, (send, exec) => releaseWithCompletion(send, exec, caps, t, items, ended));
      return { won: items.map(() => true), advanced: new Set(), claimed: [] };
    } catch (error) {
      if (!isGuardRefusal(error)) throw error;
    }
  }
  const handOn = async (commitWhenSure: boolean): Promise<BatchDone> => {
    const done = await retryPipelined(db, caps, (send) => completeKeyed(send, t, items, ended, rooms, commitWhenSure));
    lines.saw(keys, done.lined);
    return done;
  };
  try {
    return await handOn(true);
  } catch (error) {
    if (!isGuardRefusal(error)) throw error;
  }
  return handOn(false);
}

/**
 * The completion and its keys' slots given up, with the COMMIT: one round
 * trip of text statements, its CAS checked by a `ROW_COUNT()` guard. On a
 * server whose plan cache serves prepared statements (TiDB), the CAS goes
 * prepared in a round trip of its own after the BEGIN, and the client
 * checks its count: planning the CAS and the guard as text cost TiDB more
 * than the two round trips.
 */
async function releaseWithCompletion(
  send: Send,
  exec: Executor,
  caps: LedgerCapabilities,
  t: LedgerTables,
  items: readonly CompletionEntry[],
  ended: readonly KeyCount[],
): Promise<void> {
  if (!bindable(caps, items.length)) {
    await send([completionStatement(t, items), refuseUnlessChanged(t, items.length), ...releaseUnwaited(t, ended)], {
      commit: true,
    });
    return;
  }
  await send([]);
  if (affected(await completionStatement(t, items, true).execute(exec)) !== items.length) throw new PartialBatch();
  await send(releaseUnwaited(t, ended), { commit: true });
}

async function completeKeyed(
  send: Send,
  t: LedgerTables,
  entries: readonly CompletionEntry[],
  ended: readonly KeyCount[],
  rooms: readonly SuccessorClaim[],
  commitWhenSure: boolean,
): Promise<BatchDone & { lined: Set<string> }> {
  const check = ([done]: readonly StatementResult[]): void => {
    if (done?.affected !== entries.length) throw new PartialBatch();
  };
  const handedOn = await handOnKeys(send, t, ended, [completionStatement(t, entries)], check, rooms, commitWhenSure);
  return { won: entries.map(() => true), advanced: handedOn.left, claimed: handedOn.claimed, lined: handedOn.lined };
}

async function completeLanelessBatch(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  entries: readonly CompletionEntry[],
): Promise<BatchDone> {
  const changed = affected(await completionStatement(t, entries, bindable(caps, entries.length)).execute(db));
  if (changed === entries.length) return { won: entries.map(() => true), advanced: new Set(), claimed: [] };
  // Someone lost their lease. The statement stands (no transaction), so a second CAS of each entry
  // would lose to it: read which entries it completed instead.
  return { won: await completedByStatement(db, t, entries, changed), advanced: new Set(), claimed: [] };
}

/**
 * Which entries a laneless completion statement that changed `changed` rows
 * completed. The rows completed under an entry's token are this holder's; if
 * there are more of them than the statement changed, the holder had completed
 * some before (a second completion of one claim), and those ended earlier:
 * the statement's rows are the `changed` latest by `terminal_at`.
 */
async function completedByStatement(
  db: LedgerDb,
  t: LedgerTables,
  entries: readonly CompletionEntry[],
  changed: number,
): Promise<boolean[]> {
  const rows = await completionRows(
    db,
    t,
    entries.map((e) => e.handle),
  );
  const latestFirst = rows
    .map((row, k) => ({ k, ended: row.ended ?? '' }))
    .filter((_, k) => rows[k]!.settled === 'completed')
    .sort((a, b) => (a.ended < b.ended ? 1 : a.ended > b.ended ? -1 : 0));
  const won = entries.map(() => false);
  for (const { k } of latestFirst.slice(0, changed)) won[k] = true;
  return won;
}
