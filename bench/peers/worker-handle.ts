/**
 * The run process's side of its worker processes (bench/peers/worker-process.ts):
 * spawn them, wait until they are ready, tell them to go and to stop, and
 * collect what they report.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { FromWorker, ToWorker, WorkerArgs } from './protocol.js';

const WORKER_PROCESS = fileURLToPath(new URL('./worker-process.ts', import.meta.url));

export interface WorkerReport {
  peakRssMb: number;
  warnings: string[];
}

/** Called with the job numbers a worker's handler started and each one's enqueue→start ms. */
export type OnStarts = (ns: readonly number[], latencyMs: readonly (number | null)[]) => void;

export class WorkerHandle {
  readonly child: ChildProcess;
  /** Connected to the namespace. */
  readonly ready: Promise<void>;
  /** Its worker started and takes work (after go()). */
  readonly working: Promise<void>;
  /** Stopped (after stop()), with its report. */
  readonly stopped: Promise<WorkerReport>;
  readonly exited: Promise<number | null>;

  constructor(args: WorkerArgs, onStarts: OnStarts) {
    this.child = spawn(process.execPath, ['--import', 'tsx', WORKER_PROCESS, JSON.stringify(args)], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const settle = <T>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: Error) => void } => {
      let resolve: (v: T) => void = () => undefined;
      let reject: (e: Error) => void = () => undefined;
      const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
      promise.catch(() => undefined);
      return { promise, resolve, reject };
    };
    const ready = settle<void>();
    const working = settle<void>();
    const stopped = settle<WorkerReport>();
    const failAll = (e: Error): void => [ready, working, stopped].forEach((p) => p.reject(e));
    this.child.on('message', (raw) => {
      const msg = raw as FromWorker;
      if (msg.type === 'ready') ready.resolve();
      else if (msg.type === 'working') working.resolve();
      else if (msg.type === 'starts') onStarts(msg.ns, msg.latencyMs);
      else if (msg.type === 'stopped') stopped.resolve({ peakRssMb: msg.peakRssMb, warnings: msg.warnings });
      else if (msg.type === 'error') failAll(new Error(`worker process ${this.child.pid}: ${msg.message}`));
    });
    this.exited = new Promise((resolve) => {
      this.child.on('exit', (code) => {
        failAll(new Error(`worker process ${this.child.pid} exited ${code}`));
        resolve(code);
      });
    });
    this.ready = ready.promise;
    this.working = working.promise;
    this.stopped = stopped.promise;
  }

  go(): void {
    this.send({ type: 'go' });
  }

  stop(): void {
    this.send({ type: 'stop' });
  }

  /** Ends the process if it is still there (after a failure), and waits for it. */
  async kill(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGTERM');
    await this.exited;
  }

  private send(msg: ToWorker): void {
    if (this.child.connected) this.child.send(msg);
  }
}

/** Stops every worker and returns their reports, once each process has exited. */
export async function stopWorkers(workers: readonly WorkerHandle[]): Promise<WorkerReport[]> {
  for (const w of workers) w.stop();
  const reports = await Promise.all(workers.map((w) => w.stopped));
  await Promise.all(workers.map((w) => w.exited));
  return reports;
}
