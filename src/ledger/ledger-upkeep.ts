import { sql } from 'kysely';
import { capabilitiesOnce, type LedgerCapabilities } from './capabilities.js';
import { parseLedgerConfig, type LedgerConfig, type LedgerConfigInput } from './config.js';
import {
  createLedgerPool,
  ensureDatabase,
  ledgerDbOnPool,
  trackPool,
  type LedgerDb,
  type PoolStats,
} from './connection.js';
import {
  activateSchema,
  limitSchema,
  maintenanceSchema,
  queueListSchema,
  purgeSchema,
  rateTakeSchema,
  rateWindowSchema,
} from './inputs.js';
import { fleetGauges, fleetStats, releaseFleetGauges, type FleetGaugeReading, type FleetStats } from './fleet-stats.js';
import { assertSchemaCurrent, migrate, schemaStatus, type MigrateResult, type SchemaStatus } from './migrations.js';
import { probeDependencyWaits } from './sql/waits/dependency.js';
import { activateOwnership, getOwnership } from './sql/fleet/ownership.js';
import { beat, forget, liveConsumers, type ConsumerRow } from './sql/fleet/consumers.js';
import { pushRateWindow, reserveRateTurn, takeRate } from './sql/rates/rate-limits.js';
import { purgeTerminal } from './sql/upkeep/purge.js';
import { reclaimExpired } from './sql/upkeep/reclaim.js';
import { countProcessing } from './sql/operator/stats.js';
import { repairWaits } from './sql/waits/waits.js';
import { sweepSignals } from './sql/upkeep/sweep-signals.js';
import { purgeWakeMarks } from './sql/waits/wake-marks.js';
import { ledgerTables, type LedgerTables } from './tables.js';
import { MODE_PROOF_VALUES } from './mode-proof.js';
import type {
  LeaseHandle,
  Ownership,
  LiveConsumer,
  ProbeOutcome,
  RateAnswer,
  ReclaimOutcome,
  SweepSignal,
} from './types.js';
import { queueName, validate } from './validation.js';

/** Dependency wake marks are kept at least this long (see sql/waits/wake-marks.ts). */
const WAKE_MARK_KEEP_MS = 86_400_000;

/**
 * The ledger's connection, schema and clock, and its upkeep: the
 * maintenance a sweep or the reconciler runs (expired leases, dependency
 * probes, retention, wake marks) and the fleet's bookkeeping about itself
 * (consumer heartbeats, rate windows, fleet stats and gauges, ownership).
 * None of it is one work item's life, which `Ledger` (ledger.ts) adds.
 */
export class LedgerUpkeep {
  readonly config: LedgerConfig;
  readonly db: LedgerDb;
  readonly tables: LedgerTables;
  /** Connection counts of the ledger's own pool (undefined when given a Kysely instance). */
  readonly pool: Readonly<PoolStats> | undefined;
  protected readonly knownCapabilities: () => Promise<LedgerCapabilities>;

  constructor(config: LedgerConfigInput, db?: LedgerDb) {
    this.config = parseLedgerConfig(config);
    if (db) {
      // Its sessions may read backslashes as text (NO_BACKSLASH_ESCAPES): see mode-proof.ts.
      this.db = db.withPlugin(MODE_PROOF_VALUES);
    } else {
      const pool = createLedgerPool(this.config);
      this.pool = trackPool(pool);
      this.db = ledgerDbOnPool(pool);
    }
    this.tables = ledgerTables(this.config.tablePrefix);
    // Our own pool runs with multipleStatements; a Kysely instance handed in may not.
    this.knownCapabilities = capabilitiesOnce(
      this.db,
      db === undefined ? { conflictsReturned: () => this.conflictsReturnedDb() } : undefined,
    );
  }

  /**
   * What the server and this ledger's connections can do (docs/design.md §8):
   * the server's family is asked once, on first need (`SELECT VERSION()`).
   */
  capabilities(): Promise<LedgerCapabilities> {
    return this.knownCapabilities();
  }

  private conflictsReturned: LedgerDb | undefined;

  /** The few connections of LedgerCapabilities.conflictsReturned, opened on first need: half the pool's size (a claim holds one for two statements), at least two. */
  private conflictsReturnedDb(): LedgerDb {
    this.conflictsReturned ??= ledgerDbOnPool(
      createLedgerPool(
        { ...this.config, poolSize: Math.max(2, Math.ceil(this.config.poolSize / 2)) },
        { conflictsReturned: true },
      ),
    );
    return this.conflictsReturned;
  }

  /**
   * Creates the ledger's tables, or upgrades them (idempotent). `createDatabase`: first create the
   * URL's database if it does not exist, as `lanewake migrate` does (the user needs CREATE on it).
   */
  async migrate(opts: { createDatabase?: boolean } = {}): Promise<MigrateResult> {
    if (opts.createDatabase === true) await ensureDatabase(this.config.url);
    return migrate(this.db, this.config.tablePrefix);
  }

  schemaStatus(): Promise<SchemaStatus> {
    return schemaStatus(this.db, this.config.tablePrefix);
  }

  assertSchemaCurrent(): Promise<void> {
    return assertSchemaCurrent(this.db, this.config.tablePrefix);
  }

  /** The ledger's clock. */
  async now(): Promise<Date> {
    const r = await sql<{ now: Date }>`SELECT NOW(6) AS now`.execute(this.db);
    const now = r.rows[0]?.now;
    if (!now) throw new Error('ledger clock: no answer');
    return now;
  }

  reclaimExpired(opts: { queue?: string; limit?: number } = {}): Promise<ReclaimOutcome> {
    const v = validate(maintenanceSchema, opts, 'reclaimExpired');
    return this.knownCapabilities().then((caps) => reclaimExpired(this.db, caps, this.tables, v));
  }

  /**
   * For each queue, whether a claim, reclaimExpired or probeDependencyWaits
   * would find work now: one statement however many queues, so idle queues
   * cost a sweep nothing more.
   */
  async sweepSignals(queues: readonly string[]): Promise<SweepSignal[]> {
    validate(queueListSchema, queues, 'sweepSignals', 'queues');
    return sweepSignals(this.db, this.tables, queues);
  }

  probeDependencyWaits(opts: { queue?: string; limit?: number } = {}): Promise<ProbeOutcome> {
    const v = validate(maintenanceSchema, opts, 'probeDependencyWaits');
    return probeDependencyWaits(this.db, this.tables, v);
  }

  /** Records the missing waits rows of a queue's blocked items (blocked before schema 3); returns how many. */
  repairWaits(queue: string): Promise<number> {
    validate(queueName, queue, 'repairWaits', 'queue');
    return repairWaits(this.db, this.tables, queue);
  }

  /** Deletes terminal items older than `olderThanMs` (and their history); returns how many. */
  purge(opts: { olderThanMs: number; limit?: number; queue?: string }): Promise<number> {
    const v = validate(purgeSchema, opts, 'purge');
    return purgeTerminal(this.db, this.tables, v);
  }

  /**
   * Forgets dependency wake marks untouched for a day (at most `limit`; see
   * sql/waits/wake-marks.ts). They belong to no queue: one call per maintenance
   * pass, whatever the item retention.
   * @internal
   */
  forgetWakeMarks(limit = 1000): Promise<number> {
    validate(limitSchema, limit, 'forgetWakeMarks', 'limit');
    return purgeWakeMarks(this.db, this.tables, WAKE_MARK_KEEP_MS, limit);
  }

  /** The stats as the fleet last counted them, counted here if older than `everyMs` and this replica takes the task. @internal */
  fleetStats(opts: { everyMs: number; leaseMs?: number }): Promise<FleetStats> {
    return fleetStats(this.db, this.tables, { everyMs: opts.everyMs, leaseMs: opts.leaseMs ?? 60_000 });
  }

  /**
   * The fleet-wide gauges if `holder` holds (takes or keeps) their lease for
   * `leaseMs`; undefined when another replica holds it (src/ledger/fleet-stats.ts).
   * @internal
   */
  fleetGauges(opts: { holder: string; everyMs: number; leaseMs: number }): Promise<FleetGaugeReading | undefined> {
    return fleetGauges(this.db, this.tables, { ...opts, countLeaseMs: 60_000 });
  }

  /** Gives up `holder`'s lease on the fleet-wide gauges. @internal */
  releaseFleetGauges(holder: string): Promise<void> {
    return releaseFleetGauges(this.db, this.tables, holder);
  }

  /**
   * How many items of `queue` are `processing` across the fleet (the claim limiter reads it).
   * @internal
   */
  countProcessing(queue: string): Promise<number> {
    validate(queueName, queue, 'countProcessing', 'queue');
    return countProcessing(this.db, this.tables, queue);
  }

  /** The consumers whose heartbeat is recent, of one queue or all. */
  liveConsumers(queue?: string): Promise<LiveConsumer[]> {
    if (queue !== undefined) validate(queueName, queue, 'liveConsumers', 'queue');
    return liveConsumers(this.db, this.tables, queue);
  }

  /** The heartbeat of a process's running consumers, one statement for all (src/consumer/registration.ts). @internal */
  consumerBeat(rows: readonly ConsumerRow[], first: boolean): Promise<void> {
    return beat(this.db, this.tables, rows, first);
  }

  /**
   * A rate-limited item's start (docs/design.md §6, "Rate limits"): granted
   * when its key's next start has come (the item's started_at is then now),
   * else how long until it may. @internal
   */
  takeRate(
    handle: Pick<LeaseHandle, 'id' | 'queue' | 'leaseToken'>,
    input: { key: string; intervalMs: number },
  ): Promise<RateAnswer> {
    const v = validate(rateTakeSchema, input, 'takeRate');
    const take = {
      queue: handle.queue,
      key: v.key,
      id: handle.id,
      token: handle.leaseToken,
      intervalUs: Math.round(v.intervalMs * 1000),
    };
    return this.knownCapabilities().then((caps) => takeRate(this.db, caps, this.tables, take));
  }

  /** A turn for an item refused a rate-limited start: how long from now (ms). @internal */
  reserveRateTurn(input: { queue: string; key: string; intervalMs: number }): Promise<number> {
    const v = validate(rateTakeSchema, { key: input.key, intervalMs: input.intervalMs }, 'reserveRateTurn');
    validate(queueName, input.queue, 'reserveRateTurn', 'queue');
    const spec = { queue: input.queue, key: v.key, intervalUs: Math.round(v.intervalMs * 1000) };
    return this.knownCapabilities().then((caps) => reserveRateTurn(this.db, caps, this.tables, spec));
  }

  /** A key's next start pushed to `afterMs` from now at the soonest (a handler's RateLimitedError). */
  pushRateWindow(input: { queue: string; key: string; afterMs: number }): Promise<void> {
    const v = validate(rateWindowSchema, input, 'pushRateWindow');
    return pushRateWindow(this.db, this.tables, v);
  }

  /** A stopped consumer's row removed. @internal */
  consumerGone(name: string): Promise<void> {
    return forget(this.db, this.tables, name);
  }

  activate(opts: { queue: string; deployment: string; expectEpoch?: number }): Promise<Ownership> {
    const v = validate(activateSchema, opts, 'activate');
    return activateOwnership(this.db, this.tables, v);
  }

  ownership(queue: string): Promise<Ownership | undefined> {
    validate(queueName, queue, 'ownership', 'queue');
    return getOwnership(this.db, this.tables, queue);
  }

  async close(): Promise<void> {
    await Promise.all([this.db.destroy(), this.conflictsReturned?.destroy()]);
  }
}
