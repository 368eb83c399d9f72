/**
 * `lanewake demo`: the whole system under faults, against the local services.
 * A fresh database, 3 worker replicas as child processes, a mixed workload
 * over lanes, one replica SIGKILLed midway and replaced; then a summary whose
 * exactly-once and lane-order checks decide the exit code.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SingleBar, Presets } from 'cli-progress';
import { sql } from 'kysely';
import { exactCount, exactly, unfinishedCount } from '../ledger/bounded-count.js';
import { Ledger } from '../ledger/ledger.js';
import { ensureDatabase } from '../ledger/connection.js';
import type { QueueStats } from '../ledger/types.js';
import { createLogger } from '../log.js';
import { Producer } from '../producer/producer.js';
import { WakeChannel } from '../wake/wake-channel.js';
import type { EnqueueInput } from '../ledger/ledger.js';
import { DEMO_QUEUE } from './handlers.js';
import { DemoReplicas, demoHandlersPath } from './replicas.js';

export interface DemoOptions {
  /** Server URL; the demo makes its own database on it. */
  serverUrl: string;
  redisUrl: string;
  items: number;
  lanes: number;
  replicas: number;
  keep: boolean;
  out: (line: string) => void;
  progress: boolean;
  /**
   * Aborted (a SIGINT, a SIGTERM): the demo stops its replicas, cleans up as it would at its end
   * and throws DemoInterrupted.
   */
  signal?: AbortSignal;
  /** Aborted (a second signal): the replicas are killed at once rather than drained; the clean-up goes on. */
  killSignal?: AbortSignal;
}

export interface DemoSummary {
  database: string;
  items: number;
  completed: number;
  dead: number;
  retries: number;
  releases: number;
  leaseReclaims: number;
  seconds: number;
  throughput: number;
  startP50Ms: number;
  startP99Ms: number;
  laneOrderViolations: number;
  duplicateEffects: number;
  missingEffects: number;
  killedReplica: string;
}

/** The demo stopped on its signal; its replicas have exited and, unless kept, its database and Redis keys are gone. */
export class DemoInterrupted extends Error {
  override readonly name = 'DemoInterrupted';
}

/**
 * Where the run stands, from the queue's counts: done once no item is left
 * unfinished, which only an exact 0 says (the terminal counts stop at their
 * cap, so they can never say that every item ended). `finished` is exact
 * while `unfinished` is, and an upper bound otherwise.
 */
export function demoProgress(
  stats: Pick<QueueStats, 'counts'> | undefined,
  items: number,
): { done: boolean; finished: number; exact: boolean } {
  const left = stats === undefined ? exactly(0) : unfinishedCount(stats);
  return { done: exactCount(left) === 0, finished: Math.max(0, items - left.count), exact: !left.atLeast };
}

function mix(i: number): { type: string; share: string } {
  const r = (i * 2654435761) % 1000;
  if (r < 10) return { type: 'doomed', share: '1%' };
  if (r < 15) return { type: 'slow', share: '0.5%' };
  if (r < 75) return { type: 'flaky', share: '6%' };
  return { type: 'work', share: '92.5%' };
}

export async function runDemo(o: DemoOptions): Promise<DemoSummary> {
  const database = `lanewake_demo_${randomBytes(3).toString('hex')}`;
  const url = `${o.serverUrl.replace(/\/+$/, '')}/${database}`;
  const keyPrefix = `lwdemo:${randomBytes(3).toString('hex')}:`;
  const log = createLogger('lanewake.demo', 'warn');
  /** Throws DemoInterrupted once the demo's signal is aborted: checked between its steps. */
  const checkSignal = (): void => {
    if (o.signal?.aborted) throw new DemoInterrupted(`interrupted (${String(o.signal.reason ?? 'aborted')})`);
  };
  /** A sleep that an interruption ends at once. */
  const sleepUnlessInterrupted = (ms: number): Promise<void> =>
    new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        o.signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      o.signal?.addEventListener('abort', done, { once: true });
    });
  await ensureDatabase(url);
  const configDir = mkdtempSync(join(tmpdir(), 'lanewake-demo-'));
  const configPath = join(configDir, 'worker.json');
  const ledger = new Ledger({ url, poolSize: 4 });
  const wake = new WakeChannel({ redis: o.redisUrl, keyPrefix, logger: log });
  const replicas = new DemoReplicas(configPath);
  const killReplicas = (): void => replicas.killAll();
  o.killSignal?.addEventListener('abort', killReplicas, { once: true });
  const sayStopping = (): void =>
    o.out(
      `${String(o.signal?.reason ?? 'interrupted')}: stopping (a second ` +
        `signal kills the replicas without their drain, a third exits at once)`,
    );
  o.signal?.addEventListener('abort', sayStopping, { once: true });
  try {
    const m = await ledger.migrate();
    o.out(`database ${database}: schema v${m.to}; redis key prefix ${keyPrefix}`);
    checkSignal();
    await sql`CREATE TABLE demo_effects (
      row_id BIGINT AUTO_INCREMENT PRIMARY KEY, item_id VARCHAR(32) NOT NULL, lane VARCHAR(255) NULL,
      lane_seq BIGINT NULL, replica VARCHAR(32) NOT NULL, started_us BIGINT NOT NULL, ended_us BIGINT NOT NULL,
      KEY ix_item (item_id), KEY ix_lane (lane, lane_seq)
    )`.execute(ledger.db);
    writeFileSync(
      configPath,
      JSON.stringify({
        databaseUrl: url,
        redisUrl: o.redisUrl,
        redisKeyPrefix: keyPrefix,
        handlers: demoHandlersPath(),
        admin: false,
        reconcileIntervalMs: 500,
        drainTimeoutMs: 10_000,
        queues: [
          {
            name: DEMO_QUEUE,
            concurrency: 32,
            leaseMs: 2_000,
            backoff: { baseMs: 100, factor: 2, maxMs: 1_000, jitter: 0.2 },
          },
        ],
      }),
    );
    checkSignal();
    const started = Array.from({ length: o.replicas }, () => replicas.start());
    o.out(
      `started ${o.replicas} worker replicas (child processes, concurrency ` +
        `32 each; pids ${started.map((r) => r.pid ?? '?').join(', ')})`,
    );

    const producer = new Producer({ ledger, wake });
    const t0 = Date.now();
    const inputs: EnqueueInput[] = [];
    for (let i = 0; i < o.items; i++) {
      inputs.push({
        queue: DEMO_QUEUE,
        type: mix(i).type,
        lane: `account-${i % o.lanes}`,
        payload: { n: i },
        maxAttempts: 5,
      });
    }
    for (let i = 0; i < inputs.length; i += 500) {
      checkSignal();
      await producer.enqueueMany(inputs.slice(i, i + 500));
    }
    o.out(
      `enqueued ${o.items} items over ${o.lanes} lanes in ${Date.now() - t0} ms ` +
        `(92.5% work, 6% flaky, 1% doomed, 0.5% slower than the deadline)`,
    );

    const bar = o.progress
      ? new SingleBar(
          { format: 'processing |{bar}| {percentage}% {value}/{total} finished | {note}', hideCursor: true },
          Presets.shades_classic,
        )
      : undefined;
    bar?.start(o.items, 0, { note: '' });
    let killed = '';
    let note = '';
    try {
      for (;;) {
        checkSignal();
        const [s] = await ledger.stats(DEMO_QUEUE);
        const progress = demoProgress(s, o.items);
        if (replicas.unexpectedExit !== undefined) throw new Error(replicas.unexpectedExit);
        if (!killed && progress.exact && progress.finished >= o.items * 0.4) {
          killed = 'replica-2';
          replicas.kill(killed);
          const fresh = replicas.start();
          note = `SIGKILLed ${killed} mid-flight, started ${fresh.name} (pid ${fresh.pid ?? '?'})`;
          if (!bar) o.out(note);
        }
        bar?.update(progress.exact ? progress.finished : 0, { note });
        if (progress.done) break;
        await sleepUnlessInterrupted(200);
      }
    } finally {
      bar?.stop();
    }
    const seconds = (Date.now() - t0) / 1000;
    await replicas.drain(o.out);
    checkSignal();
    return {
      ...(await summarize(ledger, o.items)),
      database,
      seconds,
      throughput: o.items / seconds,
      killedReplica: killed,
    };
  } catch (error) {
    if (o.signal?.aborted) {
      await replicas.stop();
      const cleanup = o.keep
        ? `kept database ${database} and the Redis keys ${keyPrefix}* (--keep)`
        : `dropping database ${database} and the Redis keys ${keyPrefix}*`;
      o.out(`stopped the worker replicas; ${cleanup}`);
      throw error instanceof DemoInterrupted
        ? error
        : new DemoInterrupted(`interrupted (${String(o.signal.reason ?? 'aborted')})`, { cause: error });
    }
    throw error;
  } finally {
    await replicas.stop();
    o.killSignal?.removeEventListener('abort', killReplicas);
    o.signal?.removeEventListener('abort', sayStopping);
    await wake.timers.close().catch(() => undefined);
    if (!o.keep) await wake.dropKeys().catch(() => undefined);
    await wake.close().catch(() => undefined);
    if (!o.keep) await sql`DROP DATABASE IF EXISTS ${sql.id(database)}`.execute(ledger.db).catch(() => undefined);
    await ledger.close();
    rmSync(configDir, { recursive: true, force: true });
  }
}

async function summarize(
  ledger: Ledger,
  items: number,
): Promise<Omit<DemoSummary, 'database' | 'seconds' | 'throughput' | 'killedReplica'>> {
  const t = ledger.tables;
  // Exact figures, each item counted (stats stops terminal counts at a cap): the demo's own small ledger.
  const states = await sql<{
    state: string;
    n: number | string;
  }>`SELECT state, COUNT(*) AS n FROM ${t.items} WHERE queue = ${DEMO_QUEUE} GROUP BY state`.execute(ledger.db);
  const inState = (state: string): number => Number(states.rows.find((r) => r.state === state)?.n ?? 0);
  const history = await sql<{
    outcome: string;
    n: number;
  }>`SELECT outcome, COUNT(*) AS n FROM ${t.attempts} GROUP BY outcome`.execute(ledger.db);
  const count = (o: string): number => Number(history.rows.find((r) => r.outcome === o)?.n ?? 0);
  const latency = await sql<{
    us: number;
  }>`SELECT TIMESTAMPDIFF(MICROSECOND, created_at, started_at) AS us FROM ${t.items}
    WHERE queue = ${DEMO_QUEUE} AND state = 'completed' AND attempt = 1 ORDER BY us`.execute(ledger.db);
  const at = (p: number): number =>
    Number(latency.rows[Math.min(latency.rows.length - 1, Math.floor((p / 100) * latency.rows.length))]?.us ?? 0) /
    1000;
  // Per lane, in lane order, each effect must start after the previous one ended.
  const order = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM (
      SELECT started_us, LAG(ended_us) OVER (PARTITION BY lane ORDER BY lane_seq) AS prev_end FROM demo_effects
    ) x WHERE prev_end IS NOT NULL AND started_us < prev_end`.execute(ledger.db);
  const dups = await sql<{
    n: number;
  }>`SELECT COUNT(*) AS n FROM (SELECT item_id FROM demo_effects GROUP BY item_id HAVING COUNT(*) > 1) d`.execute(
    ledger.db,
  );
  const missing = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${t.items} i
    WHERE i.queue = ${DEMO_QUEUE} AND i.state = 'completed' AND NOT EXISTS (SELECT 1 FROM demo_effects e
    WHERE e.item_id = i.id)`.execute(ledger.db);
  return {
    items,
    completed: inState('completed'),
    dead: inState('dead'),
    retries: count('retried'),
    releases: count('released'),
    leaseReclaims: count('lease_expired'),
    startP50Ms: at(50),
    startP99Ms: at(99),
    laneOrderViolations: Number(order.rows[0]?.n ?? 0),
    duplicateEffects: Number(dups.rows[0]?.n ?? 0),
    missingEffects: Number(missing.rows[0]?.n ?? 0),
  };
}
