import type { Transaction } from 'kysely';
import type { LedgerCore } from './core.js';
import { encodeCapped, encodeProgress } from './outcomes.js';
import { renewLeases, saveCheckpoint, saveProgress } from './sql/run/lease.js';
import { recordStep, type StepHolder } from './sql/run/steps.js';
import type { HeldItem, LeaseHandle, RenewOutcome } from './types.js';
import { positiveDurationMs, stepName, validate } from './validation.js';

/** What the holder of a lease writes while its item runs: renewals, checkpoints, progress, durable steps. */
export class LedgerLeases {
  constructor(private readonly core: LedgerCore) {}

  /**
   * Renews many leases in one statement: per handle, in order, whether it is still held and whether its
   * cancel was requested.
   */
  renewMany(
    handles: readonly Pick<LeaseHandle, 'id' | 'leaseToken' | 'group'>[],
    leaseMs: number,
  ): Promise<RenewOutcome[]> {
    validate(positiveDurationMs, leaseMs, 'renew', 'leaseMs');
    const { db, tables } = this.core;
    return this.core.capabilities().then((caps) => renewLeases(db, caps, tables, handles, leaseMs));
  }

  /**
   * Stores the item's checkpoint; false when the lease is no longer held, OwnershipLostError when its
   * ownership epoch moved on.
   */
  checkpoint(handle: HeldItem, value: unknown): Promise<boolean> {
    const json = encodeCapped(value, this.core.config.payloadMaxBytes, 'checkpoint');
    return saveCheckpoint(this.core.db, this.core.tables, handle, json);
  }

  /**
   * Stores the latest progress report of each held item (ctx.progress), in one statement; a report of a
   * lease no longer held, or claimed under an ownership epoch that moved on, is dropped. Each value is a
   * number from 0 to 100 or a small JSON object (ValidationError otherwise).
   */
  async saveProgress(reports: readonly { handle: HeldItem; progress: unknown }[]): Promise<void> {
    const rows = reports.map((r) => ({
      id: r.handle.id,
      leaseToken: r.handle.leaseToken,
      queue: r.handle.queue,
      epoch: r.handle.epoch,
      json: encodeProgress(r.progress),
    }));
    return saveProgress(this.core.db, this.core.tables, rows);
  }

  /**
   * Records a durable step with `value` as its result (ctx.step), fenced by
   * the holder's token: LeaseLostError when it no longer holds the item.
   */
  async recordStep(handle: StepHolder, name: string, value: unknown): Promise<void> {
    validate(stepName, name, 'ctx.step', 'name');
    const { resultMaxBytes } = this.core.config;
    const resultJson = value === undefined ? null : encodeCapped(value, resultMaxBytes, 'step result');
    return recordStep(this.core.db, this.core.tables, handle, name, () =>
      Promise.resolve({ value: undefined, resultJson }),
    );
  }

  /**
   * ctx.step with `transaction: true`: `fn`'s writes and the step's record
   * commit together, or neither does (fn runs again after a lost connection
   * or a conflict, as in completeWithin). LeaseLostError when the holder lost the item.
   */
  async recordStepWithin<T>(
    handle: StepHolder,
    name: string,
    fn: (trx: Transaction<Record<string, never>>) => Promise<T>,
  ): Promise<T> {
    validate(stepName, name, 'ctx.step', 'name');
    const { resultMaxBytes } = this.core.config;
    return recordStep(this.core.db, this.core.tables, handle, name, async (trx) => {
      const value = await fn(trx);
      return { value, resultJson: value === undefined ? null : encodeCapped(value, resultMaxBytes, 'step result') };
    });
  }
}
