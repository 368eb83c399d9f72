import type { FinalizeResult, LeaseHandle } from '../ledger/types.js';
import { groupBy } from '../group-by.js';
import type { Reservation } from './reservations.js';
import type { CompletionLedger } from './ledger-port.js';

/**
 * Room for what a completion batch's ends hand on (Reservations.forSuccessors): lane successors, or
 * items keys admit (`keyed`); undefined when the consumer has none.
 */
export type SuccessorRoom = (wanted: number, keyed: boolean) => Reservation | undefined;

interface Waiting {
  /** The completing consumer's room for what its end claims (a lane's next head, the items a key admits). */
  successors: SuccessorRoom | undefined;
  handle: LeaseHandle;
  result: unknown;
  resolve: (r: FinalizeResult) => void;
  reject: (e: unknown) => void;
}

/** Laneless completions per statement, one statement in flight (measured: docs/BENCHMARKS.md, session 6). */
const LANELESS_BATCH = 500;
/** Laned completions per transaction, two in flight. */
const LANED_BATCH = 128;
/** Keyed laneless completions per transaction, two in flight on keys of their own. */
const KEYED_BATCH = 500;

/**
 * Collects completions that arrive close together and writes them in
 * batches (a fixed number of statements per batch, each item still a CAS
 * on its own token), on lines of three kinds:
 *
 * - laneless items: one UPDATE per batch of up to 500, one batch at a
 *   time. While it is written, the next batch gathers; fewer, larger
 *   statements cost the ledger less per item than two smaller ones in
 *   flight together.
 * - laned items: a transaction per batch of up to 128 (the completion, the
 *   lane advance, and a claim of the lanes' next heads for this consumer,
 *   lane affinity), two at a time: a transaction of several round trips
 *   that holds lane locks is better overlapped than made larger.
 * - keyed laneless items: a line shared by every consumer of the queue in
 *   the process (keyedLines), since their ends hand their keys' slots on
 *   under the keys' locks.
 */
export class BatchCompleter {
  private readonly laneless: CompletionLine;
  private readonly laned: CompletionLine;

  constructor(
    private readonly ledger: CompletionLedger,
    private readonly successors?: SuccessorRoom,
  ) {
    this.laneless = new CompletionLine(ledger, LANELESS_BATCH, 1, false);
    this.laned = new CompletionLine(ledger, LANED_BATCH, 2, false);
  }

  complete(handle: LeaseHandle, result: unknown): Promise<FinalizeResult> {
    if (handle.lane === null && handle.concurrencyKey !== null)
      return keyedLine(this.ledger, handle.queue).complete(handle, result, this.successors);
    return (handle.lane === null ? this.laneless : this.laned).complete(handle, result, this.successors);
  }
}

/**
 * The keyed completion lines of one process, per ledger and queue, shared
 * by its consumers. A keyed end hands its key's slot on with the key's row
 * locked, in a transaction of two round trips, and a batch of a few hundred
 * ends shares keys with nearly every other batch in flight. Batches of
 * separate consumers waited for each other's keys in the database, each
 * holding the keys it had locked already. Here one line per queue gathers
 * the ends of all the consumers, and writes a second batch alongside only
 * when more wait than one takes, on keys the first does not hold (take):
 * no two keyed transactions of the process share a key, and a light load
 * makes fewer, larger batches (measured: docs/BENCHMARKS.md, "Capacity").
 */
const keyedLines = new WeakMap<CompletionLedger, Map<string, CompletionLine>>();

function keyedLine(ledger: CompletionLedger, queue: string): CompletionLine {
  let queues = keyedLines.get(ledger);
  if (queues === undefined) keyedLines.set(ledger, (queues = new Map()));
  let line = queues.get(queue);
  if (line === undefined) queues.set(queue, (line = new CompletionLine(ledger, KEYED_BATCH, 2, true)));
  return line;
}

/**
 * One line of batches: completions that arrive in the same turn of the
 * event loop go together; while `maxFlushes` batches are being written, the
 * next one gathers; when more wait than one batch takes, another batch is
 * written alongside, up to `maxFlushes`. A batch with laned or keyed items
 * asks each completing consumer for room for as many as it ended (roomsOf),
 * and claims for them what their ends hand on.
 */
class CompletionLine {
  private queue: Waiting[] = [];
  private flushes = 0;
  /** A keyed line's keys in the batches being written: a batch takes none of them. */
  private readonly keysInFlight = new Set<string>();
  /**
   * A keyed line's last batch handed something on (claimed it for a room,
   * or left it as a head). Room asked of a consumer is room its claim
   * rounds cannot take while the batch is written, and keys under their
   * limits hand nothing on: until a batch does again, none is asked.
   */
  private handsOn = true;

  constructor(
    private readonly ledger: CompletionLedger,
    private readonly maxBatch: number,
    private readonly maxFlushes: number,
    /** Its ends are keyed: what they hand on is what their keys admit. */
    private readonly keyed: boolean,
  ) {}

  complete(handle: LeaseHandle, result: unknown, successors: SuccessorRoom | undefined): Promise<FinalizeResult> {
    return new Promise((resolve, reject) => {
      this.queue.push({ successors, handle, result, resolve, reject });
      if (this.flushes === 0) {
        this.flushes++;
        setImmediate(() => void this.flush());
      }
    });
  }

  /**
   * The next batch, oldest first. On a keyed line it leaves waiting the
   * ends whose keys a batch being written holds, so no two batches in
   * flight share a key; the last flush to end takes them.
   */
  private take(): Waiting[] {
    if (!this.keyed) return this.queue.splice(0, this.maxBatch);
    const batch: Waiting[] = [];
    const left: Waiting[] = [];
    const keys = new Set<string>();
    for (const w of this.queue) {
      const key = w.handle.concurrencyKey ?? '';
      if (batch.length < this.maxBatch && !this.keysInFlight.has(key)) {
        batch.push(w);
        keys.add(key);
      } else left.push(w);
    }
    this.queue = left;
    for (const key of keys) this.keysInFlight.add(key);
    return batch;
  }

  private async flush(): Promise<void> {
    for (let batch = this.take(); batch.length > 0; batch = this.take()) {
      // More waiting than this batch takes: let another flush write it meanwhile.
      if (this.queue.length > 0 && this.flushes < this.maxFlushes) {
        this.flushes++;
        void this.flush();
      }
      const rooms =
        this.keyed && !this.handsOn
          ? []
          : roomsOf(
              batch.filter((w) => w.handle.lane !== null || w.handle.concurrencyKey !== null),
              this.keyed,
            );
      try {
        const { results, claimed } = await this.ledger.completeManyClaimingNext(
          batch.map((w) => ({ handle: w.handle, result: w.result })),
          rooms.map((r) => r.lease),
        );
        if (this.keyed) this.handsOn = claimed.length > 0 || results.some((r) => r.keyAdmitted === true);
        const byToken = groupBy(claimed, (c) => c.leaseToken);
        for (const r of rooms) r.accept(byToken.get(r.lease.token) ?? []);
        batch.forEach((w, i) => w.resolve(results[i] ?? { won: false, state: 'completed' }));
      } catch (error) {
        for (const r of rooms) r.cancel();
        for (const w of batch) w.reject(error);
      } finally {
        if (this.keyed) for (const w of batch) this.keysInFlight.delete(w.handle.concurrencyKey ?? '');
      }
    }
    this.flushes--;
  }
}

/**
 * The room of each consumer with ends among these, for as many as it has,
 * the one with most first (every one of a consumer's own line is its own):
 * what their ends hand on is claimed for them, in that order.
 */
function roomsOf(ends: readonly Waiting[], keyed: boolean): Reservation[] {
  const counts = new Map<SuccessorRoom, number>();
  for (const w of ends) if (w.successors !== undefined) counts.set(w.successors, (counts.get(w.successors) ?? 0) + 1);
  return [...counts]
    .sort((a, b) => b[1] - a[1])
    .map(([room, n]) => room(n, keyed))
    .filter((r): r is Reservation => r !== undefined);
}
