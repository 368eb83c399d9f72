import { z } from 'zod';
import { ValidationError } from '../errors.js';
import type { Executor, LedgerDb } from './connection.js';
import type { EnqueueInput } from './inputs.js';
import { encodeJson } from './json.js';
import { nextFireAfter, planDueFires, timingProblem, type DuePlan } from './schedule-times.js';
import type { RecurringSchedule, ScheduleSource, ScheduleView } from './schedule-types.js';
import { advanceSchedule, readDueSchedules, readEarliestFire } from './sql/schedules/fires.js';
import {
  deleteConfigSchedulesExcept,
  deleteSchedule,
  insertSchedule,
  readSchedule,
  readSchedules,
  setSchedulePaused,
  updateSchedule,
  type ScheduleRow,
  type ScheduleRowInput,
} from './sql/schedules/schedules.js';
import type { LedgerTables } from './tables.js';
import { concurrencyKeyString, durationMs, laneKey, queueClass, queueName, typeName, validate } from './validation.js';

export const scheduleName = z.string().regex(/^[A-Za-z0-9._-]{1,100}$/, 'must be 1-100 chars of [A-Za-z0-9._-]');

export const scheduleSchema = z
  .object({
    name: scheduleName.describe(
      "Unique schedule name (1-100 chars of [A-Za-z0-9._-]); each fire's item has idempotency key " +
        '`<name>:<fire time ms>`.',
    ),
    pattern: z
      .string()
      .min(1)
      .max(200)
      .optional()
      .describe('A cron pattern: 5 fields, or 6 with seconds first. Give this or `everyMs`.'),
    tz: z
      .string()
      .min(1)
      .max(64)
      .optional()
      .describe('The IANA time zone the pattern is read in (e.g. Europe/Paris). Default: UTC.'),
    everyMs: z
      .number()
      .int('must be whole milliseconds')
      .min(100)
      .max(366 * 86_400_000)
      .optional()
      .describe('A fixed interval (ms): fires at the multiples of it since the Unix epoch. Give this or `pattern`.'),
    item: z
      .object({
        queue: queueName,
        type: typeName,
        payload: z.unknown(),
        lane: laneKey.optional(),
        queueClass: queueClass.optional(),
        concurrencyKey: concurrencyKeyString.optional(),
        priority: z.number().int().min(-1_000_000).max(1_000_000).optional(),
        maxAttempts: z.number().int().min(1).max(1000).optional(),
      })
      .strict()
      .describe(
        'What each fire enqueues: queue, type, payload, and optionally lane, queueClass, ' +
          'concurrencyKey, priority, maxAttempts.',
      ),
    backfillMs: durationMs
      .optional()
      .describe(
        'Fires missed while no worker ran: those less than a minute late run; older ones are ' +
          'skipped with 0, and with more, every fire of this last window (ms) runs. Default 0.',
      ),
  })
  .strict()
  .superRefine((s, ctx) => {
    if ((s.pattern === undefined) === (s.everyMs === undefined))
      ctx.addIssue({ code: 'custom', path: ['pattern'], message: 'give exactly one of pattern or everyMs' });
    if (s.tz !== undefined && s.pattern === undefined)
      ctx.addIssue({ code: 'custom', path: ['tz'], message: 'a time zone goes with a pattern only' });
    const problem = timingProblem({ pattern: s.pattern ?? null, tz: s.tz ?? null, everyMs: s.everyMs ?? null });
    if (problem) ctx.addIssue({ code: 'custom', path: [problem.field], message: problem.message });
  });

/** A due schedule, what its fires enqueue, and where they leave it. */
export interface DueSchedule {
  schedule: ScheduleRow;
  plan: DuePlan;
  /** One enqueue per fire, keyed `<name>:<fire time ms>`. */
  inputs: EnqueueInput[];
}

/** How many due schedules one firing pass reads. */
const DUE_BATCH = 100;
/** How many times a definition's write is tried against racing writers. */
const WRITE_TRIES = 5;

/**
 * The ledger's recurring schedules (docs/design/wake.md, "Recurring schedules"):
 * their definitions (from the API or a worker's config file), paused or
 * not, and their fires. Reached as `ledger.schedules`; fired by
 * src/schedules/firer.ts.
 */
export class LedgerSchedules {
  constructor(
    private readonly db: LedgerDb,
    private readonly t: LedgerTables,
    /** Throws the ValidationError an enqueue of this item would (payload size, fields). */
    private readonly checkItem: (input: EnqueueInput) => void,
  ) {}

  /**
   * Makes or replaces a schedule. A new one fires first at its first fire
   * time after the ledger's now; a replaced one keeps its next fire time
   * (and its paused flag) unless its timing changed.
   */
  async upsert(input: RecurringSchedule, source: ScheduleSource = 'api'): Promise<ScheduleView> {
    const row = this.rowInput(input, source);
    for (let tries = 1; ; tries++) {
      const { now } = await readEarliestFire(this.db, this.t);
      const existing = await readSchedule(this.db, this.t, row.name);
      if (!existing) {
        row.nextFireAt = new Date(nextFireAfter(row, now.getTime()));
        if (await insertSchedule(this.db, this.t, row)) return this.view(row.name);
      } else {
        const sameTiming =
          existing.pattern === row.pattern && existing.tz === row.tz && existing.everyMs === row.everyMs;
        row.nextFireAt = sameTiming ? existing.nextFireAt : new Date(nextFireAfter(row, now.getTime()));
        if (await updateSchedule(this.db, this.t, row, existing.revision)) return this.view(row.name);
      }
      if (tries >= WRITE_TRIES)
        throw new Error(`schedule ${row.name}: written by others ${tries} times while being written; try again`);
    }
  }

  /** Makes a schedule only if none of its name exists (an import from Redis): true when it made it. */
  async insertIfAbsent(input: RecurringSchedule, source: ScheduleSource = 'api'): Promise<boolean> {
    const row = this.rowInput(input, source);
    const { now } = await readEarliestFire(this.db, this.t);
    row.nextFireAt = new Date(nextFireAfter(row, now.getTime()));
    return insertSchedule(this.db, this.t, row);
  }

  /**
   * Makes the config file's schedules the ledger's (a worker's start): each
   * is made or replaced (taking over an API schedule of its name), and the
   * schedules an earlier file declared that this one does not are removed.
   * Schedules made through the API stay.
   */
  async reconcileConfig(inputs: readonly RecurringSchedule[]): Promise<{ upserted: string[]; removed: string[] }> {
    inputs.forEach((s, i) => this.rowInput(s, 'config', `schedules[${i}]`));
    const upserted: string[] = [];
    for (const s of inputs) upserted.push((await this.upsert(s, 'config')).name);
    const removed = await deleteConfigSchedulesExcept(this.db, this.t, upserted);
    return { upserted, removed };
  }

  /** Removes a schedule: true if there was one. Items it already enqueued stay. */
  remove(name: string): Promise<boolean> {
    validate(scheduleName, name, 'unschedule', 'name');
    return deleteSchedule(this.db, this.t, name);
  }

  /** Pauses a schedule (it fires nothing until resumed): false when there is none of that name. */
  pause(name: string): Promise<boolean> {
    validate(scheduleName, name, 'pause schedule', 'name');
    return setSchedulePaused(this.db, this.t, name, true);
  }

  /** Resumes a paused schedule; fires missed meanwhile follow its backfill policy. */
  resume(name: string): Promise<boolean> {
    validate(scheduleName, name, 'resume schedule', 'name');
    return setSchedulePaused(this.db, this.t, name, false);
  }

  async get(name: string): Promise<ScheduleView | undefined> {
    validate(scheduleName, name, 'schedule', 'name');
    const row = await readSchedule(this.db, this.t, name);
    return row ? withoutRevision(row) : undefined;
  }

  /** Every schedule, by name. */
  async list(): Promise<ScheduleView[]> {
    return (await readSchedules(this.db, this.t)).map(withoutRevision);
  }

  /** The ledger's now and the earliest next fire of an unpaused schedule: when a firer should look next. @internal */
  earliestFire(): Promise<{ now: Date; earliest: Date | null }> {
    return readEarliestFire(this.db, this.t);
  }

  /** The schedules due on the ledger's clock, and what each would enqueue. @internal */
  async due(): Promise<{ now: Date; due: DueSchedule[] }> {
    const { now, due } = await readDueSchedules(this.db, this.t, DUE_BATCH);
    return {
      now,
      due: due.map((schedule) => {
        const plan = planDueFires(schedule, schedule.nextFireAt.getTime(), now.getTime(), schedule.backfillMs);
        const inputs = plan.fires.map(
          (t): EnqueueInput => ({ ...schedule.item, idempotencyKey: `${schedule.name}:${t}` }),
        );
        return { schedule, plan, inputs };
      }),
    };
  }

  /**
   * In the caller's transaction (the one that enqueues `d.inputs`): moves
   * the schedule past its fires if nobody else did first. False: leave the
   * fires alone, another replica has them. @internal
   */
  advance(trx: Executor, d: DueSchedule): Promise<boolean> {
    const last = d.plan.fires[d.plan.fires.length - 1];
    return advanceSchedule(trx, this.t, {
      name: d.schedule.name,
      revision: d.schedule.revision,
      nextFireAt: new Date(d.plan.nextFireAtMs),
      lastFireAt: last === undefined ? null : new Date(last),
      fires: d.plan.fires.length,
    });
  }

  private async view(name: string): Promise<ScheduleView> {
    const row = await readSchedule(this.db, this.t, name);
    if (!row) throw new Error(`schedule ${name}: removed while being written`);
    return withoutRevision(row);
  }

  /** The row a definition writes (next fire time to be set), or a ValidationError naming the field; writes nothing. */
  private rowInput(input: RecurringSchedule, source: ScheduleSource, prefix = ''): ScheduleRowInput {
    const context = source === 'config' ? 'worker config' : 'schedule';
    const at = (field: string): string => (prefix === '' ? field : `${prefix}.${field}`);
    const s = validate(scheduleSchema, input, context, prefix);
    const timing = { pattern: s.pattern ?? null, tz: s.tz ?? null, everyMs: s.everyMs ?? null };
    try {
      this.checkItem({ ...s.item });
    } catch (error) {
      if (!(error instanceof ValidationError)) throw error;
      throw new ValidationError(
        error.issues.map((i) => ({ field: at(`item.${i.field}`), message: i.message })),
        context,
      );
    }
    const itemJson = encodeJson(s.item);
    if (itemJson === undefined)
      throw new ValidationError([{ field: at('item.payload'), message: 'must be JSON' }], context);
    return {
      name: s.name,
      source,
      ...timing,
      queue: s.item.queue,
      itemJson,
      backfillMs: s.backfillMs ?? 0,
      nextFireAt: new Date(0),
    };
  }
}

function withoutRevision(row: ScheduleRow): ScheduleView {
  const { revision: _revision, ...view } = row;
  return view;
}
