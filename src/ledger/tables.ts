import { sql, type RawBuilder } from 'kysely';

/** The ledger's table identifiers under one prefix. */
export interface LedgerTables {
  readonly prefix: string;
  readonly items: RawBuilder<unknown>;
  readonly lanes: RawBuilder<unknown>;
  readonly attempts: RawBuilder<unknown>;
  /** One row per blocked item: what it waits on and when to probe it (schema 3). */
  readonly waits: RawBuilder<unknown>;
  /** When each dependency key was last woken (schema 4): a block on a key woken during its attempt is not parked. */
  readonly wakeMarks: RawBuilder<unknown>;
  readonly ownership: RawBuilder<unknown>;
  /**
   * Work done once per fleet, not once per replica (schema 6): who holds it, when it was last done, and what it found.
   */
  readonly fleetTasks: RawBuilder<unknown>;
  /** One row per finished durable step of an item (schema 7): ctx.step's record. */
  readonly steps: RawBuilder<unknown>;
  /**
   * One row per queue a claim has capped (schema 8): capped claims of the queue write it first, and take turns on it.
   */
  readonly queues: RawBuilder<unknown>;
  /** One row per running consumer, its heartbeat (schema 8): what the fleet serves, for explain and stats. */
  readonly consumers: RawBuilder<unknown>;
  /** One row per rate-limited key (schema 8): its next start and the turns reserved (sql/rates/rate-limits.ts). */
  readonly rateLimits: RawBuilder<unknown>;
  /** One row per concurrency key (schema 9): how many of its items are admitted (sql/keys/admission.ts). */
  readonly keys: RawBuilder<unknown>;
  /** One row per keyed item waiting for a slot of its key (schema 9), in the order slots go to them. */
  readonly keyWaits: RawBuilder<unknown>;
  /** One row per type with a limit per concurrency key of its own (schema 11; sql/keys/scope.ts). */
  readonly typeLimits: RawBuilder<unknown>;
  /**
   * One row per recurring schedule (schema 12): its definition, next and last fire (sql/schedules/schedules.ts,
   * sql/schedules/fires.ts).
   */
  readonly schedules: RawBuilder<unknown>;
  /** One row per workflow (schema 17; sql/workflows/). */
  readonly workflows: RawBuilder<unknown>;
  /** One row per job of a workflow: its name, and how many of its dependencies are still to settle (schema 17). */
  readonly workflowJobs: RawBuilder<unknown>;
  /** One row per dependency of a workflow's job: parent item -> dependent item (schema 17). */
  readonly workflowEdges: RawBuilder<unknown>;
  readonly migrations: RawBuilder<unknown>;
}

export function ledgerTables(prefix: string): LedgerTables {
  const t = (name: string): RawBuilder<unknown> => sql`${sql.table(prefix + name)}`;
  return {
    prefix,
    items: t('items'),
    lanes: t('lanes'),
    attempts: t('attempts'),
    waits: t('waits'),
    wakeMarks: t('wake_marks'),
    ownership: t('ownership'),
    fleetTasks: t('fleet_tasks'),
    steps: t('steps'),
    queues: t('queues'),
    consumers: t('consumers'),
    rateLimits: t('rate_limits'),
    keys: t('keys'),
    keyWaits: t('key_waits'),
    typeLimits: t('type_limits'),
    schedules: t('schedules'),
    workflows: t('workflows'),
    workflowJobs: t('workflow_jobs'),
    workflowEdges: t('workflow_edges'),
    migrations: t('migrations'),
  };
}

/**
 * A table's identifier as SQL text, quoted as `sql.table` quotes it: for statements written as text
 * (sql/common/bound.ts).
 */
export function tableText(t: LedgerTables, name: 'items' | 'ownership' | 'lanes'): string {
  return `\`${(t.prefix + name).replace(/`/g, '``')}\``;
}
