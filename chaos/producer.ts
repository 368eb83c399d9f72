/**
 * The chaos run's producer, a process of its own: enqueues the planned items
 * through the public API (Producer over a Ledger and a WakeChannel) at an even
 * rate across its window, and records every item the ledger acknowledged, one
 * JSON line each. A batch that fails is retried with the same idempotency keys
 * until the ledger answers, so an enqueue whose commit was lost in flight
 * comes back as a duplicate with the same id, never as a second item.
 *
 * Configured by CHAOS_PRODUCER (JSON, see ProducerConfig); talks to the harness
 * through stdout (JSON events) and SIGTERM (stop after the batch in flight).
 */
import { createWriteStream } from 'node:fs';
import { Ledger, Producer, WakeChannel, type EnqueueInput } from '../src/index.js';
import { CHAOS_MAX_ATTEMPTS, CHAOS_QUEUE, CHAOS_TYPE, planItem, seededRandom, type EnqueuedRecord } from './items.js';

export interface ProducerConfig {
  databaseUrl: string;
  redisUrl: string;
  keyPrefix: string;
  items: number;
  lanes: number;
  windowMs: number;
  seed: number;
  workMinMs: number;
  workMaxMs: number;
  /** File the acknowledged items are appended to. */
  record: string;
}

const BATCH_MAX = 50;
const TICK_MS = 100;

function emit(event: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  const raw = process.env.CHAOS_PRODUCER;
  if (!raw) throw new Error('CHAOS_PRODUCER is not set');
  const config = JSON.parse(raw) as ProducerConfig;
  const ledger = new Ledger({ url: config.databaseUrl, poolSize: 2 });
  const wake = new WakeChannel({ redis: config.redisUrl, keyPrefix: config.keyPrefix });
  const producer = new Producer({ ledger, wake });
  const record = createWriteStream(config.record, { flags: 'a' });
  let stopping = false;
  process.on('SIGTERM', () => {
    stopping = true;
  });

  const random = seededRandom(config.seed ^ 0x5eed);
  const planned = Array.from({ length: config.items }, (_, k) =>
    planItem(k, config.lanes, random, { min: config.workMinMs, max: config.workMaxMs }),
  );
  const keyOf = (k: number): string => `chaos-${config.seed}-${k}`;
  let next = 0;
  let failures = 0;
  const errors = new Map<string, number>();
  const started = Date.now();
  let lastProgress = started;
  emit({ event: 'ready' });

  while (next < planned.length && !stopping) {
    const due = Math.min(
      planned.length,
      Math.ceil((config.items * (Date.now() - started + TICK_MS)) / config.windowMs),
    );
    if (due <= next) {
      await sleep(TICK_MS);
      continue;
    }
    const ks = Array.from({ length: Math.min(BATCH_MAX, due - next) }, (_, i) => next + i);
    const inputs: EnqueueInput[] = ks.map((k) => {
      const p = planned[k]!;
      return {
        queue: CHAOS_QUEUE,
        type: CHAOS_TYPE,
        payload: p.payload,
        maxAttempts: CHAOS_MAX_ATTEMPTS,
        idempotencyKey: keyOf(k),
        ...(p.lane === null ? {} : { lane: p.lane }),
      };
    });
    for (let tries = 1; ; tries++) {
      try {
        const results = await producer.enqueueMany(inputs);
        const lines = results.map((r, i) => {
          const k = ks[i]!;
          const line: EnqueuedRecord = {
            k,
            id: r.id,
            lane: planned[k]!.lane,
            laneSeq: r.laneSeq,
            kind: planned[k]!.payload.kind,
            duplicate: r.duplicate,
          };
          return JSON.stringify(line);
        });
        record.write(`${lines.join('\n')}\n`);
        break;
      } catch (error) {
        failures++;
        const message = (error as Error).message.slice(0, 200);
        errors.set(message, (errors.get(message) ?? 0) + 1);
        if (stopping) {
          // Neither acknowledged nor refused: the checks accept these keys in the ledger or not.
          emit({ event: 'unacknowledged', ks });
          break;
        }
        await sleep(Math.min(2000, 100 * tries));
      }
    }
    next = ks[ks.length - 1]! + 1;
    if (Date.now() - lastProgress >= 5000) {
      lastProgress = Date.now();
      emit({ event: 'progress', enqueued: next, failures });
    }
  }
  await new Promise<void>((resolve) => record.end(resolve));
  emit({ event: 'done', enqueued: next, failures, errors: Object.fromEntries(errors), publish: wake.counters });
  await wake.close().catch(() => undefined);
  await ledger.close();
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`producer failed: ${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
