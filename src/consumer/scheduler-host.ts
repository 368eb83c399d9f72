import type { WakeEntry } from '../wake/messages.js';
import type { CoalesceClaim } from './coalescing.js';
import type { ConsumerEvents } from './counters.js';
import type { JobRunDeps } from './job-run.js';

/** What the scheduler asks of the consumer around it. */
export interface SchedulerHost<DB> {
  /** Everything a job's run needs but the slot bookkeeping (the scheduler adds that). */
  runDeps: Omit<JobRunDeps<DB>, 'onSettled'>;
  /** What claim rounds coalesce (docs/design/batches-and-steps.md, Coalescing). */
  readonly coalesce: CoalesceClaim | undefined;
  emit<K extends keyof ConsumerEvents>(event: K, ...args: ConsumerEvents[K]): void;
  /** Wake entries a claim round has acted on. */
  ack(entries: readonly WakeEntry[]): void;
  /** Saturated with work left over: pass a wake-up on so an idle replica joins in. */
  followUp(): Promise<void>;
  /** Slots freed: the wake reader may read again. */
  roomChanged(): void;
  /** Whether the next claim round takes only rescued work (stale-gate.ts). */
  staleOnly(): boolean;
  /** How long a claim statement took (ms): the stale-only gate's measure of the ledger. */
  claimTimed(ms: number): void;
}
