/**
 * The whole stacks bench/floor.ts sets beside the floor: lanewake's Consumer
 * on the enqueued items, and a peer through the side-by-side benchmark's
 * adapter. Each clock stops when the system's own store counts every job
 * completed (not at the last handler start), as bench/compare.ts's do.
 */
import { randomBytes } from 'node:crypto';
import type * as Lanewake from '../src/index.js';
import {
  cpuSample,
  isInterrupted,
  onCleanup,
  postgresCpuSeconds,
  sleep,
  waitForQuiet,
  type CpuSample,
} from './support.js';
import { completedInLedger } from './engine.js';
import { findFactory } from './peers/registry.js';
import { QUEUE, STALL_MS } from './floor-layouts.js';

export const TYPE = 'noop';
export const ENQUEUE_BATCH = 500;
export const ENGINE_CONCURRENCY = 32;
/** How often a completed count is read while the last completions are written (as bench/peers/phase.ts reads it). */
const COUNT_POLL_MS = 5;

export interface RunResult {
  jobsPerS: number;
  /** The database server's CPU per job, µs: mariadbd, or postgres for a PostgreSQL peer (undefined when not visible). */
  serverUsPerJob: number | undefined;
  nodeUsPerJob: number;
}

/** Peers whose server's CPU this benchmark can read: all their `postgres` processes. */
const POSTGRES_PEERS = new Set(['graphile-worker', 'pg-boss']);

/**
 * Counts starts until `total`; `finished` resolves then, or rejects when
 * STALL_MS pass without one (a lost job would otherwise hang the run).
 * `stop()` ends the watch.
 */
function watchStarts(total: number, who: string): { started: () => void; finished: Promise<void>; stop: () => void } {
  let seen = 0;
  let last = -1;
  let done!: () => void;
  let fail!: (e: Error) => void;
  const finished = new Promise<void>((resolve, reject) => {
    done = resolve;
    fail = reject;
  });
  const watchdog = setInterval(() => {
    if (seen === last) fail(new Error(`${who}: no job started for ${STALL_MS} ms (${seen} of ${total})`));
    last = seen;
  }, STALL_MS);
  return {
    started: () => {
      if (++seen === total) done();
    },
    finished,
    stop: () => clearInterval(watchdog),
  };
}

/**
 * Reads `count` (the store's completed jobs) every COUNT_POLL_MS until it
 * reaches `want`, and returns the CPU sample taken when that count came back:
 * the end of a throughput clock. Called once every job has started, since
 * none can have completed before. Fails when the count stays put for STALL_MS.
 */
async function untilCompleted(count: () => Promise<number>, want: number, who: string): Promise<CpuSample> {
  let last = -1;
  let movedAt = Date.now();
  for (;;) {
    const n = await count();
    if (n >= want) return cpuSample();
    if (isInterrupted()) throw new Error('interrupted');
    if (n !== last) {
      last = n;
      movedAt = Date.now();
    } else if (Date.now() - movedAt > STALL_MS) {
      throw new Error(
        `${who}: every job started, but the completed count stayed at ${n} of ${want} for ${STALL_MS} ms`,
      );
    }
    await sleep(COUNT_POLL_MS);
  }
}

/**
 * lanewake's Consumer (from the package `lanewake` was loaded from) on the
 * queue's `items` items, counting each handler start in `startedIds`.
 * Returns the CPU sample taken when the ledger counts every item completed.
 */
export async function drainEngine(
  lanewake: Pick<typeof Lanewake, 'Consumer' | 'createLogger'>,
  ledger: Lanewake.Ledger,
  items: number,
  startedIds: Map<string, number>,
): Promise<CpuSample> {
  const watch = watchStarts(items, 'engine');
  const consumer = new lanewake.Consumer({
    ledger,
    queue: QUEUE,
    concurrency: ENGINE_CONCURRENCY,
    logger: lanewake.createLogger('bench.floor', 'warn'),
    handlers: {
      [TYPE]: async (job: { id: string }) => {
        startedIds.set(job.id, (startedIds.get(job.id) ?? 0) + 1);
        watch.started();
      },
    },
  });
  try {
    await consumer.start();
    await watch.finished;
    return await untilCompleted(() => completedInLedger({ ledger, queue: QUEUE }), items, 'engine');
  } finally {
    watch.stop();
    await consumer.stop();
  }
}

/**
 * The peer's whole stack on the same number of items: enqueued with its
 * batch API in batches of 500 (untimed), then one worker at concurrency 32
 * in this process, timed from its start until the peer's store counts every
 * job completed (the side-by-side bulk workload's processing figure). Each
 * job must start exactly once.
 */
export async function runPeer(peer: { system: string; mode: string }, items: number): Promise<RunResult> {
  const factory = await findFactory(peer.system, peer.mode);
  const adapter = factory.create({ id: `flr${randomBytes(4).toString('hex')}` });
  const unregister = onCleanup(() => adapter.teardown());
  try {
    await adapter.setup();
    await adapter.connect();
    for (let i = 0; i < items; i += ENQUEUE_BATCH) {
      await adapter.enqueueBatch(Array.from({ length: Math.min(ENQUEUE_BATCH, items - i) }, (_, k) => ({ n: i + k })));
    }
    await waitForQuiet();
    const starts = new Uint8Array(items);
    const watch = watchStarts(items, peer.system);
    const serverCpu = POSTGRES_PEERS.has(peer.system) ? postgresCpuSeconds : () => undefined;
    const serverFrom = serverCpu();
    const from = cpuSample();
    const worker = await adapter.startWorker({
      concurrency: ENGINE_CONCURRENCY,
      onJob: (job) => {
        starts[job.n] = (starts[job.n] ?? 0) + 1;
        watch.started();
      },
    });
    let to: CpuSample;
    try {
      await watch.finished;
      to = await untilCompleted(() => adapter.completedCount(), items, peer.system);
    } finally {
      watch.stop();
    }
    const serverTo = serverCpu();
    await worker.stop();
    const wrong = starts.reduce((n, c) => n + (c === 1 ? 0 : 1), 0);
    if (wrong > 0) throw new Error(`${peer.system}: ${wrong} jobs not started exactly once`);
    const completed = await adapter.completedCount();
    if (completed !== items)
      throw new Error(`${peer.system}: its store counts ${completed} of ${items} jobs completed`);
    return {
      jobsPerS: items / ((to.wallMs - from.wallMs) / 1000),
      serverUsPerJob:
        serverFrom !== undefined && serverTo !== undefined ? ((serverTo - serverFrom) * 1e6) / items : undefined,
      nodeUsPerJob: ((to.node - from.node) * 1e6) / items,
    };
  } finally {
    await adapter.close().catch(() => undefined);
    await adapter.teardown();
    unregister();
  }
}
