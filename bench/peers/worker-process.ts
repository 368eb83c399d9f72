/**
 * One worker process of a run (the latency, four-workers and
 * sixteen-workers workloads), driven over IPC by its run process
 * (bench/peers/worker-handle.ts):
 *
 *   node --import tsx bench/peers/worker-process.ts
 * '{"system":"bullmq","mode":"defaults","ns":"abc123","concurrency":32}'
 *
 * It connects to the namespace the run process made and says 'ready'; on
 * 'go' it starts its worker and says 'working'; it streams back the job
 * numbers its handler starts, each with its enqueue→start time on
 * CLOCK_MONOTONIC (taken here, at the start, against the producer's stamp
 * in the payload); on 'stop' it stops the worker (in-flight handlers and
 * completion writes end), reports its peak RSS and warnings, and exits.
 * It loads only its own system's adapter, so no other client library counts
 * in its RSS.
 */
import { msSince } from './clock.js';
import type { FromWorker, ToWorker, WorkerArgs } from './protocol.js';
import { findFactory } from './registry.js';
import { captureProcessWarnings, recordedWarnings } from './warnings.js';

const maxRssMb = (): number => process.resourceUsage().maxRSS / 1024;
const toParent = (m: FromWorker): void => void process.send?.(m);
/** Sends `m` and resolves once it is handed to the channel (before the process exits). */
const finalToParent = (m: FromWorker): Promise<void> =>
  new Promise((resolve) => (process.send ? process.send(m, undefined, {}, () => resolve()) : resolve()));

function nextMessage(type: ToWorker['type']): Promise<void> {
  return new Promise((resolve) => {
    process.on('message', (m: unknown) => {
      if ((m as ToWorker).type === type) resolve();
    });
  });
}

async function work(args: WorkerArgs): Promise<void> {
  captureProcessWarnings();
  const factory = await findFactory(args.system, args.mode);
  const adapter = factory.create({ id: args.ns });
  await adapter.connect();
  let ns: number[] = [];
  let latencyMs: (number | null)[] = [];
  let flushTimer: NodeJS.Timeout | undefined;
  const flush = (): void => {
    flushTimer = undefined;
    if (ns.length === 0) return;
    toParent({ type: 'starts', ns, latencyMs });
    ns = [];
    latencyMs = [];
  };
  const go = nextMessage('go');
  const stop = nextMessage('stop');
  toParent({ type: 'ready' });
  await go;
  const worker = await adapter.startWorker({
    concurrency: args.concurrency,
    onJob: (j) => {
      latencyMs.push(j.enqueuedAtUs === undefined ? null : msSince(j.enqueuedAtUs));
      ns.push(j.n);
      if (ns.length >= 512) flush();
      else flushTimer ??= setTimeout(flush, 5);
    },
  });
  toParent({ type: 'working' });
  await stop;
  await worker.stop();
  if (flushTimer) clearTimeout(flushTimer);
  flush();
  await adapter.close();
  await finalToParent({ type: 'stopped', peakRssMb: maxRssMb(), warnings: recordedWarnings() });
}

async function main(): Promise<void> {
  const raw = process.argv[2];
  if (!raw) throw new Error('usage: worker-process.ts <json args>');
  // The run process went away (killed, interrupted): nothing left to work for.
  let finishing = false;
  process.on('disconnect', () => {
    if (!finishing) process.exit(1);
  });
  try {
    await work(JSON.parse(raw) as WorkerArgs);
  } catch (error) {
    await finalToParent({ type: 'error', message: error instanceof Error ? error.message : String(error) });
  }
  finishing = true;
  process.disconnect?.();
  // Some clients keep sockets or timers alive after close(); the worker is done.
  process.exit(0);
}

void main();
